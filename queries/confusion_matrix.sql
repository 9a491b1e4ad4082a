-- confusion_matrix: per detector, how its verdicts in the store compare with the labels in force.
-- Tables: labels (the latest label per trace and detector is the one in force), findings (a
--         detector fired on a trace when any of its findings there did; a judged trace
--         without its finding did not fire), traces.
-- Parameters (optional; `SET VARIABLE name = value;` in the DuckDB CLI,
--             `--param name=value` with `otel-safety query`):
--   detector    only this detector key (default: all)
--   per         kind (default): real and synthetic labels apart (a source starting with
--               'synthetic' is synthetic); source: one row per label source
-- Labels on traces the store never judged are left out (labels_summary counts them).
-- Columns: tp/fp/fn/tn at the thresholds the findings were written with; precision, recall
-- and F1 are NULL where undefined (nothing fired; no positive label; neither), not 0;
-- always_fire_f1 is the F1 of a detector that fires on every trace.
-- In `otel-safety eval`'s store the findings are the packaged judges' (in-sample for rows
-- they were fitted on): eval's printed table is the out-of-sample figure.
WITH params AS (
    SELECT CASE
        WHEN CAST(getvariable('per') AS VARCHAR) IS NULL OR lower(CAST(getvariable('per') AS VARCHAR)) = 'kind' THEN 'kind'
        WHEN lower(CAST(getvariable('per') AS VARCHAR)) = 'source' THEN 'source'
        ELSE error('per must be kind or source, got ' || CAST(getvariable('per') AS VARCHAR)) END AS per
),
judged AS (
    SELECT trace_id FROM traces UNION SELECT trace_id FROM findings
),
verdicts AS (
    SELECT trace_id, detector, bool_or(detected) AS fired FROM findings GROUP BY ALL
),
pairs AS (
    SELECT
        e.detector,
        CASE WHEN p.per = 'source' THEN coalesce(e.source, '')
             WHEN lower(coalesce(e.source, '')) LIKE 'synthetic%' THEN 'synthetic'
             ELSE 'real' END AS labels,
        e.label,
        coalesce(v.fired, false) AS fired
    FROM effective_labels AS e
    JOIN judged AS j USING (trace_id)
    LEFT JOIN verdicts AS v USING (trace_id, detector)
    CROSS JOIN params AS p
    WHERE CAST(getvariable('detector') AS VARCHAR) IS NULL OR e.detector = CAST(getvariable('detector') AS VARCHAR)
),
counts AS (
    SELECT
        detector,
        labels,
        count(*) AS traces,
        count(*) FILTER (WHERE label AND fired) AS tp,
        count(*) FILTER (WHERE NOT label AND fired) AS fp,
        count(*) FILTER (WHERE label AND NOT fired) AS fn,
        count(*) FILTER (WHERE NOT label AND NOT fired) AS tn
    FROM pairs
    GROUP BY ALL
)
SELECT
    detector,
    labels,
    traces,
    tp,
    fp,
    fn,
    tn,
    round(CASE WHEN tp + fp > 0 THEN tp / (tp + fp) END, 4) AS precision,
    round(CASE WHEN tp + fn > 0 THEN tp / (tp + fn) END, 4) AS recall,
    round(CASE WHEN tp + fp + fn > 0 THEN 2 * tp / (2 * tp + fp + fn) END, 4) AS f1,
    round(2 * (tp + fn) / (traces + tp + fn), 4) AS always_fire_f1
FROM counts
ORDER BY detector, labels;
