"""A run's buffers on the device, and the ones a worker keeps there between runs.

A worker runs many jobs under the same harness and inputs (every version of a kernel,
"run again", the tutor's run_kernel), and uploading the same inputs each time can cost
more than the dispatch on a GPU (3 MB for the 784x128 layer). So, as the memo keeps
compiled pipelines, a worker keeps a harness's buffers on its device, keyed by the
inputs they hold, least recently used first out past a byte budget. Two rules keep a
kept buffer holding what the harness says:

- an input is kept only while no pass's kernel declares writable the binding it sits
  at; a kernel that may write into it gets a fresh upload of its own, every run;
- a kept buffer without an input (an output, a zeroed scratch buffer) is cleared at the
  start of every run that uses it, so it starts zeroed, as WebGPU's new buffers do.

The reference's expected values of large outputs are kept too (kernels/engine/gpu_compare.py
checks outputs against them on the device), in an LRU of their own, so that they never
push a harness's inputs out.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

import numpy as np

from kernels.engine.device import import_wgpu
from kernels.engine.harness import Harness
from kernels.engine.inputs import sentinel_array
from kernels.engine.naga import clean_wgpu_error
from kernels.engine.outcome import Status, Stop
from kernels.engine.wgsl import parse, resource_numbers

# Device memory a worker keeps for buffers between runs; a buffer larger than this is
# made for its run alone.
RESIDENT_BYTES = 256 * 1024 * 1024
WRITABLE_ACCESS = ("read_write", "write")


class DeviceBuffers:
    """The buffers a worker keeps on its device between runs, least recently used first
    out past budget bytes (destroyed as they go). budget 0 keeps nothing. references
    holds the expected values of outputs checked on the device, under the same budget."""

    def __init__(self, budget: int = RESIDENT_BYTES, *, references: bool = True) -> None:
        self.budget = budget
        self.kept: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
        self.references = DeviceBuffers(budget, references=False) if references else None

    def get(self, key: tuple[Any, ...], nbytes: int, make: Callable[[], Any]) -> tuple[Any, bool]:
        """The buffer kept under key, or a new one from make(); and whether it is kept
        (a buffer not kept is the caller's to destroy)."""
        if key in self.kept:
            self.kept.move_to_end(key)
            return self.kept[key], True
        buffer = make()
        if nbytes > self.budget:
            return buffer, False
        self.kept[key] = buffer
        while sum(b.size for b in self.kept.values()) > self.budget:
            _, oldest = self.kept.popitem(last=False)
            oldest.destroy()
        return buffer, True


def writable_buffers(harness: Harness, sources: Mapping[str, str]) -> set[str]:
    """The buffers some pass binds where its kernel declares a writable storage variable.

    A kernel with a writable variable whose @group or @binding is not a constant we can
    evaluate might write into any buffer its pass binds: all of them count."""
    declared: dict[str, tuple[dict[tuple[int, int], str], bool]] = {}
    for kernel in harness.kernel_names():
        module = parse(sources[kernel])
        access: dict[tuple[int, int], str] = {}
        unplaced = False
        for variable in module.variables:
            group, binding = resource_numbers(module, variable)
            if group is None or binding is None:
                unplaced = unplaced or variable.access in WRITABLE_ACCESS
            else:
                access[(group, binding)] = variable.access
        declared[kernel] = (access, unplaced)
    writable = set()
    for p in harness.passes:
        access, unplaced = declared[p.kernel]
        for b in p.bind:
            if unplaced or access.get((b.group, b.binding)) in WRITABLE_ACCESS:
                writable.add(b.buffer)
    return writable


class RunBuffers:
    """One run's buffers by harness name: kept ones from DeviceBuffers, the rest made for
    this dispatch and destroyed by release()."""

    def __init__(self, device: Any, kept: DeviceBuffers) -> None:
        self.device = device
        self.kept = kept
        self.by_name: dict[str, Any] = {}
        self.own: list[Any] = []
        self.to_clear: list[Any] = []

    def make(
        self,
        harness: Harness,
        host: Mapping[str, np.ndarray],
        inputs_key: tuple[Any, ...],
        writable: set[str],
        sentinel: bool,
    ) -> None:
        """The buffers of every bound buffer; sentinel=True is the diagnostic run, whose
        fresh buffers start with the never-written sentinel instead of zeros."""
        wgpu = import_wgpu()
        self.release()
        usage = wgpu.BufferUsage
        for buf in harness.bound_buffers():
            flags = (
                usage.UNIFORM | usage.COPY_DST
                if buf.usage == "uniform"
                else usage.STORAGE | usage.COPY_SRC | usage.COPY_DST
            )

            def upload(data: np.ndarray, flags: int = flags, label: str = buf.name) -> Any:
                return self.device.create_buffer_with_data(data=data, usage=flags, label=label)

            def zeroed(flags: int = flags, size: int = buf.nbytes, label: str = buf.name) -> Any:
                # wgpu zero-initialises new buffers: no host copy needed.
                return self.device.create_buffer(size=size, usage=flags, label=label)

            key = (*inputs_key, buf.name)
            try:
                if sentinel and buf.fill == "fresh":
                    gpu, kept = upload(sentinel_array(buf)), False
                elif buf.fill in ("zeros", "fresh"):
                    gpu, kept = self.kept.get(key, buf.nbytes, zeroed)
                    if kept:
                        self.to_clear.append(gpu)
                elif buf.name in writable:
                    gpu, kept = upload(host[buf.name]), False
                else:
                    gpu, kept = self.kept.get(key, buf.nbytes, partial(upload, host[buf.name]))
            except wgpu.GPUValidationError as e:
                text = clean_wgpu_error(str(e))
                raise Stop(Status.PIPELINE_ERROR, f"Buffer {buf.name}: {text}", text) from None
            except wgpu.GPUError as e:
                raise Stop(
                    Status.CRASHED, f"The device could not allocate buffer {buf.name}.", str(e)
                ) from None
            self.by_name[buf.name] = gpu
            if not kept:
                self.own.append(gpu)

    def keep_reference(self, key: tuple[Any, ...], nbytes: int, make: Callable[[], Any]) -> Any:
        """The expected values kept under key on the device, or new ones from make()
        (destroyed by release() when they cannot be kept)."""
        references = self.kept.references or DeviceBuffers(budget=0, references=False)
        gpu, kept = references.get(("expected", *key), nbytes, make)
        if not kept:
            self.own.append(gpu)
        return gpu

    def clear(self, encoder: Any) -> None:
        """Zero the kept buffers that hold no input, first thing in the run's commands."""
        for gpu in self.to_clear:
            encoder.clear_buffer(gpu)

    def release(self) -> None:
        # Free device memory now rather than when the garbage collector gets to it:
        # a worker runs hundreds of jobs on one device.
        for gpu in self.own:
            gpu.destroy()
        self.own.clear()
        self.to_clear.clear()
        self.by_name.clear()
