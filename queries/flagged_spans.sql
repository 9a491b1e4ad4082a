-- flagged_spans: which spans did a detector flag, strictest first, and what did it see?
-- Tables: findings, spans, resolutions (alerts marked resolved with `otel-safety resolve`).
-- Parameters (optional; `SET VARIABLE name = value;` in the DuckDB CLI,
--             `--param name=value` with `otel-safety query`):
--   min_level   lowest escalation level shown, by name: CLARIFY, WARN, SOFT_STOP,
--               HUMAN_REVIEW, HARD_STOP (default CLARIFY)
--   min_rank    the same as a number, 0 NONE .. 5 HARD_STOP (used when min_level is unset)
--   detector    only this detector key (default: all)
--   include_resolved  true: also findings whose trace or detector was resolved (default false)
--   limit_rows  at most this many rows (default 100)
WITH params AS (
    SELECT CASE
        WHEN getvariable('include_resolved') IS NULL THEN FALSE
        WHEN lower(CAST(getvariable('include_resolved') AS VARCHAR)) IN ('true', 'false')
        THEN lower(CAST(getvariable('include_resolved') AS VARCHAR)) = 'true'
        ELSE error('include_resolved must be true or false, got '
                   || CAST(getvariable('include_resolved') AS VARCHAR)) END AS include_resolved
),
-- The resolution in force per trace and detector is the latest; NULL detector: the whole trace.
-- It covers the findings judged by the time it was made: an alert judged after it is open.
resolved AS (
    SELECT trace_id, detector, resolved_at
    FROM resolutions
    QUALIFY row_number() OVER (
        PARTITION BY trace_id, detector ORDER BY resolved_at DESC, resolved DESC) = 1
        AND resolved
)
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
CROSS JOIN params AS p
LEFT JOIN spans AS s USING (trace_id, span_id)
WHERE f.detected
  AND (p.include_resolved OR NOT EXISTS (
        SELECT 1 FROM resolved AS r
        WHERE r.trace_id = f.trace_id AND (r.detector IS NULL OR r.detector = f.detector)
          AND coalesce(f.evaluated_at <= r.resolved_at, TRUE)))
  AND (CAST(getvariable('min_level') AS VARCHAR) IS NULL
       OR list_position(
            ['NONE', 'CLARIFY', 'WARN', 'SOFT_STOP', 'HUMAN_REVIEW', 'HARD_STOP'],
            upper(CAST(getvariable('min_level') AS VARCHAR))) IS NOT NULL
       OR error('min_level must be one of NONE, CLARIFY, WARN, SOFT_STOP, HUMAN_REVIEW, '
                || 'HARD_STOP; got ' || CAST(getvariable('min_level') AS VARCHAR)))
  AND f.escalation_rank >= coalesce(
        list_position(
            ['NONE', 'CLARIFY', 'WARN', 'SOFT_STOP', 'HUMAN_REVIEW', 'HARD_STOP'],
            upper(CAST(getvariable('min_level') AS VARCHAR))
        ) - 1,
        CASE WHEN getvariable('min_rank') IS NULL THEN NULL
             ELSE coalesce(try_cast(regexp_extract(trim(CAST(getvariable('min_rank') AS VARCHAR)),
                                                   '^[0-5]$') AS INTEGER),
                           error('min_rank must be a whole number from 0 to 5, got '
                                 || CAST(getvariable('min_rank') AS VARCHAR))) END,
        1)
  AND (CAST(getvariable('detector') AS VARCHAR) IS NULL OR f.detector = CAST(getvariable('detector') AS VARCHAR))
ORDER BY f.escalation_rank DESC, f.score DESC, f.trace_start DESC, f.detector
LIMIT coalesce(CAST(getvariable('limit_rows') AS BIGINT), 100);
