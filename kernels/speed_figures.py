"""What a page says about a run's speed: a headline beside its status, a row per pass,
and a picture of each pass's share of the device's measured peaks (SVG).

On a software adapter (llvmpipe) every figure is labelled as the CPU emulating a GPU, and
no speed-up is claimed: against numpy it would only be the emulator's.
"""

from __future__ import annotations

from collections.abc import Mapping
from html import escape
from typing import Any

from django.utils.safestring import SafeString, mark_safe

from kernels.engine.speed import fractions
from kernels.trace_pictures import MAX_SHOWN_PASSES

BAR_WIDTH, ROW, LEFT = 240, 22, 120


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
        if entry.get("speedup") and not emulated:
            against = f"{times(entry['speedup'])} than {entry['name']} on {where}"
        found.append({**entry, "where": where, "against": against})
    return found


def speed_summary(outcome: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The speed section's context, or None for a run with no speed report."""
    speed = (outcome or {}).get("speed")
    if not speed:
        return None
    emulated = bool(speed.get("emulated"))
    peaks = speed.get("peaks")
    rows = []
    for record in (outcome or {}).get("passes", []):
        share = fractions(record, peaks)
        rows.append(
            {
                "name": record["name"],
                "gpu_ms": record.get("gpu_ms"),
                "shown_ms": ms(record["gpu_ms"]) if record.get("gpu_ms") is not None else "",
                "bytes": record.get("bytes"),
                "flops": record.get("flops"),
                "bandwidth": share.get("bandwidth"),
                "arithmetic": share.get("arithmetic"),
                "bandwidth_pct": percent(share.get("bandwidth")),
                "arithmetic_pct": percent(share.get("arithmetic")),
            }
        )
    total = speed.get("gpu_ms")
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
        "against": against,
        "references": references,
        "peaks": peaks,
        "problem": speed.get("problem", ""),
        "rows": rows,
        "shown": rows[:MAX_SHOWN_PASSES],
        "more": max(0, len(rows) - MAX_SHOWN_PASSES),
        "picture": (
            peak_picture(rows[:MAX_SHOWN_PASSES], emulated) if peaks and total is not None else ""
        ),
    }


def peak_picture(rows: list[dict[str, Any]], emulated: bool) -> SafeString:
    """A bar per pass: its share of peak bandwidth (and of peak arithmetic, where counted),
    0 to 100% of what this device measured. A pass near the end of a bar is at the
    device's limit; one near its start has room left."""
    lines = [r for r in rows if r["bandwidth"] is not None or r["arithmetic"] is not None]
    height = ROW * (1 + sum(1 + (r["arithmetic"] is not None) for r in lines))
    width = LEFT + BAR_WIDTH + 60
    body = [
        f'<text x="{LEFT}" y="14" font-size="11">0%</text>',
        f'<text x="{LEFT + BAR_WIDTH}" y="14" font-size="11" text-anchor="end">100% of '
        f"{'the emulated' if emulated else 'this GPU'}'s peak</text>",
    ]
    y = ROW
    for row in lines:
        for kind, share in (("memory", row["bandwidth"]), ("arithmetic", row["arithmetic"])):
            if share is None:
                continue
            shown = min(max(share, 0.0), 1.0)
            label = f"{row['name']} {kind}"
            body.append(
                f'<text x="{LEFT - 6}" y="{y + 14}" font-size="11" text-anchor="end">'
                f"{escape(label)}</text>"
                f'<rect x="{LEFT}" y="{y + 4}" width="{BAR_WIDTH}" height="{ROW - 8}" '
                'fill="#eeeeee"/>'
                f'<rect x="{LEFT}" y="{y + 4}" width="{max(shown * BAR_WIDTH, 1):.1f}" '
                f'height="{ROW - 8}" fill="{"#3b82f6" if kind == "memory" else "#f59e0b"}">'
                f"<title>{escape(label)}: {100 * share:.2f}% of peak</title></rect>"
                f'<text x="{LEFT + BAR_WIDTH + 6}" y="{y + 14}" font-size="11">'
                f"{percent(share)}</text>"
            )
            y += ROW
    markup = (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" '
        f'height="{height}" role="img" aria-label="Each pass against the device&#39;s peaks">'
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
