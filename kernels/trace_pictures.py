"""The host side of a replay as a picture: what a program (or a harness) did on the GPU.

host_picture() reads a Trace (kernels/engine/host/trace.py) with the WGSL of its shader
modules and says, for templates/kernels/_host_trace.html to draw: every buffer with its
size in bytes and usage, a uniform's bytes laid out field by field against the WGSL
struct it is bound to (kernels/engine/layout.py), each pass with its bindings and its
dispatch (invocations against the elements of the buffer it writes), the copies and the
readbacks, the bind groups no dispatch used (one WebGPU refused among them); and the
findings, the host mistakes a reader should see first: a uniform smaller than its struct,
a dispatch that leaves elements without an invocation, one uniform buffer feeding several
dispatches of the same kernel in one submit.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kernels.engine import store_counts
from kernels.engine.host import trace as traces
from kernels.engine.host.harness_program import trimmed, workgroup
from kernels.engine.host.trace import NP_VIEWS, Dispatch, DispatchBinding
from kernels.engine.layout import LayoutError, binding_type, struct_layout
from kernels.engine.outcome import run_trace
from kernels.engine.wgsl import parse, resource_numbers

MAX_SHOWN_BUFFERS = 40
MAX_SHOWN_WORDS = 64
# A page draws every pass and dispatch it keeps: a program of 200 passes of 200 dispatches
# drew 40,000 rows (each with its bindings) on every view. Findings are read from all of
# them; the picture keeps the first ones and counts the rest (replay.json lists them all).
MAX_SHOWN_PASSES = 24
MAX_SHOWN_DISPATCHES = 48
MAX_SHOWN_FINDINGS = 12
STRIP_WIDTH = 640  # px for a uniform's bytes, at most 24 px a byte


@dataclass
class _Reading:
    """A trace read for the picture: the buffers by name, the dispatches in order."""

    trace: Mapping[str, Any]
    sources: Mapping[str, str]
    buffers: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    dispatches: list[Dispatch] = field(default_factory=list)
    findings: list[dict[str, Any]] = field(default_factory=list)
    counted: dict[tuple[int, str], Mapping[str, Any]] = field(default_factory=dict)


def host_picture(
    trace: Mapping[str, Any],
    sources: Mapping[str, str],
    error: Mapping[str, Any] | None = None,
    counted: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """What _host_trace.html draws. sources maps shader module names to their WGSL; a
    module it lacks is drawn without layouts. error is the program's error (ProgramError),
    when it stopped at one: a bind group WebGPU refused is drawn with it. counted is the
    run's store_counts (kernels/engine/store_counts.py): how many values each invocation
    of a pass stored, said beside its dispatch."""
    reading = _Reading(trace, sources)
    reading.counted = {(c["pass"], c["buffer"]): c for c in counted}
    reading.buffers = {b["name"]: b for b in trace.get("buffers", [])}
    reading.dispatches = traces.dispatches(trace, sources)
    buffers = [_buffer(reading, b) for b in trace.get("buffers", [])[:MAX_SHOWN_BUFFERS]]
    passes = _passes(reading)
    _shared_uniforms(reading, {b["name"]: b.get("layout") for b in buffers})
    shown_passes, more_dispatches = _shown(passes)
    return {
        "findings": reading.findings[:MAX_SHOWN_FINDINGS],
        "more_findings": max(0, len(reading.findings) - MAX_SHOWN_FINDINGS),
        "buffers": buffers,
        "more_buffers": max(0, len(reading.buffers) - MAX_SHOWN_BUFFERS),
        "passes": shown_passes,
        "more_passes": max(0, len(passes) - len(shown_passes)),
        "more_dispatches": more_dispatches,
        "unbound": _unbound_groups(reading, error),
        "copies": list(trace.get("copies", [])),
        "readbacks": [_readback(r) for r in trace.get("readbacks", [])],
        "submits": trace.get("submits", 0),
        "dropped": dict(trace.get("dropped", {})),
    }


def program_picture(
    outcome: Mapping[str, Any], own_source: str | None = None
) -> dict[str, Any] | None:
    """The picture of what a run's host program did, from its outcome alone, as JSON can
    hold it (non-finite numbers as the strings JavaScript prints), to store with the run.
    None when the outcome has no trace, or when a module of it lacks its WGSL (a trace
    stored before modules carried it, or past the cap on their code) and own_source, the
    version's WGSL that such a module was, is not given."""
    program = outcome.get("program") or {}
    trace = run_trace(outcome)
    if not trace:
        return None
    sources = traces.module_sources(trace)
    lacking = [m["name"] for m in trace.get("modules", []) if m["name"] not in sources]
    if lacking and own_source is None:
        return None
    own = {name: own_source for name in lacking} if own_source is not None else {}
    picture = host_picture(
        trace, own | sources, program.get("error"), outcome.get("store_counts") or []
    )
    safe: dict[str, Any] = _json_safe(picture)
    return safe


def _json_safe(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _json_safe(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(item) for item in value]
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return value


# -- reading the trace ------------------------------------------------------------------------


def _written_bytes(reading: _Reading, name: str, size: int) -> bytes:
    """A buffer's bytes as the host wrote them (zeros where it did not)."""
    data = bytearray(size)
    for write in reading.trace.get("writes", []):
        if write["buffer"] != name:
            continue
        dtype = "u8" if write["dtype"] == "bytes" else write["dtype"]
        values = [_number(v) for v in write["values"]]
        raw = np.array(values, dtype=np.float64).astype(NP_VIEWS.get(dtype, np.uint8)).tobytes()
        start = write["offset"]
        data[start : start + len(raw)] = raw[: max(0, size - start)]
    return bytes(data)


def _number(value: Any) -> float:
    if isinstance(value, int | float):
        return value
    return {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}.get(value, 0.0)


# -- buffers --------------------------------------------------------------------------------


def _buffer(reading: _Reading, traced: Mapping[str, Any]) -> dict[str, Any]:
    largest = max((b["size"] for b in reading.buffers.values()), default=1) or 1
    usage = list(traced["usage"])
    shown = {
        "name": traced["name"],
        "size": traced["size"],
        "usage": " | ".join(usage),
        "kind": _kind(usage),
        "line": traced.get("line"),
        # Bars on a square-root scale: a 16-byte uniform still shows beside 3 MB of weights.
        "bar": max(2.0, 100 * math.sqrt(traced["size"] / largest)),
        "writes": sum(1 for w in reading.trace.get("writes", []) if w["buffer"] == traced["name"]),
    }
    if shown["kind"] == "uniform":
        shown["layout"] = _uniform_layout(reading, traced)
    return shown


def _kind(usage: list[str]) -> str:
    for flag, kind in (("UNIFORM", "uniform"), ("STORAGE", "storage"), ("MAP_READ", "readback")):
        if flag in usage:
            return kind
    return "other"


def _uniform_layout(reading: _Reading, traced: Mapping[str, Any]) -> dict[str, Any] | None:
    """The uniform's bytes against the struct of the first variable it is bound to."""
    name, size = traced["name"], traced["size"]
    readers = [
        (f"pass {dispatch.number}", dispatch.source, b)
        for dispatch in reading.dispatches
        for b in dispatch.bindings
        if b.buffer == name and dispatch.source
    ]
    for reader, source, b in [*readers, *_group_readers(reading, name)]:
        struct = binding_type(source, b.group, b.binding)
        try:
            layout = struct_layout(source, struct or "")
        except LayoutError:
            return _words(reading, name, size)
        # Only the bytes the struct reads: a buffer's own size may be 128 MiB.
        described = layout.describe(_written_bytes(reading, name, min(size, layout.size)))
        segments = _segments(described)
        if described["given"] < described["size"]:
            reading.findings.append(_short_uniform(traced, described, b, reader))
        return _laid_out(described["struct"], described["size"], segments)
    return _words(reading, name, size)


def _group_readers(reading: _Reading, name: str) -> list[tuple[str, str, DispatchBinding]]:
    """Where bind groups no dispatch used bind the buffer, read against their pipeline's
    module: a program that stopped at createBindGroup (a uniform too short for its
    struct) dispatched nothing, and its picture still says why."""
    pipelines = {p["name"]: p for p in reading.trace.get("pipelines", [])}
    found = []
    for group in reading.trace.get("bind_groups", []):
        # A pipeline's own layout is named "<pipeline>.getBindGroupLayout(<index>)".
        owner, _, index = str(group.get("layout", "")).rpartition(".getBindGroupLayout(")
        pipeline = pipelines.get(owner)
        source = reading.sources.get(pipeline["module"], "") if pipeline else ""
        if not source or not index[:-1].isdigit() or len(index) > 4:
            continue
        for e in group["entries"]:
            if e["buffer"] == name:
                binding = DispatchBinding(int(index[:-1]), e["binding"], name, e.get("size"))
                found.append((f"bind group {group['name']}", source, binding))
    return found


def _words(reading: _Reading, name: str, size: int) -> dict[str, Any]:
    """A uniform with no struct to read it against: its first MAX_SHOWN_WORDS 4-byte words
    as u32 (only those are read, whatever the buffer's size)."""
    shown = min(size - size % 4, 4 * MAX_SHOWN_WORDS)
    words = np.frombuffer(_written_bytes(reading, name, shown), dtype=np.uint32)
    segment = {"kind": "field", "name": "", "type": "u32 words", "offset": 0, "size": shown}
    return _laid_out("", shown, [{**segment, "values": list(map(int, words)), "missing": False}])


def _laid_out(struct: str, size: int, segments: list[dict[str, Any]]) -> dict[str, Any]:
    """A layout with the geometry of its SVG strip: a box per field or padding run, as
    wide as its bytes, and a tick at every boundary."""
    scale = max(6.0, min(24.0, STRIP_WIDTH / max(size, 1)))
    for segment in segments:
        segment["x"] = segment["offset"] * scale
        segment["width"] = segment["size"] * scale
        segment["middle"] = segment["x"] + segment["width"] / 2
        segment["shown"] = ", ".join(str(v) for v in segment.get("values", [])[:8])
    bounds = sorted({0, size, *(s["offset"] for s in segments)})
    ticks = [{"x": offset * scale, "text": offset} for offset in bounds]
    return {
        "struct": struct,
        "size": size,
        "segments": segments,
        "ticks": ticks,
        "width": size * scale + 24,
    }


def _segments(described: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Fields, padding and bytes the host did not give, in byte order."""
    given = described["given"]
    parts = [{"kind": "field", **f} for f in described["fields"]]
    parts += [{"kind": "padding", "name": "padding", **p} for p in described["padding"]]
    parts.sort(key=lambda part: part["offset"])
    for part in parts:
        # Bytes past the end of the buffer: the struct reads them, the host never gave them.
        part["missing"] = part["offset"] + part["size"] > given
    return parts


def _short_uniform(
    traced: Mapping[str, Any], described: Mapping[str, Any], b: DispatchBinding, reader: str
) -> dict[str, Any]:
    fields = described["fields"]
    end = max((f["offset"] + f["size"] for f in fields), default=0)
    why = ""
    if end < described["size"]:
        why = (
            f": its fields end at byte {end}, and WGSL rounds a struct's size up to a "
            f"multiple of its alignment ({described['align']} bytes)"
        )
    return {
        "line": traced.get("line"),
        "text": (
            f"Buffer {traced['name']} is {traced['size']:,} bytes, but struct "
            f"{described['struct']}, which {reader} reads at @group({b.group}) "
            f"@binding({b.binding}), is {described['size']:,} bytes{why}."
        ),
    }


# -- passes ------------------------------------------------------------------------------------


def _passes(reading: _Reading) -> list[dict[str, Any]]:
    shown: dict[int, dict[str, Any]] = {}
    for number, traced in enumerate(reading.trace.get("passes", []), start=1):
        shown[number] = {"number": number, "name": traced["name"], "line": traced.get("line")}
        shown[number]["dispatches"] = []
    for dispatch in reading.dispatches:
        shown[dispatch.number]["dispatches"].append(_dispatch(reading, dispatch))
    return list(shown.values())


def _shown(passes: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """The first MAX_SHOWN_PASSES passes, holding MAX_SHOWN_DISPATCHES dispatches between
    them at most; and how many dispatches of those passes are left out."""
    shown, room, left_out = [], MAX_SHOWN_DISPATCHES, 0
    for drawn in passes[:MAX_SHOWN_PASSES]:
        dispatches = drawn["dispatches"]
        shown.append({**drawn, "dispatches": dispatches[:room]})
        left_out += max(0, len(dispatches) - room)
        room = max(0, room - len(dispatches))
    return shown, left_out


def _dispatch(reading: _Reading, dispatch: Dispatch) -> dict[str, Any]:
    size = workgroup(dispatch.source, dispatch.entry_point) if dispatch.source else (1, 1, 1)
    grid = [count * per for count, per in zip(dispatch.workgroups, size, strict=True)]
    invocations = math.prod(grid)
    written = _written_buffer(reading, dispatch)
    elements = None
    if written is not None:
        name, count = written
        # Fewer invocations than elements, but not by a whole factor (a kernel that
        # handles a row each): the count was rounded down.
        short = grid[1] == grid[2] == 1 and invocations < count < 2 * invocations
        elements = {"buffer": name, "count": count, "short": short}
        elements["several"] = 2 * invocations <= count
        if stores := reading.counted.get((dispatch.number, name)):
            elements["stores"] = store_counts.words(stores)
        if short:
            reading.findings.append(_short_dispatch(dispatch, size, invocations, name, count))
    return {
        "pipeline": dispatch.pipeline,
        "entry_point": dispatch.entry_point,
        "workgroups": " × ".join(trimmed(dispatch.workgroups)),
        "workgroup_size": " × ".join(trimmed(size)),
        "grid": " × ".join(trimmed(grid)),
        "invocations": invocations,
        "elements": elements,
        "line": dispatch.line,
        "bindings": [_binding(reading, b) for b in dispatch.bindings],
    }


def _binding(reading: _Reading, b: DispatchBinding) -> dict[str, Any]:
    buffer = reading.buffers.get(b.buffer, {})
    return {
        "group": b.group,
        "binding": b.binding,
        "buffer": b.buffer,
        "size": b.size if b.size is not None else buffer.get("size"),
        "kind": _kind(list(buffer.get("usage", []))),
    }


def _unbound_groups(reading: _Reading, error: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The bind groups no dispatch bound, with their entries. When the program stopped at
    device.createBindGroup, the last of them is the one WebGPU refused: it carries the
    error's message (the trace records a bind group before it is made)."""
    groups = list(reading.trace.get("bind_groups", []))
    bound = {
        name
        for traced in reading.trace.get("passes", [])
        for dispatch in traced["dispatches"]
        for name in dispatch["bind_groups"].values()
    }
    refused = (error or {}).get("call") == "device.createBindGroup" and groups
    shown = []
    for index, group in enumerate(groups):
        failed = bool(refused) and index == len(groups) - 1
        if group["name"] in bound and not failed:
            continue
        entries = [
            _binding(reading, DispatchBinding(-1, e["binding"], e["buffer"], e.get("size")))
            for e in group["entries"][: traces.MAX_GROUP_ENTRIES]
        ]
        message = str((error or {}).get("message", "")) if failed else ""
        shown.append(
            {"name": group["name"], "line": group.get("line"), "entries": entries, "error": message}
        )
    return shown


def _written_buffer(reading: _Reading, dispatch: Dispatch) -> tuple[str, int] | None:
    """The last buffer the dispatch binds to a read_write storage variable, and its
    element count (4-byte elements)."""
    if not dispatch.source:
        return None
    module = parse(dispatch.source)
    writable = {
        resource_numbers(module, v)
        for v in module.variables
        if v.address_space == "storage" and v.access == "read_write"
    }
    found = None
    for b in dispatch.bindings:
        if (b.group, b.binding) in writable and b.buffer in reading.buffers:
            size = b.size if b.size is not None else reading.buffers[b.buffer]["size"]
            found = (b.buffer, size // 4)
    return found


def _short_dispatch(
    dispatch: Dispatch, size: tuple[int, int, int], invocations: int, name: str, count: int
) -> dict[str, Any]:
    workgroups = " × ".join(trimmed(dispatch.workgroups))
    per = " × ".join(trimmed(size))
    return {
        "line": dispatch.line,
        "text": (
            f"Pass {dispatch.number} dispatches {workgroups} workgroups of {per}: "
            f"{invocations:,} invocations for the {count:,} elements of {name}, so "
            f"{count - invocations:,} elements get no invocation (round the workgroup count "
            "up: Math.ceil(n / size))."
        ),
    }


def _shared_uniforms(reading: _Reading, layouts: Mapping[str, Any]) -> None:
    """One uniform buffer bound by several dispatches of one entry point in one submit:
    every dispatch reads the same bytes, whatever the host wrote in between."""
    if reading.trace.get("submits", 0) != 1:
        return
    users: dict[tuple[str, str], list[Dispatch]] = {}
    for dispatch in reading.dispatches:
        for b in dispatch.bindings:
            if _kind(list(reading.buffers.get(b.buffer, {}).get("usage", []))) == "uniform":
                users.setdefault((b.buffer, dispatch.entry_point), []).append(dispatch)
    for (name, entry_point), dispatches in users.items():
        if len({d.number for d in dispatches}) < 2:
            continue
        numbers = " and ".join(str(d.number) for d in dispatches)
        values = _field_values(layouts.get(name))
        writes = sum(1 for w in reading.trace.get("writes", []) if w["buffer"] == name)
        written = (
            f" It is written {writes} times; only the last write reaches the GPU."
            if writes > 1
            else ""
        )
        reading.findings.append(
            {
                "line": reading.buffers[name].get("line"),
                "text": (
                    f"Uniform buffer {name} is bound in passes {numbers}, which run "
                    f"{entry_point} in one submit: every one of them reads the same "
                    f"bytes{values}."
                    f"{written} Give each pass its own buffer."
                ),
            }
        )


def _field_values(layout: Mapping[str, Any] | None) -> str:
    """ " (m = 16, k = 32)": a uniform's fields as the passes read them."""
    fields = [s for s in (layout or {}).get("segments", []) if s["kind"] == "field" and s["name"]]
    shown = [f"{f['name']} = {', '.join(str(v) for v in f['values'])}" for f in fields[:8]]
    return f" ({'; '.join(shown)})" if shown else ""


def _readback(traced: Mapping[str, Any]) -> dict[str, Any]:
    itemsize = np.dtype(NP_VIEWS.get(traced["dtype"], np.uint8)).itemsize
    return {**traced, "count": traced["size"] // itemsize}
