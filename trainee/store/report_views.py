"""The analysis views as SVG files beside ``report.md``: parameter importance, parallel
coordinates and metric-vs-parameter slice plots.

Renderers are pure (a :class:`~trainee.spec.wire.SessionAnalysis` in, SVG text out, or
None when there is nothing to draw); stdlib only, like the metric chart. The page draws
the same views from the same data (``session_analysis``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any
from xml.sax.saxutils import escape

from trainee.spec.wire import AnalysisRound, AnalysisTunable, SessionAnalysis

__all__ = [
    "IMPORTANCE_NAME",
    "PARALLEL_NAME",
    "SLICES_NAME",
    "VIEW_NAMES",
    "analysis_section",
    "analysis_views",
    "axis_scale",
    "render_importance_svg",
    "render_parallel_svg",
    "render_slices_svg",
]

IMPORTANCE_NAME = "report_importance.svg"
PARALLEL_NAME = "report_parallel.svg"
SLICES_NAME = "report_slices.svg"
VIEW_NAMES = (IMPORTANCE_NAME, PARALLEL_NAME, SLICES_NAME)
"""The analysis SVGs written beside ``report.md`` (and downloadable from the page)."""

_GOOD, _BAD = (31, 111, 209), (230, 140, 40)
"""Lines and points go from blue (the best metric) to orange (the worst)."""


def _attr(text: str) -> str:
    return escape(text, {'"': "&quot;"})


def _num(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    return f"{value:.4g}"


def _head(width: int, height: int, title: str) -> list[str]:
    return [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
        f"<title>{escape(title)}</title>",
        f'<rect x="0" y="0" width="{width}" height="{height}" fill="#ffffff"/>',
        f'<text x="{width / 2:.1f}" y="22" text-anchor="middle" font-size="15">'
        f"{escape(title)}</text>",
    ]


def _numeric(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def axis_scale(
    tunable: AnalysisTunable, values: Sequence[Any]
) -> tuple[Callable[[Any], float | None], list[tuple[float, str]]]:
    """``(position, ticks)``: position maps a value to 0..1 along the axis (None: not on
    it); ticks are ``(position, label)``. Choices are evenly spaced; numbers span the
    tunable's bounds (else the values seen), on a log scale for a log-scaled tunable."""
    if tunable.choices is not None or not all(_numeric(v) for v in values if v is not None):
        labels = [str(c) for c in tunable.choices or []]
        for v in values:
            if v is not None and str(v) not in labels:
                labels.append(str(v))
        n = max(1, len(labels) - 1)
        spots = {label: (i / n if len(labels) > 1 else 0.5) for i, label in enumerate(labels)}
        return (lambda v: None if v is None else spots.get(str(v))), [
            (p, label) for label, p in spots.items()
        ]
    seen = [float(v) for v in values if _numeric(v)]
    lo = tunable.min_value if tunable.min_value is not None else min(seen, default=0.0)
    hi = tunable.max_value if tunable.max_value is not None else max(seen, default=1.0)
    lo, hi = min([lo, *seen]), max([hi, *seen])
    log = tunable.log and lo > 0
    f: Callable[[float], float] = math.log10 if log else (lambda x: x)
    a, b = f(lo), f(hi)
    span = b - a

    def pos(v: Any) -> float | None:
        if not _numeric(v) or (log and v <= 0):
            return None
        return 0.5 if span == 0 else (f(float(v)) - a) / span

    if log:
        ticks = [10.0**e for e in range(math.ceil(a - 1e-9), math.floor(b + 1e-9) + 1)]
        if len(ticks) < 2:
            ticks = [lo, hi]
    else:
        ticks = [lo + (hi - lo) * i / 4 for i in range(5)] if span else [lo]
    return pos, [(p, _num(t)) for t in ticks if (p := pos(t)) is not None]


def _metric_axis(a: SessionAnalysis) -> AnalysisTunable:
    return AnalysisTunable(name=a.metric, type="float")


def _color(a: SessionAnalysis) -> Callable[[float | None], str]:
    values = [r.metric for r in a.rounds if r.metric is not None]
    lo, hi = min(values, default=0.0), max(values, default=1.0)

    def color(v: float | None) -> str:
        if v is None:
            return "#bbbbbb"
        t = 0.5 if hi == lo else (v - lo) / (hi - lo)
        if a.goal == "max":
            t = 1 - t  # t = 0 is the best end
        rgb = [round(g + (b - g) * t) for g, b in zip(_GOOD, _BAD, strict=True)]
        return "#{:02x}{:02x}{:02x}".format(*rgb)

    return color


def _legend(a: SessionAnalysis, x: float, y: float) -> list[str]:
    color = _color(a)
    values = [r.metric for r in a.rounds if r.metric is not None]
    if not values:
        return []
    best, worst = (min(values), max(values)) if a.goal == "min" else (max(values), min(values))
    return [
        f'<rect x="{x}" y="{y - 9}" width="10" height="10" fill="{color(best)}"/>',
        f'<text x="{x + 14}" y="{y}">best {escape(a.metric)} {_num(best)}</text>',
        f'<rect x="{x + 170}" y="{y - 9}" width="10" height="10" fill="{color(worst)}"/>',
        f'<text x="{x + 184}" y="{y}">worst {_num(worst)}</text>',
        f'<line x1="{x + 290}" y1="{y - 4}" x2="{x + 312}" y2="{y - 4}" stroke="#111" '
        'stroke-width="3"/>',
        f'<text x="{x + 316}" y="{y}">best round</text>',
        f'<line x1="{x + 400}" y1="{y - 4}" x2="{x + 422}" y2="{y - 4}" stroke="#111" '
        'stroke-dasharray="5 3"/>',
        f'<text x="{x + 426}" y="{y}">baseline</text>',
    ]


# -- importance -------------------------------------------------------------------------


def render_importance_svg(a: SessionAnalysis) -> str | None:
    """Horizontal bars of each tunable's importance share; None when not available."""
    imp = a.importance
    if not imp.available or not imp.values:
        return None
    items = sorted(imp.values.items(), key=lambda kv: -kv[1])
    width, left, bar_h = 720, 160, 22
    height = 64 + (bar_h + 8) * len(items) + 24
    top = max(imp.values.values()) or 1.0
    out = _head(width, height, f"Parameter importance for {a.metric} ({imp.evaluator})")
    y = 48
    for name, value in items:
        w = (width - left - 90) * value / top
        out.append(
            f'<text x="{left - 8}" y="{y + bar_h / 2 + 4:.1f}" text-anchor="end">'
            f"{escape(name)}</text>"
        )
        out.append(
            f'<rect class="importance" x="{left}" y="{y}" width="{w:.1f}" height="{bar_h}" '
            f'fill="#1f6fd1"><title>{_attr(f"{name}: {value:.3f}")}</title></rect>'
        )
        out.append(f'<text x="{left + w + 6:.1f}" y="{y + bar_h / 2 + 4:.1f}">{value:.0%}</text>')
        y += bar_h + 8
    n = len([r for r in a.rounds if r.metric is not None])
    out.append(
        f'<text x="{left}" y="{height - 12}" fill="#666">share of the variation in '
        f"{escape(a.metric)} over {n} completed round(s)</text>"
    )
    out.append("</svg>")
    return "\n".join(out) + "\n"


# -- parallel coordinates ---------------------------------------------------------------


def _round_style(a: SessionAnalysis, r: AnalysisRound) -> str:
    if r.index == a.best_round:
        return ' stroke-width="3.5" class="round best"'
    if r.index == a.baseline_round:
        return ' stroke-width="2" stroke-dasharray="6 3" class="round baseline"'
    return ' stroke-width="1.5" stroke-opacity="0.8" class="round"'


def render_parallel_svg(a: SessionAnalysis) -> str | None:
    """One polyline per round across the tunables' axes and the metric's (the last),
    colored by the metric; the best round thick, the baseline dashed. None without rounds
    or tunables."""
    if not a.rounds or not a.tunables:
        return None
    axes = [*a.tunables, _metric_axis(a)]
    width, height = max(720, 150 * len(axes)), 420
    left, right, top, bottom = 70, 70, 70, 60
    plot_h = height - top - bottom
    gap = (width - left - right) / max(1, len(axes) - 1)
    scales = []
    for i, axis in enumerate(axes):
        last = i == len(axes) - 1
        values = [r.metric if last else r.params.get(axis.name) for r in a.rounds]
        scales.append(axis_scale(axis, values))
    out = _head(width, height, f"Parallel coordinates: tunables and {a.metric} per round")
    for i, (axis, (_, ticks)) in enumerate(zip(axes, scales, strict=True)):
        x = left + gap * i if len(axes) > 1 else width / 2
        scale = " (log)" if axis.log else ""
        out.append(
            f'<line class="axis" x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{top + plot_h}" '
            'stroke="#444"/>'
        )
        out.append(
            f'<text class="axis-name" x="{x:.1f}" y="{top - 16}" text-anchor="middle" '
            f'font-weight="bold">{escape(axis.name + scale)}</text>'
        )
        for p, label in ticks:
            y = top + (1 - p) * plot_h
            out.append(
                f'<line x1="{x - 3:.1f}" y1="{y:.1f}" x2="{x + 3:.1f}" y2="{y:.1f}" stroke="#444"/>'
            )
            out.append(
                f'<text x="{x + 6:.1f}" y="{y + 4:.1f}" fill="#555" font-size="10">{escape(label)}</text>'
            )
    color = _color(a)
    order = sorted(a.rounds, key=lambda r: (r.index == a.best_round, r.index == a.baseline_round))
    for r in order:
        points = []
        for i, (axis, (pos, _)) in enumerate(zip(axes, scales, strict=True)):
            value = r.metric if i == len(axes) - 1 else r.params.get(axis.name)
            at = pos(value)
            if at is None:
                continue
            x = left + gap * i if len(axes) > 1 else width / 2
            points.append(f"{x:.1f},{top + (1 - at) * plot_h:.1f}")
        if not points:
            continue
        stroke = "#111111" if r.index == a.best_round else color(r.metric)
        label = (
            f"round {r.index}: {a.metric} = {_num(r.metric) if r.metric is not None else r.status}"
        )
        out.append(
            f'<polyline points="{" ".join(points)}" fill="none" stroke="{stroke}"'
            f'{_round_style(a, r)} data-round="{r.index}"><title>{_attr(label)}</title></polyline>'
        )
    out += _legend(a, left, height - 20)
    out.append("</svg>")
    return "\n".join(out) + "\n"


# -- slices -----------------------------------------------------------------------------


def render_slices_svg(a: SessionAnalysis) -> str | None:
    """One small metric-vs-parameter plot per tunable (log x axis for log-scaled ones);
    points colored by the metric, the best ringed black, the baseline ringed grey."""
    scored = [r for r in a.rounds if r.metric is not None]
    if not scored or not a.tunables:
        return None
    cols = min(3, len(a.tunables))
    rows = math.ceil(len(a.tunables) / cols)
    cell_w, cell_h = 240, 200
    width, height = cols * cell_w, 40 + rows * cell_h + 30
    out = _head(width, height, f"{a.metric} against each tunable")
    metric_pos, metric_ticks = axis_scale(_metric_axis(a), [r.metric for r in scored])
    color = _color(a)
    for k, t in enumerate(a.tunables):
        ox, oy = (k % cols) * cell_w, 40 + (k // cols) * cell_h
        px, py, pw, ph = ox + 56, oy + 22, cell_w - 72, cell_h - 64
        pos, ticks = axis_scale(t, [r.params.get(t.name) for r in scored])
        out.append(f'<g class="slice" data-param="{_attr(t.name)}">')
        out.append(
            f'<text x="{px + pw / 2:.1f}" y="{oy + 14}" text-anchor="middle" '
            f'font-weight="bold">{escape(t.name + (" (log)" if t.log else ""))}</text>'
        )
        out.append(
            f'<rect x="{px}" y="{py}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>'
        )
        for p, label in ticks[:: max(1, math.ceil(len(ticks) / 5))]:
            x = px + p * pw
            out.append(
                f'<text x="{x:.1f}" y="{py + ph + 14}" text-anchor="middle" fill="#555" '
                f'font-size="10">{escape(label)}</text>'
            )
        for p, label in metric_ticks[::2]:
            y = py + (1 - p) * ph
            out.append(
                f'<text x="{px - 4}" y="{y + 3:.1f}" text-anchor="end" fill="#555" '
                f'font-size="10">{escape(label)}</text>'
            )
        for r in scored:
            xp, yp = pos(r.params.get(t.name)), metric_pos(r.metric)
            if xp is None or yp is None:
                continue
            cx, cy = px + xp * pw, py + (1 - yp) * ph
            ring = (
                ' stroke="#111" stroke-width="2"'
                if r.index == a.best_round
                else ' stroke="#888" stroke-width="2"'
                if r.index == a.baseline_round
                else ""
            )
            label = f"round {r.index}: {t.name} = {_num(r.params.get(t.name))}, {a.metric} = {_num(r.metric)}"
            out.append(
                f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="4.5" fill="{color(r.metric)}"{ring} '
                f'data-round="{r.index}"><title>{_attr(label)}</title></circle>'
            )
        out.append("</g>")
    out.append(
        f'<text x="12" y="{height - 10}" fill="#666">y: {escape(a.metric)}; black ring: best '
        "round, grey ring: baseline</text>"
    )
    out.append("</svg>")
    return "\n".join(out) + "\n"


def analysis_views(a: SessionAnalysis) -> dict[str, str]:
    """The SVGs there is something to draw for, by file name."""
    rendered = {
        IMPORTANCE_NAME: render_importance_svg(a),
        PARALLEL_NAME: render_parallel_svg(a),
        SLICES_NAME: render_slices_svg(a),
    }
    return {name: svg for name, svg in rendered.items() if svg is not None}


def analysis_section(a: SessionAnalysis) -> list[str]:
    """The report's ``## Analysis`` section: importance in words, the SVGs linked."""
    views = analysis_views(a)
    lines = ["## Analysis", ""]
    imp = a.importance
    if imp.available:
        shown = ", ".join(
            f"`{k}` {v:.0%}" for k, v in sorted(imp.values.items(), key=lambda kv: -kv[1])
        )
        lines += [f"Parameter importance ({imp.evaluator}, Optuna): {shown}", ""]
    else:
        lines += [f"Parameter importance: {imp.note}", ""]
    titles = {
        IMPORTANCE_NAME: "parameter importance",
        PARALLEL_NAME: "parallel coordinates",
        SLICES_NAME: f"{a.metric} against each tunable",
    }
    for name, title in titles.items():
        if name in views:
            lines += [f"![{title}]({name})", ""]
    if not views:
        lines += ["No round to analyse yet.", ""]
    return lines
