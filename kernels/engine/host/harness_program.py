"""A harness written out as the WebGPU host program it stands for, with that program's trace.

A version without a host program replays under its harness (kernels/engine/run.py); a
reader still wants to see the host side: the buffers with their sizes in bytes, the
uniform bytes, the dispatch. harness_host() writes readable JavaScript that does what the
run does (one buffer per bound harness buffer, a pipeline per entry point, a compute pass
per harness pass, a copy into a mappable buffer and mapAsync per buffer read back) and the
Trace that program would leave, its lines pointing into the code. Nothing here runs: the
code is for reading, and the trace is computed from the harness alone.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kernels.engine.harness import Binding, Buffer, Harness
from kernels.engine.host import trace as traces
from kernels.engine.host.trace import Trace
from kernels.engine.inputs import struct_layouts
from kernels.engine.layout import LayoutError, StructLayout
from kernels.engine.limits import readback_names
from kernels.engine.outcome import Stop
from kernels.engine.wgsl import parse, workgroup_dimensions

NP_TYPES = {"f32": np.float32, "u32": np.uint32, "i32": np.int32}
ARRAYS = {"f32": "Float32Array", "u32": "Uint32Array", "i32": "Int32Array"}
USAGES = {
    "uniform": ("UNIFORM", "COPY_DST"),
    "read": ("STORAGE", "COPY_SRC", "COPY_DST"),
    "read_write": ("STORAGE", "COPY_SRC", "COPY_DST"),
}
# Literal values written out in full up to this many; longer data is summarised.
SHOWN_VALUES = 16
RESERVED = {
    "adapter", "device", "encoder", "module", "pass", "pipeline", "wgsl", "await", "break",
    "case", "catch", "class", "const", "continue", "default", "delete", "do", "else",
    "export", "extends", "false", "finally", "for", "function", "if", "import", "in",
    "instanceof", "let", "new", "null", "return", "super", "switch", "this", "throw",
    "true", "try", "typeof", "var", "void", "while", "with", "yield",
}  # fmt: skip


@dataclass
class HarnessHost:
    code: str
    trace: Trace
    modules: dict[str, str]  # shader module variable -> the kernel whose WGSL it holds


@dataclass
class _Writer:
    lines: list[str] = field(default_factory=list)
    trace: Trace = field(default_factory=traces.new_trace)

    def add(self, text: str = "") -> int:
        """Append a line; its 1-based number."""
        self.lines.append(text)
        return len(self.lines)


def harness_host(
    harness: Harness,
    sources: Mapping[str, str],
    kernel: str = "kernel",
    dropped: Collection[tuple[int, int, int]] = (),
) -> HarnessHost:
    """The host program of a harness, and its trace. sources maps kernel names to WGSL
    ("self" is the kernel replayed, fetched as kernel.wgsl); kernel names it in comments.
    dropped: the (pass, group, binding) the run left out of its bind groups, as its
    kernel does not use them (its outcome's unused_binding warnings): left out here too,
    so the code is what ran."""
    out = _Writer()
    out.add(f"// The harness of {kernel}, written out as the WebGPU host code it stands for.")
    out.add("const adapter = await navigator.gpu.requestAdapter();")
    out.add("const device = await adapter.requestDevice();")
    modules = _modules(out, harness, sources)
    variables = _buffers(out, harness, sources)
    pipelines = _pipelines(out, harness, modules)
    _passes(out, harness, sources, variables, pipelines, set(dropped))
    code = "\n".join(out.lines) + "\n"
    return HarnessHost(code, out.trace, {name: kernel for kernel, name in modules.items()})


def _modules(out: _Writer, harness: Harness, sources: Mapping[str, str]) -> dict[str, str]:
    """A shader module per kernel the passes run; kernel -> variable name."""
    names = {}
    for kernel in dict.fromkeys(p.kernel for p in harness.passes):
        file = "kernel.wgsl" if kernel == "self" else f"{kernel}.wgsl"
        name = "module" if kernel == "self" else _identifier(kernel, "Module", suffix=True)
        line = out.add(
            f"const {name} = device.createShaderModule({{ code: "
            f'await (await fetch("{file}")).text() }});'
        )
        size = len(sources.get(kernel, "").encode())
        traces.append(out.trace, "modules", {"name": name, "bytes": size, "line": line})
        names[kernel] = name
    return names


def _buffers(out: _Writer, harness: Harness, sources: Mapping[str, str]) -> dict[str, str]:
    """createBuffer and writeBuffer for every bound buffer; harness name -> variable."""
    layouts, problem = {}, ""
    try:
        layouts = struct_layouts(harness, sources)
    except Stop as stop:  # the run says so too; here the struct's bytes are left out
        layouts, problem = {}, stop.message
    variables = {}
    for buf in harness.bound_buffers():
        variable = _identifier(buf.name, "Buffer")
        data, what = _contents(buf, layouts.get(buf.name))
        if buf.fill == "fields" and buf.name not in layouts:
            what = f"a struct ({problem})"
        size = len(data) if data is not None else buf.nbytes
        usage = USAGES[buf.usage]
        out.add()
        out.add(f"// {buf.name}: {what}, {size:,} bytes")
        line = out.add(
            f'const {variable} = device.createBuffer({{ label: "{buf.name}", size: {size}, '
            f"usage: {' | '.join('GPUBufferUsage.' + u for u in usage)} }});"
        )
        traces.append(
            out.trace,
            "buffers",
            {
                "name": buf.name,
                "size": size,
                "usage": list(usage),
                "mapped_at_creation": False,
                "line": line,
            },
        )
        if data is not None:
            _write(out, buf, variable, data, layouts.get(buf.name))
        variables[buf.name] = variable
    return variables


def _contents(buf: Buffer, layout: StructLayout | None) -> tuple[bytes | None, str]:
    """The bytes a host writes (None: it writes nothing, WebGPU zeroes the buffer), and
    what the buffer holds, in words."""
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
    out: _Writer, buf: Buffer, variable: str, data: bytes, layout: StructLayout | None
) -> None:
    dtype = buf.dtype
    if layout is not None:
        array, dtype = _struct_views(out, variable, layout, data), "bytes"
    elif (values := np.frombuffer(data, dtype=NP_TYPES[dtype])).size <= SHOWN_VALUES:
        array = f"new {ARRAYS[dtype]}([{', '.join(_number(v, dtype) for v in values)}])"
    else:
        array = f"{variable}Data"
        out.add(f"const {array} = new {ARRAYS[dtype]}({values.size}); // the harness's values")
    line = out.add(f"device.queue.writeBuffer({variable}, 0, {array});")
    traces.append(
        out.trace,
        "writes",
        {
            "buffer": buf.name,
            "offset": 0,
            "size": len(data),
            "dtype": dtype,
            "values": traces.values_of(data, "u8" if dtype == "bytes" else dtype),
            "line": line,
        },
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


def _pipelines(
    out: _Writer, harness: Harness, modules: dict[str, str]
) -> dict[tuple[str, str], str]:
    """A compute pipeline per (kernel, entry point), its layout "auto"."""
    names: dict[tuple[str, str], str] = {}
    single = len({(p.kernel, p.entry_point) for p in harness.passes}) == 1
    out.add()
    for p in harness.passes:
        key = (p.kernel, p.entry_point)
        if key in names:
            continue
        words = p.entry_point if p.kernel == "self" else f"{p.kernel}_{p.entry_point}"
        name = "pipeline" if single else _identifier(words, "Pipeline", suffix=True)
        line = out.add(
            f'const {name} = device.createComputePipeline({{ layout: "auto", compute: '
            f'{{ module: {modules[p.kernel]}, entryPoint: "{p.entry_point}" }} }});'
        )
        traces.append(
            out.trace,
            "pipelines",
            {
                "name": name,
                "module": modules[p.kernel],
                "entry_point": p.entry_point,
                "layout": "auto",
                "line": line,
            },
        )
        names[key] = name
    return names


def _passes(
    out: _Writer,
    harness: Harness,
    sources: Mapping[str, str],
    variables: dict[str, str],
    pipelines: dict[tuple[str, str], str],
    dropped: set[tuple[int, int, int]],
) -> None:
    """Bind groups, one compute pass per harness pass, the copies and the readbacks."""
    several = len(harness.passes) > 1
    groups = {}
    for number, p in enumerate(harness.passes, start=1):
        for group, bindings in sorted(p.groups().items()):
            name = f"bindGroup{number}" if several else "bindGroup"
            name += f"_{group}" if len(p.groups()) > 1 else ""
            used = [b for b in bindings if (number, group, b.binding) not in dropped]
            for b in bindings:
                if b not in used:
                    out.add(
                        f"// @group({group}) @binding({b.binding}) {b.buffer}: the kernel does "
                        "not use it, so the run leaves it out"
                    )
            if used:
                groups[(number, group)] = name
                pipeline = pipelines[(p.kernel, p.entry_point)]
                _bind_group(out, name, pipeline, group, used, variables)
    out.add()
    out.add("const encoder = device.createCommandEncoder();")
    for number, p in enumerate(harness.passes, start=1):
        name = f"pass{number}" if several else "pass"
        line = out.add(f"const {name} = encoder.beginComputePass();")
        traced: traces.TracedPass = {"name": f"pass {number}", "dispatches": [], "line": line}
        traces.append(out.trace, "passes", traced)
        pipeline = pipelines[(p.kernel, p.entry_point)]
        out.add(f"{name}.setPipeline({pipeline});")
        bound = {}
        for group in sorted(p.groups()):
            if (number, group) in groups:
                out.add(f"{name}.setBindGroup({group}, {groups[(number, group)]});")
                bound[str(group)] = groups[(number, group)]
        size = workgroup(sources.get(p.kernel, ""), p.entry_point)
        counts = trimmed(p.dispatch)
        threads = math.prod(p.dispatch) * math.prod(size)
        line = out.add(
            f"{name}.dispatchWorkgroups({', '.join(counts)}); // {' × '.join(counts)} "
            f"workgroups of {' × '.join(trimmed(size))}: {threads:,} invocations"
        )
        traced["dispatches"].append(
            {
                "pipeline": pipeline,
                "bind_groups": bound,
                "workgroups": list(p.dispatch),
                "line": line,
            }
        )
        out.add(f"{name}.end();")
    _read_back(out, harness, variables)


def _bind_group(
    out: _Writer,
    name: str,
    pipeline: str,
    group: int,
    bindings: list[Binding],
    variables: dict[str, str],
) -> None:
    line = out.add(f"const {name} = device.createBindGroup({{")
    out.add(f"  layout: {pipeline}.getBindGroupLayout({group}),")
    out.add("  entries: [")
    for b in bindings:
        out.add(f"    {{ binding: {b.binding}, resource: {{ buffer: {variables[b.buffer]} }} }},")
    out.add("  ],")
    out.add("});")
    entries: list[traces.TracedBinding] = [
        {"binding": b.binding, "buffer": b.buffer, "offset": 0, "size": None} for b in bindings
    ]
    traces.append(out.trace, "bind_groups", {"name": name, "entries": entries, "line": line})


def _read_back(out: _Writer, harness: Harness, variables: dict[str, str]) -> None:
    names = readback_names(harness)
    readers = {}
    for name in names:
        buf, reader = harness.buffer(name), f"{variables[name]}Read"
        line = out.add(
            f'const {reader} = device.createBuffer({{ label: "{name} (read)", size: {buf.nbytes}, '
            "usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });"
        )
        traces.append(
            out.trace,
            "buffers",
            {
                "name": f"{name} (read)",
                "size": buf.nbytes,
                "usage": ["MAP_READ", "COPY_DST"],
                "mapped_at_creation": False,
                "line": line,
            },
        )
        line = out.add(
            f"encoder.copyBufferToBuffer({variables[name]}, 0, {reader}, 0, {buf.nbytes});"
        )
        traces.append(
            out.trace,
            "copies",
            {
                "source": name,
                "source_offset": 0,
                "destination": f"{name} (read)",
                "destination_offset": 0,
                "size": buf.nbytes,
                "line": line,
            },
        )
        readers[name] = reader
    out.add("device.queue.submit([encoder.finish()]);")
    out.trace["submits"] = 1
    for name, reader in readers.items():
        buf = harness.buffer(name)
        out.add()
        line = out.add(f"await {reader}.mapAsync(GPUMapMode.READ);")
        out.add(
            f"const {variables[name]}Values = new {ARRAYS[buf.dtype]}({reader}.getMappedRange());"
        )
        traced: traces.TracedReadback = {
            "buffer": f"{name} (read)",
            "source": name,
            "offset": 0,
            "size": buf.nbytes,
            "dtype": buf.dtype,
            "values": [],
            "line": line,
        }
        traces.append(out.trace, "readbacks", traced)


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
