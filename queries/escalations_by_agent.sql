-- escalations_by_agent: per agent, how many runs were judged and how far they escalated.
-- Tables: traces (one row per evaluated GenAI trace).
-- Parameters: none.
SELECT
    coalesce(agent_names ->> '$[0]', '(unnamed)') AS agent,
    count(*) AS traces,
    count(*) FILTER (WHERE escalation_rank >= 1) AS escalated,
    count(*) FILTER (WHERE escalation_rank >= 4) AS review_or_stop,
    count(*) FILTER (WHERE escalation_level = 'HARD_STOP') AS hard_stops,
    arg_max(escalation_level, escalation_rank) AS strictest_level,
    round(100.0 * count(*) FILTER (WHERE escalation_rank >= 1) / count(*), 1) AS escalated_pct
FROM traces
GROUP BY 1
ORDER BY escalated DESC, agent;
