"""What a page says about a run's speed: a headline beside its status, a row per pass,
a roofline of the passes whose arithmetic is counted and a bar of the share of peak
bandwidth of those whose arithmetic is not (SVG).

On a software adapter (llvmpipe) every figure is labelled as the CPU emulating a GPU, and
no speed-up is claimed: against numpy it would only be the emulator's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from html import escape
from typing import Any

from django.utils.safestring import SafeString, mark_safe

from kernels.engine.speed import fractions
from kernels.pictures import svg_text
from kernels.trace_pictures import MAX_SHOWN_PASSES

BAR_WIDTH, ROW, LEFT = 240, 22, 120
# The roofline's frame and font: narrow enough that a phone (318 px for the figure at 390)
# shrinks its 12 px labels to 9 px, no smaller.
PLOT_WIDTH, PLOT_HEIGHT = 420, 290
PLOT_LEFT, PLOT_RIGHT, PLOT_TOP, PLOT_BOTTOM = 68, 22, 30, 46
FONT = 12
INNER_WIDTH = PLOT_WIDTH - PLOT_LEFT - PLOT_RIGHT
INNER_HEIGHT = PLOT_HEIGHT - PLOT_TOP - PLOT_BOTTOM
# A stored outcome may carry any number (replay.json outcomes of forks are a learner's
# program's): a point further than this from the ridge, in decades, is drawn at the edge.
MAX_DECADES = 5


def ms(value: float) -> str:
    return f"{value:.3g} ms" if value >= 0.001 else f"{value * 1000:.3g} µs"


def times(factor: float) -> str:
    """A ratio as a reader says it: "3.1x faster" or "2.0x slower"."""
    if factor >= 1:
        return f"{factor:.2g}x faster" if factor < 10 else f"{factor:.0f}x faster"
    slower = 1 / factor
    return f"{slower:.2g}x slower" if slower < 10 else f"{slower:.0f}x slower"


def percent(share: float | None) -> str:
    return "" if share is None else f"{100 * share:.2g}%"


def compared(speed: Mapping[str, Any], emulated: bool) -> list[dict[str, Any]]:
    """The run's references, the one on the same GPU first: PyTorch where the worker has a
    CUDA GPU (gpu_reference), then the harness's numpy reference on the worker's CPU (for a
    Triton or CUDA program, "reference" is PyTorch on its GPU, gpu_run.speed). Each with
    what this version is against it ("" on an emulator: no speed-up is claimed there)."""
    found = []
    for key in ("gpu_reference", "reference"):
        entry = speed.get(key)
        if not isinstance(entry, dict) or entry.get("ms") is None:
            continue
        where = entry.get("where") or "this machine's CPU"
        against = ""
        if (speedup := measure(entry.get("speedup"))) and not emulated:
            against = f"{times(speedup)} than {entry.get('name', '')} on {where}"
        found.append({**entry, "where": where, "against": against})
    return found


def figure(value: float) -> str:
    """A measured figure as a reader reads it: 2,842 or 3.98 or 1e+30."""
    return f"{value:,.0f}" if 100 <= value < 1e7 else f"{value:.3g}"


def measure(value: object) -> float | None:
    """A stored figure as a quantity: a finite number of at least 0, else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:  # an integer past float's range
        return None
    return value if math.isfinite(number) and number >= 0 else None


def usable_peaks(peaks: object) -> dict[str, Any] | None:
    """The device's peaks where both are positive figures, and so is the intensity where
    they meet: the roofs a pass is measured against. None otherwise (no share, no
    picture)."""
    if not isinstance(peaks, Mapping):
        return None
    bandwidth, arithmetic = measure(peaks.get("bandwidth_gbs")), measure(peaks.get("fma_gflops"))
    if not bandwidth or not arithmetic or not 0 < arithmetic / bandwidth < math.inf:
        return None
    return {"bandwidth_gbs": bandwidth, "fma_gflops": arithmetic, "clock": peaks.get("clock", "")}


def pass_row(record: Mapping[str, Any], peaks: Mapping[str, Any] | None) -> dict[str, Any]:
    """A pass's figures for the table and the pictures; its intensity (flops a byte) and
    attained GFLOP/s only where its time, bytes and flops are all counted."""
    gpu_ms, moved, flops = (measure(record.get(k)) for k in ("gpu_ms", "bytes", "flops"))
    share = fractions({"gpu_ms": gpu_ms, "bytes": moved, "flops": flops}, peaks)
    intensity = attained = None
    if gpu_ms and moved and flops:
        intensity, attained = flops / moved, flops / gpu_ms / 1e6
        if not (0 < intensity < math.inf and 0 < attained < math.inf):
            intensity = attained = None
    return {
        "name": str(record.get("name", "")),
        "gpu_ms": gpu_ms,
        "shown_ms": ms(gpu_ms) if gpu_ms is not None else "",
        "bytes": moved,
        "bytes_shown": f"{moved:,.0f}" if moved is not None else "",
        "flops": flops,
        "intensity": intensity,
        "gflops": attained,
        "bandwidth": share.get("bandwidth"),
        "arithmetic": share.get("arithmetic"),
        "bandwidth_pct": percent(share.get("bandwidth")),
        "arithmetic_pct": percent(share.get("arithmetic")),
    }


def speed_summary(outcome: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The speed section's context, or None for a run with no speed report."""
    speed = (outcome or {}).get("speed")
    if not speed:
        return None
    emulated = bool(speed.get("emulated"))
    peaks = usable_peaks(speed.get("peaks"))
    rows = [pass_row(record, peaks) for record in (outcome or {}).get("passes") or []]
    total = measure(speed.get("gpu_ms"))
    references = compared(speed, emulated)
    against = references[0]["against"] if references else ""
    if total is None:
        headline = speed.get("problem") or "Not timed."
    elif emulated:
        headline = f"{ms(total)} of CPU emulation (not a GPU's speed)"
    else:
        headline = f"{ms(total)} on the GPU"
        if against:
            headline += f", {against}"
    program = speed.get("program_ms")
    cuda = speed.get("clock") == "cuda-events"
    shown = rows[:MAX_SHOWN_PASSES]
    return {
        "program": ms(program) if program is not None else "",
        "headline": headline,
        "emulated": emulated,
        "adapter": speed.get("adapter", ""),
        "clock": speed.get("clock", ""),
        "repeats": speed.get("repeats", 1),
        "total": total,
        # Blank where the copies were not timed apart: a Triton or CUDA program's own (runs
        # stored before they said so carry 0).
        "upload": "" if (upload := speed.get("upload_ms")) is None or cuda else ms(upload),
        "readback": "" if (back := speed.get("readback_ms")) is None or cuda else ms(back),
        "references": references,
        # A GPU worker's PyTorch still loading when this ran: the next run has its time.
        "reference_loading": bool(speed.get("gpu_reference_loading")),
        "bandwidth": figure(peaks["bandwidth_gbs"]) if peaks else "",
        "problem": speed.get("problem", ""),
        "rows": rows,
        "shown": shown,
        "more": max(0, len(rows) - MAX_SHOWN_PASSES),
        # Only where the passes were timed; a share of the peaks is only where they are known.
        "roofline": roofline(shown, peaks, emulated) if peaks and total is not None else "",
        "uncounted": bandwidth_bars(shown, emulated) if total is not None else "",
    }


def roofline(rows: list[dict[str, Any]], peaks: Mapping[str, Any], emulated: bool) -> SafeString:
    """The device's roofline, log-log: a pass doing I flops a byte can reach at most
    min(bandwidth * I, multiply-add rate) GFLOP/s, and each pass whose arithmetic is
    counted is a point at its intensity and attained rate. Under the slanted roof a pass
    is limited by memory, under the flat one by arithmetic; the distance below the roof is
    room left. Empty where no pass can be placed."""
    points = [r for r in rows if r["intensity"] is not None]
    if not points:
        return mark_safe("")
    bandwidth = math.log10(peaks["bandwidth_gbs"])
    peak = math.log10(peaks["fma_gflops"])
    frame = Frame.around(
        [math.log10(p["intensity"]) for p in points],
        [math.log10(p["gflops"]) for p in points],
        bandwidth,
        peak,
    )
    heading = (
        "The CPU emulating a GPU: the emulator's roofs, not a GPU's"
        if emulated
        else "This GPU's roofs, as the worker measured them"
    )
    body = [svg_text(0, 13, heading, "start", FONT), *frame.grid(), *_roofs(frame, peaks)]
    for row in points:
        x, y = frame.inside(math.log10(row["intensity"]), math.log10(row["gflops"]))
        dot = frame.at(x, y)
        roof = frame.at(x, min(x + bandwidth, peak))[1]
        body.append(_point(row, peaks, dot, roof, flip=dot[0] > PLOT_LEFT + 0.6 * INNER_WIDTH))
    markup = (
        f'<svg class="roofline" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {PLOT_WIDTH} '
        f'{PLOT_HEIGHT}" width="{PLOT_WIDTH}" height="{PLOT_HEIGHT}" role="img" '
        f'aria-label="{escape(heading)}: each pass&#39;s GFLOP/s against its FLOP per byte">'
        + "".join(body)
        + "</svg>"
    )
    return mark_safe(markup)  # noqa: S308 - numbers and escaped names only


@dataclass(frozen=True)
class Frame:
    """The roofline's axes: the decades they span (10^x_lo to 10^x_hi FLOP a byte across,
    10^y_lo to 10^y_hi GFLOP/s up) and where a point falls in the SVG."""

    x_lo: int
    x_hi: int
    y_lo: int
    y_hi: int

    @classmethod
    def around(cls, xs: list[float], ys: list[float], bandwidth: float, peak: float) -> Frame:
        """Axes reaching each point (in decades) up to MAX_DECADES from the ridge (across)
        and the peak (up), a decade either side of the ridge, and the slanted roof from
        the left edge."""
        ridge = peak - bandwidth
        near_x = [min(max(x, ridge - MAX_DECADES), ridge + MAX_DECADES) for x in xs]
        near_y = [min(max(y, peak - MAX_DECADES), peak + MAX_DECADES) for y in ys]
        x_lo = math.floor(min(*near_x, ridge - 1) - 0.2)
        return cls(
            x_lo=x_lo,
            x_hi=math.ceil(max(*near_x, ridge + 1) + 0.2),
            y_lo=math.floor(min(*near_y, bandwidth + x_lo) - 0.2),
            y_hi=math.ceil(max(*near_y, peak) + 0.3),  # room above the flat roof's label
        )

    def inside(self, x: float, y: float) -> tuple[float, float]:
        """A point further out than the axes reach, at the frame's edge."""
        return min(max(x, self.x_lo), self.x_hi), min(max(y, self.y_lo), self.y_hi)

    def at(self, x: float, y: float) -> tuple[float, float]:
        return (
            PLOT_LEFT + (x - self.x_lo) / (self.x_hi - self.x_lo) * INNER_WIDTH,
            PLOT_TOP + (self.y_hi - y) / (self.y_hi - self.y_lo) * INNER_HEIGHT,
        )

    def grid(self) -> list[str]:
        """The frame, a line and a label at each labelled decade, the axes' names."""
        right, bottom = PLOT_LEFT + INNER_WIDTH, PLOT_TOP + INNER_HEIGHT
        marks = [
            f'<rect class="frame" x="{PLOT_LEFT}" y="{PLOT_TOP}" width="{INNER_WIDTH}" '
            f'height="{INNER_HEIGHT}"/>'
        ]
        for d in range(self.x_lo, self.x_hi + 1, _tick_step(self.x_hi - self.x_lo)):
            x = self.at(d, self.y_lo)[0]
            marks.append(
                f'<line class="grid" x1="{x:.1f}" y1="{PLOT_TOP}" x2="{x:.1f}" y2="{bottom}"/>'
                + svg_text(x, bottom + 15, decade(d), size=FONT)
            )
        for d in range(self.y_lo, self.y_hi + 1, _tick_step(self.y_hi - self.y_lo)):
            y = self.at(self.x_lo, d)[1]
            marks.append(
                f'<line class="grid" x1="{PLOT_LEFT}" y1="{y:.1f}" x2="{right}" y2="{y:.1f}"/>'
                + svg_text(PLOT_LEFT - 5, y + 4, decade(d), "end", FONT)
            )
        middle = PLOT_TOP + INNER_HEIGHT / 2
        return [
            *marks,
            svg_text(
                PLOT_LEFT + INNER_WIDTH / 2, PLOT_HEIGHT - 6, "FLOP per byte moved", size=FONT
            ),
            svg_text(
                12, middle, "GFLOP/s", size=FONT, extra=f' transform="rotate(-90 12 {middle:.1f})"'
            ),
        ]


def _roofs(frame: Frame, peaks: Mapping[str, Any]) -> list[str]:
    """The slanted roof from the frame's left edge up to the ridge, then the flat one,
    each labelled with its measured figure, and the ridge marked."""
    bandwidth = math.log10(peaks["bandwidth_gbs"])
    peak = math.log10(peaks["fma_gflops"])
    ridge = peak - bandwidth
    (x0, y0), (x1, y1) = frame.at(frame.x_lo, frame.x_lo + bandwidth), frame.at(ridge, peak)
    right, bottom = PLOT_LEFT + INNER_WIDTH, PLOT_TOP + INNER_HEIGHT
    slope = math.degrees(math.atan2(y0 - y1, x1 - x0))
    mx, my = (x0 + x1) / 2, (y0 + y1) / 2 - 5
    copying = f"{figure(peaks['bandwidth_gbs'])} GB/s copying"
    ridge_at = figure(peaks["fma_gflops"] / peaks["bandwidth_gbs"])
    return [
        f'<polyline class="roof" points="{x0:.1f},{y0:.1f} {x1:.1f},{y1:.1f} '
        f'{right:.1f},{y1:.1f}"/>',
        svg_text(
            mx, my, copying, size=FONT, extra=f' transform="rotate({-slope:.1f} {mx:.1f} {my:.1f})"'
        ),
        svg_text(
            right - 4, y1 - 6, f"{figure(peaks['fma_gflops'])} GFLOP/s multiply-add", "end", FONT
        ),
        f'<line class="ridge" x1="{x1:.1f}" y1="{y1:.1f}" x2="{x1:.1f}" y2="{bottom}"/>'
        f'<circle class="ridge-point" cx="{x1:.1f}" cy="{y1:.1f}" r="3.5"><title>The ridge: '
        f"{ridge_at} FLOP a byte, where the roofs meet</title></circle>",
        svg_text(x1 + 6, y1 + 15, f"ridge {ridge_at}", "start", FONT),
    ]


def _tick_step(decades: int) -> int:
    """Every how many decades a label fits: six at most along an axis."""
    return max(1, math.ceil(decades / 6))


def decade(power: int) -> str:
    """10 to the power as a reader reads it: 0.01, 1, 1,000; 1e9 past a million."""
    if -3 <= power < 0:
        return f"{10.0**power:.{-power}f}"
    return f"{10**power:,}" if 0 <= power <= 6 else f"1e{power}"


def _point(
    row: Mapping[str, Any],
    peaks: Mapping[str, Any],
    dot: tuple[float, float],
    roof_y: float,
    flip: bool,
) -> str:
    """A pass on the roofline: a dot with its name and share of the roof beside it (left
    of it near the right edge), a dashed line up to the roof (the room left) and its
    figures on hover."""
    intensity, attained = row["intensity"], row["gflops"]
    slanted = peaks["bandwidth_gbs"] * intensity
    roof = min(slanted, peaks["fma_gflops"])
    limit = "memory" if slanted < peaks["fma_gflops"] else "arithmetic"
    x, y = dot
    title = (
        f"{row['name']}: {row['shown_ms']}, {figure(intensity)} FLOP a byte, "
        f"{figure(attained)} GFLOP/s, {percent(attained / roof)} of the roof there "
        f"({figure(roof)} GFLOP/s, a limit of {limit})"
    )
    room = (
        f'<line class="room" x1="{x:.1f}" y1="{y:.1f}" x2="{x:.1f}" y2="{roof_y:.1f}"/>'
        if roof_y < y - 6
        else ""
    )
    label = f"{row['name'][:24]}: {percent(attained / roof)} of the roof"
    return (
        room + f'<circle class="point" cx="{x:.1f}" cy="{y:.1f}" r="5"><title>{escape(title)}'
        "</title></circle>"
        + svg_text(x - 8 if flip else x + 8, y + 4, label, "end" if flip else "start", FONT)
    )


def bandwidth_bars(rows: list[dict[str, Any]], emulated: bool) -> SafeString:
    """A bar per timed pass whose arithmetic is not counted, so it has no place on the
    roofline: its share of the peak bandwidth, 0 to 100% of what this device measured.
    Empty where every pass is on the roofline (or none has a share)."""
    bars = [r for r in rows if r["intensity"] is None and r["bandwidth"] is not None]
    if not bars:
        return mark_safe("")
    height = ROW * (1 + len(bars))
    width = LEFT + BAR_WIDTH + 60
    device = "the emulator" if emulated else "this GPU"
    body = [
        svg_text(LEFT, 14, "0%", "start"),
        svg_text(LEFT + BAR_WIDTH, 14, f"100% of {device}'s bandwidth", "end"),
    ]
    for index, row in enumerate(bars, start=1):
        y = ROW * index
        share = row["bandwidth"]
        shown = max(min(share, 1.0), 0.0) * BAR_WIDTH
        body.append(
            svg_text(LEFT - 6, y + 14, row["name"][:20], "end")
            + f'<rect class="track" x="{LEFT}" y="{y + 4}" width="{BAR_WIDTH}" '
            f'height="{ROW - 8}"/><rect class="bar" x="{LEFT}" y="{y + 4}" '
            f'width="{max(shown, 1):.1f}" height="{ROW - 8}"><title>'
            f"{escape(row['name'])}: {percent(share)} of peak bandwidth; its arithmetic is not "
            "counted</title></rect>"
            + svg_text(LEFT + BAR_WIDTH + 6, y + 14, percent(share), "start")
        )
    markup = (
        f'<svg class="bandwidth-bars" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} '
        f'{height}" width="{width}" height="{height}" role="img" aria-label="Each pass&#39;s '
        f'share of {device}&#39;s peak bandwidth, its arithmetic not counted">'
        + "".join(body)
        + "</svg>"
    )
    return mark_safe(markup)  # noqa: S308 - numbers and escaped names only


# A version slower than the one before by more than this is marked as a speed regression:
# below it, the difference is within what two runs of the same kernel differ by.
REGRESSION = 1.10


def timed(outcome: Mapping[str, Any] | None) -> tuple[float, str, bool, str] | None:
    """What a version is compared by, its adapter, whether it was emulated and what the
    figure is: a host program's time from its first submit to its last readback (its
    round trips are part of its speed), else its passes' GPU total; None if untimed."""
    speed = (outcome or {}).get("speed") or {}
    if speed.get("gpu_ms") is None:
        return None
    emulated = bool(speed.get("emulated"))
    if speed.get("program_ms") is not None:
        return speed["program_ms"], speed.get("adapter", ""), emulated, "program"
    return speed["gpu_ms"], speed.get("adapter", ""), emulated, "passes"


def version_change(
    outcome: Mapping[str, Any] | None, before: Mapping[str, Any] | None, number: int
) -> dict[str, Any] | None:
    """This version's time against version `number`'s (before), measured on the same
    adapter and of the same kind (timed): "3.1x faster than v3"; regression when it is
    slower past REGRESSION. None when either is untimed, or they ran on different adapters,
    or one is a program and the other not."""
    now, then = timed(outcome), timed(before)
    if now is None or then is None or now[1:] != then[1:] or now[0] <= 0:
        return None
    factor = then[0] / now[0]
    text = f"{times(factor)} than v{number}"
    if now[2]:
        text += " (CPU emulation)"
    return {"text": text, "factor": factor, "regression": 1 / factor > REGRESSION}


def timeline_speeds(
    versions: list[tuple[int, Mapping[str, Any] | None]],
) -> list[dict[str, Any] | None]:
    """Each version's time and its change from the latest version before it timed on the
    same adapter and of the same kind; versions are (number, outcome) in order."""
    rows: list[dict[str, Any] | None] = []
    for index, (_, outcome) in enumerate(versions):
        now = timed(outcome)
        if now is None:
            rows.append(None)
            continue
        change = None
        for number, earlier in reversed(versions[:index]):
            if (then := timed(earlier)) is not None and then[1:] == now[1:]:
                change = version_change(outcome, earlier, number)
                break
        shown = ms(now[0]) + (" submit to readback" if now[3] == "program" else "")
        rows.append(
            {"time": shown, "adapter": now[1], "emulated": now[2], "kind": now[3], "change": change}
        )
    return rows
