-- flagged_spans: which spans did a detector flag, strictest first, and what did it see?
-- Tables: findings, spans.
-- Parameters (optional; `SET VARIABLE name = value;` in the DuckDB CLI,
--             `--param name=value` with `otel-safety query`):
--   min_level   lowest escalation level shown, by name: CLARIFY, WARN, SOFT_STOP,
--               HUMAN_REVIEW, HARD_STOP (default CLARIFY)
--   min_rank    the same as a number, 0 NONE .. 5 HARD_STOP (used when min_level is unset)
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
  AND (getvariable('min_level') IS NULL
       OR list_position(
            ['NONE', 'CLARIFY', 'WARN', 'SOFT_STOP', 'HUMAN_REVIEW', 'HARD_STOP'],
            upper(getvariable('min_level'))) IS NOT NULL
       OR error('min_level must be one of NONE, CLARIFY, WARN, SOFT_STOP, HUMAN_REVIEW, '
                || 'HARD_STOP; got ' || getvariable('min_level')))
  AND f.escalation_rank >= coalesce(
        list_position(
            ['NONE', 'CLARIFY', 'WARN', 'SOFT_STOP', 'HUMAN_REVIEW', 'HARD_STOP'],
            upper(getvariable('min_level'))
        ) - 1,
        getvariable('min_rank'),
        1)
  AND (getvariable('detector') IS NULL OR f.detector = getvariable('detector'))
ORDER BY f.escalation_rank DESC, f.score DESC, f.trace_start DESC, f.detector
LIMIT coalesce(getvariable('limit_rows'), 100);
