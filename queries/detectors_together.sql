-- detectors_together: which detectors fire on the same agent runs, and more often than chance?
-- Tables: findings (a detector fired on a trace when any of its findings there did).
-- Parameters (optional; `SET VARIABLE name = value;` in the DuckDB CLI,
--             `--param name=value` with `otel-safety query`):
--   min_traces  only pairs that fired together on at least this many traces (default 1)
--   detector    only pairs that include this detector (default: all)
-- Columns: together = traces where both fired; jaccard = together / traces where either
-- fired; lift = how many times more often they fire together than if independent (over
-- all judged traces in findings).
WITH params AS (
    SELECT CASE
        WHEN getvariable('min_traces') IS NULL THEN 1
        ELSE coalesce(try_cast(regexp_extract(trim(CAST(getvariable('min_traces') AS VARCHAR)), '^[0-9]+$') AS INTEGER),
                      error('min_traces must be a whole number, got '
                            || getvariable('min_traces'))) END AS min_traces
),
fired AS (
    SELECT DISTINCT trace_id, detector FROM findings WHERE detected
),
per_detector AS (
    SELECT detector, count(*) AS traces FROM fired GROUP BY ALL
),
total AS (
    SELECT count(DISTINCT trace_id) AS traces FROM findings
)
SELECT
    a.detector AS detector_a,
    b.detector AS detector_b,
    count(*) AS together,
    pa.traces AS fired_a,
    pb.traces AS fired_b,
    round(count(*) / (pa.traces + pb.traces - count(*)), 3) AS jaccard,
    round(count(*) * total.traces / (pa.traces * pb.traces), 2) AS lift
FROM fired AS a
JOIN fired AS b ON a.trace_id = b.trace_id AND a.detector < b.detector
JOIN per_detector AS pa ON pa.detector = a.detector
JOIN per_detector AS pb ON pb.detector = b.detector
CROSS JOIN total
CROSS JOIN params AS p
WHERE CAST(getvariable('detector') AS VARCHAR) IS NULL
   OR CAST(getvariable('detector') AS VARCHAR) IN (a.detector, b.detector)
GROUP BY a.detector, b.detector, pa.traces, pb.traces, total.traces, p.min_traces
HAVING count(*) >= p.min_traces
ORDER BY together DESC, lift DESC, detector_a, detector_b;
