-- behavior_indicators: which agents show which behaviour indicators, how often and how strongly?
-- Tables: findings (the behaviour monitors' findings: sandbagging, agent_deception,
--         behavior_drift, ethics_boundary; `details` lists every indicator with its type,
--         strength and agent).
-- Parameters (optional; `SET VARIABLE name = value;` in the DuckDB CLI,
--             `--param name=value` with `otel-safety query`):
--   since       only traces that started at or after this date or timestamp (default: all)
--   until       only traces that started before this date or timestamp (default: all)
--   fired       true: only indicators of findings that fired; false: all, learning mode
--               included (default true)
--   limit_rows  at most this many rows (default 50)
-- Columns: agent is the agent the indicator was seen in (gen_ai.agent.name); strongest is
-- the highest strength (0-1, the indicators' `severity` key); traces counts distinct traces.
WITH params AS (
    SELECT
        CASE WHEN getvariable('fired') IS NULL THEN TRUE
             WHEN lower(CAST(getvariable('fired') AS VARCHAR)) IN ('true', 'false')
             THEN lower(CAST(getvariable('fired') AS VARCHAR)) = 'true'
             ELSE error('fired must be true or false, got '
                        || CAST(getvariable('fired') AS VARCHAR)) END AS fired
),
entries AS (
    SELECT f.detector, f.trace_id, f.trace_start, f.detected,
           unnest(CAST(f.details -> '$.indicators' AS JSON[])) AS entry
    FROM findings AS f, params AS p
    WHERE in_time_window(f.trace_start)
      AND (f.detected OR NOT p.fired)
)
SELECT
    coalesce(entry ->> '$.agent', '(unnamed)') AS agent,
    entry ->> '$.type' AS indicator,
    detector,
    count(*) AS seen,
    count(DISTINCT trace_id) AS traces,
    round(max(CAST(entry ->> '$.severity' AS DOUBLE)), 3) AS strongest,
    max(trace_start) AS last_seen
FROM entries
WHERE entry ->> '$.type' IS NOT NULL
GROUP BY ALL
ORDER BY seen DESC, strongest DESC, agent, indicator
LIMIT coalesce(CAST(getvariable('limit_rows') AS BIGINT), 50);
