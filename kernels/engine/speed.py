"""How fast a run was: the SpeedReport of an outcome (outcome.py says what each field means)."""

from __future__ import annotations

from collections.abc import Sequence

from kernels.engine.device import Environment
from kernels.engine.outcome import PassRecord, SpeedReport


def speed_report(
    env: Environment,
    passes: Sequence[PassRecord],
    repeats: int,
    upload_ms: float,
    readback_ms: float,
) -> SpeedReport:
    """The run's speed from its timed passes, on the device env describes."""
    times = [p["gpu_ms"] for p in passes if p.get("gpu_ms") is not None]
    total = round(sum(t for t in times if t is not None), 4) if times else None
    problem = ""
    if not env.timestamps:
        problem = f"{env.label} cannot time passes (it has no timestamp queries)."
    elif passes and total is None:
        problem = "No pass was timed: the run stopped before its work was submitted."
    return {
        "clock": "timestamp-query" if env.timestamps else "none",
        "adapter": env.label,
        "emulated": env.software,
        "repeats": repeats,
        "gpu_ms": total,
        "upload_ms": round(upload_ms, 3),
        "readback_ms": round(readback_ms, 3),
        "problem": problem,
    }
