"""The device's clock around each compute pass: timestamp queries, as WebGPU defines them.

Each encoder gets query sets as its passes need them (two queries a pass, its beginning and
its end); before the encoder finishes they are resolved into a buffer and copied into one
the host can map; once the command buffer is submitted, those are read (at the end of the
run, so that timing adds no wait of its own between submits). WebGPU's resolved timestamps
are nanoseconds (wgpu-native converts the queue's ticks with its timestamp period).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kernels.engine.device import TIMESTAMPS, import_wgpu, map_now

PASSES_PER_SET = 32


@dataclass
class EncoderClock:
    """The query sets of one encoder, and the pass (an index into Timeline.passes, None
    for one past MAX_PASSES, which is not timed) of each beginComputePass in order."""

    sets: list[Any] = field(default_factory=list)
    begins: list[int | None] = field(default_factory=list)
    timed: list[int] = field(default_factory=list)  # the passes timed, in query order
    reads: list[tuple[Any, list[int]]] = field(default_factory=list)


class PassClock:
    """Timestamps of every pass of a run (times: pass index -> milliseconds, a sample a
    run), for a device opened with timestamp-query; `available` is False otherwise, and
    for a run whose times are not shown (timed False)."""

    def __init__(self, device: Any, timed: bool = True) -> None:
        self.device = device
        self.available = timed and TIMESTAMPS in device.features
        self.submitted: list[tuple[Any, list[int]]] = []
        self.times: dict[int, list[float]] = {}

    def writes(self, clock: EncoderClock, index: int | None) -> dict[str, Any] | None:
        """The timestamp_writes of the encoder's next beginComputePass, for pass `index`."""
        clock.begins.append(index)
        if not self.available or index is None:
            return None
        wgpu = import_wgpu()
        slot = len(clock.timed) % PASSES_PER_SET
        if slot == 0:
            clock.sets.append(
                self.device.create_query_set(
                    type=wgpu.QueryType.timestamp, count=2 * PASSES_PER_SET
                )
            )
        clock.timed.append(index)
        return {
            "query_set": clock.sets[-1],
            "beginning_of_pass_write_index": 2 * slot,
            "end_of_pass_write_index": 2 * slot + 1,
        }

    def resolve(self, clock: EncoderClock, encoder: Any) -> None:
        """Before the encoder finishes: its timestamps into buffers the host can map."""
        wgpu = import_wgpu()
        for number, query_set in enumerate(clock.sets):
            passes = clock.timed[number * PASSES_PER_SET : (number + 1) * PASSES_PER_SET]
            size = 16 * len(passes)
            resolved = self.device.create_buffer(
                size=size, usage=wgpu.BufferUsage.QUERY_RESOLVE | wgpu.BufferUsage.COPY_SRC
            )
            read = self.device.create_buffer(
                size=size, usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST
            )
            encoder.resolve_query_set(query_set, 0, 2 * len(passes), resolved, 0)
            encoder.copy_buffer_to_buffer(resolved, 0, read, 0, size)
            clock.reads.append((read, passes))

    def submit(self, clock: EncoderClock) -> None:
        """The encoder's command buffer was submitted: its timestamps will be written."""
        self.submitted.extend(clock.reads)
        clock.reads = []

    def collect(self) -> None:
        """Read the timestamps of what was submitted (waits for it to finish)."""
        for read, passes in self.submitted:
            map_now(read)
            stamps = np.frombuffer(read.read_mapped(), dtype=np.uint64).reshape(-1, 2)
            read.destroy()
            for index, (begin, end) in zip(passes, stamps.tolist(), strict=True):
                # A clock that went backwards (some drivers between submits) says nothing.
                ms = (end - begin) / 1e6 if end >= begin else float("nan")
                self.times.setdefault(index, []).append(ms)
        self.submitted = []

    def median(self, index: int) -> float | None:
        samples = [t for t in self.times.get(index, []) if t == t]
        return round(statistics.median(samples), 4) if samples else None
