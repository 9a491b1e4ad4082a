-- flagged_spans: which spans did a detector flag, strictest first, and what did it see?
-- Tables: findings, spans.
-- Parameters (optional; `SET VARIABLE name = value;` in the DuckDB CLI,
--             `--param name=value` with `otel-safety query`):
--   min_rank    lowest escalation rank shown: 0 NONE, 1 CLARIFY, 2 WARN, 3 SOFT_STOP,
--               4 HUMAN_REVIEW, 5 HARD_STOP (default 1)
--   detector    only this detector key (default: all)
--   limit_rows  at most this many rows (default 100)
SELECT
    f.escalation_level,
    f.detector,
    round(f.score, 3) AS score,
    coalesce(f.agent_name, s.agent_name) AS agent,
    f.evidence ->> '$[0].text' AS evidence,
    s.name AS span_name,
    f.trace_id,
    f.span_id,
    date_trunc('second', f.trace_start) AS trace_start
FROM findings AS f
LEFT JOIN spans AS s USING (trace_id, span_id)
WHERE f.detected
  AND f.escalation_rank >= coalesce(getvariable('min_rank'), 1)
  AND (getvariable('detector') IS NULL OR f.detector = getvariable('detector'))
ORDER BY f.escalation_rank DESC, f.trace_start DESC, f.detector
LIMIT coalesce(getvariable('limit_rows'), 100);
