"""Timing diagrams from a VCD dump, drawn like the paper's Figure 6: one row per chosen signal,
one-bit signals as high/low traces, wider ones as buses with their value (hex) written in each
stretch, unknown ("x") and floating ("z") stretches shaded. Optional faint lines at the rising
edges of a clock make cycles countable.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: never needs a display

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Polygon  # noqa: E402

from .vcd import Dump, Signal, VcdError  # noqa: E402

LOW, HIGH = 0.15, 0.85  # trace levels inside a row of height 1
FONT_SIZE = 8
WIDTH_IN = 10.0
ROW_IN = 0.42
UNKNOWN_COLOR = "#e8a0a0"
TRACE_COLOR = "#1f4e79"
DISPLAY_UNITS = [("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9), ("ps", 1e-12), ("fs", 1e-15)]


def _display_unit(dump: Dump, span: int) -> tuple[str, float]:
    """The largest unit in which the span is at least 1, and VCD units per display unit."""
    if dump.timescale is None:
        return "VCD time units", 1.0
    seconds = max(span, 1) * dump.timescale
    for name, size in DISPLAY_UNITS:
        if seconds >= size:
            return name, size / dump.timescale
    name, size = DISPLAY_UNITS[-1]
    return name, size / dump.timescale


def _stretches(signal: Signal, start: int, end: int):
    """(from, to, value) covering [start, end] with the value the signal holds in each part."""
    times = [start] + [t for t in signal.times if start < t < end] + [end]
    for t0, t1 in zip(times, times[1:]):
        yield t0, t1, signal.value_at(t0)


def bus_text(value: str) -> str:
    """A vector value as hex, or "x"/"z" when any bit is unknown or floating."""
    if "x" in value:
        return "x"
    if "z" in value:
        return "z"
    try:
        return f"{int(value, 2):x}"
    except ValueError:  # a real value
        return value


def _draw_bit(ax, signal: Signal, start: int, end: int, y: float, scale: float) -> None:
    xs, ys = [], []
    for t0, t1, value in _stretches(signal, start, end):
        if value in ("0", "1"):
            level = y + (HIGH if value == "1" else LOW)
            xs += [t0 / scale, t1 / scale]
            ys += [level, level]
        else:
            ax.fill_between([t0 / scale, t1 / scale], y + LOW, y + HIGH, color=UNKNOWN_COLOR,
                            linewidth=0)
            xs.append(t0 / scale)
            ys.append(float("nan"))
    ax.plot(xs, ys, color=TRACE_COLOR, linewidth=1.2)


def _draw_bus(ax, signal: Signal, start: int, end: int, y: float, scale: float,
              char_width: float) -> None:
    slant = (end - start) / scale * 0.004
    mid = y + (LOW + HIGH) / 2
    for t0, t1, value in _stretches(signal, start, end):
        x0, x1 = t0 / scale, t1 / scale
        d = min(slant, (x1 - x0) / 4)
        text = bus_text(value)
        unknown = text in ("x", "z")
        shape = Polygon([(x0, mid), (x0 + d, y + HIGH), (x1 - d, y + HIGH), (x1, mid),
                         (x1 - d, y + LOW), (x0 + d, y + LOW)], closed=True,
                        facecolor=UNKNOWN_COLOR if unknown else "white", edgecolor=TRACE_COLOR,
                        linewidth=1.0)
        ax.add_patch(shape)
        if not unknown and len(text) * char_width < (x1 - x0) - 2 * d:
            ax.text((x0 + x1) / 2, mid, text, ha="center", va="center", fontsize=FONT_SIZE,
                    family="monospace")


def draw(dump: Dump, names: list[str], *, title: str | None = None, clock: str | None = None):
    """A matplotlib Figure with one row per name (full names or unique suffixes, see
    `Dump.find`), top to bottom in the given order. Raises VcdError for a name that matches no
    signal or several."""
    if not names:
        raise VcdError("no signals to draw")
    signals = [dump.find(name) for name in names]
    clock_signal = dump.find(clock) if clock else None
    starts = [s.times[0] for s in signals if s.times]
    start = min(starts) if starts else 0
    end = max(dump.end_time, start + 1)
    unit, scale = _display_unit(dump, end - start)

    fig, ax = plt.subplots(figsize=(WIDTH_IN, ROW_IN * len(signals) + 1.0), layout="constrained")
    ax.set_xlim(start / scale, end / scale)
    ax.set_ylim(0, len(signals))
    # Width of one monospace character in data units, to skip labels that would not fit.
    axis_width_in = WIDTH_IN * 0.85
    char_width = (end - start) / scale / axis_width_in * (FONT_SIZE * 0.62 / 72)

    if clock_signal is not None:
        for t, value in zip(clock_signal.times, clock_signal.values):
            if value == "1" and start <= t <= end:
                ax.axvline(t / scale, color="#cccccc", linewidth=0.6, zorder=0)

    for row, signal in enumerate(signals):
        y = len(signals) - 1 - row
        if signal.width == 1:
            _draw_bit(ax, signal, start, end, y, scale)
        else:
            _draw_bus(ax, signal, start, end, y, scale, char_width)

    ax.set_yticks([len(signals) - 1 - row + 0.5 for row in range(len(signals))], labels=names,
                  fontsize=FONT_SIZE + 1, family="monospace")
    ax.tick_params(axis="y", length=0)
    ax.set_xlabel(f"time ({unit})")
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    if title:
        ax.set_title(title, fontsize=FONT_SIZE + 2)
    return fig


def write(dump: Dump, names: list[str], out, **options) -> Path:
    """Draws the diagram and saves it to `out`; the suffix (.png, .pdf, .svg) picks the format."""
    out = Path(out)
    fig = draw(dump, names, **options)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out, dpi=150)
    finally:
        plt.close(fig)
    return out
