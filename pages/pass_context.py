"""The passes a run captured, for the replay page's stepper (templates/kernels/_passes.html):
one pass at a time, each buffer it wrote drawn as outputs are, what it changed marked."""

from __future__ import annotations

from typing import Any

from kernels import pictures
from kernels.engine.outcome import Outcome

# Pass links the page lists around the one shown (all of them up to twice this).
NEAR = 6


def passes_context(outcome: Outcome | None, asked: str | None) -> dict[str, Any] | None:
    """The pass asked for (?pass=N; by default the last, what the run ended with), its
    buffers' pictures and links to the others; None for a run that captured nothing."""
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
        "read_back": bool(outcome and outcome.get("outputs")),
    }
