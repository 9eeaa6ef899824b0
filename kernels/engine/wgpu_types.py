"""The C types wgpu-py makes on a replay's path, parsed in one go before a device opens.

wgpu-py builds its descriptors with cffi, which parses a type string the first time one is
made (ffi.new("WGPUBufferDescriptor *")). Each parse is a pycparser run over a preamble
that declares every typedef of wgpu.h, 15 to 20 ms, and a worker makes 41 of them to open
its device and run its first harness and program: half of its start, which a reader's
first replay after a restart waited for. Declared together as the parameters of one
function, they take one run of the parser (bench/worker_start.py measures both ways).
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("kernels.engine.wgpu_types")

# What opening a device (device.open_device) and the warm-up jobs (worker.WARM_JOBS: a
# harness, a program, each pass timed) make, spelled as wgpu-py spells them: cffi keeps
# each parse under its exact string. tests/kernels/test_wgpu_types.py fails when a wgpu-py
# release makes one that is not here.
REPLAY_TYPES = (
    "WGPUAdapter[]",
    "WGPUAdapterInfo *",
    "WGPUBindGroupDescriptor *",
    "WGPUBindGroupEntry *",
    "WGPUBindGroupEntry[]",
    "WGPUBufferDescriptor *",
    "WGPUBufferMapCallbackInfo *",
    "WGPUChainedStruct *",
    "WGPUChainedStruct * ",
    "WGPUCommandBuffer[]",
    "WGPUCommandBufferDescriptor *",
    "WGPUCommandEncoderDescriptor *",
    "WGPUComputePassDescriptor *",
    "WGPUComputePipelineDescriptor *",
    "WGPUComputeState *",
    "WGPUDeviceDescriptor *",
    "WGPUDeviceExtras *",
    "WGPUDeviceLostCallbackInfo *",
    "WGPUFeatureName[]",
    "WGPUInstanceDescriptor *",
    "WGPULimits *",
    "WGPUNativeLimits *",
    "WGPUPassTimestampWrites *",
    "WGPUQuerySetDescriptor *",
    "WGPUQueueDescriptor *",
    "WGPURequestDeviceCallbackInfo *",
    "WGPUShaderModuleDescriptor *",
    "WGPUShaderSourceWGSL *",
    "WGPUStringView *",
    "WGPUUncapturedErrorCallbackInfo *",
    "char []",
    "intptr_t",
    "uint32_t []",
    "uint8_t *",
    "uint8_t []",
    "uintptr_t",
    "void(WGPUDevice const *, WGPUDeviceLostReason, WGPUStringView, void *, void *)",
    "void(WGPUDevice const *, WGPUErrorType, WGPUStringView, void *, void *)",
    "void(WGPULogLevel, WGPUStringView, void *)",
    "void(WGPUMapAsyncStatus, WGPUStringView, void *, void *)",
    "void(WGPURequestDeviceStatus, WGPUDevice, WGPUStringView, void *, void *)",
)


def parse_ahead(ffi: Any, types: tuple[str, ...] = REPLAY_TYPES) -> int:
    """Put the types not parsed yet into ffi's cache of parsed types, from one parse; how
    many. This reaches into cffi's parser (what ffi.typeof does for one type, for all at
    once): where a cffi release has changed it, nothing is parsed ahead and each type is
    parsed on first use, as without this."""
    wanted = [cdecl for cdecl in types if cdecl not in ffi._parsed_types]
    if not wanted:
        return 0
    try:
        parser = ffi._parser
        with ffi._lock:
            declaration = "void __dummy(\n" + ",\n".join(wanted) + "\n);"
            ast = parser._parse(declaration)[0]
            params = ast.ext[-1].type.args.params
            parsed = {}
            for cdecl, node in zip(wanted, params, strict=True):
                kind, _ = parser._get_type_and_quals(node.type)
                raw_function = kind.is_raw_function
                if raw_function:
                    kind = kind.as_function_pointer()
                parsed[cdecl] = (ffi._get_cached_btype(kind), raw_function)
            ffi._parsed_types.update(parsed)
    except Exception:
        log.warning("wgpu-py's C types could not be parsed ahead", exc_info=True)
        return 0
    return len(parsed)
