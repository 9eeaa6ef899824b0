"""How fast a run was: the SpeedReport of an outcome (outcome.py says what each field means),
the arithmetic a known operation must do, the reference's time, and a pass's fraction of
the device's peaks."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from kernels.engine.device import Environment
from kernels.engine.gpu_reference import gpu_reference_loading, gpu_reference_time
from kernels.engine.inputs import Memo
from kernels.engine.outcome import PassRecord, SpeedReport
from kernels.engine.references import REFERENCES


def speed_report(
    env: Environment,
    passes: Sequence[PassRecord],
    repeats: int,
    upload_ms: float,
    readback_ms: float,
    program_ms: float | None = None,
) -> SpeedReport:
    """The run's speed from its timed passes, on the device env describes; program_ms for
    a host program (Timeline.program_ms)."""
    times = [p["gpu_ms"] for p in passes if p.get("gpu_ms") is not None]
    total = round(sum(t for t in times if t is not None), 4) if times else None
    problem = ""
    if not env.timestamps:
        problem = f"{env.label} cannot time passes (it has no timestamp queries)."
    elif passes and total is None:
        problem = "No pass was timed: the run ended before its passes' times could be read."
    report: SpeedReport = {
        "clock": "timestamp-query" if env.timestamps else "none",
        "adapter": env.label,
        "emulated": env.software,
        "repeats": repeats,
        "gpu_ms": total,
        "upload_ms": round(upload_ms, 3),
        "readback_ms": round(readback_ms, 3),
        "problem": problem,
    }
    if program_ms is not None:
        report["program_ms"] = round(program_ms, 3)
    if env.peaks:
        report["peaks"] = {
            "bandwidth_gbs": env.peaks["bandwidth_gbs"],
            "fma_gflops": env.peaks["fma_gflops"],
            "clock": env.peaks["clock"],
        }
    return report


def _matmul_flops(a: tuple[int, ...], b: tuple[int, ...], *bias: tuple[int, ...]) -> int:
    rows, inner = math.prod(a[:-1]), a[-1]
    columns = b[-1]
    return 2 * rows * inner * columns + (rows * columns if bias else 0)


def _elementwise(*shapes: tuple[int, ...]) -> int:
    return math.prod(shapes[0])


# Floating-point operations a reference's operation does, from its arguments' shapes (a
# multiply-add is two): the arithmetic a kernel doing the same work must do at least.
FLOPS: dict[str, Callable[..., int]] = {
    "matmul": _matmul_flops,
    "matmul_bias": _matmul_flops,
    "add": _elementwise,
    "double": _elementwise,
    "relu": _elementwise,
}


def reference_flops(name: str, args: Sequence[np.ndarray]) -> int | None:
    count = FLOPS.get(name)
    return count(*(tuple(a.shape) for a in args)) if count else None


def time_reference(name: str, args: Sequence[np.ndarray], repeats: int) -> float:
    """The reference's median time over repeats runs, in ms, on float32 copies of its
    arguments: numpy doing the kernel's work at the kernel's precision on this machine."""
    inputs = [np.asarray(a, dtype=np.float32) for a in args]
    samples = []
    for _ in range(max(repeats, 1)):
        started = time.perf_counter()
        REFERENCES[name](*inputs)
        samples.append((time.perf_counter() - started) * 1000)
    return round(statistics.median(samples), 4)


def reference_time(
    memo: Memo,
    inputs: tuple[Any, ...],
    name: str,
    args: Callable[[], Sequence[np.ndarray]],
    repeats: int,
) -> float:
    """time_reference's figure, kept in a worker's memo under inputs (a key of the
    arguments' contents): every version run on the same inputs is compared with the same
    work, so it is timed once per worker, not on every replay."""
    ms = memo(
        ("reference time", *inputs, name, repeats), lambda: time_reference(name, args(), repeats)
    )
    return float(ms)


def speedup(ms: float, gpu_ms: float | None) -> float | None:
    """A reference's ms over the passes': above 1, the kernel's passes beat it."""
    return float(f"{ms / gpu_ms:.3g}") if gpu_ms else None


def reference_entry(name: str, ms: float, gpu_ms: float | None) -> dict[str, Any]:
    """SpeedReport's reference: numpy's time and the passes' speed-up over it."""
    return {"name": f"numpy {name}", "ms": ms, "speedup": speedup(ms, gpu_ms)}


def add_references(
    speed: SpeedReport,
    memo: Memo,
    inputs: tuple[Any, ...],
    name: str,
    args: Callable[[], Sequence[np.ndarray]],
) -> None:
    """The reference's time beside the passes' (speed["gpu_ms"], which must be known):
    numpy's on this machine's CPU, and PyTorch's on its GPU where the worker has a
    reference process (gpu_reference.py)."""
    gpu_ms = speed["gpu_ms"]
    ms = reference_time(memo, inputs, name, args, speed["repeats"])
    speed["reference"] = reference_entry(name, ms, gpu_ms)
    timed = gpu_reference_time(
        name, lambda: memo(("reference shapes", *inputs, name), lambda: [a.shape for a in args()])
    )
    if timed is not None and gpu_ms:
        speed["gpu_reference"] = {
            "name": f"PyTorch {name}",
            **timed,
            "speedup": speedup(timed["ms"], gpu_ms),
        }
    elif gpu_reference_loading():
        speed["gpu_reference_loading"] = True


def fractions(record: Mapping[str, Any], peaks: Mapping[str, Any] | None) -> dict[str, float]:
    """A timed pass's bandwidth and arithmetic as fractions of the device's peaks (each
    where it can be said): what the roofline draws."""
    ms = record.get("gpu_ms")
    if not ms or not peaks:
        return {}
    seconds = ms / 1000
    found = {}
    if record.get("bytes"):
        found["bandwidth"] = record["bytes"] / seconds / 1e9 / peaks["bandwidth_gbs"]
    if record.get("flops"):
        found["arithmetic"] = record["flops"] / seconds / 1e9 / peaks["fma_gflops"]
    return found
