-- escalations_by_service: per service (resource service.name), how many agent runs were judged and how far they escalated.
-- Tables: traces (one row per evaluated GenAI trace).
-- Parameters (optional; `SET VARIABLE name = value;` in the DuckDB CLI,
--             `--param name=value` with `otel-safety query`):
--   since       only traces that started at or after this date or timestamp (default: all)
--   until       only traces that started before this date or timestamp (default: all)
-- Columns: levels maps each escalation level, in order of severity, to its number of traces.
SELECT
    coalesce(t.service_name, '(unnamed)') AS service,
    count(*) AS traces,
    count(*) FILTER (WHERE t.escalation_rank >= 1) AS escalated,
    count(*) FILTER (WHERE t.escalation_rank >= 4) AS review_or_stop,
    count(*) FILTER (WHERE t.escalation_level = 'HARD_STOP') AS hard_stops,
    arg_max(t.escalation_level, t.escalation_rank) AS strictest_level,
    round(100.0 * count(*) FILTER (WHERE t.escalation_rank >= 1) / count(*), 1) AS escalated_pct,
    map_from_entries(list_transform(list_sort(list_transform(
        map_entries(histogram(t.escalation_level)),
        lambda e: {'rank': list_position(['NONE', 'CLARIFY', 'WARN', 'SOFT_STOP', 'HUMAN_REVIEW',
                                          'HARD_STOP'], e.key), 'key': e.key, 'value': e.value})),
        lambda e: {'key': e.key, 'value': e.value})) AS levels
FROM traces AS t
WHERE in_time_window(t.trace_start)
GROUP BY 1
ORDER BY escalated DESC, service;
