"""Command encoders: a recorded encoder call on wgpu-py, and finding the call at fault.

wgpu-py reports an encoder's validation errors at finish(), for the whole encoder; the call
a browser's console would point at is found by encoding the calls again, one prefix at a
time, until a prefix fails.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kernels.engine.device import import_wgpu
from kernels.engine.host.clock import EncoderClock

MAX_PREFIXES = 2000

ENCODER_OPS = {
    "beginComputePass",
    "setPipeline",
    "setBindGroup",
    "dispatchWorkgroups",
    "endPass",
    "copyBufferToBuffer",
    "clearBuffer",
    "finish",
}


@dataclass
class Encoder:
    gpu: Any
    entries: list[dict[str, Any]] = field(default_factory=list)
    compute_pass: Any = None
    traced_pass: Any = None
    pipeline: str = ""
    pipeline_id: int | None = None  # the pipeline set last, by id
    bind_groups: dict[str, str] = field(default_factory=dict[str, Any])
    bound: dict[int, int | None] = field(default_factory=dict[int, Any])  # index -> group id
    clock: EncoderClock = field(default_factory=EncoderClock)
    group_bytes: dict[int, int] = field(default_factory=dict[int, int])  # index -> bytes bound


def encode(
    encoder: Encoder,
    entry: dict[str, Any],
    objects: Mapping[int, Any],
    timestamp_writes: dict[str, Any] | None = None,
) -> Any:
    """One recorded encoder call on a wgpu-py encoder; finish returns the command buffer.
    timestamp_writes: where a beginComputePass has the device write its timestamps."""
    op = entry["op"]
    if op == "beginComputePass":
        encoder.compute_pass = encoder.gpu.begin_compute_pass(
            label=entry["label"], timestamp_writes=timestamp_writes
        )
    elif op == "setPipeline":
        encoder.compute_pass.set_pipeline(objects[entry["pipeline"]])
    elif op == "setBindGroup":
        group = objects[entry["group"]] if entry["group"] is not None else None
        encoder.compute_pass.set_bind_group(entry["index"], group, entry["offsets"])
    elif op == "dispatchWorkgroups":
        encoder.compute_pass.dispatch_workgroups(*entry["workgroups"])
    elif op == "endPass":
        encoder.compute_pass.end()
        encoder.compute_pass = None
    elif op == "copyBufferToBuffer":
        encoder.gpu.copy_buffer_to_buffer(
            objects[entry["source"]],
            entry["sourceOffset"],
            objects[entry["destination"]],
            entry["destinationOffset"],
            entry["size"],
        )
    elif op == "clearBuffer":
        encoder.gpu.clear_buffer(objects[entry["buffer"]], entry["offset"], entry["size"])
    elif op == "finish":
        return encoder.gpu.finish()
    return None


def first_failing(
    device: Any, entries: list[dict[str, Any]], objects: Mapping[int, Any]
) -> dict[str, Any] | None:
    """The first of an encoder's calls whose prefix no longer encodes and finishes.

    An encoder's error sticks, so every prefix past the first failing one fails too: the
    prefix is found by bisection, in a number of trials that grows with the logarithm of
    the calls (one trial per prefix made 40,000 calls cost 800 million encodes).
    """
    wgpu = import_wgpu()

    def fails(end: int) -> bool:
        trial = Encoder(device.create_command_encoder(label="prefix"))
        try:
            for entry in entries[:end]:
                if entry["op"] != "finish":
                    encode(trial, entry, objects)
            if trial.compute_pass is not None:
                trial.compute_pass.end()
            trial.gpu.finish()
        except wgpu.GPUValidationError:
            return True
        return False

    low, high = 1, min(len(entries), MAX_PREFIXES)
    if high < 1 or not fails(high):
        return None
    while low < high:
        middle = (low + high) // 2
        if fails(middle):
            high = middle
        else:
            low = middle + 1
    return entries[low - 1]
