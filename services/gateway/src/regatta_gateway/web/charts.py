"""Inline SVG charts drawn on the server: no chart library, no client-side rendering, readable axes.

Every chart is a `viewBox` drawing that scales to its container's width, carries `role="img"` with a
text description, and labels both axes. Colours come from the Okabe–Ito palette (safe for colour
blindness) and every series is also named in text, so colour is never the only cue.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from html import escape

PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#882255", "#444444")

WIDTH, HEIGHT = 460, 290
LEFT, RIGHT, TOP, BOTTOM = 54, 34, 14, 50  # RIGHT: half the widest last x-axis label ("$0.00020")


def colour(index: int) -> str:
    return PALETTE[index % len(PALETTE)]


@dataclass
class CurvePoint:
    k: int
    value: float
    low: float | None = None
    high: float | None = None


@dataclass
class Series:
    label: str
    colour: str
    points: list[CurvePoint] = field(default_factory=list)


@dataclass
class ScatterPoint:
    label: str
    colour: str
    cost: float
    value: float
    key: str = ""  # short marker drawn next to the point (agent number); the legend spells it out


def _nice_step(span: float, ticks: int = 5) -> float:
    if span <= 0:
        return 1.0
    raw = span / ticks
    magnitude = 10 ** math.floor(math.log10(raw))
    for factor in (1, 2, 2.5, 5, 10):
        if raw <= factor * magnitude:
            return factor * magnitude
    return 10 * magnitude


def _fmt_usd(value: float) -> str:
    if value == 0:
        return "$0"
    if value < 0.01:
        # Two significant digits, however small: $0.000037, never "$0." or a rounded-away zero.
        decimals = 1 - math.floor(math.log10(value))
        return f"${value:.{decimals}f}".rstrip("0").rstrip(".")
    if value < 1:
        return f"${value:.3f}".rstrip("0").rstrip(".")
    return f"${value:,.2f}".rstrip("0").rstrip(".")


def _usd_ticks(values: list[float], step: float) -> list[str]:
    """Axis labels with as many decimals as the step needs (one count for the whole axis), so no two
    ticks read the same: $0.0005 steps are $0.0005, $0.0010, $0.0015, not $0.0005, $0.001, $0.0015."""
    decimals = 0
    while decimals < 12 and any(abs(round(v, decimals) - v) > step * 1e-6 for v in values):
        decimals += 1
    return ["$0" if v == 0 else f"${v:,.{decimals}f}" for v in values]


class _Frame:
    """Plot-area geometry shared by both charts: data → pixel mapping plus the axes and grid."""

    def __init__(self, x_max: float, y_max: float = 1.0, x_min: float = 0.0) -> None:
        self.x_min, self.x_max, self.y_max = x_min, x_max, y_max
        self.plot_w = WIDTH - LEFT - RIGHT
        self.plot_h = HEIGHT - TOP - BOTTOM

    def x(self, value: float) -> float:
        span = (self.x_max - self.x_min) or 1.0
        return LEFT + (value - self.x_min) / span * self.plot_w

    def y(self, value: float) -> float:
        return TOP + (1 - value / (self.y_max or 1.0)) * self.plot_h

    def axes(self, x_ticks: list[tuple[float, str]], x_title: str, y_title: str) -> list[str]:
        parts = []
        for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
            y = self.y(tick)
            right = LEFT + self.plot_w
            parts.append(
                f'<line class="grid" x1="{LEFT}" x2="{right}" y1="{y:.1f}" y2="{y:.1f}"/>'
                f'<text class="tick" x="{LEFT - 8}" y="{y + 4:.1f}" text-anchor="end">'
                f"{tick * 100:.0f}%</text>"
            )
        bottom = TOP + self.plot_h
        for value, label in x_ticks:
            x = self.x(value)
            parts.append(
                f'<line class="tickmark" x1="{x:.1f}" x2="{x:.1f}" y1="{bottom}" y2="{bottom + 5}"/>'
                f'<text class="tick" x="{x:.1f}" y="{bottom + 19}" text-anchor="middle">'
                f"{escape(label)}</text>"
            )
        right = LEFT + self.plot_w
        parts.append(f'<line class="axis" x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{bottom}"/>')
        parts.append(f'<line class="axis" x1="{LEFT}" x2="{right}" y1="{bottom}" y2="{bottom}"/>')
        parts.append(
            f'<text class="axis-title" x="{LEFT + self.plot_w / 2:.1f}" y="{HEIGHT - 8}" '
            f'text-anchor="middle">{escape(x_title)}</text>'
        )
        parts.append(
            f'<text class="axis-title" transform="translate(14 {TOP + self.plot_h / 2:.1f}) rotate(-90)" '
            f'text-anchor="middle">{escape(y_title)}</text>'
        )
        return parts


def _svg(title: str, description: str, parts: list[str], css_class: str) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart {css_class}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'aria-label="{escape(title)}" preserveAspectRatio="xMidYMid meet">'
        f"<title>{escape(title)}</title><desc>{escape(description)}</desc>" + "".join(parts) + "</svg>"
    )


def pass_at_k_curve(series: list[Series]) -> str:
    """pass@k for k = 1 … K per agent, with its 95% interval as a band."""
    k_max = max((p.k for s in series for p in s.points), default=1)
    frame = _Frame(x_max=float(k_max), x_min=1.0)
    step = max(1, math.ceil(k_max / 10))
    ticks = [(float(k), str(k)) for k in range(1, k_max + 1, step)]
    parts = frame.axes(ticks, "k (attempts per task)", "pass@k")
    for item in series:
        points = sorted(item.points, key=lambda p: p.k)
        if not points:
            continue
        banded = [p for p in points if p.low is not None and p.high is not None]
        if len(banded) > 1:
            upper = [f"{frame.x(p.k):.1f},{frame.y(p.high or 0):.1f}" for p in banded]
            lower = [f"{frame.x(p.k):.1f},{frame.y(p.low or 0):.1f}" for p in reversed(banded)]
            parts.append(f'<polygon class="band" fill="{item.colour}" points="{" ".join(upper + lower)}"/>')
        line = " ".join(f"{frame.x(p.k):.1f},{frame.y(p.value):.1f}" for p in points)
        parts.append(f'<polyline class="series" stroke="{item.colour}" points="{line}"/>')
        for p in points:
            parts.append(
                f'<circle class="dot" cx="{frame.x(p.k):.1f}" cy="{frame.y(p.value):.1f}" r="4" '
                f'fill="{item.colour}"><title>{escape(item.label)}: pass@{p.k} = {p.value * 100:.1f}%'
                "</title></circle>"
            )
    description = "; ".join(
        f"{s.label}: " + ", ".join(f"pass@{p.k} {p.value * 100:.1f}%" for p in s.points) for s in series
    )
    return _svg("pass@k curve by agent", description, parts, "chart-curve")


def pareto_frontier(points: list[ScatterPoint]) -> list[ScatterPoint]:
    """Agents no other agent beats on both cost (lower) and pass@1 (higher), cheapest first."""
    frontier: list[ScatterPoint] = []
    best = -1.0
    for point in sorted(points, key=lambda p: (p.cost, -p.value)):
        if point.value > best:
            frontier.append(point)
            best = point.value
    return frontier


def _place_label(
    frame: _Frame, x: float, y: float, text: str, taken: list[tuple[float, float, float, float]]
) -> tuple[float, float, str]:
    """First of right / left / above / below that stays in the plot and overlaps no other label or dot."""
    width, height = 7.5 * len(text) + 2, 13.0
    candidates = (
        (x + 9, y + 4, "start", x + 9, x + 9 + width),
        (x - 9, y + 4, "end", x - 9 - width, x - 9),
        (x, y - 10, "middle", x - width / 2, x + width / 2),
        (x, y + 19, "middle", x - width / 2, x + width / 2),
    )
    right_edge = LEFT + frame.plot_w
    bottom_edge = TOP + frame.plot_h
    for label_x, label_y, anchor, left, right in candidates:
        box = (left, label_y - height + 3, right, label_y + 3)
        inside = left >= LEFT and right <= right_edge and box[1] >= TOP - 2 and box[3] <= bottom_edge
        clear = all(box[2] <= o[0] or box[0] >= o[2] or box[3] <= o[1] or box[1] >= o[3] for o in taken)
        if inside and clear:
            taken.append(box)
            return label_x, label_y, anchor
    # Crowded: keep the label inside the plot even if it touches another one.
    label_x, label_y, anchor, left, right = candidates[0] if x < right_edge - width - 12 else candidates[1]
    taken.append((left, label_y - height + 3, right, label_y + 3))
    return label_x, label_y, anchor


def cost_vs_pass(points: list[ScatterPoint]) -> str:
    """Cost per task against pass@1; the Pareto frontier is the dashed staircase through its points."""
    top = max((p.cost for p in points), default=0.0)
    step = _nice_step(top * 1.1 if top > 0 else 1.0, 4)
    x_max = step * math.ceil((top * 1.1 if top > 0 else 1.0) / step)
    frame = _Frame(x_max=x_max)
    values = [step * i for i in range(round(x_max / step) + 1)]
    ticks = list(zip(values, _usd_ticks(values, step), strict=True))
    parts = frame.axes(ticks, "LLM cost per task (USD)", "pass@1")
    frontier = pareto_frontier(points)
    if frontier:
        path = [f"M{frame.x(frontier[0].cost):.1f},{frame.y(frontier[0].value):.1f}"]
        for point in frontier[1:]:
            path.append(f"H{frame.x(point.cost):.1f}")
            path.append(f"V{frame.y(point.value):.1f}")
        parts.append(f'<path class="frontier" d="{"".join(path)}"/>')
    on_frontier = {id(p) for p in frontier}
    taken: list[tuple[float, float, float, float]] = []
    for point in points:
        x, y = frame.x(point.cost), frame.y(point.value)
        taken.append((x - 7, y - 7, x + 7, y + 7))
    for point in points:
        x, y = frame.x(point.cost), frame.y(point.value)
        filled = id(point) in on_frontier
        fill = point.colour if filled else "#ffffff"
        parts.append(
            f'<circle class="dot{" frontier-dot" if filled else ""}" cx="{x:.1f}" cy="{y:.1f}" r="6" '
            f'fill="{fill}" stroke="{point.colour}" stroke-width="2.5"><title>{escape(point.label)}: '
            f"{_fmt_usd(point.cost)} per task, pass@1 {point.value * 100:.1f}%"
            f"{' (Pareto frontier)' if filled else ''}</title></circle>"
        )
        text = point.key or point.label
        label_x, label_y, anchor = _place_label(frame, x, y, text, taken)
        parts.append(
            f'<text class="point-label" x="{label_x:.1f}" y="{label_y:.1f}" '
            f'text-anchor="{anchor}">{escape(text)}</text>'
        )
    description = (
        "; ".join(f"{p.label}: {_fmt_usd(p.cost)} per task, pass@1 {p.value * 100:.1f}%" for p in points)
        + ". Pareto frontier: "
        + ", ".join(p.label for p in frontier)
    )
    title = "LLM cost per task against pass@1, with the Pareto frontier"
    return _svg(title, description, parts, "chart-pareto")
