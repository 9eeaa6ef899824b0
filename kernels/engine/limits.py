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
        for key, value in overrides.items():
            if key not in known:
                raise ValueError(f"unknown limit {key!r}; known: {', '.join(sorted(known))}")
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"limit {key} must be a positive integer (got {value!r})")
        return cls(**overrides)  # type: ignore[arg-type]


DEFAULT_LIMITS = Limits()


def check_limits(harness: Harness, sources: Mapping[str, str], limits: Limits) -> None:
    """Refuse a run over the limits before any memory or device time is spent on it."""

    def over(what: str, value: int, cap: int, unit: str = "") -> Stop:
        value_text = f"{value:,}{unit}" + (f" ({_size(value)})" if unit else "")
        cap_text = f"{cap:,}{unit}" + (f" ({_size(cap)})" if unit else "")
        return Stop(
            Status.REJECTED,
            f"Rejected before running: {what} is {value_text}, over the limit of {cap_text}.",
            f"{what}: {value} > {cap}",
        )

    for buf in harness.buffers:
        if buf.nbytes > limits.max_buffer_bytes:
            raise over(f"buffer {buf.name}", buf.nbytes, limits.max_buffer_bytes, " bytes")
    total = sum(b.nbytes for b in harness.buffers)
    if total > limits.max_total_bytes:
        raise over("the total size of all buffers", total, limits.max_total_bytes, " bytes")
    invocations = 0
    for number, p in enumerate(harness.passes, start=1):
        for axis, size in zip("xyz", p.dispatch, strict=True):
            if size > limits.max_workgroups_per_dim:
                raise over(
                    f"pass {number}'s dispatch in {axis}", size, limits.max_workgroups_per_dim
                )
        per_group = workgroup_size(sources[p.kernel], p.entry_point)
        invocations += math.prod(p.dispatch) * per_group
    if invocations > limits.max_invocations:
        raise over(
            "the number of invocations (workgroups times workgroup size, all passes)",
            invocations,
            limits.max_invocations,
        )
    readback = sum(harness.buffer(name).nbytes for name in readback_names(harness))
    if readback > limits.max_readback_bytes:
        raise over(
            "the size of the buffers read back", readback, limits.max_readback_bytes, " bytes"
        )


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


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1024**3), ("MiB", MiB), ("KiB", 1024)):
        if n >= scale:
            return f"{n / scale:.4g} {unit}"
    return f"{n} B"
