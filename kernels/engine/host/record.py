"""The shim's record of WebGPU calls, checked before anything is made from it.

The record is written by JavaScript that shares its realm with the program, so it is read as
untrusted input: every operation and its fields are checked against SCHEMA, and the operation
is then run by the method the device timeline's table names (gpu.OPERATIONS), never by a
method looked up by the op's name.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from kernels.engine.host import trace as traces

MAX_LABEL_CHARS = 256  # the shim cuts labels to 200 characters and an ellipsis
MAX_CODE_CHARS = 1024 * 1024  # a shader module's WGSL (the shim refuses more, at its line)
MAX_URL_CHARS = 2048
MAX_LIST = 10_000  # entries of a list in one call (bind group entries, command buffers)
MAX_SAFE_INTEGER = 2**53 - 1
U32_MAX = 2**32 - 1

# A field's spec is a scalar kind (below), an id of an object of the kind named ("GPUBuffer"),
# ("?", spec) for spec or null, [spec] for a list of at most MAX_LIST, or a dict of the fields
# of a nested object.
Spec = str | tuple[str, Any] | list[Any] | dict[str, Any]
SCALARS: dict[str, Callable[[Any], bool]] = {
    "uint": lambda v: type(v) is int and 0 <= v <= MAX_SAFE_INTEGER,
    "u32": lambda v: type(v) is int and 0 <= v <= U32_MAX,
    "flag": lambda v: type(v) is bool,
    "label": lambda v: type(v) is str and len(v) <= MAX_LABEL_CHARS,
    "code": lambda v: type(v) is str and len(v) <= MAX_CODE_CHARS,
    "url": lambda v: type(v) is str and len(v) <= MAX_URL_CHARS,
    "dtype": lambda v: v == "bytes" or v in traces.NP_VIEWS,
    "bufferType": lambda v: v in ("uniform", "storage", "read-only-storage"),
    "workgroups": lambda v: (
        type(v) is list and len(v) == 3 and all(type(c) is int and 0 <= c <= U32_MAX for c in v)
    ),
    "constants": lambda v: (
        type(v) is dict
        and len(v) <= 64
        and all(
            len(k) <= MAX_LABEL_CHARS and type(c) in (int, float) and math.isfinite(c)
            for k, c in v.items()
        )
    ),
    "caller": lambda v: (
        v is None
        or (
            type(v) is list
            and len(v) == 2
            and type(v[0]) is str
            and len(v[0]) <= MAX_LABEL_CHARS
            and type(v[1]) is int
        )
    ),
}
# Ids: a new one, or one the record made before as an object of the named kind.
KINDS = (
    "GPUBuffer",
    "GPUShaderModule",
    "GPUComputePipeline",
    "GPUBindGroupLayout",
    "GPUPipelineLayout",
    "GPUBindGroup",
    "GPUCommandEncoder",
    "GPUCommandBuffer",
)
ENCODER: dict[str, Spec] = {"encoder": "GPUCommandEncoder"}
REQUEST: dict[str, Spec] = {"request": "uint"}
SCHEMA: dict[str, dict[str, Spec]] = {
    "requestAdapter": REQUEST,
    "requestDevice": REQUEST,
    "popErrorScope": REQUEST,
    "onSubmittedWorkDone": REQUEST,
    "getCompilationInfo": {**REQUEST, "module": "GPUShaderModule"},
    "fetch": {**REQUEST, "url": "url"},
    "mapAsync": {**REQUEST, "buffer": "GPUBuffer", "mode": "u32", "offset": "uint", "size": "uint"},
    "destroyDevice": {},
    "createBuffer": {
        "id": "new",
        "label": "label",
        "size": "uint",
        "usage": "u32",
        "mappedAtCreation": "flag",
        "caller": "caller",
    },
    "writeBuffer": {"buffer": "GPUBuffer", "offset": "uint", "blob": "uint", "dtype": "dtype"},
    "unmap": {"buffer": "GPUBuffer", "ranges": [{"offset": "uint", "blob": "uint"}]},
    "destroyBuffer": {"buffer": "GPUBuffer"},
    "view": {"buffer": "GPUBuffer", "dtype": "dtype"},
    "createShaderModule": {"id": "new", "label": "label", "code": "code"},
    "createComputePipeline": {
        "id": "new",
        "label": "label",
        "layout": "layout",
        "compute": {
            "module": "GPUShaderModule",
            "entryPoint": ("?", "label"),
            "constants": "constants",
        },
    },
    "getBindGroupLayout": {"id": "new", "pipeline": "GPUComputePipeline", "index": "u32"},
    "createBindGroupLayout": {
        "id": "new",
        "label": "label",
        "entries": [
            {
                "binding": "u32",
                "visibility": "u32",
                "buffer": {
                    "type": "bufferType",
                    "hasDynamicOffset": "flag",
                    "minBindingSize": "uint",
                },
            }
        ],
    },
    "createPipelineLayout": {
        "id": "new",
        "label": "label",
        "bindGroupLayouts": ["GPUBindGroupLayout"],
    },
    "createBindGroup": {
        "id": "new",
        "label": "label",
        "layout": "GPUBindGroupLayout",
        "entries": [
            {"binding": "u32", "buffer": "GPUBuffer", "offset": "uint", "size": ("?", "uint")}
        ],
    },
    "createCommandEncoder": {"id": "new", "label": "label"},
    "beginComputePass": {**ENCODER, "pass": "uint", "label": "label"},
    "setPipeline": {**ENCODER, "pipeline": "GPUComputePipeline"},
    "setBindGroup": {**ENCODER, "index": "u32", "group": ("?", "GPUBindGroup"), "offsets": ["u32"]},
    "dispatchWorkgroups": {**ENCODER, "pass": "uint", "workgroups": "workgroups"},
    "endPass": {**ENCODER, "pass": "uint"},
    "copyBufferToBuffer": {
        **ENCODER,
        "source": "GPUBuffer",
        "sourceOffset": "uint",
        "destination": "GPUBuffer",
        "destinationOffset": "uint",
        "size": "uint",
    },
    "clearBuffer": {**ENCODER, "buffer": "GPUBuffer", "offset": "uint", "size": ("?", "uint")},
    "finish": {**ENCODER, "id": "new"},
    "submit": {"commandBuffers": ["GPUCommandBuffer"]},
}
# What each op makes, under its "id" (getBindGroupLayout's layout, finish's command buffer).
MAKES = {
    "createBuffer": "GPUBuffer",
    "createShaderModule": "GPUShaderModule",
    "createComputePipeline": "GPUComputePipeline",
    "getBindGroupLayout": "GPUBindGroupLayout",
    "createBindGroupLayout": "GPUBindGroupLayout",
    "createPipelineLayout": "GPUPipelineLayout",
    "createBindGroup": "GPUBindGroup",
    "createCommandEncoder": "GPUCommandEncoder",
    "finish": "GPUCommandBuffer",
}


def check_entry(entry: Any, kinds: Mapping[int, str]) -> str:
    """Why entry is not a call the record can stand for, or "" when it is. kinds maps the
    ids made so far to their objects' kinds."""
    if type(entry) is not dict or type(entry.get("op")) is not str:
        return "the record holds something that is not a call"
    if entry["op"] not in SCHEMA:
        return f"the record names a call Kernelbin does not know ({entry['op'][:40]!r})"
    line = entry.get("line")
    if line is not None and (type(line) is not int or line < 1):
        entry["line"] = None
        return "the call's line is not a line number"
    fields = {key: value for key, value in entry.items() if key not in ("op", "line")}
    return _check(fields, SCHEMA[entry["op"]], kinds, "")


def _check(value: Any, spec: Spec, kinds: Mapping[int, str], where: str) -> str:
    if isinstance(spec, dict):
        if type(value) is not dict or set(value) != set(spec):
            return f"{where or 'the call'} does not have the fields {', '.join(sorted(spec))}"
        for name, inner in spec.items():
            if problem := _check(value[name], inner, kinds, f"{where}.{name}".lstrip(".")):
                return problem
        return ""
    if isinstance(spec, list):
        if type(value) is not list or len(value) > MAX_LIST:
            return f"{where} is not a list of at most {MAX_LIST:,}"
        for index, item in enumerate(value):
            if problem := _check(item, spec[0], kinds, f"{where}[{index}]"):
                return problem
        return ""
    if isinstance(spec, tuple):
        return "" if value is None else _check(value, spec[1], kinds, where)
    if spec in SCALARS:
        return "" if SCALARS[spec](value) else f"{where} is not a valid {spec}"
    if spec == "layout" and value == "auto":
        return ""
    fresh = spec == "new"
    if type(value) is not int or value < 1 or (fresh and value in kinds):
        return f"{where} is not a {'new id' if fresh else 'WebGPU object id'}"
    wanted = "GPUPipelineLayout" if spec == "layout" else spec
    if not fresh and kinds.get(value) != wanted:
        return f"{where} is not a {wanted} made by this program"
    return ""
