"""What the storage buffers held after each compute pass (outcome["passes"][i]["buffers"]).

After a pass ends, the buffers it bound writable (read_write in the WGSL its dispatches ran:
nothing else can change in a pass) are copied, in the pass's own encoder, into a staging
buffer of the capture's (one for many passes: a staging buffer made and mapped per pass
took a third of a 20-pass run on the H100); the staging buffers of submitted encoders are
read once, when the run ends (reading after each submit would wait for the GPU where the
program does not). A
buffer's first MAX_CELLS cells are kept, and MAX_RUN_BYTES in all; the rest are counted.
A job may ask for one buffer after one pass whole (Whole): that one is copied again, all
of it up to WHOLE_MAX_BYTES, into a staging buffer of its own, and leaves the outcome's
JSON as bytes (outcome["whole"], which the worker sends after the outcome's frame).

A capture never changes a run: a buffer is copied only when the copy is valid (the Timeline
gives storage buffers COPY_SRC, which WebGPU allows with STORAGE whatever else a buffer
has), and an encoder whose copies would fail is finished again without them
(Timeline.encode_call).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kernels.engine.analysis import used_bindings
from kernels.engine.device import map_now
from kernels.engine.outcome import (
    SENTINEL_BITS,
    PassBuffer,
    PassRecord,
    WholeBuffer,
    pack_values,
)
from kernels.engine.wgsl import parse, resource_numbers, type_text

# A buffer's cells kept per pass (256 KiB of f32), and the bytes kept over a run: under the
# worker's 8 MiB outcome cap once base64 (4/3), with the outputs beside them.
MAX_CELLS = 64 * 1024
MAX_RUN_BYTES = 2 * 1024 * 1024
# A buffer kept whole on request: at most this (the worker's outcome crosses its pipe
# beside it, and the web process stores it).
WHOLE_MAX_BYTES = 64 * 1024 * 1024
# A staging buffer holds this much at least (while the run's budget lasts), for the passes
# of its encoder that come after the one it is made for.
CHUNK_BYTES = 256 * 1024
WORD = 4
SHORT_TYPES = {"f": "f32", "u": "u32", "i": "i32"}
NP_TYPES = {"f32": "<f4", "u32": "<u4", "i32": "<i4", "u8": "u1"}


@dataclass(frozen=True)
class Cells:
    """How a WGSL variable's type reads a buffer: the scalar of its cells ("u8" where it
    cannot be told: a struct, f16, bools) and how many cells make one element."""

    dtype: str
    width: int


@dataclass(frozen=True)
class Whole:
    """A job's request to keep one buffer whole after one pass (job["whole"]: {"pass":
    its number, "buffer": its name, ...}), past MAX_CELLS and MAX_RUN_BYTES."""

    number: int
    name: str
    asked: Mapping[str, Any]

    @classmethod
    def from_job(cls, asked: Any) -> Whole | None:
        """The request in a job (None: none); ValueError for one that is malformed."""
        if asked is None:
            return None
        number = asked.get("pass") if isinstance(asked, dict) else None
        name = asked.get("buffer") if isinstance(asked, dict) else None
        if type(number) is not int or not isinstance(name, str):
            raise ValueError('"whole" must be {"pass": a pass number, "buffer": a name}')
        return cls(number, name, asked)


@dataclass
class Copy:
    """One buffer of one pass, copied at offset of its pass's staging buffer."""

    buffer: int
    name: str
    cells: Cells
    size: int  # the buffer's bytes
    kept: int  # bytes copied (0: over the run's budget)
    offset: int = 0  # in the staging buffer


@dataclass
class Staging:
    """A staging buffer, and the bytes its copies fill from its start."""

    gpu: Any
    size: int
    used: int = 0
    data: bytes | None = None  # what it held, read once

    def read(self) -> bytes:
        if self.data is None:
            map_now(self.gpu, size=self.used)
            # One copy, out of the mapped range (read_mapped's own copy would be a second:
            # 40 ms of 64 MiB on the H100).
            self.data = bytes(self.gpu.read_mapped(0, self.used, copy=False))
            self.gpu.unmap()
        return self.data


@dataclass
class Staged:
    number: int  # the pass's number
    staging: Staging | None
    copies: list[Copy]
    submitted: bool = False
    # The buffer kept whole (Whole), in a staging buffer of its own.
    whole: Copy | None = None
    whole_staging: Staging | None = None


@dataclass
class Captured:
    """A buffer as it stood after a pass, read back: what becomes its JSON."""

    name: str
    cells: Cells
    size: int
    data: bytes | None  # None: not kept (over the run's budget, or never submitted)
    why: str = ""


@dataclass
class Capture:
    """The capture of one Timeline: the writable buffers each pass bound, the staging
    copies each encoder made, and what they read."""

    device: Any
    budget: int = field(default_factory=lambda: MAX_RUN_BYTES)  # bytes it may still keep
    groups: dict[int, dict[int, int]] = field(default_factory=dict)  # group -> binding -> buffer
    numbers: dict[int, int | None] = field(default_factory=dict)  # encoder -> its open pass
    open: dict[int, dict[int, Cells]] = field(default_factory=dict)  # encoder -> buffer -> cells
    bound: dict[int, dict[int, int]] = field(default_factory=dict)  # encoder -> index -> group
    staged: dict[int, list[Staged]] = field(default_factory=dict)  # encoder -> its passes
    staging: dict[int, Staging] = field(default_factory=dict)  # encoder -> its latest
    finished: dict[int, list[Staged]] = field(default_factory=dict)  # command buffer -> ...
    read: dict[int, list[Captured]] = field(default_factory=dict)  # pass number -> buffers
    failed: str = ""
    whole: Whole | None = None
    kept_whole: Captured | None = None  # the buffer kept whole, read

    def bind_group(self, group: int, entries: Sequence[Mapping[str, Any]]) -> None:
        self.groups[group] = {e["binding"]: e["buffer"] for e in entries}

    def set_bind_group(self, encoder: int, index: int, group: int | None) -> None:
        bound = self.bound.setdefault(encoder, {})
        if group is None:
            bound.pop(index, None)
        else:
            bound[index] = group

    def begin_pass(self, encoder: int, number: int | None) -> None:
        """A pass begins; number: the pass's in outcome["passes"] (None past its cap)."""
        self.numbers[encoder] = number
        self.open.pop(encoder, None)

    def dispatch(self, encoder: int, source: str, entry_point: str) -> None:
        """The buffers this dispatch binds writable join its pass's."""
        writable = writable_bindings(source, entry_point)
        found = self.open.setdefault(encoder, {})
        for index, group in self.bound.get(encoder, {}).items():
            for binding, buffer in self.groups.get(group, {}).items():
                cells = writable.get((index, binding))
                if cells is not None:
                    found.setdefault(buffer, cells)

    def end_pass(
        self,
        encoder: int,
        gpu_encoder: Any,
        names: Mapping[int, str],
        sizes: Mapping[int, int],
        objects: Mapping[int, Any],
    ) -> None:
        """Copy the pass's writable buffers into a staging buffer, in its encoder."""
        wgpu = _wgpu()
        found = self.open.pop(encoder, {})
        number = self.numbers.pop(encoder, None)
        if number is None or not found:
            return
        copies = []
        for buffer, cells in found.items():
            size = sizes.get(buffer, 0)
            source = objects.get(buffer)
            if not size or source is None or not source.usage & wgpu.BufferUsage.COPY_SRC:
                continue
            whole = size - size % WORD
            kept = min(whole, MAX_CELLS * _itemsize(cells))
            kept = min(kept, max(0, self.budget) // WORD * WORD)
            self.budget -= kept
            copies.append(Copy(buffer, names[buffer], cells, size, kept))
        if not copies:
            return
        staged = Staged(number, None, copies)
        if self.whole is not None and self.whole.number == number:
            self.copy_whole(staged, gpu_encoder, objects)
        need = sum(copy.kept for copy in copies)
        staging = self.staging.get(encoder) if need else None
        if need and (staging is None or staging.size - staging.used < need):
            usage = wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST
            size = max(need, min(CHUNK_BYTES, need + self.budget))
            made = self.device.create_buffer(label="capture", size=size, usage=usage)
            staging = self.staging[encoder] = Staging(made, size)
        for copy in copies:
            if copy.kept and staging is not None:
                copy.offset, staging.used = staging.used, staging.used + copy.kept
                source = objects[copy.buffer]
                gpu_encoder.copy_buffer_to_buffer(source, 0, staging.gpu, copy.offset, copy.kept)
        staged.staging = staging
        self.staged.setdefault(encoder, []).append(staged)

    def copy_whole(self, staged: Staged, gpu_encoder: Any, objects: Mapping[int, Any]) -> None:
        """Copy the buffer asked for whole, if this pass wrote it, into a staging buffer
        of its own (up to WHOLE_MAX_BYTES; over it, nothing is copied and the
        capture's Captured says so)."""
        assert self.whole is not None
        found = next((c for c in staged.copies if c.name == self.whole.name), None)
        if found is None:
            return
        whole = found.size - found.size % WORD
        if not whole:
            return
        copy = Copy(found.buffer, found.name, found.cells, found.size, whole)
        staged.whole = copy
        if whole > WHOLE_MAX_BYTES:
            return
        wgpu = _wgpu()
        usage = wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST
        made = self.device.create_buffer(label="capture whole", size=whole, usage=usage)
        staged.whole_staging = Staging(made, whole, used=whole)
        gpu_encoder.copy_buffer_to_buffer(objects[copy.buffer], 0, made, 0, whole)

    def drop(self, encoder: int) -> None:
        """The encoder was finished again without its copies."""
        self.staging.pop(encoder, None)
        for staged in self.staged.pop(encoder, []):
            for staging in (staged.staging, staged.whole_staging):
                if staging is not None:
                    staging.gpu.destroy()

    def finish(self, encoder: int, command_buffer: int) -> None:
        self.finished[command_buffer] = self.staged.pop(encoder, [])
        self.staging.pop(encoder, None)
        self.bound.pop(encoder, None)
        self.numbers.pop(encoder, None)

    def submit(self, command_buffers: Sequence[int]) -> None:
        for key in command_buffers:
            for staged in self.finished.get(key, []):
                staged.submitted = True

    def read_all(self) -> None:
        """Read every staging buffer (the GPU's work is done or waited for here); the
        passes of encoders never finished are never submitted too."""
        for staged in sorted(self.everything(), key=lambda s: s.number):
            data = b""
            if staged.submitted and staged.staging is not None:
                data = staged.staging.read()
            buffers = self.read.setdefault(staged.number, [])
            for copy in staged.copies:
                why = "" if copy.kept else "over budget"
                why = why if staged.submitted else "never submitted"
                kept = data[copy.offset : copy.offset + copy.kept] if not why else None
                buffers.append(Captured(copy.name, copy.cells, copy.size, kept, why))
            if staged.whole is not None:
                self.kept_whole = self.read_whole(staged, staged.whole)

    def read_whole(self, staged: Staged, copy: Copy) -> Captured:
        whole = staged.whole_staging
        why = "" if whole is not None else "too large"
        why = why if staged.submitted else "never submitted"
        data = whole.read() if whole is not None and not why else None
        # Its size as copied: whole words (WebGPU copies no less).
        return Captured(copy.name, copy.cells, copy.kept, data, why)

    def release(self) -> None:
        made = {
            id(staging): staging
            for s in self.everything()
            for staging in (s.staging, s.whole_staging)
            if staging is not None
        }
        for staging in made.values():
            staging.gpu.destroy()

    def everything(self) -> list[Staged]:
        pending = [s for group in self.staged.values() for s in group]
        return pending + [s for group in self.finished.values() for s in group]


def _wgpu() -> Any:
    from kernels.engine.device import import_wgpu

    return import_wgpu()


def _itemsize(cells: Cells) -> int:
    return 1 if cells.dtype == "u8" else WORD


@functools.lru_cache(maxsize=64)
def writable_bindings(source: str, entry_point: str) -> dict[tuple[int, int], Cells]:
    """(group, binding) -> Cells of each read_write storage variable the entry point uses
    (all of the module's where the entry point cannot be read)."""
    module = parse(source)
    used = used_bindings(source, entry_point)
    found = {}
    for variable in module.variables:
        if variable.address_space != "storage" or variable.access != "read_write":
            continue
        group, binding = resource_numbers(module, variable)
        if group is None or binding is None or (used is not None and (group, binding) not in used):
            continue
        found[(group, binding)] = cells_of(type_text(variable.type))
    return found


SIZES = re.compile(r",[^<>,]*>")
VECTOR = re.compile(r"vec([234])(?:<(f32|u32|i32)>|([fui]))")


def cells_of(wgsl_type: str) -> Cells:
    """How a variable of this WGSL type reads its buffer: array<vec4<f32>> -> f32 by 4."""
    text = SIZES.sub(">", wgsl_type.replace(" ", ""))
    for wrapper in ("array<", "atomic<", "array<", "atomic<"):
        if text.startswith(wrapper) and text.endswith(">"):
            text = text[len(wrapper) : -1]
    if text in ("f32", "u32", "i32"):
        return Cells(text, 1)
    if vector := VECTOR.fullmatch(text):
        # A vec3's elements are 16 bytes apart in an array: the fourth cell is padding.
        width = int(vector[1])
        return Cells(vector[2] or SHORT_TYPES[vector[3]], 4 if width == 3 else width)
    return Cells("u8", 1)


def with_buffers(
    passes: Sequence[PassRecord],
    captured: Mapping[int, list[Captured]],
    diagnostic: Mapping[int, list[Captured]] | None = None,
    shapes: Mapping[str, Sequence[int]] | None = None,
) -> list[PassRecord]:
    """The passes with their buffers (PassBuffer JSON). diagnostic: the sentinel run's
    capture, whose cells still holding the sentinel are marked never written here.
    shapes: the shape a harness gives a buffer, by name."""
    shown = []
    for record in passes:
        found = captured.get(record["number"])
        if found is None:
            shown.append(record)
            continue
        marks = {b.name: b for b in (diagnostic or {}).get(record["number"], [])}
        with_them: PassRecord = {**record}
        with_them["buffers"] = [
            _as_json(b, marks.get(b.name), (shapes or {}).get(b.name)) for b in found
        ]
        shown.append(with_them)
    return shown


def _as_json(
    buffer: Captured, diagnostic: Captured | None, shape: Sequence[int] | None
) -> PassBuffer:
    dtype, width = buffer.cells.dtype, buffer.cells.width
    if buffer.size % WORD:
        dtype, width = "u8", 1
    itemsize = 1 if dtype == "u8" else WORD
    count = buffer.size // itemsize
    whole = _shape(count, width, shape)
    entry: PassBuffer = {
        "name": buffer.name,
        "dtype": dtype,
        "shape": whole,
        "count": count,
        "kept": 0,
    }
    if buffer.data is None:
        entry["note"] = (
            "never submitted: the pass was encoded but its command buffer never reached "
            "queue.submit, so it never ran"
            if buffer.why == "never submitted"
            else f"not kept: the run's captures reached their cap of {MAX_RUN_BYTES:,} bytes"
        )
        return entry
    values = np.frombuffer(buffer.data, dtype=NP_TYPES[dtype])
    if diagnostic is not None and diagnostic.data is not None and dtype in SENTINEL_BITS:
        never = np.frombuffer(diagnostic.data, dtype="<u4")[: values.size]
        bits = values.view("<u4").copy()
        bits[: never.size][never == SENTINEL_BITS["f32"]] = SENTINEL_BITS[dtype]
        values = bits.view(NP_TYPES[dtype])
    entry["kept"] = int(values.size)
    if values.size < count:
        entry["shape"] = [int(values.size)]
        entry["note"] = (
            f"too large to keep whole: the first {values.size:,} of its {count:,} cells are "
            f"kept (at most {MAX_CELLS:,} a buffer and {MAX_RUN_BYTES // 1024**2} MiB a run)"
        )
    elif len(whole) > 1:
        values = values.reshape(whole)
    entry["values"] = pack_values(values, dtype)
    return entry


def _shape(count: int, width: int, shape: Sequence[int] | None) -> list[int]:
    if shape and math.prod(shape) == count:
        return list(shape)
    if width > 1 and count % width == 0:
        return [count // width, width]
    return [count]


def whole_entry(
    capture: Capture | None, shapes: Mapping[str, Sequence[int]] | None = None
) -> WholeBuffer | None:
    """What a capture kept of the buffer its job asked for whole (None: it asked none):
    its cells' type and shape (shapes: a harness's, by buffer name) and bytes, or why
    there are none."""
    if capture is None or capture.whole is None:
        return None
    asked = capture.whole
    entry: WholeBuffer = {"asked": dict(asked.asked)}
    found = capture.kept_whole
    if capture.failed:
        entry["problem"] = "the capture of this run failed, so nothing was kept"
        return entry
    if found is None:
        entry["problem"] = (
            f"this run has no pass {asked.number} that writes a buffer named {asked.name!r}"
        )
        return entry
    dtype, width = found.cells.dtype, found.cells.width
    count = found.size // (1 if dtype == "u8" else WORD)
    entry["dtype"], entry["count"], entry["bytes"] = dtype, count, found.size
    entry["shape"] = _shape(count, width, (shapes or {}).get(found.name))
    if found.why == "too large":
        entry["problem"] = (
            f"buffer {found.name} is {found.size:,} bytes, over the "
            f"{WHOLE_MAX_BYTES:,} bytes a buffer kept whole may be"
        )
    elif found.why == "never submitted" or found.data is None:
        entry["problem"] = (
            f"pass {asked.number} was encoded but its command buffer never reached "
            "queue.submit, so it never ran"
        )
    else:
        entry["data"] = found.data
    return entry
