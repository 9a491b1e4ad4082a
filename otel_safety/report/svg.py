"""Inline SVG charts drawn in Python: no script, no font or stylesheet from the network.

Every text that reaches a chart goes through `esc`; span-derived text is attacker-controlled.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from html import escape
from typing import Any

from otel_safety.result_tables import page_safe

LEVEL_COLOURS = {
    "NONE": "#cbd5e1",
    "CLARIFY": "#93c5fd",
    "WARN": "#fcd34d",
    "SOFT_STOP": "#fb923c",
    "HUMAN_REVIEW": "#ef4444",
    "HARD_STOP": "#7f1d1d",
}
CURVE = "#2563eb"
STORE_MARK = "#111827"
CALIBRATED_MARK = "#16a34a"
BASELINE = "#9ca3af"


def esc(value: Any) -> str:
    """HTML-escaped, with bidirectional controls shown as escapes (they would reorder what
    an agent wrote around them)."""
    return escape(page_safe("" if value is None else str(value)), quote=True)


def stacked_bars(
    series: Sequence[tuple[datetime, dict[str, int]]], bucket: str, width: int = 920
) -> str:
    """Traces per escalation level per time bucket, stacked strictest on top."""
    height, left, bottom, top = 260, 48, 48, 16
    plot_w, plot_h = width - left - 16, height - top - bottom
    peak = max((sum(counts.values()) for _, counts in series), default=0) or 1
    step = plot_w / max(len(series), 1)
    bar = max(2.0, min(48.0, step * 0.7))
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" role="img" class="chart" '
        f'id="escalation-chart" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}">',
        f"<title>Traces per escalation level per {esc(bucket)}</title>",
    ]
    for tick in _ticks(peak):
        y = top + plot_h - plot_h * tick / peak
        parts.append(
            f'<line x1="{left}" x2="{left + plot_w}" y1="{y:.1f}" y2="{y:.1f}" '
            f'stroke="#e5e7eb"/><text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" '
            f'class="tick">{tick}</text>'
        )
    label_every = max(1, len(series) // 8)
    years = len({moment.year for moment, _ in series}) > 1
    for index, (moment, counts) in enumerate(series):
        x = left + step * index + (step - bar) / 2
        y = top + plot_h
        for level, colour in LEVEL_COLOURS.items():
            n = counts.get(level, 0)
            if not n:
                continue
            h = plot_h * n / peak
            y -= h
            parts.append(
                f'<rect class="bar level-{esc(level)}" x="{x:.1f}" y="{y:.1f}" '
                f'width="{bar:.1f}" height="{h:.1f}" fill="{colour}">'
                f"<title>{esc(_moment(moment, bucket, years))}: {n} {esc(level)}</title></rect>"
            )
        if index % label_every == 0:
            parts.append(
                f'<text x="{x + bar / 2:.1f}" y="{top + plot_h + 16}" text-anchor="middle" '
                f'class="tick">{esc(_moment(moment, bucket, years))}</text>'
            )
    parts.append(
        f'<line x1="{left}" x2="{left + plot_w}" y1="{top + plot_h}" y2="{top + plot_h}" '
        'stroke="#6b7280"/>'
    )
    x = left
    for level, colour in LEVEL_COLOURS.items():
        parts.append(
            f'<rect x="{x}" y="{height - 18}" width="12" height="12" fill="{colour}"/>'
            f'<text x="{x + 16}" y="{height - 8}" class="legend">{esc(level)}</text>'
        )
        x += 24 + 8 * len(level)
    parts.append("</svg>")
    return "".join(parts)


def pr_curve(
    title: str,
    points: Sequence[dict[str, Any]],
    *,
    prevalence: float,
    store_point: dict[str, Any] | None,
    calibrated_point: dict[str, Any] | None,
    size: int = 260,
) -> str:
    """Precision against recall over the thresholds; marks where the detector runs now
    (store threshold) and where calibration put it; the always-fire precision as a floor."""
    left, bottom, top, right = 40, 36, 24, 12
    plot = size - left - right
    plot_h = size - top - bottom

    def xy(recall: float, precision: float) -> tuple[float, float]:
        return left + plot * recall, top + plot_h * (1 - precision)

    ordered = sorted(points, key=lambda p: (p["recall"], -p["precision"]))
    path = " ".join(
        f"{x:.1f},{y:.1f}" for x, y in (xy(p["recall"], p["precision"]) for p in ordered)
    )
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" role="img" class="chart pr" width="{size}" '
        f'height="{size}" viewBox="0 0 {size} {size}">',
        f"<title>{esc(title)}: precision against recall</title>",
        f'<text x="{left}" y="14" class="chart-title">{esc(title)}</text>',
        f'<rect x="{left}" y="{top}" width="{plot}" height="{plot_h}" fill="#f9fafb" '
        'stroke="#d1d5db"/>',
    ]
    for tick in (0.0, 0.5, 1.0):
        x, _ = xy(tick, 0)
        _, y = xy(0, tick)
        parts.append(
            f'<text x="{x:.1f}" y="{top + plot_h + 14}" text-anchor="middle" class="tick">'
            f"{tick:g}</text>"
            f'<text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end" class="tick">{tick:g}</text>'
        )
    parts.append(
        f'<text x="{left + plot / 2}" y="{size - 6}" text-anchor="middle" class="axis">recall'
        f'</text><text x="10" y="{top + plot_h / 2}" class="axis" '
        f'transform="rotate(-90 10 {top + plot_h / 2})" text-anchor="middle">precision</text>'
    )
    _, base_y = xy(0, prevalence)
    parts.append(
        f'<line class="baseline" x1="{left}" x2="{left + plot}" y1="{base_y:.1f}" '
        f'y2="{base_y:.1f}" stroke="{BASELINE}" stroke-dasharray="4 3"/>'
    )
    if ordered:
        parts.append(
            f'<polyline class="curve" points="{path}" fill="none" stroke="{CURVE}" '
            'stroke-width="2.5"/>'
        )
    for p in ordered:
        x, y = xy(p["recall"], p["precision"])
        parts.append(
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.5" fill="{CURVE}"><title>threshold '
            f"{p['threshold']:g}: precision {p['precision']:.3f}, recall {p['recall']:.3f}"
            "</title></circle>"
        )
    if store_point is not None:
        x, y = xy(store_point["recall"], store_point["precision"])
        parts.append(
            f'<circle class="mark-store" cx="{x:.1f}" cy="{y:.1f}" r="6" fill="none" '
            f'stroke="{STORE_MARK}" stroke-width="2"><title>threshold in the store '
            f"{store_point['threshold']:g}</title></circle>"
        )
    if calibrated_point is not None:
        x, y = xy(calibrated_point["recall"], calibrated_point["precision"])
        parts.append(
            f'<rect class="mark-calibrated" x="{x - 6:.1f}" y="{y - 6:.1f}" width="12" '
            f'height="12" fill="{CALIBRATED_MARK}" transform="rotate(45 {x:.1f} {y:.1f})">'
            f"<title>calibrated threshold {calibrated_point['threshold']:g}</title></rect>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _ticks(peak: int) -> list[int]:
    step = max(1, _nice(peak / 4))
    return list(range(0, peak + 1, step))


def _nice(value: float) -> int:
    for base in (1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 5000, 10000):
        if value <= base:
            return base
    return int(value)


def _moment(moment: datetime, bucket: str, years: bool = False) -> str:
    """A bar's time; with the year when the bars span several (a bar from a stray clock)."""
    shown = {"minute": "%m-%d %H:%M", "hour": "%m-%d %H:00", "day": "%Y-%m-%d"}[bucket]
    return moment.strftime(f"%Y-{shown}" if years and bucket != "day" else shown)
