-- escalations_by_tool: per tool, how many calls were made and how far the calls themselves escalated.
-- Tables: spans (tool-call spans: tool_name set; a span's escalation level comes from the
--         findings written onto it, NONE when there are none), findings, and audit (the
--         guard's decisions, for calls of tools that have no span of their own).
-- Parameters (optional; `SET VARIABLE name = value;` in the DuckDB CLI,
--             `--param name=value` with `otel-safety query`):
--   since       only calls that started at or after this date or timestamp (default: all)
--   until       only calls that started before this date or timestamp (default: all)
--   agent       only calls made by this agent (default: all)
-- Columns: detectors lists the detectors that fired on the tool's calls.
WITH fired AS (
    SELECT trace_id, span_id, list(DISTINCT detector ORDER BY detector) AS detectors
    FROM findings
    WHERE detected
    GROUP BY ALL
),
span_calls AS (
    SELECT
        s.trace_id,
        s.span_id,
        s.tool_name,
        coalesce(s.escalation_level, 'NONE') AS level,
        coalesce(s.escalation_rank, 0) AS rank,
        f.detectors
    FROM spans AS s
    LEFT JOIN fired AS f USING (trace_id, span_id)
    WHERE s.tool_name IS NOT NULL
      AND in_time_window(s.start_time)
      AND (CAST(getvariable('agent') AS VARCHAR) IS NULL OR s.agent_name = CAST(getvariable('agent') AS VARCHAR))
),
-- Calls of tools that have no span of their own (the app's tools are not instrumented, the
-- call is only in the model's output): the guard's decision on each is in the audit log, and
-- its level is the strictest of the findings on the model call that asked for it (the
-- guard's own on this tool; every other detector's, which judge the call there: an answer
-- that asked for several calls counts them for each).
guard_calls AS (
    SELECT
        a.trace_id,
        a.span_id,
        a.tool AS tool_name,
        coalesce(arg_max(g.escalation_level, g.escalation_rank), 'NONE') AS level,
        coalesce(max(g.escalation_rank), 0) AS rank,
        list(DISTINCT g.detector ORDER BY g.detector) FILTER (g.detector IS NOT NULL) AS detectors
    FROM audit AS a
    LEFT JOIN findings AS g
        ON g.trace_id = a.trace_id AND g.span_id = a.span_id AND g.detected
       AND (g.detector <> 'tool_guard' OR (g.details ->> '$.tool') = a.tool)
    WHERE NOT EXISTS (
            SELECT 1 FROM spans AS s
            WHERE s.trace_id = a.trace_id AND s.span_id = a.span_id AND s.tool_name IS NOT NULL)
      AND in_time_window(a.decided_at)
      AND (CAST(getvariable('agent') AS VARCHAR) IS NULL OR a.agent_name = CAST(getvariable('agent') AS VARCHAR))
    GROUP BY a.trace_id, a.span_id, a.tool, a.source, a.decided_at
),
calls AS (
    SELECT * FROM span_calls
    UNION ALL
    SELECT * FROM guard_calls
)
SELECT
    c.tool_name AS tool,
    count(*) AS calls,
    count(*) FILTER (WHERE c.rank >= 1) AS escalated,
    count(*) FILTER (WHERE c.rank >= 4) AS review_or_stop,
    count(*) FILTER (WHERE c.level = 'HARD_STOP') AS hard_stops,
    arg_max(c.level, c.rank) AS strictest_level,
    round(100.0 * count(*) FILTER (WHERE c.rank >= 1) / count(*), 1) AS escalated_pct,
    map_from_entries(list_transform(list_sort(list_transform(
        map_entries(histogram(c.level)),
        lambda e: {'rank': list_position(['NONE', 'CLARIFY', 'WARN', 'SOFT_STOP', 'HUMAN_REVIEW',
                                          'HARD_STOP'], e.key), 'key': e.key, 'value': e.value})),
        lambda e: {'key': e.key, 'value': e.value})) AS levels,
    coalesce(
        list_sort(list_distinct(flatten(list(c.detectors) FILTER (c.detectors IS NOT NULL)))),
        []) AS detectors
FROM calls AS c
GROUP BY 1
ORDER BY escalated DESC, calls DESC, tool;
