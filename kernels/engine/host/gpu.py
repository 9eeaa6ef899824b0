"""The device timeline: the shim's record of WebGPU calls, replayed on wgpu-py.

Entries are applied in the order the program made them; requests (requestDevice, mapAsync,
fetch ...) return what settles the program's promise. The first error stops the replay as a
HostError naming the program line of the call at fault: wgpu-py raises validation errors at
the call, but a command encoder's surface at finish(), so its calls are encoded again one
prefix at a time to find the first that fails (the one a browser's console would name).
"""

# Kept whole: one class replays the record in order, an operation a method, all of them on
# the timeline's state (buffers, layouts, the trace); split, each half would reach into the other.

from __future__ import annotations

import functools
import hashlib
import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from kernels.engine.device import TIMESTAMPS, Environment, import_wgpu, map_now, wait_for_queue
from kernels.engine.host import trace as traces
from kernels.engine.host.capture import Capture, Whole
from kernels.engine.host.clock import PassClock
from kernels.engine.host.encoder import ENCODER_OPS, Encoder, encode, first_failing
from kernels.engine.host.js import assigned_variables, call_start
from kernels.engine.host.kept_inputs import ProgramInputs
from kernels.engine.host.record import MAKES, check_entry
from kernels.engine.host.trace import Trace
from kernels.engine.inputs import Memo, no_memo
from kernels.engine.limits import Limits, over
from kernels.engine.naga import clean_wgpu_error, parse_compile_error
from kernels.engine.outcome import SENTINEL_BITS, CompileError, PassRecord
from kernels.engine.resident import DeviceBuffers
from kernels.engine.webgpu import module_refusal, pipeline_refusal
from kernels.engine.wgsl import workgroup_size

log = logging.getLogger("kernels.engine.host.gpu")

# A never-written cell keeps the f32 sentinel's bits in the diagnostic run, as under a
# harness: a storage buffer is filled with them whatever the program views it as.
SENTINEL_WORD = SENTINEL_BITS["f32"]
STORAGE = 0x80
MAP_READ, MAP_WRITE, COPY_SRC = 0x1, 0x2, 0x4
MAX_CALLS = 100_000
# Compute passes an outcome lists (outcome["passes"]); a run may encode more.
MAX_PASSES = 1000
# What the host wrote into a buffer is kept whole (Timeline.written, a reference's inputs) for
# buffers up to this size, and up to MAX_SHADOWS_BYTES in all.
MAX_SHADOW_BYTES = 64 * 1024 * 1024
MAX_SHADOWS_BYTES = 256 * 1024 * 1024
# A destroyed buffer this big is freed at once (Timeline.op_destroyBuffer).
FREED_AT_ONCE = 16 * 1024 * 1024
Entry = dict[str, Any]  # one recorded call, as the shim wrote it
Blob = Callable[[int], bytes | memoryview | None]  # the bytes a call handed over, by index
# The name a program fetch()es its version's WGSL by (run_program_job's "wgsl").
VERSION_WGSL = "kernel.wgsl"
# The JavaScript method behind a recorded entry, where the names differ.
METHODS: dict[str, str] = {"endPass": "end", "destroyBuffer": "destroy", "destroyDevice": "destroy"}

# The calls whose time is the compile time of a run (outcome timings' compile_ms).
COMPILING = frozenset(("createShaderModule", "createComputePipeline"))
# The calls that move data between host and device, timed apart (wall clock): a read's
# wait for the work before it is not its own, and is waited out before it is timed.
UPLOADING = frozenset(("writeBuffer", "unmap"))
# A run whose passes took under CHEAP_MS on the device is run REPEATS times in all, and each
# pass's time is the median: one sample of a short pass is mostly noise (a clock's ramp-up,
# another process's work), and four more cost under 4 * CHEAP_MS.
REPEATS = 5
CHEAP_MS = 20.0

CALLS = {
    "createBuffer": "device.createBuffer",
    "writeBuffer": "queue.writeBuffer",
    "unmap": "buffer.unmap",
    "destroyBuffer": "buffer.destroy",
    "createShaderModule": "device.createShaderModule",
    "createComputePipeline": "device.createComputePipeline",
    "getBindGroupLayout": "pipeline.getBindGroupLayout",
    "createBindGroupLayout": "device.createBindGroupLayout",
    "createPipelineLayout": "device.createPipelineLayout",
    "createBindGroup": "device.createBindGroup",
    "createCommandEncoder": "device.createCommandEncoder",
    "beginComputePass": "encoder.beginComputePass",
    "setPipeline": "pass.setPipeline",
    "setBindGroup": "pass.setBindGroup",
    "dispatchWorkgroups": "pass.dispatchWorkgroups",
    "endPass": "pass.end",
    "copyBufferToBuffer": "encoder.copyBufferToBuffer",
    "clearBuffer": "encoder.clearBuffer",
    "finish": "encoder.finish",
    "submit": "queue.submit",
    "mapAsync": "buffer.mapAsync",
}


class HostError(Exception):
    """Where and why the replay stopped.

    kind: "validation" (what WebGPU would report), "compile" (WGSL), "limit" (over
    Kernelbin's caps), "record" (a call the record cannot stand for: see record.SCHEMA), "fetch"
    (a file that is not attached never reaches this: fetch rejects).
    """

    def __init__(
        self,
        kind: str,
        message: str,
        entry: Mapping[str, Any],
        detail: str = "",
        compile: CompileError | None = None,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.line = entry.get("line")
        self.call = CALLS.get(entry.get("op", ""), entry.get("op", ""))
        self.detail = detail
        self.compile = compile


@dataclass
class Readback:
    """The bytes a mapAsync(READ) gave the program, and how the program viewed them."""

    buffer: str
    source: str
    offset: int
    data: bytes
    dtype: str
    viewed: bool
    line: int | None


class Timeline:
    """The executor: wgpu-py objects for the ids a recorded program hands out (the shim's
    record of a program, or a harness's calls: harness_program.py), and what happened to them.

    sentinel: the diagnostic run, whose new storage buffers start with the never-written
    sentinel instead of zeros (True: every one; a set: those of these names). kept and
    resident: buffers a worker keeps on its device between runs (resident.py), by buffer id
    -> key, for buffers the host fills whole and no pass writes; a kept one is not uploaded
    again. inputs: a program's inputs, found and kept as it runs (host/kept_inputs.py).
    shadows: keep what the host wrote into each buffer (Timeline.written), which a
    program's reference is computed from. capture: keep what the buffers each pass binds
    writable held after it (host/capture.py; read when the run ends, in release()), and
    whole: the one buffer after one pass a job asked to keep whole. timed:
    time each pass on the device (host/clock.py) where it can; False for a run not shown.
    recorded: the entries are a program's record, which a hostile program may have shaped:
    each is checked, and its line moved to where its call begins; False for a harness's
    (harness_program.py), made in Python with each call's own line.
    """

    def __init__(
        self,
        device: Any,
        env: Environment,
        limits: Limits,
        files: Mapping[str, bytes],
        sentinel: bool | frozenset[str],
        source: str = "",
        memo: Memo = no_memo,
        *,
        kept: DeviceBuffers | None = None,
        resident: Mapping[int, tuple[Any, ...]] | None = None,
        inputs: ProgramInputs | None = None,
        shadows: bool = True,
        capture: bool = False,
        whole: Whole | None = None,
        timed: bool = True,
        recorded: bool = True,
    ) -> None:
        self.lines = source.splitlines()
        self.recorded = recorded
        # The worker's memo: a module or "auto" pipeline made before (the same program run
        # again, its diagnostic run) is not compiled again.
        self.memo = memo
        self.kept = kept
        self.resident = dict(resident or {})
        self.inputs = inputs
        self.prefilled: set[int] = set()  # kept buffers that hold their contents already
        self.shadows = shadows
        self.compile_ms = 0.0
        self.digests: dict[int, str] = {}  # shader module id -> its WGSL's sha256
        self.device = device
        self.env = env
        self.limits = limits
        self.files = files
        self.sentinel = sentinel
        self.objects: dict[int, Any] = {}
        self.names: dict[int, str] = {}
        self.sizes: dict[int, int] = {}  # bytes each buffer holds now (0 once destroyed)
        self.made_sizes: dict[int, int] = {}  # bytes each buffer was made with
        self.kinds: dict[int, str] = {}  # id -> the kind of object it was made as (MAKES)
        self.sources: dict[int, str] = {}  # shader module id -> WGSL
        self.pipeline_stage: dict[int, tuple[int, str | None]] = {}
        self.group_sizes: dict[int, int] = {}  # pipeline id -> invocations per workgroup
        self.encoders: dict[int, Encoder] = {}
        self.copied_from: dict[int, str] = {}
        self.views: dict[int, str] = {}
        # What the program put in each buffer from the host (writes, mapped ranges and the
        # copies between such buffers), whole: the inputs a reference is computed from.
        self.written: dict[int, bytes | bytearray] = {}
        self.shadowed = 0  # bytes of those copies
        self.live_bytes = 0
        self.readback_bytes = 0
        self.invocations = 0
        self.calls = 0
        self.dispatches = 0
        self.counts: dict[str, int] = {}
        self.readbacks: list[Readback] = []
        self.code_left = traces.MAX_TRACE_CODE  # WGSL the trace may still carry
        self.passes: list[PassRecord] = []  # every compute pass, uncapped up to MAX_PASSES
        self.group_bytes: dict[int, int] = {}  # bind group id -> the bytes of its bound ranges
        self.group_buffers: dict[int, dict[int, int]] = {}  # bind group id -> binding -> buffer
        self.trace: Trace = traces.new_trace()
        self.clock = PassClock(device, timed)
        self.finished: dict[int, Encoder] = {}  # command buffer id -> the encoder it came from
        self.ran: list[Encoder] = []  # the encoders of the command buffers submitted, in order
        self.upload_ms = 0.0
        self.readback_ms = 0.0
        # From the first submit to the end of the last readback (perf_counter seconds).
        self.first_submit: float | None = None
        self.last_read = 0.0
        self.capture = Capture(device, whole=whole) if capture else None

    def apply(self, entry: Entry, blob: Blob) -> Any:
        """Replay one entry; for a request, the answer: a dict, or a dict and bytes."""
        shown = entry if type(entry) is dict else {}
        self.calls += 1
        if self.calls > MAX_CALLS:
            raise HostError(
                "limit", f"The program made more than {MAX_CALLS:,} WebGPU calls.", shown
            )
        op = shown.get("op")
        if self.recorded:
            if type(op) is str and type(entry.get("line")) is int:
                # The line where the call begins (QuickJS names the one where it ends).
                line = entry["line"] if 1 <= entry["line"] <= len(self.lines) else None
                entry["line"] = call_start(self.lines, line, METHODS.get(op, op))
            if problem := check_entry(entry, self.kinds):
                raise HostError("record", f"the call could not be replayed: {problem}.", shown)
        wgpu = import_wgpu()
        try:
            if op in ENCODER_OPS:
                self.encode_call(entry)
                answer = None
            elif op in COMPILING:
                started = time.perf_counter()
                try:
                    answer = OPERATIONS[entry["op"]](self, entry, blob)
                finally:
                    self.compile_ms += (time.perf_counter() - started) * 1000
            elif op in UPLOADING or op == "mapAsync":
                reading = op == "mapAsync" and entry["mode"] & MAP_READ
                if reading:
                    self.wait_idle()
                started = time.perf_counter()
                try:
                    answer = OPERATIONS[entry["op"]](self, entry, blob)
                finally:
                    ms = (time.perf_counter() - started) * 1000
                    if reading:
                        self.readback_ms += ms
                        self.last_read = time.perf_counter()
                    else:
                        self.upload_ms += ms
            else:
                answer = OPERATIONS[entry["op"]](self, entry, blob)
        except wgpu.GPUValidationError as e:
            text = clean_wgpu_error(str(e))
            raise HostError("validation", text, entry, str(e)) from None
        except ValueError as e:  # wgpu-py refuses some arguments before wgpu-native sees them
            raise HostError("validation", str(e), entry, str(e)) from None
        if op in MAKES:
            self.kinds[entry["id"]] = MAKES[op]
        return answer

    def data(
        self, entry: Entry, index: int, blob: Blob, buffer: int, offset: int
    ) -> bytes | memoryview:
        """The bytes a call handed over, checked to fit the buffer they go into."""
        data = blob(index)
        if data is None:
            raise HostError("record", "the call could not be replayed: its data is missing.", entry)
        size = self.made_sizes[buffer]
        if offset + len(data) > size:
            raise HostError(
                "validation",
                f"Writing {len(data):,} bytes at offset {offset:,} runs past the end of buffer "
                f"{self.names[buffer]} ({size:,} bytes).",
                entry,
            )
        return data

    def release(self) -> None:
        if self.capture is not None:
            self.captured(self.capture.read_all)
            self.captured(self.capture.release, True)
        if self.inputs is not None and self.kept is not None:
            keep, spoiled = self.inputs.settled()
            self.resident |= keep
            for buffer, dropped in spoiled.items():
                if buffer in self.prefilled:
                    self.kept.drop(dropped)
        for key, size in self.sizes.items():
            if not size:
                continue
            if key in self.resident and key not in self.prefilled and self.kept is not None:
                # Made and filled in this run: kept from now on, unless it cannot be.
                _, kept = self.kept.get(
                    self.resident[key], size, functools.partial(self.objects.get, key)
                )
                if kept:
                    continue
            if key not in self.prefilled:
                self.objects[key].destroy()

    # -- adapter, device --------------------------------------------------------------------

    def op_requestAdapter(self, entry: Entry, blob: Blob) -> dict[str, Any]:
        return dict(self.memo(("device answer",), self.device_answer))

    def op_requestDevice(self, entry: Entry, blob: Blob) -> dict[str, Any]:
        return dict(self.memo(("device answer",), self.device_answer))

    def device_answer(self) -> dict[str, Any]:
        limits = {_camel(k): v for k, v in self.device.limits.items()}
        info = {
            "vendor": self.env.adapter,
            "architecture": self.env.backend,
            "device": self.env.adapter,
            "description": self.env.description,
        }
        # Without the replay's own timestamp queries: the shim has no query sets.
        features = sorted(self.device.features - {TIMESTAMPS})
        return {"features": features, "limits": limits, "info": info}

    def op_popErrorScope(self, entry: Entry, blob: Blob) -> dict[str, Any]:
        return {}

    def op_onSubmittedWorkDone(self, entry: Entry, blob: Blob) -> dict[str, Any]:
        self.wait_idle()
        return {}

    def wait_idle(self) -> None:
        """Wait for the work submitted so far; wgpu-native frees destroyed buffers then."""
        wait_for_queue(self.device)

    def op_destroyDevice(self, entry: Entry, blob: Blob) -> None:
        return None

    # -- buffers ----------------------------------------------------------------------------

    def op_createBuffer(self, entry: Entry, blob: Blob) -> None:
        size, usage = entry["size"], entry["usage"]
        name = self.name(entry, "buffer")
        self.within("max_buffer_bytes", f"Buffer {name}", size, entry)
        self.within(
            "max_total_bytes",
            f"With buffer {name}, the total size of all buffers",
            self.live_bytes + size,
            entry,
        )
        wanted = self.sentinel is True or (
            not isinstance(self.sentinel, bool) and name in self.sentinel
        )
        fill = wanted and bool(usage & STORAGE) and size % 4 == 0
        if self.capture is not None and usage & STORAGE and not usage & (MAP_READ | MAP_WRITE):
            usage |= COPY_SRC  # copied after each pass that writes it; WebGPU allows it
        key = self.resident.get(entry["id"])
        if key is not None and self.kept is not None and key in self.kept.kept:
            buf, _ = self.kept.get(key, size, lambda: None)
            self.prefilled.add(entry["id"])
        else:
            buf = self.device.create_buffer(
                label=name,
                size=size,
                usage=usage,
                mapped_at_creation=entry["mappedAtCreation"] or fill,
            )
        if fill and entry["id"] not in self.prefilled:
            buf.write_mapped(np.full(size // 4, SENTINEL_WORD, dtype=np.uint32))
            if not entry["mappedAtCreation"]:
                buf.unmap()
        self.objects[entry["id"]], self.names[entry["id"]] = buf, name
        self.sizes[entry["id"]] = self.made_sizes[entry["id"]] = size
        self.live_bytes += size
        traces.append(
            self.trace,
            "buffers",
            {
                "name": name,
                "size": size,
                "usage": traces.usage_names(entry["usage"]),
                "mapped_at_creation": entry["mappedAtCreation"],
                "line": entry["line"],
            },
        )

    def op_writeBuffer(self, entry: Entry, blob: Blob) -> None:
        data = self.data(entry, entry["blob"], blob, entry["buffer"], entry["offset"])
        if self.inputs is not None:
            # A program's: only the write that a kept buffer holds already is not made. The
            # file's own bytes stand for it from here (equal, and immutable: not copied).
            file = self.input_written(entry["buffer"], entry["offset"], data)
            held, data = file is not None, data if file is None else file
        else:
            # A harness's resident input, written once, held from an earlier run.
            held = entry["buffer"] in self.prefilled
        if not held:
            self.device.queue.write_buffer(self.objects[entry["buffer"]], entry["offset"], data)
        self.remember(entry["buffer"], entry["offset"], data)
        self.trace_write(entry, entry["buffer"], entry["offset"], data, entry["dtype"])

    def input_written(self, buffer: int, offset: int, data: bytes | memoryview) -> bytes | None:
        """A write that may be a program's input: bound from the kept buffer that holds it
        already, where one does (the one made for it is unused so far); the fetched file it
        holds where it was, else None."""
        assert self.inputs is not None and self.kept is not None
        made = self.objects[buffer]
        key = self.inputs.written(
            buffer, offset, data, self.made_sizes[buffer], made.usage, self.names[buffer]
        )
        if key is not None:
            self.objects[buffer], _ = self.kept.get(key, len(data), lambda: None)
            self.prefilled.add(buffer)
            made.destroy()
            return self.inputs.fetched[key[1]]
        return None

    def remember(self, buffer: int, offset: int, data: bytes | memoryview) -> None:
        """Keep what the host put in buffer, in a whole copy of it: up to MAX_SHADOW_BYTES a
        buffer and MAX_SHADOWS_BYTES in all (40 uniforms of 128 MiB would take 5 GiB)."""
        if not self.shadows:
            return
        shadow = self.written.get(buffer)
        if shadow is None:
            size = self.made_sizes[buffer]
            if size > MAX_SHADOW_BYTES or self.shadowed + size > MAX_SHADOWS_BYTES:
                return
            self.shadowed += size
            if offset == 0 and len(data) >= size:
                # The whole buffer at once, the usual upload: one copy of it, not a zeroed
                # buffer written over (7 ms of a 4 MB upload's 33 ms on llvmpipe's host).
                self.written[buffer] = bytes(data[:size])
                return
            shadow = self.written[buffer] = bytearray(size)
        elif isinstance(shadow, bytes):
            shadow = self.written[buffer] = bytearray(shadow)  # written again: in place now
        # Cut to the buffer: a copy WebGPU refuses at finish() is traced before then.
        data = data[: max(0, len(shadow) - offset)]
        shadow[offset : offset + len(data)] = data

    def trace_write(
        self, entry: Entry, buffer: int, offset: int, data: bytes | memoryview, dtype: str
    ) -> None:
        traces.append(
            self.trace,
            "writes",
            {
                "buffer": self.names[buffer],
                "offset": offset,
                "size": len(data),
                "dtype": dtype,
                "values": traces.values_of(data, "u8" if dtype == "bytes" else dtype),
                "line": entry["line"],
            },
        )

    def op_unmap(self, entry: Entry, blob: Blob) -> None:
        buf = self.objects[entry["buffer"]]
        if buf.map_state == "unmapped":  # WebGPU ignores unmapping a buffer that is not mapped
            return
        if self.inputs is not None and entry["ranges"]:
            self.inputs.spoil(entry["buffer"])
        for mapped in entry["ranges"]:
            data = self.data(entry, mapped["blob"], blob, entry["buffer"], mapped["offset"])
            buf.write_mapped(data, mapped["offset"])
            self.remember(entry["buffer"], mapped["offset"], data)
            dtype = self.views.get(entry["buffer"], "bytes")
            self.trace_write(entry, entry["buffer"], mapped["offset"], data, dtype)
        buf.unmap()

    def op_destroyBuffer(self, entry: Entry, blob: Blob) -> None:
        if self.inputs is not None:
            self.inputs.spoil(entry["buffer"])
        if entry["buffer"] not in self.prefilled:  # a kept one goes when the run is settled
            self.objects[entry["buffer"]].destroy()
        self.live_bytes -= self.sizes[entry["buffer"]]
        if self.sizes[entry["buffer"]] >= FREED_AT_ONCE:
            # Freed now, as a browser lets a program count on: a program that makes and
            # destroys 128 MiB buffers in a loop ran out of the worker's memory at the 22nd.
            self.wait_idle()
        self.sizes[entry["buffer"]] = 0

    def op_mapAsync(self, entry: Entry, blob: Blob) -> tuple[dict[str, Any], bytes]:
        if self.inputs is not None:
            self.inputs.spoil(entry["buffer"])
        buf, mode = self.objects[entry["buffer"]], entry["mode"]
        offset, size = entry["offset"], entry["size"]
        if size == 0 or offset + size > self.made_sizes[entry["buffer"]]:
            raise HostError(
                "validation",
                f"mapAsync: the range of {size:,} bytes at offset {offset:,} is empty or runs "
                f"past the end of buffer {self.names[entry['buffer']]} "
                f"({self.made_sizes[entry['buffer']]:,} bytes).",
                entry,
            )
        if mode & MAP_READ:
            self.readback_bytes += size
            what = "The size of the buffers read back"
            self.within("max_readback_bytes", what, self.readback_bytes, entry)
        # A read waited for the queue first (apply), which its pending writes need.
        map_now(buf, write=not mode & MAP_READ, offset=offset, size=size)
        if not mode & MAP_READ:
            # A write mapping starts from zeros here: the program is about to fill it.
            return {"size": size}, bytes(size)
        # One copy, out of the mapped range (read_mapped's own copy would be a second).
        data = bytes(buf.read_mapped(offset, size, copy=False))
        readback = Readback(
            buffer=self.names[entry["buffer"]],
            source=self.copied_from.get(entry["buffer"], ""),
            offset=offset,
            data=data,
            dtype="f32" if size % 4 == 0 else "u8",
            viewed=False,
            line=entry["line"],
        )
        self.readbacks.append(readback)
        traces.append(self.trace, "readbacks", self.traced_readback(readback))
        return {"size": size}, data

    def op_view(self, entry: Entry, blob: Blob) -> None:
        """The program made a typed array on a mapped range: that is how it reads it."""
        self.views[entry["buffer"]] = entry["dtype"]
        name, size = self.names[entry["buffer"]], traces.itemsize(entry["dtype"])
        for index in range(len(self.readbacks) - 1, -1, -1):
            readback = self.readbacks[index]
            if readback.buffer == name:
                if not readback.viewed and len(readback.data) % size == 0:
                    readback.dtype, readback.viewed = entry["dtype"], True
                    if index < len(self.trace["readbacks"]):
                        self.trace["readbacks"][index] = self.traced_readback(readback)
                break

    def traced_readback(self, readback: Readback) -> traces.TracedReadback:
        return {
            "buffer": readback.buffer,
            "source": readback.source,
            "offset": readback.offset,
            "size": len(readback.data),
            "dtype": readback.dtype,
            "values": traces.values_of(readback.data, readback.dtype),
            "line": readback.line,
        }

    # -- shaders, pipelines, bind groups ------------------------------------------------------

    def op_createShaderModule(self, entry: Entry, blob: Blob) -> None:
        wgpu = import_wgpu()
        name = self.name(entry, "module")
        digest = hashlib.sha256(entry["code"].encode()).hexdigest()
        make = functools.partial(self.device.create_shader_module, label=name, code=entry["code"])
        try:
            module = self.memo(("module", digest, name), make)
        except wgpu.GPUValidationError as e:
            raise self.compile_error(entry, parse_compile_error(name, str(e))) from None
        # What Chrome refuses and naga does not; read once per source.
        refused = self.memo(
            ("refusal", digest, name), functools.partial(module_refusal, name, entry["code"])
        )
        if refused:
            raise self.compile_error(entry, cast(CompileError, dict(refused)))
        self.objects[entry["id"]], self.names[entry["id"]] = module, name
        self.sources[entry["id"]], self.digests[entry["id"]] = entry["code"], digest
        traced: traces.TracedModule = {
            "name": name,
            "bytes": len(entry["code"].encode()),
            "line": entry["line"],
        }
        if len(entry["code"]) <= min(traces.MAX_MODULE_CODE, self.code_left):
            traced["code"] = entry["code"]
            self.code_left -= len(entry["code"])
        traces.append(self.trace, "modules", traced)

    def compile_error(self, entry: Entry, info: CompileError) -> HostError:
        """A module that does not compile, named as a browser's console names it: the
        createShaderModule call (the error's line), then the WGSL line and message. A
        module whose code is the version's own WGSL is the kernel ("self"), so its page
        marks the line in the source it shows."""
        own = self.files.get(VERSION_WGSL)
        if own is not None and entry["code"].encode() == own:
            info["kernel"] = "self"
        which = f"shader module '{entry['label']}'" if entry.get("label") else "shader module"
        where = f" at WGSL line {info['line']}, column {info['column']}" if info["line"] else ""
        message = f"The {which} does not compile{where}: {info['message']}"
        return HostError("compile", message, entry, info["text"], compile=info)

    def op_getCompilationInfo(self, entry: Entry, blob: Blob) -> dict[str, Any]:
        # A module that did not compile stopped the replay at createShaderModule.
        return {"messages": []}

    def op_createComputePipeline(self, entry: Entry, blob: Blob) -> None:
        stage = entry["compute"]
        compute: dict[str, Any] = {"module": self.objects[stage["module"]]}
        if stage["entryPoint"] is not None:
            compute["entry_point"] = stage["entryPoint"]
        if stage["constants"]:
            compute["constants"] = stage["constants"]
        layout = entry["layout"]
        name = self.name(entry, "pipeline")
        make = functools.partial(
            self.device.create_compute_pipeline,
            label=name,
            layout="auto" if layout == "auto" else self.objects[layout],
            compute=compute,
        )
        if layout == "auto":
            module = stage["module"]
            constants = tuple(sorted(stage["constants"].items()))
            key = (self.digests[module], self.names[module], stage["entryPoint"], constants, name)
            pipeline = self.memo(("pipeline", *key), make)
        else:
            pipeline = make()
        source = self.sources[stage["module"]]
        if text := pipeline_refusal(source, stage["entryPoint"], self.device.limits):
            raise HostError("validation", text, entry)
        self.objects[entry["id"]], self.names[entry["id"]] = pipeline, name
        self.pipeline_stage[entry["id"]] = (stage["module"], stage["entryPoint"])
        traces.append(
            self.trace,
            "pipelines",
            {
                "name": name,
                "module": self.names[stage["module"]],
                "entry_point": stage["entryPoint"] or "",
                "layout": "auto" if layout == "auto" else self.names[layout],
                "line": entry["line"],
            },
        )

    def op_getBindGroupLayout(self, entry: Entry, blob: Blob) -> None:
        pipeline = self.objects[entry["pipeline"]]
        self.objects[entry["id"]] = pipeline.get_bind_group_layout(entry["index"])
        self.names[entry["id"]] = (
            f"{self.names[entry['pipeline']]}.getBindGroupLayout({entry['index']})"
        )

    def op_createBindGroupLayout(self, entry: Entry, blob: Blob) -> None:
        entries = [
            {
                "binding": e["binding"],
                "visibility": e["visibility"],
                "buffer": {
                    "type": e["buffer"]["type"],
                    "has_dynamic_offset": e["buffer"]["hasDynamicOffset"],
                    "min_binding_size": e["buffer"]["minBindingSize"],
                },
            }
            for e in entry["entries"]
        ]
        name = self.name(entry, "bind group layout")
        self.objects[entry["id"]] = self.device.create_bind_group_layout(
            label=name, entries=entries
        )
        self.names[entry["id"]] = name

    def op_createPipelineLayout(self, entry: Entry, blob: Blob) -> None:
        layouts = [self.objects[i] for i in entry["bindGroupLayouts"]]
        name = self.name(entry, "pipeline layout")
        self.objects[entry["id"]] = self.device.create_pipeline_layout(
            label=name, bind_group_layouts=layouts
        )
        self.names[entry["id"]] = name

    def op_createBindGroup(self, entry: Entry, blob: Blob) -> None:
        name = self.name(entry, "bind group")
        traced = [
            {
                "binding": e["binding"],
                "buffer": self.names[e["buffer"]],
                "offset": e["offset"],
                "size": e["size"],
            }
            for e in entry["entries"][: traces.MAX_GROUP_ENTRIES]
        ]
        if len(entry["entries"]) > traces.MAX_GROUP_ENTRIES:
            traces.drop(self.trace, "bind group entries", len(entry["entries"]) - len(traced))
        # Traced before it is made: one WebGPU refuses is the last, drawn with the error.
        traces.append(
            self.trace,
            "bind_groups",
            {
                "name": name,
                "entries": traced,
                "line": entry["line"],
                "layout": self.names.get(entry["layout"], ""),
            },
        )
        entries = []
        for e in entry["entries"]:
            resource = {"buffer": self.objects[e["buffer"]], "offset": e["offset"]}
            if e["size"] is not None:
                resource["size"] = e["size"]
            entries.append({"binding": e["binding"], "resource": resource})
        self.objects[entry["id"]] = self.device.create_bind_group(
            label=name, layout=self.objects[entry["layout"]], entries=entries
        )
        self.names[entry["id"]] = name
        self.group_bytes[entry["id"]] = sum(
            e["size"] if e["size"] is not None else self.made_sizes[e["buffer"]] - e["offset"]
            for e in entry["entries"]
        )
        self.group_buffers[entry["id"]] = {e["binding"]: e["buffer"] for e in entry["entries"]}
        if self.inputs is not None:
            self.inputs.touch(e["buffer"] for e in entry["entries"])
        if self.capture is not None:
            self.capture.bind_group(entry["id"], entry["entries"])

    # -- command encoders -------------------------------------------------------------------

    def op_createCommandEncoder(self, entry: Entry, blob: Blob) -> None:
        gpu = self.device.create_command_encoder(label=self.name(entry, "encoder"))
        self.encoders[entry["id"]] = Encoder(gpu)

    def encode_call(self, entry: dict[str, Any]) -> None:
        wgpu = import_wgpu()
        encoder = self.encoders[entry["encoder"]]
        encoder.entries.append(entry)
        if entry["op"] == "setPipeline":
            encoder.pipeline_id = entry["pipeline"]
        elif entry["op"] == "setBindGroup":
            encoder.bound[entry["index"]] = entry["group"]
        if entry["op"] == "dispatchWorkgroups":
            self.check_dispatch(encoder, entry)
        if self.inputs is not None:
            self.inputs_used(encoder, entry)
        writes = None
        if entry["op"] == "beginComputePass":
            index = len(self.passes) if len(self.passes) < MAX_PASSES else None
            writes = self.clock.writes(encoder.clock, index)
        elif entry["op"] == "finish":
            self.clock.resolve(encoder.clock, encoder.gpu)
        try:
            done = encode(encoder, entry, self.objects, writes)
        except wgpu.GPUValidationError as e:
            culprit = first_failing(self.device, encoder.entries, self.objects)
            copied = self.capture is not None and entry["encoder"] in self.capture.staged
            if culprit is None and copied and entry["op"] == "finish" and self.capture:
                # Only the capture's copies failed: the program's calls, without them.
                self.captured(functools.partial(self.capture.drop, entry["encoder"]), True)
                done = self.encode_again(encoder)
            else:
                text = clean_wgpu_error(str(e))
                raise HostError("validation", text, culprit or entry, str(e)) from None
        if entry["op"] == "finish":
            self.objects[entry["id"]] = done
            self.finished[entry["id"]] = encoder
        passes = len(self.passes)
        self.trace_call(encoder, entry)
        if self.capture is not None:
            self.captured(functools.partial(self.capture_call, encoder, entry, passes))

    def inputs_used(self, encoder: Encoder, entry: dict[str, Any]) -> None:
        """What an encoder call may do to a program's inputs (before it is encoded)."""
        assert self.inputs is not None
        op = entry["op"]
        if op == "copyBufferToBuffer":
            self.inputs.touch([entry["source"]])
            self.inputs.spoil(entry["destination"])
        elif op == "clearBuffer":
            self.inputs.spoil(entry["buffer"])
        elif op == "dispatchWorkgroups":
            module, entry_point = self.pipeline_stage.get(encoder.pipeline_id or -1, (-1, None))
            bound = {
                index: self.group_buffers.get(group, {})
                for index, group in encoder.bound.items()
                if group is not None
            }
            if module in self.sources:
                self.inputs.dispatch(self.sources[module], entry_point or "", bound)
            else:  # a pipeline not replayed here: anything it binds may be written
                for buffers in bound.values():
                    for buffer in buffers.values():
                        self.inputs.spoil(buffer)

    def encode_again(self, encoder: Encoder) -> Any:
        again = Encoder(self.device.create_command_encoder(label="encoder"))
        for entry in encoder.entries:
            done = encode(again, entry, self.objects)
        return done

    def capture_call(self, encoder: Encoder, entry: Entry, passes: int) -> None:
        """What the capture follows of an encoder call (passes: those listed before it)."""
        assert self.capture is not None
        op, key = entry["op"], entry["encoder"]
        if op == "beginComputePass":
            self.capture.begin_pass(key, len(self.passes) if len(self.passes) > passes else None)
        elif op == "setBindGroup":
            self.capture.set_bind_group(key, entry["index"], entry["group"])
        elif op == "dispatchWorkgroups" and encoder.pipeline_id in self.pipeline_stage:
            module, entry_point = self.pipeline_stage[encoder.pipeline_id]
            self.capture.dispatch(key, self.sources[module], entry_point or "")
        elif op == "endPass":
            self.capture.end_pass(key, encoder.gpu, self.names, self.sizes, self.objects)
        elif op == "finish":
            self.capture.finish(key, entry["id"])

    def captured(self, step: Callable[[], Any], always: bool = False) -> None:
        """A step of the capture, which never stops a run: a failure ends the capture (its
        copies already encoded stay valid: their staging buffers are kept to the end)."""
        if self.capture is None or (self.capture.failed and not always):
            return
        try:
            step()
        except Exception as e:  # the run goes on without its capture; the log says why
            log.exception("the capture of a run failed")
            self.capture.failed = f"{type(e).__name__}: {e}"
            self.capture.read.clear()

    def check_dispatch(self, encoder: Encoder, entry: dict[str, Any]) -> None:
        counts = entry["workgroups"]
        for axis, count in zip("xyz", counts, strict=True):
            self.within("max_workgroups_per_dim", f"The dispatch in {axis}", count, entry)
        pipeline = encoder.pipeline_id
        if pipeline in self.pipeline_stage:
            if pipeline not in self.group_sizes:
                module, entry_point = self.pipeline_stage[pipeline]
                self.group_sizes[pipeline] = workgroup_size(self.sources[module], entry_point or "")
            self.invocations += math.prod(counts) * self.group_sizes[pipeline]
        what = "The number of invocations (workgroups times workgroup size, all dispatches)"
        self.within("max_invocations", what, self.invocations, entry)

    def within(self, cap: str, what: str, value: int, entry: Entry) -> None:
        """Stop at entry when value passes the cap (limits.over has the words)."""
        if problem := over(self.limits, cap, what, value):
            raise HostError("limit", f"{problem}.", entry)

    def trace_call(self, encoder: Encoder, entry: dict[str, Any]) -> None:
        op = entry["op"]
        if op == "beginComputePass" and len(self.passes) < MAX_PASSES:
            number = len(self.passes) + 1
            name = entry["label"] or f"pass {number}"
            self.passes.append(
                {"number": number, "name": name, "line": entry["line"], "dispatches": 0, "bytes": 0}
            )
        if op == "beginComputePass":
            encoder.group_bytes = {}  # a pass starts with nothing bound
        elif op == "setBindGroup":
            if entry["group"] is None:
                encoder.group_bytes.pop(entry["index"], None)
            else:
                encoder.group_bytes[entry["index"]] = self.group_bytes[entry["group"]]
        if op == "dispatchWorkgroups" and self.passes:
            self.passes[-1]["dispatches"] += 1
            # What the dispatch must move at least: each range it binds, once.
            self.passes[-1]["bytes"] = self.passes[-1].get("bytes", 0) + sum(
                encoder.group_bytes.values()
            )
        if op == "beginComputePass":
            encoder.traced_pass = {
                "name": entry["label"] or f"pass {len(self.trace['passes']) + 1}",
                "dispatches": [],
                "line": entry["line"],
            }
            traces.append(self.trace, "passes", encoder.traced_pass)
        elif op == "setPipeline":
            encoder.pipeline = self.names[entry["pipeline"]]
        elif op == "setBindGroup" and entry["group"] is not None:
            if entry["index"] < traces.MAX_BIND_GROUPS:
                encoder.bind_groups[str(entry["index"])] = self.names[entry["group"]]
        elif op == "dispatchWorkgroups":
            self.dispatches += 1
            dispatches = encoder.traced_pass["dispatches"] if encoder.traced_pass else []
            if self.dispatches > traces.MAX_DISPATCHES:
                traces.drop(self.trace, "dispatches")
            elif len(dispatches) < traces.MAX_ENTRIES:
                dispatches.append(
                    {
                        "pipeline": encoder.pipeline,
                        "bind_groups": dict(encoder.bind_groups),
                        "workgroups": list(entry["workgroups"]),
                        "line": entry["line"],
                    }
                )
        elif op == "copyBufferToBuffer":
            self.copied_from[entry["destination"]] = self.names[entry["source"]]
            if entry["source"] in self.written:
                start, size = entry["sourceOffset"], entry["size"]
                data = self.written[entry["source"]][start : start + size]
                self.remember(entry["destination"], entry["destinationOffset"], bytes(data))
            traces.append(
                self.trace,
                "copies",
                {
                    "source": self.names[entry["source"]],
                    "source_offset": entry["sourceOffset"],
                    "destination": self.names[entry["destination"]],
                    "destination_offset": entry["destinationOffset"],
                    "size": entry["size"],
                    "line": entry["line"],
                },
            )

    def op_submit(self, entry: Entry, blob: Blob) -> None:
        if self.first_submit is None:
            self.first_submit = time.perf_counter()
        self.device.queue.submit([self.objects[i] for i in entry["commandBuffers"]])
        self.trace["submits"] += 1
        for i in entry["commandBuffers"]:
            self.clock.submit(self.finished[i].clock)
            self.ran.append(self.finished[i])
        if self.capture is not None:
            self.captured(functools.partial(self.capture.submit, entry["commandBuffers"]))

    # -- timing -------------------------------------------------------------------------------

    def program_ms(self) -> float | None:
        """From the first submit to the end of the last readback, in ms: what a program
        waited for the device, its round trips included; None without both."""
        if self.first_submit is None or self.last_read < self.first_submit:
            return None
        return (self.last_read - self.first_submit) * 1000

    def time_passes(self, repeat: bool = False) -> int:
        """Read the passes' timestamps and set each pass's gpu_ms; return how many runs
        each is the median of. repeat: a run whose passes took under CHEAP_MS is run
        REPEATS - 1 times more (the passes of the submitted encoders encoded again as
        recorded, in the same order, into one encoder submitted once). Call it once the
        outputs are read (a repeat changes what a pass writes in place) and before
        release()."""
        self.clock.collect()
        repeats = 1
        total = sum(self.clock.median(i) or 0.0 for i in range(len(self.passes)))
        if repeat and self.clock.available and self.ran and total < CHEAP_MS:
            repeats = REPEATS
            # One encoder and one wait for all the repeats: each would cost a wait of its own.
            again = Encoder(self.device.create_command_encoder(label="repeats"))
            for _ in range(repeats - 1):
                for recorded in self.ran:
                    begun = 0
                    for entry in recorded.entries:
                        if entry["op"] in ("copyBufferToBuffer", "clearBuffer", "finish"):
                            continue  # only passes are timed; a copy's target may be mapped
                        writes = None
                        if entry["op"] == "beginComputePass":
                            index = recorded.clock.begins[begun]
                            writes, begun = self.clock.writes(again.clock, index), begun + 1
                        encode(again, entry, self.objects, writes)
            self.clock.resolve(again.clock, again.gpu)
            self.device.queue.submit([again.gpu.finish()])
            self.clock.submit(again.clock)
            self.clock.collect()
        for index, record in enumerate(self.passes):
            record["gpu_ms"] = self.clock.median(index)
        return repeats

    # -- files --------------------------------------------------------------------------------

    def op_fetch(self, entry: Entry, blob: Blob) -> tuple[dict[str, Any], bytes] | dict[str, Any]:
        url = entry["url"]
        name = attached_name(url, self.files)
        if name is None:
            # A browser's TypeError says only "Failed to fetch"; its console names the URL.
            why = (
                "a replay reaches no network, only the files attached to its session"
                if is_remote(url)
                else "no file of that name is attached to the session"
            )
            return {"failed": f"Failed to fetch {url}: {why}"}
        data = self.files[name]
        return {"url": entry["url"], "size": len(data)}, data

    def name(self, entry: dict[str, Any], kind: str) -> str:
        """The object's label; for a buffer, else the variable it goes by in the program,
        once (the outputs and the trace are named by it); else its kind and number."""
        self.counts[kind] = self.counts.get(kind, 0) + 1
        if kind == "buffer" and not entry.get("label"):
            names = assigned_variables(self.lines, entry.get("line"), entry.get("caller"))
            if free := [name for name in names if name not in self.names.values()]:
                return free[0]
        return entry.get("label") or f"{kind} {self.counts[kind]}"


# The method that replays each operation that is not an encoder's (encoder.py runs those).
OPERATIONS: dict[str, Callable[[Timeline, Entry, Blob], Any]] = {
    "requestAdapter": Timeline.op_requestAdapter,
    "requestDevice": Timeline.op_requestDevice,
    "popErrorScope": Timeline.op_popErrorScope,
    "onSubmittedWorkDone": Timeline.op_onSubmittedWorkDone,
    "getCompilationInfo": Timeline.op_getCompilationInfo,
    "fetch": Timeline.op_fetch,
    "mapAsync": Timeline.op_mapAsync,
    "destroyDevice": Timeline.op_destroyDevice,
    "createBuffer": Timeline.op_createBuffer,
    "writeBuffer": Timeline.op_writeBuffer,
    "unmap": Timeline.op_unmap,
    "destroyBuffer": Timeline.op_destroyBuffer,
    "view": Timeline.op_view,
    "createShaderModule": Timeline.op_createShaderModule,
    "createComputePipeline": Timeline.op_createComputePipeline,
    "getBindGroupLayout": Timeline.op_getBindGroupLayout,
    "createBindGroupLayout": Timeline.op_createBindGroupLayout,
    "createPipelineLayout": Timeline.op_createPipelineLayout,
    "createBindGroup": Timeline.op_createBindGroup,
    "createCommandEncoder": Timeline.op_createCommandEncoder,
    "submit": Timeline.op_submit,
}


def attached_name(url: str, files: Mapping[str, bytes]) -> str | None:
    """The attached file a program's relative URL names, or None (anything with a scheme,
    or a name that is not attached, fails as fetch does offline)."""
    if is_remote(url):
        return None
    path = url.split("#", 1)[0].split("?", 1)[0]
    while path.startswith(("./", "/")):
        path = path[1:] if path.startswith("/") else path[2:]
    if path in files:
        return path
    base = path.rsplit("/", 1)[-1]
    matches = [name for name in files if name.rsplit("/", 1)[-1] == base]
    return matches[0] if len(matches) == 1 else None


def is_remote(url: str) -> bool:
    return "://" in url or url.startswith(("data:", "blob:", "//"))


def _camel(name: str) -> str:
    head, *rest = name.split("-")
    return head + "".join(part.capitalize() for part in rest)
