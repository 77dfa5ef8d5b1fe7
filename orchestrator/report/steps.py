"""A small inline SVG plot of one row's per-step times (Result.samples.batch_times_s), each ok
repeat a line, for report.html's per-row details.

Drawn by hand rather than with matplotlib (chart.py): a report has a plot per row, often a hundred
or more, and a few SVG elements each keep the page small and the report fast. A training run has
thousands of steps: past MAX_COLUMNS, steps are binned and each bin drawn as a vertical stroke from
its fastest to its slowest step, so a single slow step (a retrace) still shows. The y axis is
logarithmic: the first step (compilation, tracing, autotuning) is often a hundred times the others.

Training: the first step is marked (red) and each epoch's end is a dashed line (the epoch's last
step carries the wait for the device). Inference: every timed batch ran after untimed warm-up
batches, whose count the caption gives.
"""
from __future__ import annotations

import math
import statistics

from markupsafe import escape

WIDTH, HEIGHT = 420, 120
LEFT, RIGHT, TOP, BOTTOM = 58, 10, 16, 20
MAX_COLUMNS = 300  # bins across the plot; fewer steps are drawn one point each
COLOURS = ("#4c78a8", "#72b7b2", "#54a24b", "#b279a2", "#9d755d")  # one per repeat, repeated past five
FIRST_STEP_COLOUR = "#d62728"


def step_plot(series: list[dict], *, training: bool) -> dict | None:
    """{"svg": the <svg> element, "caption": what it shows} for a row's ``series`` (summary's
    step_series: per ok repeat, its "repeat", step "times" in seconds, "epoch_steps" and
    "warmup_batches"); None when no repeat recorded a step time."""
    series = [item for item in series if _finite(item["times"])]
    if not series:
        return None
    times_ms = [[1000.0 * value for value in _finite(item["times"])] for item in series]
    steps = max(len(times) for times in times_ms)
    low = min(min(times) for times in times_ms)
    high = max(max(times) for times in times_ms)
    low, high = max(low, 1e-6), max(high, 1e-6)
    if high / low < 1.5:  # a flat series: give the axis some room so that it is not a hairline
        low, high = low / 1.25, high * 1.25
    x = _x_scale(steps)
    y = _y_scale(low, high)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="steps" width="{WIDTH}" height="{HEIGHT}" '
             f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img">',
             f'<rect x="{LEFT}" y="{TOP}" width="{WIDTH - LEFT - RIGHT}" height="{HEIGHT - TOP - BOTTOM}" '
             'fill="#fafafa" stroke="#ccc"/>']
    # epoch ends (training): where an epoch's last step waited for the device
    boundaries = _epoch_ends(series[0]["epoch_steps"], steps) if training else []
    for boundary in boundaries:
        position = x(boundary - 0.5)
        parts.append(f'<line x1="{position:.1f}" y1="{TOP}" x2="{position:.1f}" y2="{HEIGHT - BOTTOM}" '
                     'stroke="#999" stroke-dasharray="3,3"/>')
    after_first = [value for times in times_ms for value in (times[1:] if training else times)]
    median = statistics.median(after_first) if after_first else None
    if median is not None:
        parts.append(f'<line x1="{LEFT}" y1="{y(median):.1f}" x2="{WIDTH - RIGHT}" y2="{y(median):.1f}" '
                     'stroke="#333" stroke-width="0.8" stroke-dasharray="6,3"/>')
    for index, times in enumerate(times_ms):
        parts.append(_line(times, x, y, COLOURS[index % len(COLOURS)]))
    if training:
        for times in times_ms:
            parts.append(f'<circle cx="{x(0):.1f}" cy="{y(times[0]):.1f}" r="3" fill="{FIRST_STEP_COLOUR}"/>')
        first = max(times[0] for times in times_ms)
        parts.append(_text(x(0) + 6, TOP - 4, f"first step {_ms(first)} (compile, trace, autotune)",
                           fill=FIRST_STEP_COLOUR))
    # axes: the slowest and fastest step, the median, the step count
    parts.append(_text(LEFT - 4, TOP + 8, _ms(high), anchor="end"))
    parts.append(_text(LEFT - 4, HEIGHT - BOTTOM, _ms(low), anchor="end"))
    if median is not None:
        # inside the plot, at its right end, above the line: clear of the axis labels
        parts.append(_text(WIDTH - RIGHT - 4, y(median) - 3, f"median {_ms(median)}", anchor="end", size=8))
    noun = "step" if training else "batch"
    parts.append(_text(LEFT, HEIGHT - 6, f"{noun} 1", size=9))
    parts.append(_text(WIDTH - RIGHT, HEIGHT - 6, f"{noun} {steps} (log time scale)", anchor="end", size=9))
    parts.append("</svg>")
    repeats = ", ".join(f"r{item['repeat']}" for item in series)
    caption = f"Time per {noun}, repeats {repeats} (one line each)"
    if training:
        caption += ("; red: the first step (compilation, tracing, autotuning land there); dashed: each epoch's end "
                    "(its last step waits for the device)" if boundaries else
                    "; red: the first step (compilation, tracing, autotuning land there)")
    else:
        warmups = sorted({item["warmup_batches"] for item in series if item.get("warmup_batches") is not None})
        if warmups:
            caption += (f"; all after {', '.join(map(str, warmups))} untimed warm-up batches "
                        "(compilation and autotuning happen there)")
    caption += "; dashed horizontal: the median" + (" after the first step" if training else "")
    return {"svg": "".join(parts), "caption": caption}


def _finite(values) -> list[float]:
    return [float(value) for value in values or []
            if isinstance(value, (int, float)) and math.isfinite(value) and value >= 0]


def _x_scale(steps: int):
    span = WIDTH - LEFT - RIGHT
    return lambda step: LEFT + span * (step + 0.5) / max(steps, 1)


def _y_scale(low: float, high: float):
    span = HEIGHT - TOP - BOTTOM
    bottom, top = math.log(low), math.log(high)

    def scale(value: float) -> float:
        value = min(max(value, low), high)
        return HEIGHT - BOTTOM - span * (math.log(value) - bottom) / ((top - bottom) or 1.0)
    return scale


def _line(times: list[float], x, y, colour: str) -> str:
    """A repeat's steps: a polyline, or past MAX_COLUMNS one min-max stroke per bin."""
    if len(times) <= MAX_COLUMNS:
        points = " ".join(f"{x(step):.1f},{y(value):.1f}" for step, value in enumerate(times))
        return f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="1.2"/>'
    width = len(times) / MAX_COLUMNS
    strokes = []
    for column in range(MAX_COLUMNS):
        chunk = times[int(column * width):max(int((column + 1) * width), int(column * width) + 1)]
        centre = x(column * width + width / 2 - 0.5)
        strokes.append(f"M{centre:.1f},{y(max(chunk)):.1f}V{y(min(chunk)) + 0.6:.1f}")
    return f'<path d="{"".join(strokes)}" fill="none" stroke="{colour}" stroke-width="1.2"/>'


def _epoch_ends(epoch_steps: list, steps: int) -> list[int]:
    ends, total = [], 0
    for count in epoch_steps or []:
        if not isinstance(count, int) or count <= 0:
            return []
        total += count
        if total < steps:
            ends.append(total)
    return ends


def _text(x: float, y: float, text: str, *, anchor: str = "start", size: int = 9, fill: str = "#333") -> str:
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" fill="{fill}" '
            f'font-family="sans-serif">{escape(text)}</text>')


def _ms(value: float) -> str:
    return f"{value:.3g} ms" if value < 1000 else f"{value / 1000:.3g} s"
