"""What a host program did on the GPU, as plain JSON data for the replay page's picture.

Every entry carries `line`, the program line of the call that made it (1-based, None when
unknown). Buffers are named by their label, or "buffer N" (N counts createBuffer calls) for
a buffer without one. Lists are capped at MAX_ENTRIES and values at MAX_VALUES per entry,
dispatches at MAX_DISPATCHES over all passes, a bind group's entries at MAX_GROUP_ENTRIES and
the modules' WGSL at MAX_TRACE_CODE in all; `dropped` counts what the caps left out, per
list. The caps are applied in the worker, so a page draws a trace of bounded size whatever
the program did (200 passes of 200 dispatches made a 24.7 MB page).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, NotRequired, TypedDict

import numpy as np

from kernels.engine.compare import json_number
from kernels.engine.wgsl import entry_points

MAX_ENTRIES = 200
MAX_VALUES = 256
# A module's WGSL travels in the trace up to this many characters (the picture and the
# warnings read each dispatch against its own module's code).
MAX_MODULE_CODE = 64 * 1024
MAX_TRACE_CODE = 256 * 1024
MAX_DISPATCHES = 200
MAX_GROUP_ENTRIES = 16
# Bind group slots a dispatch's trace keeps (WebGPU guarantees 4; more fail at finish()).
MAX_BIND_GROUPS = 8

USAGE_NAMES = (
    "MAP_READ",
    "MAP_WRITE",
    "COPY_SRC",
    "COPY_DST",
    "INDEX",
    "VERTEX",
    "UNIFORM",
    "STORAGE",
    "INDIRECT",
    "QUERY_RESOLVE",
)
NP_VIEWS = {
    "f32": np.float32,
    "u32": np.uint32,
    "i32": np.int32,
    "f64": np.float64,
    "u8": np.uint8,
    "i8": np.int8,
    "u16": np.uint16,
    "i16": np.int16,
}


class TracedBuffer(TypedDict):
    name: str
    size: int  # bytes
    usage: list[str]  # GPUBufferUsage flag names
    mapped_at_creation: bool
    line: int | None


class TracedWrite(TypedDict):
    """queue.writeBuffer, or the bytes a program put in a mapped range before unmap()."""

    buffer: str
    offset: int
    size: int
    dtype: str  # the TypedArray the program passed ("f32", "u32", ...), "bytes" otherwise
    values: list[Any]  # the first MAX_VALUES values, read as dtype (bytes as u8)
    line: int | None


class TracedModule(TypedDict):
    name: str  # label, or "module N"
    bytes: int
    line: int | None
    code: NotRequired[str]  # its WGSL, when under MAX_MODULE_CODE (absent in older traces)


class TracedPipeline(TypedDict):
    name: str
    module: str
    entry_point: str
    layout: str  # "auto", or the pipeline layout's label
    line: int | None


class TracedBinding(TypedDict):
    binding: int
    buffer: str
    offset: int
    size: int | None  # None: the rest of the buffer


class TracedBindGroup(TypedDict):
    name: str
    entries: list[TracedBinding]
    line: int | None
    # The layout's name: "pipeline.getBindGroupLayout(0)" for a pipeline's own (absent from
    # traces stored before it was kept).
    layout: NotRequired[str]


class TracedDispatch(TypedDict):
    pipeline: str
    bind_groups: dict[str, str]  # group index -> bind group name
    workgroups: list[int]  # x, y, z
    line: int | None


class TracedPass(TypedDict):
    name: str
    dispatches: list[TracedDispatch]
    line: int | None


class TracedCopy(TypedDict):
    source: str
    source_offset: int
    destination: str
    destination_offset: int
    size: int
    line: int | None


class TracedReadback(TypedDict):
    """A mapAsync(READ) that resolved: what the program could see."""

    buffer: str
    source: str  # the buffer last copied into it, "" when none
    offset: int
    size: int
    dtype: str  # how the program viewed the range; "f32" assumed when it did not
    values: list[Any]
    line: int | None


class Trace(TypedDict):
    buffers: list[TracedBuffer]
    writes: list[TracedWrite]
    modules: list[TracedModule]
    pipelines: list[TracedPipeline]
    bind_groups: list[TracedBindGroup]
    passes: list[TracedPass]
    copies: list[TracedCopy]
    readbacks: list[TracedReadback]
    submits: int
    dropped: dict[str, int]


def new_trace() -> Trace:
    return {
        "buffers": [],
        "writes": [],
        "modules": [],
        "pipelines": [],
        "bind_groups": [],
        "passes": [],
        "copies": [],
        "readbacks": [],
        "submits": 0,
        "dropped": {},
    }


# The lists of a Trace.
Listed = Literal[
    "buffers", "writes", "modules", "pipelines", "bind_groups", "passes", "copies", "readbacks"
]


def drop(trace: Trace, key: str, count: int = 1) -> None:
    """Count count entries of key that a cap left out."""
    trace["dropped"][key] = trace["dropped"].get(key, 0) + count


def append(trace: Trace, key: Listed, entry: Any) -> None:
    """Add entry to the list trace[key] unless it is full (then count it as dropped)."""
    entries: list[Any] = trace[key]
    if len(entries) < MAX_ENTRIES:
        entries.append(entry)
    else:
        drop(trace, key)


def usage_names(usage: int) -> list[str]:
    return [name for bit, name in enumerate(USAGE_NAMES) if usage & (1 << bit)]


def values_of(data: bytes | memoryview, dtype: str) -> list[Any]:
    """The first MAX_VALUES values of data read as dtype, as JSON numbers."""
    np_type = NP_VIEWS.get(dtype, np.uint8)
    itemsize = np.dtype(np_type).itemsize
    count = min(len(data) // itemsize, MAX_VALUES)
    array = np.frombuffer(data, dtype=np_type, count=count)
    if array.dtype.kind == "f" and not np.isfinite(array).all():
        return [json_number(float(v)) for v in array]
    values: list[Any] = array.tolist()
    return values


def itemsize(dtype: str) -> int:
    """Bytes per value of a view's dtype ("f32": 4); a dtype not known is bytes."""
    return int(np.dtype(NP_VIEWS.get(dtype, np.uint8)).itemsize)


@dataclass
class DispatchBinding:
    group: int
    binding: int
    buffer: str
    size: int | None
    offset: int = 0


@dataclass
class Dispatch:
    """A traced dispatch with what it ran: its pipeline's entry point and module source,
    and the buffers its bind groups bound."""

    number: int  # the pass's number, 1-based
    pipeline: str
    module: str
    entry_point: str
    source: str
    workgroups: list[int]
    bindings: list[DispatchBinding]
    line: int | None


def dispatches(trace: Mapping[str, Any], sources: Mapping[str, str]) -> list[Dispatch]:
    """The trace's dispatches in order, at most MAX_DISPATCHES (a trace stored before the
    worker capped them may hold more); sources maps module names to their WGSL (a module
    it lacks has source "")."""
    pipelines = {p["name"]: p for p in trace.get("pipelines", [])}
    groups = {g["name"]: g for g in trace.get("bind_groups", [])}
    found: list[Dispatch] = []
    for number, traced in enumerate(trace.get("passes", []), start=1):
        for dispatch in traced["dispatches"][: MAX_DISPATCHES - len(found)]:
            pipeline = pipelines.get(dispatch["pipeline"], {})
            source = sources.get(pipeline.get("module", ""), "")
            entry = pipeline.get("entry_point") or next(iter(entry_points(source)), "")
            bindings = [
                DispatchBinding(
                    int(index), e["binding"], e["buffer"], e.get("size"), e.get("offset", 0)
                )
                for index, name in sorted(dispatch["bind_groups"].items())[:MAX_BIND_GROUPS]
                for e in groups.get(name, {}).get("entries", [])[:MAX_GROUP_ENTRIES]
            ]
            found.append(
                Dispatch(
                    number,
                    dispatch["pipeline"],
                    pipeline.get("module", ""),
                    entry,
                    source,
                    list(dispatch["workgroups"]),
                    bindings,
                    dispatch.get("line"),
                )
            )
    return found


def module_sources(trace: Mapping[str, Any]) -> dict[str, str]:
    """The WGSL of each traced module that carries it, by module name."""
    return {m["name"]: m["code"] for m in trace.get("modules", []) if m.get("code")}
