-- escalations_by_day: per day, how many agent runs were judged and how far they escalated.
-- Tables: traces (one row per evaluated GenAI trace; the day is the trace's start, UTC).
-- Parameters (optional; `SET VARIABLE name = value;` in the DuckDB CLI,
--             `--param name=value` with `otel-safety query`):
--   since       first day shown, a date or timestamp like 2025-06-01 (default: all)
--   until       only traces that started before this date or timestamp (default: all)
--   service     only this service.name (default: all)
-- Columns: levels maps each escalation level, in order of severity, to its number of
--          traces that day.
SELECT
    CAST(date_trunc('day', t.trace_start) AS DATE) AS day,
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
  AND (CAST(getvariable('service') AS VARCHAR) IS NULL OR t.service_name = CAST(getvariable('service') AS VARCHAR))
GROUP BY 1
ORDER BY day;
