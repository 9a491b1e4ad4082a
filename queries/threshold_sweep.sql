-- threshold_sweep: per detector, the precision and recall it would have at each threshold it could be given.
-- Tables: labels (the label in force per trace and detector: the latest), findings (a trace's
--         score is the highest its findings got; a judged trace without a finding scores 0).
-- Parameters (optional; `SET VARIABLE name = value;` in the DuckDB CLI,
--             `--param name=value` with `otel-safety query`):
--   detector    only this detector key (default: all)
--   labels      real or synthetic: only that kind of label (default: both, apart)
-- A detector fires when its score reaches the threshold and is above 0, so the thresholds
-- are the positive scores observed. Columns: fires = traces that would fire; best marks the
-- highest F1 (ties: higher precision, then higher threshold), the point `otel-safety
-- calibrate` chooses on all the rows (it places its threshold in the gap below that point,
-- at the default where that fires on the same traces); store_threshold is the threshold the
-- findings carry.
-- In-sample figures: for honest ones use `otel-safety calibrate` (cross-validated).
WITH params AS (
    SELECT CASE
        WHEN CAST(getvariable('labels') AS VARCHAR) IS NULL THEN NULL
        WHEN lower(CAST(getvariable('labels') AS VARCHAR)) IN ('real', 'synthetic') THEN lower(CAST(getvariable('labels') AS VARCHAR))
        ELSE error('labels must be real or synthetic, got ' || CAST(getvariable('labels') AS VARCHAR)) END AS kind
),
judged AS (
    SELECT trace_id FROM traces UNION SELECT trace_id FROM findings
),
scores AS (
    SELECT trace_id, detector, max(score) AS score FROM findings GROUP BY ALL
),
scored AS (
    SELECT
        e.detector,
        CASE WHEN lower(coalesce(e.source, '')) LIKE 'synthetic%' THEN 'synthetic'
             ELSE 'real' END AS labels,
        e.label,
        coalesce(s.score, 0.0) AS score
    FROM effective_labels AS e
    JOIN judged AS j USING (trace_id)
    LEFT JOIN scores AS s USING (trace_id, detector)
    WHERE CAST(getvariable('detector') AS VARCHAR) IS NULL OR e.detector = CAST(getvariable('detector') AS VARCHAR)
),
per_score AS (
    SELECT
        detector,
        labels,
        score,
        count(*) FILTER (WHERE label) AS pos,
        count(*) FILTER (WHERE NOT label) AS neg
    FROM scored, params AS p
    WHERE p.kind IS NULL OR labels = p.kind
    GROUP BY ALL
),
cumulative AS (
    SELECT
        detector,
        labels,
        score AS threshold,
        sum(pos) OVER w AS tp,
        sum(neg) OVER w AS fp,
        sum(pos) OVER everything AS positives,
        sum(neg) OVER everything AS negatives
    FROM per_score
    WINDOW
        w AS (PARTITION BY detector, labels ORDER BY score DESC
              ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW),
        everything AS (PARTITION BY detector, labels)
),
points AS (
    SELECT
        detector,
        labels,
        threshold,
        CAST(tp + fp AS BIGINT) AS fires,
        CAST(tp AS BIGINT) AS tp,
        CAST(fp AS BIGINT) AS fp,
        CAST(positives - tp AS BIGINT) AS fn,
        CAST(negatives - fp AS BIGINT) AS tn,
        CASE WHEN tp + fp > 0 THEN tp / (tp + fp) ELSE 0 END AS p,
        CASE WHEN positives > 0 THEN tp / positives ELSE 0 END AS r
    FROM cumulative
    WHERE threshold > 0
),
stored AS (
    SELECT detector, mode(threshold) AS store_threshold FROM findings GROUP BY ALL
)
SELECT
    pt.detector,
    pt.labels,
    pt.threshold,
    pt.fires,
    pt.tp,
    pt.fp,
    pt.fn,
    pt.tn,
    round(pt.p, 4) AS precision,
    round(pt.r, 4) AS recall,
    round(CASE WHEN pt.p + pt.r > 0 THEN 2 * pt.p * pt.r / (pt.p + pt.r) ELSE 0 END, 4) AS f1,
    pt.tp > 0 AND row_number() OVER (
        PARTITION BY pt.detector, pt.labels
        ORDER BY pt.tp > 0 DESC,
                 CASE WHEN pt.p + pt.r > 0 THEN 2 * pt.p * pt.r / (pt.p + pt.r) ELSE 0 END DESC,
                 pt.p DESC, pt.threshold DESC) = 1 AS best,
    st.store_threshold
FROM points AS pt
LEFT JOIN stored AS st USING (detector)
ORDER BY pt.detector, pt.labels, pt.threshold DESC;
