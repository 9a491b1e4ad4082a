-- calibration_drift: has a detector's behaviour moved between two time windows, so its calibration may no longer hold?
-- Tables: findings (per trace and detector: the highest score, whether it fired, the
--         threshold; the window is the trace's start), labels (the latest per trace and
--         detector), traces.
-- Parameters (optional; `SET VARIABLE name = value;` in the DuckDB CLI,
--             `--param name=value` with `otel-safety query`):
--   days        window length in days when the bounds below are not given (default 7)
--   b_until     end of the recent window B, exclusive (default: just after the latest trace)
--   b_since     start of B (default: b_until minus `days`)
--   a_until     end of the earlier window A, exclusive (default: b_since)
--   a_since     start of A (default: a_until minus `days`)
-- Columns per detector and window: traces, fire rate, mean and 90th-percentile score, the
-- threshold in force, and precision / recall where traces carry labels. psi is the
-- population stability index of the score distribution (10 bins of width 0.1) from A to B:
-- below 0.1 stable, up to 0.25 moderate, above that major: recalibrate; with fewer than 30
-- traces in a window, too few to tell.
WITH bounds AS (
    SELECT
        CASE WHEN getvariable('days') IS NULL THEN 7
             ELSE coalesce(CASE WHEN isfinite(try_cast(CAST(getvariable('days') AS VARCHAR) AS DOUBLE))
                           THEN try_cast(CAST(getvariable('days') AS VARCHAR) AS DOUBLE) END,
                           error('days must be a number, got '
                                 || CAST(getvariable('days') AS VARCHAR))) END
            AS days,
        CASE WHEN getvariable('b_until') IS NULL
             THEN (SELECT max(trace_start) FROM findings) + INTERVAL 1 MICROSECOND
             ELSE timestamp_param('b_until') END AS b_until,
        timestamp_param('b_since') AS b_since_given,
        timestamp_param('a_until') AS a_until_given,
        timestamp_param('a_since') AS a_since_given
),
windows AS (
    SELECT
        b_until,
        coalesce(b_since_given, b_until - to_microseconds(CAST(days * 86400e6 AS BIGINT)))
            AS b_since,
        coalesce(a_until_given, b_since_given,
                 b_until - to_microseconds(CAST(days * 86400e6 AS BIGINT))) AS a_until,
        days
    FROM bounds
    WHERE days > 0 OR error('days must be above 0, got ' || days::VARCHAR)
),
windows_all AS (
    SELECT
        coalesce(b.a_since_given, w.a_until - to_microseconds(CAST(w.days * 86400e6 AS BIGINT)))
            AS a_since,
        w.a_until,
        w.b_since,
        w.b_until
    FROM windows AS w, bounds AS b
    WHERE (w.b_since < w.b_until OR b.b_since_given IS NULL
           OR error('b_since must be before b_until, got ' || w.b_since::VARCHAR || ' and '
                    || w.b_until::VARCHAR))
),
per_trace AS (
    SELECT
        f.trace_id,
        f.detector,
        max(f.score) AS score,
        bool_or(f.detected) AS fired,
        max(f.threshold) AS threshold,
        CASE WHEN min(f.trace_start) >= any_value(w.b_since) AND min(f.trace_start) < any_value(w.b_until) THEN 'B'
             WHEN min(f.trace_start) >= any_value(w.a_since) AND min(f.trace_start) < any_value(w.a_until) THEN 'A'
        END AS win
    FROM findings AS f, windows_all AS w
    GROUP BY f.trace_id, f.detector
),
rows AS (
    SELECT p.*, e.label
    FROM per_trace AS p
    LEFT JOIN effective_labels AS e USING (trace_id, detector)
    WHERE p.win IS NOT NULL
),
stats AS (
    SELECT
        detector,
        win,
        count(*) AS traces,
        avg(fired::INTEGER) AS fire_rate,
        favg(score) AS mean_score,  -- compensated: the same answer however threads split rows
        quantile_cont(score, 0.9) AS p90_score,
        mode(threshold) AS threshold,
        count(label) AS labelled,
        count(*) FILTER (WHERE label AND fired) AS tp,
        count(*) FILTER (WHERE NOT label AND fired) AS fp,
        count(*) FILTER (WHERE label AND NOT fired) AS fn
    FROM rows
    GROUP BY ALL
),
bins AS (
    SELECT d.detector, g.bin
    FROM (SELECT DISTINCT detector FROM rows) AS d, range(10) AS g(bin)
),
shares AS (
    SELECT
        b.detector,
        b.bin,
        coalesce(count(r.score) FILTER (WHERE r.win = 'A'), 0)
            / greatest(any_value(sa.traces), 1) AS share_a,
        coalesce(count(r.score) FILTER (WHERE r.win = 'B'), 0)
            / greatest(any_value(sb.traces), 1) AS share_b
    FROM bins AS b
    LEFT JOIN rows AS r
        ON r.detector = b.detector AND least(floor(r.score * 10), 9) = b.bin
    LEFT JOIN stats AS sa ON sa.detector = b.detector AND sa.win = 'A'
    LEFT JOIN stats AS sb ON sb.detector = b.detector AND sb.win = 'B'
    GROUP BY b.detector, b.bin
),
psi AS (
    SELECT
        detector,
        sum((greatest(share_b, 1e-4) - greatest(share_a, 1e-4))
            * ln(greatest(share_b, 1e-4) / greatest(share_a, 1e-4))) AS psi
    FROM shares
    GROUP BY ALL
)
SELECT
    d.detector,
    any_value(w.a_since) AS a_since,
    any_value(w.a_until) AS a_until,
    any_value(w.b_since) AS b_since,
    any_value(w.b_until) AS b_until,
    coalesce(any_value(a.traces), 0) AS traces_a,
    coalesce(any_value(b.traces), 0) AS traces_b,
    round(any_value(a.fire_rate), 4) AS fire_rate_a,
    round(any_value(b.fire_rate), 4) AS fire_rate_b,
    round(any_value(a.mean_score), 4) AS mean_score_a,
    round(any_value(b.mean_score), 4) AS mean_score_b,
    round(any_value(a.p90_score), 4) AS p90_score_a,
    round(any_value(b.p90_score), 4) AS p90_score_b,
    any_value(a.threshold) AS threshold_a,
    any_value(b.threshold) AS threshold_b,
    coalesce(any_value(a.labelled), 0) AS labelled_a,
    coalesce(any_value(b.labelled), 0) AS labelled_b,
    round(any_value(a.tp) / nullif(any_value(a.tp) + any_value(a.fp), 0), 4) AS precision_a,
    round(any_value(b.tp) / nullif(any_value(b.tp) + any_value(b.fp), 0), 4) AS precision_b,
    round(any_value(a.tp) / nullif(any_value(a.tp) + any_value(a.fn), 0), 4) AS recall_a,
    round(any_value(b.tp) / nullif(any_value(b.tp) + any_value(b.fn), 0), 4) AS recall_b,
    CASE WHEN any_value(a.traces) > 0 AND any_value(b.traces) > 0
         THEN round(any_value(p.psi), 4) END AS psi,
    CASE WHEN coalesce(any_value(a.traces), 0) = 0 OR coalesce(any_value(b.traces), 0) = 0
              THEN 'no data in one window'
         WHEN least(any_value(a.traces), any_value(b.traces)) < 30
              THEN 'too few traces to tell (under 30 in a window)'
         WHEN any_value(p.psi) < 0.1 THEN 'stable'
         WHEN any_value(p.psi) <= 0.25 THEN 'moderate'
         ELSE 'major' END AS drift
FROM (SELECT DISTINCT detector FROM rows) AS d
CROSS JOIN windows_all AS w
LEFT JOIN stats AS a ON a.detector = d.detector AND a.win = 'A'
LEFT JOIN stats AS b ON b.detector = d.detector AND b.win = 'B'
LEFT JOIN psi AS p ON p.detector = d.detector
GROUP BY d.detector
ORDER BY psi DESC NULLS LAST, d.detector;
