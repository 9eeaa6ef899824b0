"""Caps on a run, checked before anything touches the device."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass

from kernels.engine.harness import Harness
from kernels.engine.outcome import Status, Stop
from kernels.engine.wgsl import workgroup_size

MiB = 1024 * 1024


@dataclass(frozen=True)
class Limits:
    """Caps checked before anything touches the device."""

    max_buffer_bytes: int = 128 * MiB
    max_total_bytes: int = 512 * MiB
    max_workgroups_per_dim: int = 65535
    # dispatch x*y*z times the entry point's workgroup size, summed over passes
    max_invocations: int = 2**26
    max_readback_bytes: int = 64 * MiB

    @classmethod
    def from_dict(cls, overrides: Mapping[str, object]) -> Limits:
        known = {f.name for f in dataclasses.fields(cls)}
        checked: dict[str, int] = {}
        for key, value in overrides.items():
            if key not in known:
                raise ValueError(f"unknown limit {key!r}; known: {', '.join(sorted(known))}")
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"limit {key} must be a positive integer (got {value!r})")
            checked[key] = value
        return dataclasses.replace(cls(), **checked)


DEFAULT_LIMITS = Limits()


def over(limits: Limits, cap: str, what: str, value: int) -> str:
    """ "{what} is {value}, over the limit of {limit}" when value passes the cap named (a
    field of Limits), else "". The one wording of every cap, for harness runs (refused
    before running) and programs (refused at the call)."""
    limit: int = getattr(limits, cap)
    if value <= limit:
        return ""
    return f"{what} is {_amount(cap, value)}, over the limit of {_amount(cap, limit)}"


def check_limits(harness: Harness, sources: Mapping[str, str], limits: Limits) -> None:
    """Refuse a run over the limits before any memory or device time is spent on it."""

    def check(cap: str, what: str, value: int) -> None:
        if problem := over(limits, cap, what, value):
            raise Stop(
                Status.REJECTED,
                f"Rejected before running: {problem}.",
                f"{what}: {value} > {getattr(limits, cap)}",
            )

    for buf in harness.buffers:
        check("max_buffer_bytes", f"buffer {buf.name}", buf.nbytes)
    check(
        "max_total_bytes", "the total size of all buffers", sum(b.nbytes for b in harness.buffers)
    )
    invocations = 0
    for number, p in enumerate(harness.passes, start=1):
        for axis, size in zip("xyz", p.dispatch, strict=True):
            check("max_workgroups_per_dim", f"pass {number}'s dispatch in {axis}", size)
        per_group = workgroup_size(sources[p.kernel], p.entry_point)
        invocations += math.prod(p.dispatch) * per_group
    check(
        "max_invocations",
        "the number of invocations (workgroups times workgroup size, all passes)",
        invocations,
    )
    readback = sum(harness.buffer(name).nbytes for name in readback_names(harness))
    check("max_readback_bytes", "the size of the buffers read back", readback)


def readback_names(harness: Harness) -> list[str]:
    """The bound buffers copied back after the passes: outputs and report buffers (a
    struct buffer, shape (), is an input)."""
    names = [b.name for b in harness.outputs()]
    if not names and harness.reference is None:
        # Nothing marked: show every buffer the kernel could have written.
        names = [b.name for b in harness.buffers if b.usage == "read_write" and b.shape]
    if harness.report is not None:
        names += harness.report.show
        if harness.report.kind:
            names += [harness.report.probabilities, harness.report.labels]
    bound = {b.name for b in harness.bound_buffers()}
    return [name for name in dict.fromkeys(names) if name in bound]


def _amount(cap: str, n: int) -> str:
    """n as the cap counts it: bytes, with their size from 1 KiB up ("4,294,967,296
    bytes (4 GiB)"), or a plain count."""
    if not cap.endswith("_bytes"):
        return f"{n:,}"
    for unit, scale in (("GiB", 1024**3), ("MiB", MiB), ("KiB", 1024)):
        if n >= scale:
            return f"{n:,} bytes ({n / scale:.4g} {unit})"
    return f"{n:,} bytes"
