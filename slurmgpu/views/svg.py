"""Small inline-SVG charts for the HTML report, drawn in Python (no JavaScript, no CDN).

Every piece of text that reaches the SVG (partition, QOS, user names, labels) goes through
`esc`, so the markup can be inserted into the page as is.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from slurmgpu.accounting.document import TimePoint

# Colour-blind-safe palette (Okabe-Ito); the browser test looks for the first colour.
PALETTE: tuple[str, ...] = ("#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00")
CAPACITY_COLOUR = "#555555"

WIDTH = 760


def esc(value: Any) -> str:
    """Escape text and attribute values (quotes too)."""
    return html.escape("" if value is None else str(value), quote=True)


def _known(value: Any) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def nice_ceiling(value: float) -> float:
    """The smallest 1, 2, 2.5 or 5 x 10^k at or above `value` (axis maximum)."""
    if value <= 0:
        return 1.0
    exponent = math.floor(math.log10(value))
    for step in (1.0, 2.0, 2.5, 5.0, 10.0):
        candidate = step * 10**exponent
        if candidate >= value * (1 - 1e-9):
            return candidate
    return 10.0 ** (exponent + 1)


def _short_time(t: Any) -> str:
    text = str(t)
    if "T" not in text:
        return text
    date, _, clock = text.partition("T")
    clock = clock.rstrip("Z")[:5]
    return date[5:] if clock in ("00:00", "") else f"{date[5:]} {clock}"


def _fmt_axis(value: float) -> str:
    if value >= 1000:
        return f"{value / 1000:g}k"
    return f"{value:g}"


def timeseries_chart(points: Sequence[TimePoint]) -> str:
    """GPU-hours allocated per interval (filled) against capacity (dashed); "" without data."""
    if not points:
        return ""
    height, left, right, top, bottom = 260, 56, 16, 28, 44
    plot_w, plot_h = WIDTH - left - right, height - top - bottom
    alloc = [p.gpu_hours_allocated for p in points]
    cap = [p.capacity_gpu_hours for p in points]
    known = [float(v) for v in alloc + cap if _known(v)]
    y_max = nice_ceiling(max(known) if known else 1.0)
    n = len(points)

    def x(i: int) -> float:
        return left + (plot_w * i / (n - 1) if n > 1 else plot_w / 2)

    def y(v: float) -> float:
        return top + plot_h - plot_h * float(v) / y_max

    parts = [
        f'<svg class="chart timeseries" width="{WIDTH}" '
        f'height="{height}" viewBox="0 0 {WIDTH} {height}" role="img" '
        f'aria-label="GPU-hours allocated over time">'
    ]
    for k in range(5):
        v = y_max * k / 4
        yy = y(v)
        parts.append(
            f'<line x1="{left}" y1="{yy:.1f}" x2="{WIDTH - right}" y2="{yy:.1f}" '
            f'stroke="#dddddd" stroke-width="1"/>'
            f'<text x="{left - 6}" y="{yy + 4:.1f}" text-anchor="end" class="axis">'
            f"{_fmt_axis(v)}</text>"
        )
    label_every = max(1, math.ceil(n / 6))
    for i, p in enumerate(points):
        if i % label_every == 0 or i == n - 1:
            parts.append(
                f'<text x="{x(i):.1f}" y="{height - bottom + 18}" text-anchor="middle" '
                f'class="axis">{esc(_short_time(p.t))}</text>'
            )
    # Allocated, stacked by partition when the analysis splits it (largest at the bottom),
    # one set of polygons per run of known buckets (an unknown bucket leaves a gap).
    layers = _partition_layers(points)
    runs: list[list[int]] = [[]]
    for i, v in enumerate(alloc):
        if _known(v):
            runs[-1].append(i)
        elif runs[-1]:
            runs.append([])
    for run in (r for r in runs if r):
        xs = [x(i) for i in run]
        if len(run) == 1:
            xs = [xs[0] - 3, xs[0] + 3]
            run = [run[0], run[0]]
        lower = [0.0] * len(run)
        for k, (_, values) in enumerate(layers):
            upper = [lo + values[i] for lo, i in zip(lower, run, strict=True)]
            fwd = " ".join(f"{px:.1f},{y(v):.1f}" for px, v in zip(xs, upper, strict=True))
            back = " ".join(
                f"{px:.1f},{y(v):.1f}" for px, v in reversed(list(zip(xs, lower, strict=True)))
            )
            colour = PALETTE[k % len(PALETTE)]
            parts.append(
                f'<polygon class="series s{k}" fill="{colour}" fill-opacity="0.55" '
                f'stroke="none" points="{fwd} {back}"/>'
            )
            lower = upper
        total = " ".join(
            f"{px:.1f},{y(float(alloc[i])):.1f}" for px, i in zip(xs, run, strict=True)
        )
        parts.append(
            f'<polyline class="total" fill="none" stroke="{PALETTE[0]}" stroke-width="2" '
            f'points="{total}"/>'
        )
    cap_pts = [(x(i), y(v)) for i, v in enumerate(cap) if _known(v)]
    if cap_pts:
        line = " ".join(f"{px:.1f},{py:.1f}" for px, py in cap_pts)
        parts.append(
            f'<polyline class="capacity" fill="none" stroke="{CAPACITY_COLOUR}" stroke-width="1.5" '
            f'stroke-dasharray="6 4" points="{line}"/>'
        )
    for i, p in enumerate(points):
        if _known(alloc[i]):
            ratio = p.allocation_ratio
            tip = f"{p.t}: {float(alloc[i]):,.1f} GPU-h allocated"
            if _known(cap[i]):
                tip += f" of {float(cap[i]):,.1f}"
            if _known(ratio):
                tip += f" ({float(ratio) * 100:.1f}%)"
            parts.append(
                f'<circle cx="{x(i):.1f}" cy="{y(alloc[i]):.1f}" r="3" fill="{PALETTE[0]}">'
                f"<title>{esc(tip)}</title></circle>"
            )
    legend = [(PALETTE[k % len(PALETTE)], name) for k, (name, _) in enumerate(layers)]
    legend += [(CAPACITY_COLOUR, "capacity")] if cap_pts else []
    parts.append(_legend(legend, left, 14))
    parts.append("</svg>")
    return "".join(parts)


MAX_LAYERS = 5


def _partition_layers(points: Sequence[TimePoint]) -> list[tuple[str, list[float]]]:
    """[(name, value per point)]: the largest partitions, the rest as "other"; or one
    "allocated" layer when the points carry no per-partition split. Sums to the total."""
    totals: dict[str, float] = {}
    for p in points:
        for name, v in p.by_partition.items():
            if _known(v):
                totals[str(name)] = totals.get(str(name), 0.0) + float(v)
    alloc = [float(p.gpu_hours_allocated) if _known(p.gpu_hours_allocated) else 0.0
             for p in points]  # fmt: skip
    if not totals:
        return [("allocated", alloc)]
    names = sorted(totals, key=lambda n: (-totals[n], n))
    shown = names if len(names) <= MAX_LAYERS else names[: MAX_LAYERS - 1]
    layers = []
    for name in shown:
        values = []
        for p in points:
            v = p.by_partition.get(name)
            values.append(float(v) if _known(v) else 0.0)
        layers.append((name, values))
    stacked = [sum(values[i] for _, values in layers) for i in range(len(points))]
    rest = [max(0.0, a - s) for a, s in zip(alloc, stacked, strict=True)]
    if any(v > 1e-6 * max(alloc) for v in rest):  # not float noise of the sum
        layers.append(("other", rest))
    return layers


def _legend(entries: Sequence[tuple[str, str]], x0: float, y0: float) -> str:
    out, xx = [], x0
    for colour, name in entries:
        name = name if len(name) <= 20 else name[:19] + "…"
        out.append(
            f'<rect x="{xx:.0f}" y="{y0 - 9}" width="12" height="10" fill="{colour}"/>'
            f'<text x="{xx + 16:.0f}" y="{y0}" class="legend">{esc(name)}</text>'
        )
        xx += 24 + 7 * len(name)
    return "".join(out)


def bar_chart(
    groups: Sequence[tuple[str, Sequence[Any]]],
    *,
    series: Sequence[str],
    value_format: Callable[[Any], str],
    vmax: float | None = None,
    log_scale: bool = False,
) -> str:
    """Horizontal (grouped) bars: one row per group, one bar per series; "" without groups.

    Unknown values get the text "unknown" and no bar, so they never read as zero. With
    `log_scale` bar length follows log10(1 + value), for waits where the max dwarfs p50.
    """
    if not groups:
        return ""
    label_w, value_w, bar_h, gap = 190, 90, 14, 10
    top = 26 if len(series) > 1 else 8
    row_h = bar_h * len(series) + gap
    height = top + row_h * len(groups) + 4
    bars_w = WIDTH - label_w - value_w
    known = [float(v) for _, values in groups for v in values if _known(v)]
    scale_max = vmax if vmax is not None else nice_ceiling(max(known) if known else 1.0)
    scale_max = scale_max or 1.0

    def length(value: float) -> float:
        if log_scale:
            return math.log10(1 + max(0.0, value)) / math.log10(1 + scale_max)
        return min(value, scale_max) / scale_max

    parts = [
        f'<svg class="chart bars" width="{WIDTH}" '
        f'height="{height}" viewBox="0 0 {WIDTH} {height}" role="img">'
    ]
    if len(series) > 1:
        parts.append(_legend(list(zip(PALETTE, series, strict=False)), label_w, 14))
    for row, (label, values) in enumerate(groups):
        y0 = top + row * row_h
        short = label if len(label) <= 28 else label[:27] + "…"
        parts.append(
            f'<text x="{label_w - 8}" y="{y0 + bar_h * len(series) / 2 + 4:.1f}" '
            f'text-anchor="end" class="label"><title>{esc(label)}</title>{esc(short)}</text>'
        )
        for k, value in enumerate(values):
            yy = y0 + k * bar_h
            colour = PALETTE[k % len(PALETTE)]
            if _known(value):
                w = max(1.0, bars_w * min(1.0, length(float(value))))
                parts.append(
                    f'<rect class="bar s{k}" x="{label_w}" y="{yy}" width="{w:.1f}" '
                    f'height="{bar_h - 2}" fill="{colour}"><title>{esc(label)} '
                    f"{esc(series[k])}: {esc(value_format(value))}</title></rect>"
                    f'<text x="{label_w + w + 4:.1f}" y="{yy + bar_h - 4}" class="value">'
                    f"{esc(value_format(value))}</text>"
                )
            else:
                parts.append(
                    f'<text x="{label_w + 4}" y="{yy + bar_h - 4}" class="value unknown">'
                    f"{esc(series[k])}: unknown</text>"
                )
    parts.append("</svg>")
    return "".join(parts)
