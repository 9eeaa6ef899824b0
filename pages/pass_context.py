"""The passes a run captured, for the replay page's stepper (templates/kernels/_passes.html):
one pass at a time, each buffer it wrote drawn as outputs are, what it changed marked."""

from __future__ import annotations

from typing import Any

from kernels import pictures, whole_buffers
from kernels.engine.outcome import Outcome, PassBuffer
from kernels.models import KeptBuffer, Run

# Pass links the page lists around the one shown (all of them up to twice this).
NEAR = 6


def passes_context(
    outcome: Outcome | None,
    asked: str | None,
    run: Run | None = None,
    urls: dict[str, str] | None = None,
) -> dict[str, Any] | None:
    """The pass asked for (?pass=N; by default the last, what the run ended with), its
    buffers' pictures and links to the others; None for a run that captured nothing.
    run and urls (the page's "whole" and "npy" URLs): for a buffer the capture cut, what
    the page offers to keep it whole (kernels/whole_buffers.py), or the one kept."""
    passes = [p for p in (outcome.get("passes") if outcome else None) or [] if "buffers" in p]
    if not passes:
        return None
    numbers = [p["number"] for p in passes]
    number = int(asked) if asked and asked.isdigit() and int(asked) in numbers else numbers[-1]
    index = numbers.index(number)
    shown = passes[index]
    figures = []
    for buffer in shown["buffers"]:
        before = next(
            (
                b
                for p in reversed(passes[:index])
                for b in p["buffers"]
                if b["name"] == buffer["name"]
            ),
            None,
        )
        figures.append(pictures.buffer_figure(buffer, before))
    kept = whole_buffers.states(run, shown) if urls else {}
    for buffer, figure in zip(shown["buffers"], figures, strict=True):
        figure["name"] = buffer["name"]
        figure["note"] = buffer.get("note", "") if "values" in buffer else ""
        if (state := kept.get(buffer["name"])) is not None and urls:
            npy = whole_buffers.download_url(urls["npy"], shown["number"], buffer["name"])
            figure["whole"] = {"state": state, "ask": urls["whole"], "npy": npy}
            if state.kept is not None:
                figure.update(whole_figure(buffer, state.kept))
    if len(numbers) <= 2 * NEAR:
        near = numbers
    else:
        low = max(0, min(index - NEAR // 2, len(numbers) - NEAR))
        near = sorted({numbers[0], *numbers[low : low + NEAR], numbers[-1]})
    return {
        "shown": shown,
        "count": len(passes),
        "position": index + 1,
        "previous": numbers[index - 1] if index else None,
        "next": numbers[index + 1] if index + 1 < len(numbers) else None,
        "near": near,
        "figures": figures,
        "legend": any(f.get("marks") for f in figures),
        # A page showing a buffer being kept is not kept for readers: it changes soon.
        "pending": any(state.kind == "pending" for state in kept.values()),
        "read_back": bool(outcome and outcome.get("outputs")),
    }


def whole_figure(buffer: PassBuffer, kept: KeptBuffer) -> dict[str, Any]:
    """The picture of a buffer kept whole: its block means (pictures.block_means) drawn as
    a buffer is, titled with what a block is."""
    means = kept.picture
    shape, block = means["shape"], means["block"]
    entry = {"name": buffer["name"], "dtype": "f32", "shape": shape, "count": 0}
    figure = pictures.buffer_figure({**entry, "values": means["values"]}, None)
    whole = "×".join(str(side) for side in kept.shape)
    spans = "×".join(str(side) for side in block)
    figure["title"] = (
        f"{buffer['name']}: {whole} {kept.dtype}, kept whole ({kept.count:,} cells)"
        + (f"; each cell drawn is the mean of {spans} cells" if max(block) > 1 else "")
    )
    figure["marks"] = False
    return figure
