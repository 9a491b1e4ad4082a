-- top_blocked_requesters: who asks the agents for the actions the guard blocks most?
-- Tables: audit (one row per tool-call decision of the guard: ALLOW, WARN or BLOCK, inline
--         before the tool ran or judged on the trace afterwards).
-- Parameters (optional; `SET VARIABLE name = value;` in the DuckDB CLI,
--             `--param name=value` with `otel-safety query`):
--   since       only decisions at or after this date or timestamp (default: all)
--   until       only decisions before this date or timestamp (default: all)
--   source      inline or trace: only decisions made there (default: both)
--   min_blocked only requesters with at least this many blocked calls (default 1)
--   limit_rows  at most this many requesters (default 20)
-- Columns: blocked_pct is of all the requester's decisions; lowest_trust is the lowest trust
-- level (0-4) the guard gave the requester; top_rule the rule that blocked them most often.
WITH params AS (
    SELECT
        CASE WHEN getvariable('source') IS NULL THEN NULL
             WHEN lower(CAST(getvariable('source') AS VARCHAR)) IN ('inline', 'trace')
             THEN lower(CAST(getvariable('source') AS VARCHAR))
             ELSE error('source must be inline or trace, got '
                        || CAST(getvariable('source') AS VARCHAR)) END AS source,
        CASE WHEN getvariable('min_blocked') IS NULL THEN 1
             ELSE coalesce(try_cast(regexp_extract(trim(CAST(getvariable('min_blocked') AS VARCHAR)), '^[0-9]+$') AS INTEGER),
                           error('min_blocked must be a whole number, got '
                                 || getvariable('min_blocked'))) END AS min_blocked
),
decisions AS (
    SELECT a.*
    FROM audit AS a, params AS p
    WHERE in_time_window(a.decided_at)
      AND (p.source IS NULL OR a.source = p.source)
),
-- The rule that blocked each requester most often; a tie goes to the last rule id in order,
-- so two runs over the same rows agree (mode() picks among ties at random).
top_rules AS (
    SELECT requester, arg_max(rule, (n, rule)) AS top_rule
    FROM (SELECT requester, rule_ids ->> '$[0]' AS rule, count(*) AS n
          FROM decisions WHERE verdict = 'BLOCK' GROUP BY ALL)
    GROUP BY requester
)
SELECT
    coalesce(d.requester, '(unknown)') AS requester,
    count(*) FILTER (WHERE d.verdict = 'BLOCK') AS blocked,
    count(*) FILTER (WHERE d.verdict = 'WARN') AS warned,
    count(*) AS decisions,
    round(100.0 * count(*) FILTER (WHERE d.verdict = 'BLOCK') / count(*), 1) AS blocked_pct,
    max(d.risk) FILTER (WHERE d.verdict = 'BLOCK') AS max_risk,
    min(d.requester_trust) AS lowest_trust,
    coalesce(list_sort(list_distinct(list(d.tool) FILTER (d.verdict = 'BLOCK'))), [])
        AS blocked_tools,
    coalesce(list_sort(list_distinct(
        list(d.category) FILTER (d.verdict = 'BLOCK' AND d.category IS NOT NULL))), [])
        AS blocked_categories,
    any_value(t.top_rule) AS top_rule,
    min(d.decided_at) FILTER (d.verdict = 'BLOCK') AS first_blocked,
    max(d.decided_at) FILTER (d.verdict = 'BLOCK') AS last_blocked,
    coalesce(list_sort(list_distinct(
        list(d.agent_name) FILTER (d.verdict = 'BLOCK' AND d.agent_name IS NOT NULL))), [])
        AS agents
FROM decisions AS d CROSS JOIN params AS p
LEFT JOIN top_rules AS t ON t.requester IS NOT DISTINCT FROM d.requester
GROUP BY d.requester, p.min_blocked
HAVING count(*) FILTER (WHERE d.verdict = 'BLOCK') >= p.min_blocked
ORDER BY blocked DESC, max_risk DESC, requester
LIMIT coalesce(CAST(getvariable('limit_rows') AS BIGINT), 20);
