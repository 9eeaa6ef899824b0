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
from typing import Any

from kernels.engine.harness import Harness
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

    def drop(self, key: tuple[Any, ...]) -> None:
        """Destroy the buffer kept under key, if one is."""
        if (buffer := self.kept.pop(key, None)) is not None:
            buffer.destroy()


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
