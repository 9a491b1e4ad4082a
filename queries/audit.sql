-- audit: every tool-call decision of the guard, newest first: what was asked, by whom, and why;
-- for a call a person was asked about, which request (approval_id) and who answered it.
-- Tables: audit (one row per tool call: inline checks before the tool ran, and calls judged
--         on traces; allowed calls too).
-- Parameters (optional; `SET VARIABLE name = value;` in the DuckDB CLI,
--             `--param name=value` with `otel-safety query`):
--   verdict     only this verdict: ALLOW, WARN or BLOCK (default: all)
--   requester   only this requester (default: all)
--   tool        only this tool (default: all)
--   limit_rows  at most this many rows (default 100)
WITH params AS (
    SELECT CASE
        WHEN getvariable('verdict') IS NULL THEN NULL
        WHEN list_position(['ALLOW', 'WARN', 'BLOCK'], upper(getvariable('verdict'))) IS NULL
            THEN error('verdict must be ALLOW, WARN or BLOCK; got ' || getvariable('verdict'))
        ELSE upper(getvariable('verdict')) END AS verdict
)
SELECT
    date_trunc('second', a.decided_at) AS decided_at,
    a.verdict,
    a.risk,
    a.tool,
    a.category,
    a.requester,
    a.requester_trust AS trust,
    a.source,
    a.approval,
    a.approval_id,
    a.approval_by,
    a.rule_ids ->> '$[0]' AS top_rule,
    a.reasons ->> '$[0]' AS reason,
    a.agent_name AS agent,
    a.trace_id,
    a.span_id
FROM audit AS a, params AS p
WHERE (p.verdict IS NULL OR a.verdict = p.verdict)
  AND (getvariable('requester') IS NULL OR a.requester = getvariable('requester'))
  AND (getvariable('tool') IS NULL OR a.tool = getvariable('tool'))
ORDER BY a.decided_at DESC, a.risk DESC
LIMIT coalesce(CAST(getvariable('limit_rows') AS BIGINT), 100);
