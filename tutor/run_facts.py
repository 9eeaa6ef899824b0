"""A run as Claude is told of it: its facts as compact JSON, its speed among them (on a GPU
each pass's time, share of the measured peaks and speed-up; on llvmpipe only the
emulator's total, with what it is not)."""

from __future__ import annotations

import json
from typing import Any

from kernels.engine.outcome import Outcome
from kernels.engine.run_warnings import warnings_of
from kernels.speed_figures import speed_summary


def outcome_for_model(outcome: Outcome) -> str:
    """The facts of a run as compact JSON: what Claude needs to review, nothing more."""
    facts: dict[str, Any] = {"status": outcome.get("status"), "message": outcome.get("message", "")}
    if compile_error := outcome.get("compile"):
        facts["compile_error"] = {
            key: compile_error.get(key)
            for key in ("line", "column", "message", "label", "notes")
            if compile_error.get(key)
        }
    elif outcome.get("error"):
        facts["error"] = str(outcome["error"])[:600]
    outputs = []
    for output in outcome.get("outputs", []):
        entry = {
            key: output.get(key)
            for key in ("name", "shape", "count", "bad", "unwritten", "nonfinite", "max_abs_err")
        }
        entry["first_bad"] = [
            {"index": cell.get("index"), "expected": cell.get("expected"), "got": cell.get("got")}
            for cell in (output.get("first_bad") or [])[:8]
        ]
        grid = output.get("grid") or {}
        # A map of wrong cells shows patterns (a transposed or shifted result) at a glance.
        if grid and grid.get("rows", 0) * grid.get("cols", 0) <= 256:
            cells = grid.get("cells", "")
            cols = grid.get("cols", 1) or 1
            entry["map"] = [cells[r : r + cols] for r in range(0, len(cells), cols)]
            entry["map_legend"] = ". right, x wrong, n NaN/inf, u never written"
        outputs.append(entry)
    if outputs:
        facts["outputs"] = outputs
    if warnings := warnings_of(outcome):
        facts["warnings"] = warnings
    if label := (outcome.get("environment") or {}).get("label"):
        facts["ran_on"] = label
    if speed := speed_facts(outcome):
        facts["speed"] = speed
    return json.dumps(facts, ensure_ascii=False)


EMULATED = (
    "measured on llvmpipe, which emulates a GPU on the CPU: these times are the emulator's "
    "and say nothing about how fast the kernel is on a GPU; do not compare them with the "
    "reference or draw conclusions about speed from them"
)


def speed_facts(outcome: Outcome) -> dict[str, Any] | None:
    """The run's times for Claude: on a GPU each pass's time, share of the measured peaks
    and the speed-up against the reference; on llvmpipe the times with what they are not."""
    summary = speed_summary(outcome)
    if summary is None or summary["total"] is None:
        return None
    facts: dict[str, Any] = {"gpu_ms": summary["total"], "adapter": summary["adapter"]}
    if summary["emulated"]:
        facts["note"] = EMULATED
        return facts
    facts["passes"] = [
        {
            key: row[key]
            for key in ("name", "gpu_ms", "bytes", "flops", "bandwidth", "arithmetic")
            if row[key] is not None
        }
        for row in summary["rows"][:16]
    ]
    if against := [r["against"] for r in summary["references"] if r["against"]]:
        facts["against_reference"] = "; ".join(against)
    return facts
