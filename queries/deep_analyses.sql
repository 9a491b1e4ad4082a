-- deep_analyses: every deep analysis a model gave, newest first: why the trace was chosen,
-- the verdict, the level before and after, and what it cost (or the error that stopped it).
-- Tables: deep_runs (one row per analysis, errors included), findings (the deep_analysis
--         finding with its eight dimensions in `details`).
-- Parameters (optional; `SET VARIABLE name = value;` in the DuckDB CLI,
--             `--param name=value` with `otel-safety query`):
--   outcome     only ok or error (default: both)
--   limit_rows  at most this many rows (default 100)
WITH params AS (
    SELECT CASE
        WHEN getvariable('outcome') IS NULL THEN NULL
        WHEN lower(CAST(getvariable('outcome') AS VARCHAR)) IN ('ok', 'error')
            THEN lower(CAST(getvariable('outcome') AS VARCHAR))
        ELSE error('outcome must be ok or error, got ' || CAST(getvariable('outcome') AS VARCHAR))
    END AS outcome
)
SELECT
    date_trunc('second', r.requested_at) AS requested_at,
    r.trace_id,
    r.chosen_because,
    r.outcome,
    r.verdict,
    round(r.score, 3) AS score,
    r.level_before,
    r.level_after,
    f.details->>'$.summary' AS summary,
    r.model,
    r.prompt_version,
    r.calls,
    r.prompt_tokens + r.completion_tokens AS tokens,
    r.latency_ms,
    r.error
FROM deep_runs r
CROSS JOIN params p
LEFT JOIN findings f
    ON f.trace_id = r.trace_id AND f.detector = 'deep_analysis' AND r.outcome = 'ok'
WHERE p.outcome IS NULL OR r.outcome = p.outcome
ORDER BY r.requested_at DESC, r.trace_id
LIMIT coalesce(CAST(getvariable('limit_rows') AS BIGINT), 100);
