"""A harness compiled to the WebGPU host program it stands for: readable JavaScript, and the
calls that JavaScript makes, recorded as the shim records a program's (record.SCHEMA).

A version without a host program replays under its harness. Its run is this program's
calls, replayed by the same executor as any program's (kernels/engine/host/gpu.py), so the
code a page shows for a harness is the code that ran, line for line: each call's entry
names the line of the code that makes it. One buffer per bound harness buffer (written from
the host where the harness fills it), a shader module per kernel, an "auto" pipeline per
entry point, a bind group per pass and group holding the bindings the entry point uses, a
compute pass per harness pass, and a copy into a mappable buffer and mapAsync per buffer
read back.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kernels.engine.analysis import used_bindings
from kernels.engine.harness import Binding, Buffer, Harness
from kernels.engine.host.gpu import VERSION_WGSL, Entry
from kernels.engine.inputs import struct_layouts
from kernels.engine.layout import LayoutError, StructLayout
from kernels.engine.limits import readback_names
from kernels.engine.outcome import Stop
from kernels.engine.store_counts import Instrumented
from kernels.engine.wgsl import parse, workgroup_dimensions

NP_TYPES = {"f32": np.float32, "u32": np.uint32, "i32": np.int32}
ARRAYS = {"f32": "Float32Array", "u32": "Uint32Array", "i32": "Int32Array"}
UNIFORM, STORAGE, COPY_SRC, COPY_DST, MAP_READ = 0x40, 0x80, 0x4, 0x8, 0x1
USAGES = {
    "uniform": ("UNIFORM", "COPY_DST"),
    "read": ("STORAGE", "COPY_SRC", "COPY_DST"),
    "read_write": ("STORAGE", "COPY_SRC", "COPY_DST"),
}
FLAGS = {"UNIFORM": UNIFORM, "STORAGE": STORAGE, "COPY_SRC": COPY_SRC, "COPY_DST": COPY_DST}
# Literal values written out in full up to this many; longer data is summarised.
SHOWN_VALUES = 16
COUNTERS = "storeCounts"
RESERVED = {
    "adapter", "device", "encoder", "module", "pass", "pipeline", "wgsl", "await", "break",
    "case", "catch", "class", "const", "continue", "default", "delete", "do", "else",
    "export", "extends", "false", "finally", "for", "function", "if", "import", "in",
    "instanceof", "let", "new", "null", "return", "super", "switch", "this", "throw",
    "true", "try", "typeof", "var", "void", "while", "with", "yield",
}  # fmt: skip


@dataclass(frozen=True)
class Counting:
    """Run the passes up to pass `number`, its kernel the counting copy (store_counts.py)."""

    number: int
    copy: Instrumented


@dataclass
class Unused:
    """A binding the harness gives that its pass's entry point does not use: left out."""

    number: int  # the pass, from 1
    kernel: str
    group: int
    binding: int
    buffer: str


@dataclass
class HarnessHost:
    """The program: its code, and the calls that code makes (their data in blobs, by index).

    reads: each buffer read back, by harness name -> the indexes of its mapAsync and view
    entries; submit: the index of the submit entry; inputs: buffer id -> harness name for
    the buffers the host fills and no pass may write (a worker may keep them on its device);
    what: code line -> which part of the harness the call there stands for (messages)."""

    code: str
    entries: list[Entry] = field(default_factory=list)
    blobs: list[bytes | memoryview] = field(default_factory=list)
    reads: dict[str, list[int]] = field(default_factory=dict)
    submit: int = -1
    inputs: dict[int, str] = field(default_factory=dict)
    unused: list[Unused] = field(default_factory=list)
    what: dict[int, tuple[Any, ...]] = field(default_factory=dict)
    buffers: dict[str, int] = field(default_factory=dict)  # harness name -> buffer id
    counting: str = ""  # the counting copy's WGSL, fetched as counting.wgsl

    def blob(self, index: int) -> bytes | memoryview | None:
        return self.blobs[index] if 0 <= index < len(self.blobs) else None

    def fresh_entries(self) -> list[Entry]:
        """The calls, copied: the executor writes into an entry as it replays it."""
        return [dict(entry) for entry in self.entries]


@dataclass
class _Writer:
    host: HarnessHost
    lines: list[str] = field(default_factory=list)
    ids: int = 0
    requests: int = 0

    def add(self, text: str = "") -> int:
        """Append a line; its 1-based number."""
        self.lines.append(text)
        return len(self.lines)

    def call(self, op: str, line: int, what: tuple[Any, ...] = (), /, **fields: Any) -> int:
        """Record the call made at line; its new object id when it makes one."""
        entry: Entry = {"op": op, "line": line, **fields}
        if "id" in fields:
            self.ids += 1
            entry["id"] = self.ids
        if "request" in fields:
            self.requests += 1
            entry["request"] = self.requests
        if what:
            self.host.what[line] = what
        self.host.entries.append(entry)
        return self.ids

    def blob(self, data: bytes | memoryview) -> int:
        self.host.blobs.append(data)
        return len(self.host.blobs) - 1


def harness_host(
    harness: Harness,
    sources: Mapping[str, str],
    kernel: str = "kernel",
    host: Mapping[str, np.ndarray] | None = None,
    writable: set[str] | None = None,
    counting: Counting | None = None,
) -> HarnessHost:
    """The host program of a harness (one case's: Harness.for_case). sources maps kernel
    names to WGSL ("self" is the kernel replayed, fetched as kernel.wgsl); kernel names it in
    comments. host: the buffers' contents (inputs.make_inputs), which the writes carry; None
    for the code alone. writable: the buffers a pass may write (resident.writable_buffers),
    never kept between runs. counting: the store-counting run instead of the harness's."""
    out = _Writer(HarnessHost(""))
    out.add(f"// The harness of {kernel}, written out as the WebGPU host code it stands for.")
    out.call(
        "requestAdapter",
        out.add("const adapter = await navigator.gpu.requestAdapter();"),
        request=0,
    )
    out.call("requestDevice", out.add("const device = await adapter.requestDevice();"), request=0)
    passes = list(harness.passes)
    if counting is not None:
        passes = passes[: counting.number]
    modules = _modules(out, passes, sources, counting)
    variables = _buffers(out, harness, sources, host, writable)
    if counting is not None:
        _counters(out, counting, variables)
        out.host.counting = counting.copy.source
    pipelines = _pipelines(out, passes, modules, counting)
    _passes(out, harness, passes, sources, variables, pipelines, counting)
    out.host.code = "\n".join(out.lines) + "\n"
    return out.host


def _modules(
    out: _Writer, passes: list[Any], sources: Mapping[str, str], counting: Counting | None
) -> dict[tuple[str, bool], tuple[str, int]]:
    """A shader module per kernel the passes run (and the counting copy); (kernel, counting)
    -> its variable and id."""
    names: dict[tuple[str, bool], tuple[str, int]] = {}
    for number, p in enumerate(passes, start=1):
        counts = counting is not None and number == counting.number
        if (p.kernel, counts) in names:
            continue
        file = VERSION_WGSL if p.kernel == "self" else f"{p.kernel}.wgsl"
        name = "module" if p.kernel == "self" else _identifier(p.kernel, "Module", suffix=True)
        label = p.kernel
        if counts:
            file, name, label = "counting.wgsl", "countingModule", f"{p.kernel} (counting)"
        line = out.add(
            f'const {name} = device.createShaderModule({{ label: "{label}", code: '
            f'await (await fetch("{file}")).text() }});'
        )
        out.call("fetch", line, request=0, url=file)
        code = counting.copy.source if counts and counting else sources.get(p.kernel, "")
        made = out.call(
            "createShaderModule", line, ("module", p.kernel), id=0, label=label, code=code
        )
        names[(p.kernel, counts)] = (name, made)
    return names


def _buffers(
    out: _Writer,
    harness: Harness,
    sources: Mapping[str, str],
    host: Mapping[str, np.ndarray] | None,
    writable: set[str] | None,
) -> dict[str, tuple[str, int, int]]:
    """createBuffer and writeBuffer for every bound buffer; harness name -> (variable, id)."""
    layouts, problem = {}, ""
    try:
        layouts = struct_layouts(harness, sources)
    except Stop as stop:  # the run stops on it before this; here the struct is left out
        layouts, problem = {}, stop.message
    variables = {}
    for buf in harness.bound_buffers():
        variable = _identifier(buf.name, "Buffer")
        layout = layouts.get(buf.name)
        shown, what = _contents(buf, layout)
        if buf.fill == "fields" and layout is None:
            what = f"a struct ({problem})"
        # The inputs' own memory, not a copy of it: a worker keeps both for the next run.
        data = _bytes(host[buf.name]) if host is not None and buf.fill not in FRESH else None
        size = len(data) if data is not None else len(shown) if shown is not None else buf.nbytes
        usage = USAGES[buf.usage]
        out.add()
        out.add(f"// {buf.name}: {what}, {size:,} bytes")
        line = out.add(
            f'const {variable} = device.createBuffer({{ label: "{buf.name}", size: {size}, '
            f"usage: {' | '.join('GPUBufferUsage.' + u for u in usage)} }});"
        )
        made = out.call(
            "createBuffer",
            line,
            ("buffer", buf.name),
            id=0,
            label=buf.name,
            size=size,
            usage=sum(FLAGS[u] for u in usage),
            mappedAtCreation=False,
            caller=None,
        )
        if buf.fill not in FRESH:
            _write(out, buf, variable, made, shown, data, layout)
            if writable is not None and buf.name not in writable:
                out.host.inputs[made] = buf.name
        variables[buf.name] = (variable, made, size)
        out.host.buffers[buf.name] = made
    return variables


# Fills that write nothing: WebGPU starts a new buffer zeroed.
FRESH = ("zeros", "fresh")


def _bytes(array: np.ndarray) -> memoryview:
    return np.ascontiguousarray(array).view(np.uint8).reshape(-1).data


def _contents(buf: Buffer, layout: StructLayout | None) -> tuple[bytes | None, str]:
    """The bytes the code spells out (None: too many, or not known without the inputs),
    and what the buffer holds, in words."""
    count = f"{buf.count:,} {buf.dtype}"
    if buf.fill == "data" and buf.data is not None:
        return np.array(buf.data, dtype=NP_TYPES[buf.dtype]).tobytes(), count
    if buf.fill == "random" and buf.random is not None:
        rng = buf.random
        return None, f"{count}, random in [{rng.low}, {rng.high}) with seed {rng.seed}"
    if buf.fill == "file":
        return None, f"{count} from {buf.file}"
    if buf.fill == "fields" and layout is not None:
        try:
            return layout.pack(buf.fields or {}), f"struct {layout.name}, as WGSL lays it out"
        except LayoutError as e:
            return None, f"a struct ({e})"
    if buf.output:
        return None, f"{count}, the output (WebGPU starts it zeroed)"
    return None, f"{count}, zeroed"


def _write(
    out: _Writer,
    buf: Buffer,
    variable: str,
    made: int,
    shown: bytes | None,
    data: memoryview | None,
    layout: StructLayout | None,
) -> None:
    dtype = buf.dtype
    if layout is not None and shown is not None:
        array, dtype = _struct_views(out, variable, layout, shown), "bytes"
    elif (
        shown is not None and (values := np.frombuffer(shown, NP_TYPES[dtype])).size <= SHOWN_VALUES
    ):
        array = f"new {ARRAYS[dtype]}([{', '.join(_number(v, dtype) for v in values)}])"
    else:
        array = f"{variable}Data"
        out.add(f"const {array} = new {ARRAYS[dtype]}({buf.count}); // the harness's values")
    line = out.add(f"device.queue.writeBuffer({variable}, 0, {array});")
    blob = out.blob(data if data is not None else shown or b"")
    out.call(
        "writeBuffer", line, ("buffer", buf.name), buffer=made, offset=0, blob=blob, dtype=dtype
    )


def _struct_views(out: _Writer, variable: str, layout: StructLayout, data: bytes) -> str:
    """A struct's bytes as a host lays them out: an ArrayBuffer of the struct's size, a
    typed view per field at its offset; the gaps are padding. Returns the buffer's name."""
    name = f"{variable}Data"
    out.add(f"const {name} = new ArrayBuffer({layout.size}); // struct {layout.name}")
    for member in layout.describe(data)["fields"]:
        scalar = next((s for s in ARRAYS if s in member["type"]), "u32")
        values = ", ".join(_number(v, scalar) for v in member["values"])
        count = len(member["values"])
        where = f"{member['name']}: {member['type']} at byte {member['offset']}"
        if member["size"] == 4 * count:
            view = f"new {ARRAYS[scalar]}({name}, {member['offset']}, {count})"
            out.add(f"{view}.set([{values}]); // {where}")
        else:  # a strided leaf (a matrix of vec3 columns): padding between its values
            out.add(f"// {where}: [{values}], with padding between them")
    return name


def _counters(out: _Writer, counting: Counting, variables: dict[str, tuple[str, int, int]]) -> None:
    size = 4 * counting.copy.invocations
    out.add()
    out.add("// One counter per invocation: how many values it stores into the output.")
    line = out.add(
        f'const {COUNTERS} = device.createBuffer({{ label: "{COUNTERS}", size: {size}, '
        "usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC });"
    )
    made = out.call(
        "createBuffer",
        line,
        id=0,
        label=COUNTERS,
        size=size,
        usage=STORAGE | COPY_SRC,
        mappedAtCreation=False,
        caller=None,
    )
    variables[COUNTERS] = (COUNTERS, made, size)


def _pipelines(
    out: _Writer,
    passes: list[Any],
    modules: dict[tuple[str, bool], tuple[str, int]],
    counting: Counting | None,
) -> dict[tuple[str, str, bool], tuple[str, int]]:
    """A compute pipeline per (kernel, entry point), its layout "auto"."""
    names: dict[tuple[str, str, bool], tuple[str, int]] = {}
    single = len({(p.kernel, p.entry_point) for p in passes}) == 1 and counting is None
    out.add()
    for number, p in enumerate(passes, start=1):
        counts = counting is not None and number == counting.number
        key = (p.kernel, p.entry_point, counts)
        if key in names:
            continue
        words = p.entry_point if p.kernel == "self" else f"{p.kernel}_{p.entry_point}"
        name = "pipeline" if single else _identifier(words, "Pipeline", suffix=True)
        name = "countingPipeline" if counts else name
        module, module_id = modules[(p.kernel, counts)]
        line = out.add(
            f'const {name} = device.createComputePipeline({{ label: "{name}", layout: "auto", '
            f'compute: {{ module: {module}, entryPoint: "{p.entry_point}" }} }});'
        )
        made = out.call(
            "createComputePipeline",
            line,
            ("pipeline", p.kernel, p.entry_point),
            id=0,
            label=name,
            layout="auto",
            compute={"module": module_id, "entryPoint": p.entry_point, "constants": {}},
        )
        names[key] = (name, made)
    return names


def _passes(
    out: _Writer,
    harness: Harness,
    passes: list[Any],
    sources: Mapping[str, str],
    variables: dict[str, tuple[str, int, int]],
    pipelines: dict[tuple[str, str, bool], tuple[str, int]],
    counting: Counting | None,
) -> None:
    """Bind groups, one compute pass per harness pass, the copies and the readbacks."""
    several = len(passes) > 1
    groups: dict[tuple[int, int], tuple[str, int]] = {}
    for number, p in enumerate(passes, start=1):
        counts = counting is not None and number == counting.number
        pipeline = pipelines[(p.kernel, p.entry_point, counts)]
        source = counting.copy.source if counts and counting else sources.get(p.kernel, "")
        used = used_bindings(source, p.entry_point)
        bind = dict(p.groups())
        if counts and counting:
            bind[counting.copy.group] = [Binding(counting.copy.group, 0, COUNTERS)]
        for group, bindings in sorted(bind.items()):
            name = f"bindGroup{number}" if several else "bindGroup"
            name += f"_{group}" if len(bind) > 1 else ""
            kept = [b for b in bindings if used is None or (group, b.binding) in used]
            for b in bindings:
                if b not in kept:
                    out.host.unused.append(Unused(number, p.kernel, group, b.binding, b.buffer))
                    out.add(
                        f"// @group({group}) @binding({b.binding}) {b.buffer}: the kernel does "
                        "not use it, so it is left out"
                    )
            if kept:
                groups[(number, group)] = _bind_group(
                    out, name, pipeline, group, kept, variables, (number, p.kernel)
                )
    out.add()
    encoder = out.call(
        "createCommandEncoder",
        out.add("const encoder = device.createCommandEncoder();"),
        id=0,
        label="",
    )
    for number, p in enumerate(passes, start=1):
        counts = counting is not None and number == counting.number
        name = f"pass{number}" if several else "pass"
        line = out.add(f"const {name} = encoder.beginComputePass();")
        out.call("beginComputePass", line, encoder=encoder, label="", **{"pass": number})
        variable, made = pipelines[(p.kernel, p.entry_point, counts)]
        out.call(
            "setPipeline",
            out.add(f"{name}.setPipeline({variable});"),
            encoder=encoder,
            pipeline=made,
        )
        for (at, group), (variable, group_id) in groups.items():
            if at == number:
                line = out.add(f"{name}.setBindGroup({group}, {variable});")
                out.call(
                    "setBindGroup", line, encoder=encoder, index=group, group=group_id, offsets=[]
                )
        source = counting.copy.source if counts and counting else sources.get(p.kernel, "")
        size = workgroup(source, p.entry_point)
        shown = trimmed(p.dispatch)
        threads = math.prod(p.dispatch) * math.prod(size)
        line = out.add(
            f"{name}.dispatchWorkgroups({', '.join(shown)}); // {' × '.join(shown)} "
            f"workgroups of {' × '.join(trimmed(size))}: {threads:,} invocations"
        )
        out.call(
            "dispatchWorkgroups",
            line,
            ("dispatch", number, p.kernel),
            encoder=encoder,
            workgroups=list(p.dispatch),
            **{"pass": number},
        )
        out.call("endPass", out.add(f"{name}.end();"), encoder=encoder, **{"pass": number})
    names = [COUNTERS] if counting is not None else readback_names(harness)
    _read_back(out, harness, names, variables, encoder)


def _bind_group(
    out: _Writer,
    name: str,
    pipeline: tuple[str, int],
    group: int,
    bindings: list[Binding],
    variables: dict[str, tuple[str, int, int]],
    where: tuple[int, str],
) -> tuple[str, int]:
    line = out.add(f"const {name} = device.createBindGroup({{")
    layout_line = out.add(f"  layout: {pipeline[0]}.getBindGroupLayout({group}),")
    layout = out.call(
        "getBindGroupLayout",
        layout_line,
        ("bind group", *where, group, tuple(bindings)),
        id=0,
        pipeline=pipeline[1],
        index=group,
    )
    out.add("  entries: [")
    for b in bindings:
        out.add(
            f"    {{ binding: {b.binding}, resource: {{ buffer: {variables[b.buffer][0]} }} }},"
        )
    out.add("  ],")
    out.add("});")
    made = out.call(
        "createBindGroup",
        line,
        ("bind group", *where, group, tuple(bindings)),
        id=0,
        label=name,
        layout=layout,
        entries=[
            {"binding": b.binding, "buffer": variables[b.buffer][1], "offset": 0, "size": None}
            for b in bindings
        ],
    )
    return name, made


def _read_back(
    out: _Writer,
    harness: Harness,
    names: list[str],
    variables: dict[str, tuple[str, int, int]],
    encoder: int,
) -> None:
    readers: dict[str, tuple[str, int, int, str]] = {}
    for name in names:
        variable, made, size = variables[name]
        buf = harness.buffer(name) if name != COUNTERS else None
        dtype = buf.dtype if buf is not None else "u32"
        reader = f"{variable}Read"
        line = out.add(
            f'const {reader} = device.createBuffer({{ label: "{name} (read)", size: {size}, '
            "usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });"
        )
        read_id = out.call(
            "createBuffer",
            line,
            id=0,
            label=f"{name} (read)",
            size=size,
            usage=MAP_READ | COPY_DST,
            mappedAtCreation=False,
            caller=None,
        )
        line = out.add(f"encoder.copyBufferToBuffer({variable}, 0, {reader}, 0, {size});")
        out.call(
            "copyBufferToBuffer",
            line,
            encoder=encoder,
            source=made,
            sourceOffset=0,
            destination=read_id,
            destinationOffset=0,
            size=size,
        )
        readers[name] = (reader, read_id, size, dtype)
    line = out.add("device.queue.submit([encoder.finish()]);")
    commands = out.call("finish", line, encoder=encoder, id=0)
    out.host.submit = len(out.host.entries)
    out.call("submit", line, ("submit",), commandBuffers=[commands])
    for name, (reader, read_id, size, dtype) in readers.items():
        variable = variables[name][0]
        out.add()
        line = out.add(f"await {reader}.mapAsync(GPUMapMode.READ);")
        out.host.reads[name] = [len(out.host.entries), len(out.host.entries) + 1]
        out.call(
            "mapAsync",
            line,
            ("read", name),
            request=0,
            buffer=read_id,
            mode=MAP_READ,
            offset=0,
            size=size,
        )
        line = out.add(f"const {variable}Values = new {ARRAYS[dtype]}({reader}.getMappedRange());")
        out.call("view", line, buffer=read_id, dtype=dtype)


def workgroup(source: str, entry_point: str) -> tuple[int, int, int]:
    """The entry point's @workgroup_size as (x, y, z); (1, 1, 1) when it cannot be told."""
    module = parse(source)
    function = module.entry_point(entry_point)
    x, y, z = (workgroup_dimensions(module, function) if function else None) or (1, 1, 1)
    return (x, y, z)


def trimmed(sizes: tuple[int, ...] | list[int]) -> list[str]:
    """(15, 1, 1) as ["15"], (2, 3, 1) as ["2", "3"]: as a program would write them."""
    shown = [str(n) for n in sizes]
    while len(shown) > 1 and shown[-1] == "1":
        shown.pop()
    return shown


def _identifier(name: str, kind: str, suffix: bool = False) -> str:
    """name as a JavaScript variable: itself when it is one and takes no reserved word,
    else camelCased with the kind appended."""
    if not suffix and re.fullmatch(r"[A-Za-z_$][\w$]*", name) and name not in RESERVED:
        return name
    words = [w for w in re.split(r"[^A-Za-z0-9]+", name) if w] or ["value"]
    camel = words[0] + "".join(w[:1].upper() + w[1:] for w in words[1:])
    if camel[0].isdigit():
        camel = "_" + camel
    return camel + kind


def _number(value: Any, scalar: str) -> str:
    """A value as JavaScript writes it: 0.1 for f32 0.1, 1 for 1.0, NaN and Infinity."""
    if isinstance(value, str):
        return value  # "NaN", "Infinity", "-Infinity": JavaScript's names too
    if scalar != "f32":
        return str(int(value))
    text = str(np.float32(value))
    return text.removesuffix(".0")
