"""A feature's curves over an episode, drawn with Pillow: one line per dimension, named in a legend.

The x axis is time in seconds (frame / fps); dashed verticals mark the frames the camera strips show, so
a curve and a picture can be read together. A value that is not finite breaks its line rather than
bending the axis.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from PIL import ImageDraw, ImageFont

from cache.printable import printable
from reshard.preview.episode_view import Curve

Font = ImageFont.ImageFont | ImageFont.FreeTypeFont
# matplotlib's tab10, then its lighter tab20 partners: 20 dimensions before a colour repeats.
PALETTE = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
    "#17becf", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94", "#f7b6d2", "#c7c7c7",
    "#dbdb8d", "#9edae5",
)  # fmt: skip
AXIS, GRID, MARK, TEXT = "#808080", "#e8e8e8", "#b8c4d6", "#202020"


@dataclass(frozen=True)
class PanelGeometry:
    """Where a panel's parts go, in pixels from its top-left corner."""

    header: int = 22  # the feature's name
    y_labels: int = 64  # tick values left of the axes
    x_labels: int = 24  # tick values below the axes
    legend: int = 190  # dimension names right of the axes
    legend_row: int = 15
    right: int = 8


def nice_ticks(lo: float, hi: float, target: int = 6) -> list[float]:
    """Round tick values (1, 2, 2.5 or 5 times a power of ten apart) covering [lo, hi], about `target`."""
    if not hi > lo:
        return [lo]
    raw = (hi - lo) / max(target, 1)
    power = 10.0 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    first = math.ceil(lo / step - 1e-9)
    return [k * step for k in range(first, int(math.floor(hi / step + 1e-9)) + 1)]


def value_limits(values: np.ndarray) -> tuple[float, float]:
    """The y axis of `values`: their finite range with 5% room, or +-1 around a constant."""
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return -1.0, 1.0
    lo, hi = float(finite.min()), float(finite.max())
    if hi - lo < 1e-12:
        return lo - 1.0, hi + 1.0
    room = (hi - lo) * 0.05
    return lo - room, hi + room


# One shared y axis flattens a dimension whose span is this many times smaller than the largest one's.
SPAN_RATIO = 10.0


def per_dimension(values: np.ndarray) -> tuple[np.ndarray, list[tuple[float, float]] | None]:
    """`values` (frames x dimensions) as drawn: as they are when one y axis shows every dimension, or each
    dimension scaled to [0, 1] over its own finite range (returned beside, to be written in the legend)
    when one shared axis would be more than `SPAN_RATIO` times a moving dimension's span (a joint near
    4,000 beside five near 0 flattens those five to a line). A constant dimension is drawn at 0.5."""
    if values.ndim != 2 or values.shape[1] < 2:
        return values, None
    ranges = []
    for column in values.T:
        finite = column[np.isfinite(column)]
        ranges.append((float(finite.min()), float(finite.max())) if finite.size else (0.0, 0.0))
    moving = [hi - lo for lo, hi in ranges if hi > lo]
    axis = max(hi for _, hi in ranges) - min(lo for lo, _ in ranges)
    if not moving or axis <= SPAN_RATIO * min(moving):
        return values, None
    scaled = np.empty_like(values, dtype=np.float64)
    for dim, (lo, hi) in enumerate(ranges):
        scaled[:, dim] = (values[:, dim] - lo) / (hi - lo) if hi > lo else 0.5
    return scaled, ranges


def draw_panel(
    draw: ImageDraw.ImageDraw,
    box: tuple[int, int, int, int],
    curve: Curve,
    *,
    fps: float,
    marks: tuple[int, ...],
    font: Font,
    geometry: PanelGeometry = PanelGeometry(),
) -> None:
    """Draw `curve` inside `box` (x0, y0, x1, y1): name, axes, ticks, a line per dimension, legend;
    `marks` are frame indices to mark with a dashed vertical."""
    x0, y0, x1, y1 = box
    g = geometry
    values, ranges = per_dimension(curve.values)
    scaled = "; each dimension scaled to its own range, written in the legend" if ranges else ""
    draw.text(
        (x0, y0 + 2), printable(f"{curve.key}  ({len(curve.names)} dims{scaled})"), fill=TEXT, font=font
    )
    axes = (x0 + g.y_labels, y0 + g.header, x1 - g.legend - g.right, y1 - g.x_labels)
    t_max = max(len(values) - 1, 1) / fps
    v_lo, v_hi = (-0.05, 1.05) if ranges else value_limits(values)

    def at(t: float, v: float) -> tuple[float, float]:
        ax0, ay0, ax1, ay1 = axes
        return ax0 + (ax1 - ax0) * t / t_max, ay1 - (ay1 - ay0) * (v - v_lo) / (v_hi - v_lo)

    _grid(draw, axes, at, t_max=t_max, v_limits=(v_lo, v_hi), font=font)
    for frame in marks:
        _dashed(draw, at(frame / fps, v_lo), at(frame / fps, v_hi))
    for dim in range(len(curve.names)):
        _line(draw, [at(t / fps, v) for t, v in enumerate(values[:, dim])], PALETTE[dim % len(PALETTE)])
    draw.rectangle(axes, outline=AXIS)
    names = legend_names(curve.names, ranges)
    _legend(draw, (axes[2] + 12, axes[1], x1, axes[3]), names, font=font, row=g.legend_row)


def legend_names(names: tuple[str, ...], ranges: list[tuple[float, float]] | None) -> tuple[str, ...]:
    """The legend's names, each with the range it was scaled from when the dimensions are scaled."""
    if ranges is None:
        return names
    return tuple(f"{name} [{lo:.4g}, {hi:.4g}]" for name, (lo, hi) in zip(names, ranges, strict=True))


def _grid(
    draw: ImageDraw.ImageDraw,
    axes: tuple[int, int, int, int],
    at: Callable[[float, float], tuple[float, float]],
    *,
    t_max: float,
    v_limits: tuple[float, float],
    font: Font,
) -> None:
    ax0, ay0, ax1, ay1 = axes
    for v in nice_ticks(*v_limits, target=5):
        _, y = at(0.0, v)
        draw.line([(ax0, y), (ax1, y)], fill=GRID)
        label = f"{v:.4g}"
        draw.text((ax0 - 6 - font.getlength(label), y - 7), label, fill=TEXT, font=font)
    for t in nice_ticks(0.0, t_max, target=8):
        x, _ = at(t, v_limits[0])
        draw.line([(x, ay0), (x, ay1)], fill=GRID)
        label = f"{t:g} s"
        draw.text((x - font.getlength(label) / 2, ay1 + 4), label, fill=TEXT, font=font)


def _dashed(draw: ImageDraw.ImageDraw, top: tuple[float, float], bottom: tuple[float, float]) -> None:
    (x, y_start), (_, y_end) = bottom, top
    y = min(y_start, y_end)
    while y < max(y_start, y_end):
        draw.line([(x, y), (x, min(y + 4, max(y_start, y_end)))], fill=MARK)
        y += 8


def _line(draw: ImageDraw.ImageDraw, points: list[tuple[float, float]], colour: str) -> None:
    """A polyline through the finite points; a non-finite one ends a run, a lone point is a dot."""
    run: list[tuple[float, float]] = []
    for point in [*points, (math.nan, math.nan)]:
        if all(math.isfinite(c) for c in point):
            run.append(point)
            continue
        if len(run) > 1:
            draw.line(run, fill=colour, width=2, joint="curve")
        elif run:
            (x, y) = run[0]
            draw.ellipse((x - 2, y - 2, x + 2, y + 2), fill=colour)
        run = []


def _legend(
    draw: ImageDraw.ImageDraw, box: tuple[int, int, int, int], names: tuple[str, ...], *, font: Font, row: int
) -> None:
    """A swatch and a name per dimension, as many as fit; the rest counted in a last row."""
    x0, y0, x1, y1 = box
    fits = max(1, (y1 - y0) // row)
    shown = names if len(names) <= fits else names[: fits - 1]
    for i, name in enumerate(shown):
        y = y0 + i * row
        draw.rectangle((x0, y + 4, x0 + 10, y + 10), fill=PALETTE[i % len(PALETTE)])
        draw.text((x0 + 16, y), fit_text(name, x1 - x0 - 16, font), fill=TEXT, font=font)
    if len(shown) < len(names):
        draw.text((x0 + 16, y0 + len(shown) * row), f"+{len(names) - len(shown)} more", fill=TEXT, font=font)


def fit_text(text: str, width: float, font: Font) -> str:
    """`text`, `printable` (a name from the dataset draws as it prints), cut with an ellipsis to `width`
    pixels."""
    text = printable(text)
    if font.getlength(text) <= width:
        return text
    while text and font.getlength(text + "…") > width:
        text = text[:-1]
    return text + "…"
