"""Small SVG charts for campaign reports: lines (and step lines) over x, horizontal bars.

No plotting library: each chart is one self-contained ``<svg>`` string with a title,
axes with "nice" ticks, grid lines, optional reference lines (horizontal and vertical),
shaded x spans and a legend. Every piece of text goes through :func:`html.escape`.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = [
    "PALETTE",
    "Bar",
    "HLine",
    "Series",
    "Span",
    "VLine",
    "bar_chart",
    "color",
    "line_chart",
    "nice_ticks",
]

# Muted, distinguishable colours (Tableau 10, slightly desaturated); cycled for many series.
PALETTE = (
    "#4e79a7",
    "#f28e2b",
    "#59a14f",
    "#e15759",
    "#76b7b2",
    "#edc948",
    "#b07aa1",
    "#ff9da7",
    "#9c755f",
    "#bab0ac",
)
TEXT = "#222"
AXIS = "#666"
GRID = "#e4e4e4"
FONT = "font-family='system-ui, sans-serif'"
CHAR_W = 6.0  # approximate width of one character at 11 px
LEGEND_W = 360  # at most this wide (labels beyond it are clipped with an ellipsis)
LEGEND_MAX = 12  # more series than this: a one-line note instead of an entry each
Y2_W = 56  # room for a right axis
HALO = "paint-order='stroke' stroke='#fff' stroke-width='3' stroke-linejoin='round'"


def color(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


@dataclass(frozen=True, slots=True)
class Series:
    """One line. ``step``: a step line (the value holds until the next point)."""

    label: str
    xs: Sequence[float]
    ys: Sequence[float | None]  # None breaks the line
    color: str = PALETTE[0]
    width: float = 1.5
    dash: str | None = None
    step: bool = False
    markers: bool = False
    opacity: float = 1.0
    legend: bool = True


@dataclass(frozen=True, slots=True)
class HLine:
    y: float
    label: str
    color: str = "#c0392b"
    dash: str = "6 3"


@dataclass(frozen=True, slots=True)
class VLine:
    x: float
    label: str
    color: str = "#555"
    dash: str = "4 3"


@dataclass(frozen=True, slots=True)
class Span:
    """A shaded band between two x values."""

    x0: float
    x1: float
    label: str
    color: str = "#e15759"
    opacity: float = 0.18


@dataclass(frozen=True, slots=True)
class Bar:
    label: str
    value: float | None  # None: "n/a" instead of a bar
    color: str = PALETTE[0]
    text: str | None = None  # printed after the bar; default: the value


def _clip(text: str, chars: int) -> str:
    return text if len(text) <= chars else text[: max(chars - 1, 1)] + "\u2026"


def _e(text: str) -> str:
    return html.escape(text, quote=True)


def _num(v: float) -> str:
    return f"{v:.2f}".rstrip("0").rstrip(".")


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round tick values covering ``[lo, hi]``: steps of 1, 2, 2.5 or 5 times a power of 10."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return [0.0, 1.0]
    if hi < lo:
        lo, hi = hi, lo
    if hi - lo < 1e-12:
        pad = abs(hi) * 0.1 or 1.0
        lo, hi = lo - pad, hi + pad
    raw = (hi - lo) / max(count, 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw * 0.999)
    first = math.floor(lo / step + 1e-9) * step
    last = math.ceil(hi / step - 1e-9) * step
    n = round((last - first) / step)
    return [round(first + i * step, 12) for i in range(n + 1)]


def tick_label(v: float) -> str:
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 1e6 or a < 1e-3:
        return f"{v:.3g}"
    if float(v).is_integer():
        return str(int(v))
    return f"{v:.6g}"


class _Frame:
    """The plot area of a chart and its mapping from data to pixels."""

    def __init__(
        self,
        *,
        width: int,
        height: int,
        left: float,
        right: float,
        top: float,
        bottom: float,
        xr: tuple[float, float],
        yr: tuple[float, float],
        log_x: bool = False,
    ) -> None:
        self.x0, self.x1 = left, width - right
        self.y0, self.y1 = top, height - bottom
        self.log_x = log_x
        self.xrange = xr  # in data units
        self.xr = (self._tx(xr[0]), self._tx(xr[1]))
        self.yr = yr

    def _tx(self, v: float) -> float:
        return math.log2(max(v, 1e-9)) if self.log_x else v

    def x(self, v: float) -> float:
        lo, hi = self.xr
        return self.x0 + (self._tx(v) - lo) / (hi - lo) * (self.x1 - self.x0)

    def y(self, v: float) -> float:
        lo, hi = self.yr
        return self.y1 - (v - lo) / (hi - lo) * (self.y1 - self.y0)


def _svg(width: int, height: int, title: str, body: list[str]) -> str:
    head = (
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
        f"viewBox='0 0 {width} {height}' {FONT} font-size='11'>"
    )
    return "\n".join(
        [
            head,
            f"<title>{_e(title)}</title>",
            f"<rect width='{width}' height='{height}' fill='#fff'/>",
            f"<text x='{width / 2:.1f}' y='18' text-anchor='middle' font-size='14' "
            f"font-weight='600' fill='{TEXT}'>{_e(title)}</text>",
            *body,
            "</svg>",
            "",
        ]
    )


def _path(points: list[tuple[float, float]]) -> str:
    return " ".join(f"{'M' if i == 0 else 'L'}{x:.1f},{y:.1f}" for i, (x, y) in enumerate(points))


def _segments(s: Series, f: _Frame) -> list[list[tuple[float, float]]]:
    """The series as pixel polylines, split where y is None."""
    runs: list[list[tuple[float, float]]] = []
    cur: list[tuple[float, float]] = []
    pts = list(zip(s.xs, s.ys, strict=True))
    for i, (x, y) in enumerate(pts):
        if y is None:
            if cur:
                runs.append(cur)
            cur = []
            continue
        cur.append((f.x(x), f.y(y)))
        if s.step and i + 1 < len(pts):
            cur.append((f.x(pts[i + 1][0]), f.y(y)))
    if cur:
        runs.append(cur)
    return runs


Entry = tuple[str, str, float, str | None]  # label, color, stroke width, dash


def _legend(entries: list[Entry], x: float, y: float) -> list[str]:
    out = []
    for i, (label, col, width, dash) in enumerate(entries):
        ly = y + i * 16
        dash_attr = f" stroke-dasharray='{dash}'" if dash else ""
        out.append(
            f"<line x1='{x:.1f}' y1='{ly:.1f}' x2='{x + 20:.1f}' y2='{ly:.1f}' stroke='{col}' "
            f"stroke-width='{max(width, 1.5):.1f}'{dash_attr}/>"
        )
        out.append(f"<text x='{x + 26:.1f}' y='{ly + 4:.1f}' fill='{TEXT}'>{_e(label)}</text>")
    return out


def _line_ranges(
    series: Sequence[Series],
    *,
    hlines: Sequence[HLine],
    vlines: Sequence[VLine],
    spans: Sequence[Span],
    y_min: float | None,
    x_ticks: Sequence[float] | None,
    log_x: bool,
) -> tuple[list[float], list[float], float, float]:
    """The y ticks, the x ticks and the x range of a line chart's data."""
    xs = [x for s in series for x in s.xs]
    ys = [y for s in series for y in s.ys if y is not None]
    ys += [h.y for h in hlines]
    xs += [v.x for v in vlines] + [b for s in spans for b in (s.x0, s.x1)]
    if not xs:
        xs = [0.0, 1.0]
    if not ys:
        ys = [0.0, 1.0]
    ylo = min(ys) if y_min is None else min(y_min, *ys)
    yticks = nice_ticks(ylo, max(ys) * 1.05 if max(ys) > 0 else max(ys))
    if x_ticks:
        xticks = list(x_ticks)
    elif log_x:
        low, high = math.floor(math.log2(max(min(xs), 1e-9))), math.ceil(math.log2(max(xs)))
        xticks = [2.0**k for k in range(low, high + 1)]
    else:
        xticks = nice_ticks(min(xs), max(xs), 8)
    xlo, xhi = min(*xs, xticks[0]), max(*xs, xticks[-1])
    if log_x and xhi / max(xlo, 1e-9) < 1.01:
        xlo, xhi = xlo / 2, xhi * 2
    elif xhi - xlo < 1e-12:
        xlo, xhi = xlo - 1, xhi + 1
    return yticks, xticks, xlo, xhi


def _line_legend(
    series: Sequence[Series], hlines: Sequence[HLine], legend_note: str | None
) -> tuple[list[Entry], str | None, float]:
    """The legend's entries (clipped to fit), its note and its width."""
    entries: list[Entry] = [(s.label, s.color, s.width, s.dash) for s in series if s.legend]
    entries += [(h.label, h.color, 1.2, h.dash) for h in hlines]
    crowd = sum(1 for s in series if not s.legend)
    if len(entries) > LEGEND_MAX:
        crowd += len(entries) - LEGEND_MAX
        entries = entries[:LEGEND_MAX]
    note = legend_note if legend_note is not None else (f"+ {crowd} more" if crowd else None)
    longest = max([len(e[0]) for e in entries] + [len(note) if note else 0] + [0])
    legend_w = min(30 + longest * CHAR_W, LEGEND_W) if entries or note else 0
    fits = int((legend_w - 30) / CHAR_W)
    entries = [(_clip(label, fits), col, w, dash) for label, col, w, dash in entries]
    return entries, note, legend_w


def _grid(f: _Frame, yticks: Sequence[float], xticks: Sequence[float]) -> list[str]:
    """Horizontal grid lines with the y tick labels, x ticks with their labels."""
    body: list[str] = []
    for t in yticks:
        y = f.y(t)
        body.append(
            f"<line x1='{f.x0:.1f}' y1='{y:.1f}' x2='{f.x1:.1f}' y2='{y:.1f}' stroke='{GRID}'/>"
        )
        body.append(
            f"<text x='{f.x0 - 6:.1f}' y='{y + 4:.1f}' text-anchor='end' fill='{AXIS}'>"
            f"{_e(tick_label(t))}</text>"
        )
    xlo, xhi = f.xrange
    for t in xticks:
        if not xlo - 1e-9 <= t <= xhi + 1e-9:
            continue
        x = f.x(t)
        body.append(
            f"<line x1='{x:.1f}' y1='{f.y1:.1f}' x2='{x:.1f}' y2='{f.y1 + 4:.1f}' stroke='{AXIS}'/>"
        )
        body.append(
            f"<text x='{x:.1f}' y='{f.y1 + 16:.1f}' text-anchor='middle' fill='{AXIS}'>"
            f"{_e(tick_label(t))}</text>"
        )
    return body


def _spans(f: _Frame, spans: Sequence[Span]) -> list[str]:
    body: list[str] = []
    for sp in spans:
        a, b = sorted((f.x(sp.x0), f.x(sp.x1)))
        body.append(
            f"<rect x='{a:.1f}' y='{f.y0:.1f}' width='{max(b - a, 1):.1f}' "
            f"height='{f.y1 - f.y0:.1f}' fill='{sp.color}' fill-opacity='{sp.opacity}'/>"
        )
        body.append(
            f"<text x='{(a + b) / 2:.1f}' y='{f.y1 - 8:.1f}' text-anchor='middle' "
            f"fill='{TEXT}' {HALO}>{_e(sp.label)}</text>"
        )
    return body


def _lines(f: _Frame, series: Sequence[Series]) -> list[str]:
    """Each series as paths (broken where it has no value), with its markers."""
    body: list[str] = []
    for s in series:
        dash = f" stroke-dasharray='{s.dash}'" if s.dash else ""
        op = f" stroke-opacity='{s.opacity}'" if s.opacity < 1 else ""
        for run in _segments(s, f):
            body.append(
                f"<path d='{_path(run)}' fill='none' stroke='{s.color}' "
                f"stroke-width='{s.width}' stroke-linejoin='round'{dash}{op}/>"
            )
        if s.markers:
            for mx, my in zip(s.xs, s.ys, strict=True):
                if my is not None:
                    body.append(
                        f"<circle cx='{f.x(mx):.1f}' cy='{f.y(my):.1f}' r='3' fill='{s.color}'/>"
                    )
    return body


def _rules(f: _Frame, hlines: Sequence[HLine], vlines: Sequence[VLine]) -> list[str]:
    """Dashed horizontal and vertical lines, the vertical ones labelled."""
    body: list[str] = []
    for h in hlines:
        y = f.y(h.y)
        body.append(
            f"<line x1='{f.x0:.1f}' y1='{y:.1f}' x2='{f.x1:.1f}' y2='{y:.1f}' stroke='{h.color}' "
            f"stroke-width='1.2' stroke-dasharray='{h.dash}'/>"
        )
    for i, v in enumerate(vlines):
        x = f.x(v.x)
        body.append(
            f"<line x1='{x:.1f}' y1='{f.y0:.1f}' x2='{x:.1f}' y2='{f.y1:.1f}' stroke='{v.color}' "
            f"stroke-width='1.2' stroke-dasharray='{v.dash}'/>"
        )
        body.append(
            f"<text x='{x + 3:.1f}' y='{f.y0 + 12 + 13 * (i % 4):.1f}' fill='{v.color}' "
            f"{HALO}>{_e(v.label)}</text>"
        )
    return body


def _axis_labels(f: _Frame, height: int, x_label: str, y_label: str) -> list[str]:
    mid = (f.y0 + f.y1) / 2
    return [
        f"<text x='{(f.x0 + f.x1) / 2:.1f}' y='{height - 8}' text-anchor='middle' "
        f"fill='{TEXT}'>{_e(x_label)}</text>",
        f"<text x='14' y='{mid:.1f}' text-anchor='middle' fill='{TEXT}' "
        f"transform='rotate(-90 14 {mid:.1f})'>{_e(y_label)}</text>",
    ]


def _right_axis(f: _Frame, yticks: Sequence[float], factor: float, label: str) -> list[str]:
    """A right axis reading the left one times ``factor``."""
    body = [
        f"<line x1='{f.x1:.1f}' y1='{f.y0:.1f}' x2='{f.x1:.1f}' y2='{f.y1:.1f}' stroke='{AXIS}'/>"
    ]
    for t in yticks:
        body.append(
            f"<text x='{f.x1 + 6:.1f}' y='{f.y(t) + 4:.1f}' fill='{AXIS}'>"
            f"{_e(tick_label(round(t * factor, 9)))}</text>"
        )
    ry = (f.y0 + f.y1) / 2
    rx = f.x1 + Y2_W - 8
    body.append(
        f"<text x='{rx:.1f}' y='{ry:.1f}' text-anchor='middle' fill='{TEXT}' "
        f"transform='rotate(90 {rx:.1f} {ry:.1f})'>{_e(label)}</text>"
    )
    return body


def line_chart(
    series: Sequence[Series],
    *,
    title: str,
    x_label: str,
    y_label: str,
    hlines: Sequence[HLine] = (),
    vlines: Sequence[VLine] = (),
    spans: Sequence[Span] = (),
    y_min: float | None = 0.0,
    x_ticks: Sequence[float] | None = None,
    log_x: bool = False,
    y2: tuple[float, str] | None = None,
    legend_note: str | None = None,
    width: int = 760,
    height: int = 340,
) -> str:
    """Lines over a shared x axis; the legend lists up to ``LEGEND_MAX`` labelled series,
    beyond that ``legend_note`` (or a count) stands for the unlabelled crowd. ``log_x``:
    a base-2 logarithmic x axis (for stream counts; x values must be > 0). ``y2``:
    ``(factor, label)`` of a right axis that reads the left one times ``factor`` (a
    series meant for it is drawn divided by ``factor``)."""
    yticks, xticks, xlo, xhi = _line_ranges(
        series,
        hlines=hlines,
        vlines=vlines,
        spans=spans,
        y_min=y_min,
        x_ticks=x_ticks,
        log_x=log_x,
    )
    entries, note, legend_w = _line_legend(series, hlines, legend_note)
    f = _Frame(
        width=width,
        height=height,
        left=62,
        right=16 + legend_w + (Y2_W if y2 else 0),
        top=30,
        bottom=44,
        xr=(xlo, xhi),
        yr=(yticks[0], yticks[-1]),
        log_x=log_x,
    )
    body = _grid(f, yticks, xticks) + _spans(f, spans)
    body.append(
        f"<path d='M{f.x0:.1f},{f.y0:.1f} L{f.x0:.1f},{f.y1:.1f} L{f.x1:.1f},{f.y1:.1f}' "
        f"fill='none' stroke='{AXIS}'/>"
    )
    body += _lines(f, series) + _rules(f, hlines, vlines)
    body += _axis_labels(f, height, x_label, y_label)
    lx = f.x1 + 14
    if y2:
        lx += Y2_W
        body += _right_axis(f, yticks, *y2)
    body += _legend(entries, lx, f.y0 + 6)
    if note:
        ny = f.y0 + 6 + len(entries) * 16 + 4
        body.append(f"<text x='{lx:.1f}' y='{ny:.1f}' fill='{AXIS}'>{_e(note)}</text>")
    return _svg(width, height, title, body)


def bar_chart(
    bars: Sequence[Bar],
    *,
    title: str,
    x_label: str,
    hlines: Sequence[HLine] = (),
    keys: Sequence[tuple[str, str]] = (),
    fmt: Callable[[float], str] = _num,
    width: int = 760,
) -> str:
    """Horizontal bars, one per labelled value (labels can be long scenario names);
    ``hlines`` are drawn as vertical reference lines at their value; ``keys`` are
    ``(label, colour)`` pairs explaining the bar colours, bottom left."""
    label_w = min(max([len(b.label) for b in bars] + [4]) * CHAR_W + 12, 300)
    row = 22
    top = 30 + (16 if hlines else 0)
    height = int(top + 16 + max(len(bars), 1) * row + 44)
    values = [b.value for b in bars if b.value is not None and math.isfinite(b.value)]
    values += [h.y for h in hlines]
    ticks = nice_ticks(min([0.0, *values]), max([0.0, *values]) * 1.05 or 1.0)
    f = _Frame(
        width=width,
        height=height,
        left=label_w,
        right=70,
        top=top,
        bottom=44,
        xr=(ticks[0], ticks[-1]),
        yr=(0.0, 1.0),
    )
    body: list[str] = []
    for t in ticks:
        x = f.x(t)
        body.append(
            f"<line x1='{x:.1f}' y1='{f.y0:.1f}' x2='{x:.1f}' y2='{f.y1:.1f}' stroke='{GRID}'/>"
        )
        body.append(
            f"<text x='{x:.1f}' y='{f.y1 + 16:.1f}' text-anchor='middle' fill='{AXIS}'>"
            f"{_e(tick_label(t))}</text>"
        )
    zero = f.x(max(ticks[0], 0.0))
    for i, b in enumerate(bars):
        bar_top = f.y0 + 8 + i * row
        cy = bar_top + (row - 6) / 2
        body.append(
            f"<text x='{f.x0 - 6:.1f}' y='{cy + 4:.1f}' text-anchor='end' fill='{TEXT}'>"
            f"{_e(b.label)}</text>"
        )
        if b.value is None or not math.isfinite(b.value):
            body.append(
                f"<text x='{zero + 4:.1f}' y='{cy + 4:.1f}' fill='{AXIS}'>"
                f"{_e(b.text or 'n/a')}</text>"
            )
            continue
        a, c = sorted((zero, f.x(b.value)))
        body.append(
            f"<rect x='{a:.1f}' y='{bar_top:.1f}' width='{max(c - a, 0.5):.1f}' "
            f"height='{row - 6}' fill='{b.color}'/>"
        )
        text = b.text if b.text is not None else fmt(b.value)
        body.append(f"<text x='{c + 4:.1f}' y='{cy + 4:.1f}' fill='{TEXT}'>{_e(text)}</text>")
    body.append(
        f"<line x1='{zero:.1f}' y1='{f.y0:.1f}' x2='{zero:.1f}' y2='{f.y1:.1f}' stroke='{AXIS}'/>"
    )
    for h in hlines:
        x = f.x(h.y)
        body.append(
            f"<line x1='{x:.1f}' y1='{f.y0:.1f}' x2='{x:.1f}' y2='{f.y1:.1f}' stroke='{h.color}' "
            f"stroke-width='1.2' stroke-dasharray='{h.dash}'/>"
        )
        body.append(
            f"<text x='{x:.1f}' y='{f.y0 - 2:.1f}' text-anchor='middle' fill='{h.color}'>"
            f"{_e(h.label)}</text>"
        )
    body.append(
        f"<text x='{(f.x0 + f.x1) / 2:.1f}' y='{height - 8}' text-anchor='middle' "
        f"fill='{TEXT}'>{_e(x_label)}</text>"
    )
    kx = 10.0
    for label, col in keys:
        body.append(f"<rect x='{kx:.1f}' y='{height - 18}' width='10' height='10' fill='{col}'/>")
        body.append(f"<text x='{kx + 14:.1f}' y='{height - 9}' fill='{TEXT}'>{_e(label)}</text>")
        kx += 24 + len(label) * CHAR_W
    return _svg(width, height, title, body)
