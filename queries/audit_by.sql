-- audit_by: the guard's decisions counted per requester or per tool: how many allowed, warned, blocked?
-- Tables: audit (one row per tool-call decision of the guard, inline or judged on a trace).
-- Parameters (optional; `SET VARIABLE name = value;` in the DuckDB CLI,
--             `--param name=value` with `otel-safety query`):
--   per         requester or tool: what to count by (default requester)
--   since       only decisions at or after this date or timestamp (default: all)
--   until       only decisions before this date or timestamp (default: all)
--   limit_rows  at most this many rows (default 50)
-- Columns: key is the requester or the tool ('(unknown)' when the decision named none).
WITH params AS (
    SELECT
        CASE WHEN getvariable('per') IS NULL THEN 'requester'
             WHEN lower(CAST(getvariable('per') AS VARCHAR)) IN ('requester', 'tool')
             THEN lower(CAST(getvariable('per') AS VARCHAR))
             ELSE error('per must be requester or tool, got '
                        || CAST(getvariable('per') AS VARCHAR)) END AS per
)
SELECT
    coalesce(CASE WHEN p.per = 'tool' THEN a.tool ELSE a.requester END, '(unknown)') AS key,
    count(*) AS decisions,
    count(*) FILTER (WHERE a.verdict = 'ALLOW') AS allowed,
    count(*) FILTER (WHERE a.verdict = 'WARN') AS warned,
    count(*) FILTER (WHERE a.verdict = 'BLOCK') AS blocked,
    max(a.risk) AS max_risk,
    date_trunc('second', max(a.decided_at)) AS last_decided
FROM audit AS a, params AS p
WHERE in_time_window(a.decided_at)
GROUP BY ALL
ORDER BY blocked DESC, warned DESC, decisions DESC, key
LIMIT coalesce(CAST(getvariable('limit_rows') AS BIGINT), 50);
