"""What a browser's WebGPU refuses that wgpu-native, as wgpu-py 0.32 uses it, accepts.

wgpu-py opens a device with the adapter's own limits when none are asked for (llvmpipe
allows 32 KiB of workgroup storage and 1,024 invocations per workgroup); a page gets
WebGPU's defaults unless it asks for more. The device is opened with those defaults
(device.py). wgpu-native then enforces most of them itself, but not the workgroup
storage an entry point uses: that is checked here, as Dawn checks it when Chrome
creates the pipeline. Barriers in non-uniform control flow are found by uniformity.py.
"""

from __future__ import annotations

from collections.abc import Mapping

from kernels.engine.outcome import CompileError
from kernels.engine.uniformity import uniformity_error
from kernels.engine.wgsl import IDENT, Module, Param, Token, attribute_word, parse

# WebGPU's default limits (https://www.w3.org/TR/webgpu/#limits), by wgpu-py's names.
DEFAULT_LIMITS = {
    "max-texture-dimension-1d": 8192,
    "max-texture-dimension-2d": 8192,
    "max-texture-dimension-3d": 2048,
    "max-texture-array-layers": 256,
    "max-bind-groups": 4,
    "max-bind-groups-plus-vertex-buffers": 24,
    "max-bindings-per-bind-group": 1000,
    "max-dynamic-uniform-buffers-per-pipeline-layout": 8,
    "max-dynamic-storage-buffers-per-pipeline-layout": 4,
    "max-sampled-textures-per-shader-stage": 16,
    "max-samplers-per-shader-stage": 16,
    "max-storage-buffers-per-shader-stage": 8,
    "max-storage-textures-per-shader-stage": 4,
    "max-uniform-buffers-per-shader-stage": 12,
    "max-uniform-buffer-binding-size": 64 * 1024,
    "max-storage-buffer-binding-size": 128 * 1024 * 1024,
    "min-uniform-buffer-offset-alignment": 256,
    "min-storage-buffer-offset-alignment": 256,
    "max-vertex-buffers": 8,
    "max-buffer-size": 256 * 1024 * 1024,
    "max-vertex-attributes": 16,
    "max-vertex-buffer-array-stride": 2048,
    "max-inter-stage-shader-variables": 16,
    "max-color-attachments": 8,
    "max-color-attachment-bytes-per-sample": 32,
    "max-compute-workgroup-storage-size": 16384,
    "max-compute-invocations-per-workgroup": 256,
    "max-compute-workgroup-size-x": 256,
    "max-compute-workgroup-size-y": 256,
    "max-compute-workgroup-size-z": 64,
    "max-compute-workgroups-per-dimension": 65535,
}
WORKGROUP_STORAGE = "max-compute-workgroup-storage-size"

SCALARS = {"f32": 4, "i32": 4, "u32": 4, "bool": 4, "f16": 2, "atomic": 4}
SUFFIXES = {"f": 4, "i": 4, "u": 4, "h": 2}
# Types nest (arrays of arrays, structs of structs) at most this deep before we give up.
MAX_TYPE_DEPTH = 16

Layout = tuple[int, int]  # (size, alignment) in bytes


def device_limits(adapter_limits: Mapping[str, int]) -> dict[str, int]:
    """WebGPU's defaults, as far as the adapter allows them: a "max" is never asked above
    what the adapter has, an alignment ("min") never below."""
    wanted = {}
    for name, default in DEFAULT_LIMITS.items():
        if name in adapter_limits:
            pick = min if name.startswith("max") else max
            wanted[name] = pick(default, adapter_limits[name])
    return wanted


def module_refusal(kernel: str, source: str) -> CompileError | None:
    """Tint's error for a module that naga compiles but Chrome refuses, or None."""
    return uniformity_error(kernel, source)


def pipeline_refusal(source: str, entry_point: str | None, limits: Mapping[str, int]) -> str:
    """Dawn's words for a compute pipeline that wgpu-native creates but Chrome refuses
    (its workgroup variables are over the device's limit), or ""."""
    used = workgroup_storage(parse(source), entry_point or "")
    limit = limits[WORKGROUP_STORAGE]
    if used <= limit:
        return ""
    return (
        f"The total use of workgroup storage ({used} bytes) is larger than the maximum "
        f"allowed ({limit} bytes): maxComputeWorkgroupStorageSize, WebGPU's default limit, "
        "which a browser keeps unless the page asks for more in requiredLimits."
    )


def workgroup_storage(module: Module, entry_point: str) -> int:
    """Bytes of var<workgroup> the entry point ("" for the only one) uses, itself or
    through what it calls, each rounded up to its alignment, as Tint counts them (0 for
    what it cannot size)."""
    function = module.entry_point(entry_point)
    names = _used_names(module, function.name) if function else set()
    cache: dict[str, Layout | None] = {}
    total = 0
    for variable in module.variables:
        if variable.address_space == "workgroup" and variable.name in names:
            found = layout(module, variable.type, cache)
            if found is not None:
                size, align = found
                total += _round_up(align, size)
    return total


def _used_names(module: Module, entry_point: str) -> set[str]:
    """The identifiers in the bodies of the entry point and of every function it reaches."""
    bodies = {f.name: f.body for f in module.functions}
    names: set[str] = set()
    queue = [entry_point] if entry_point in bodies else []
    seen = set(queue)
    while queue:
        for j in bodies[queue.pop()]:
            module.steps += 1
            token = module.tokens[j]
            if token.kind != IDENT:
                continue
            names.add(token.text)
            if token.text in bodies and token.text not in seen:
                seen.add(token.text)
                queue.append(token.text)
    return names


def layout(
    module: Module, tokens: list[Token], cache: dict[str, Layout | None], depth: int = 0
) -> Layout | None:
    """A type's size and alignment by WGSL's memory layout rules; None if unknown."""
    module.steps += 1
    name, args = module.type_parts(tokens)
    if depth > MAX_TYPE_DEPTH or not name:
        return None
    if name in SCALARS:
        return SCALARS[name], SCALARS[name]
    if name[:3] in ("vec", "mat"):
        return _vector_or_matrix(module, name, args, cache, depth)
    if name == "array" and len(args) == 2:
        element = layout(module, args[0], cache, depth + 1)
        count = module.value(args[1])
        if element is None or count is None:
            return None
        return count * _round_up(element[1], element[0]), element[1]
    if name in module.structs or name in module.aliases:
        if name not in cache:
            cache[name] = None  # a cycle ends here
            if name in module.aliases:
                cache[name] = layout(module, module.aliases[name], cache, depth + 1)
            else:
                cache[name] = _struct(module, module.structs[name], cache, depth)
        return cache[name]
    return None


def _vector_or_matrix(
    module: Module, name: str, args: list[list[Token]], cache: dict[str, Layout | None], depth: int
) -> Layout | None:
    """vecN<T> / vecNf and matCxR<T> / matCxRf: a matrix is C columns of vecR."""
    shape, suffix = (name[3:4], name[4:]) if name[:3] == "vec" else (name[3:6], name[6:])
    if suffix:
        scalar = SUFFIXES.get(suffix)
    else:
        element = layout(module, args[0], cache, depth + 1) if len(args) == 1 else None
        scalar = element[0] if element else None
    if scalar is None:
        return None
    rows = shape[-1:]
    if rows not in ("2", "3", "4") or (name[:3] == "mat" and shape[:2] not in ("2x", "3x", "4x")):
        return None
    align = scalar * (2 if rows == "2" else 4)
    if name[:3] == "vec":
        return scalar * int(rows), align
    return int(shape[0]) * align, align


def _struct(
    module: Module, members: list[Param], cache: dict[str, Layout | None], depth: int
) -> Layout | None:
    offset = biggest = 0
    for member in members:
        found = layout(module, member.type, cache, depth + 1)
        if found is None:
            return None
        size, align = found
        align = _attribute_number(module, member, "align") or align
        size = _attribute_number(module, member, "size") or size
        offset = _round_up(align, offset) + size
        biggest = max(biggest, align)
    return (_round_up(biggest, offset), biggest) if biggest else None


def _attribute_number(module: Module, member: Param, name: str) -> int | None:
    if not attribute_word(member.attributes, name):
        return None
    attribute = next(a for a in member.attributes if a.name == name)
    return module.value(attribute.args[0])


def _round_up(align: int, value: int) -> int:
    return -(-value // align) * align if align > 0 else value
