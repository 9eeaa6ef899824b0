"""The device a worker runs on: the best adapter wgpu offers, with WebGPU's default limits.

wgpu, and the WGSL reader that WebGPU's limits come with, are imported on first use, not
with this module: the pool imports NoAdapter here, and the web process must not load a
GPU driver, nor wait for more than it needs before it starts its replay workers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import wgpu

# Bump when the same inputs could end in a different outcome: it is part of the
# environment id, so cached runs from an older runner are not reused.
# 2: WebGPU's default limits, the checks a browser makes, and the source's analysis.
# 3: new buffers zeroed as in WebGPU (the NaN sentinel only in a diagnostic second run).
# 4: a program's checked readbacks take their harness buffer's shape and its report.
# 5: the analysis says how each entry point uses workgroup memory and where its barriers are.
# 6: a program's record is checked, its exceptions are `threw`, what it controls is capped.
# 7: a pass whose dispatch and output differ in size counts the stores of each invocation.
# 8: each pass is timed on the device (timestamp queries) and the run's speed reported.
RUNNER_VERSION = 8
# The feature a device is opened with, where the adapter has it, to time each pass.
TIMESTAMPS = "timestamp-query"

BACKEND_ORDER = ("vulkan", "metal", "d3d12", "opengl")
# wgpu-native's names for them, for an instance that loads only the one asked for.
INSTANCE_BACKENDS = {"vulkan": "Vulkan", "metal": "Metal", "d3d12": "DX12", "opengl": "GL"}
ADAPTER_TYPE_ORDER = ("discretegpu", "integratedgpu", "virtualgpu", "unknown", "cpu")


class NoAdapter(RuntimeError):
    """No GPU adapter (hardware or llvmpipe) could be opened."""


@dataclass(frozen=True)
class Environment:
    adapter: str
    backend: str
    description: str
    software: bool
    wgpu: str
    wgpu_native: str
    timestamps: bool = False  # the device can time passes (opened with TIMESTAMPS)
    # Its measured peaks (outcome.Peaks, kernels/engine/peaks.py), once the worker has them;
    # not part of the id: a new measurement is not a new environment.
    peaks: Mapping[str, Any] | None = None

    @property
    def label(self) -> str:
        return f"{self.adapter} via {self.backend}"

    @property
    def id(self) -> str:
        """Part of a run's cache key: a new adapter, driver or runner means a new run."""
        parts = (
            self.adapter,
            self.backend,
            self.description,
            self.wgpu,
            self.wgpu_native,
            str(RUNNER_VERSION),
        )
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()

    def as_dict(self) -> dict[str, Any]:
        return {
            **dataclasses.asdict(self),
            "runner": RUNNER_VERSION,
            "label": self.label,
            "id": self.id,
        }


def import_wgpu() -> Any:
    """wgpu, imported on first use: web processes import this module (for NoAdapter)
    and must not load a GPU driver."""
    import wgpu

    return wgpu


# The handles of the mappings wgpu-native has not called back yet (map_now), by address: it
# calls each once, maybe only on a later poll after an error, so each is kept until then.
_MAPPING: dict[int, Any] = {}
# Polls a mapping may wait for: each waits for the queue, so one is all a mapping of
# finished work takes; the bound turns a mapping that never ends into an error.
MAX_MAP_POLLS = 100


@functools.cache
def _map_callback() -> Any:
    """The one callback every mapping of map_now's reports to, made once per process
    rather than once a mapping (as wgpu-py's map_async does): cffi makes each callback in
    executable memory of its own. Each mapping is told apart by its handle."""
    from wgpu.backends.wgpu_native._ffi import ffi

    @ffi.callback("void(WGPUMapAsyncStatus, WGPUStringView, void *, void *)")  # type: ignore[untyped-decorator]
    def mapped(status: int, message: Any, handle: Any, userdata2: Any) -> None:
        kept = _MAPPING.pop(int(ffi.cast("uintptr_t", handle)), None)
        if kept is not None:
            ffi.from_handle(kept).append(status)

    return mapped


def map_now(buffer: Any, write: bool = False, offset: int = 0, size: int | None = None) -> None:
    """Map buffer for reading (write: for writing), as wgpu-py's map_sync does, but on
    this thread and without wgpu-py's poll thread.

    map_sync wakes that thread, which polls until the mapping is done and wakes this one:
    two hand-offs between threads a mapping, and a replay maps up to four buffers (the
    readback, the timestamps, the repeats' timestamps, the capture). Here this thread
    polls the device itself. That is safe only while the poll thread is not polling too
    (wait_for_queue says why), so a worker maps every buffer here and nothing of wgpu-py
    that starts the poll thread (its map_sync, read_buffer or *_async calls) runs in a job.

    There is no empty submit first, as map_sync makes before a buffer's first read mapping
    for queue writes still pending on it (gfx-rs/wgpu-native#305): a caller whose buffer
    the queue may have written waits for the queue first (wait_for_queue submits). Raises
    wgpu's GPUValidationError for a mapping WebGPU refuses, RuntimeError for one that fails.
    """
    from wgpu import enums
    from wgpu.backends.wgpu_native._api import libf, new_struct
    from wgpu.backends.wgpu_native._ffi import ffi, lib

    if buffer.map_state != enums.BufferMapState.unmapped:
        raise RuntimeError(f"Can only map a buffer that is unmapped, not {buffer.map_state}.")
    offset, size = buffer._check_range(offset, size)
    mode = lib.WGPUMapMode_Write if write else lib.WGPUMapMode_Read
    statuses: list[int] = []
    handle = ffi.new_handle(statuses)
    _MAPPING[int(ffi.cast("uintptr_t", handle))] = handle
    info = new_struct(
        "WGPUBufferMapCallbackInfo",
        mode=lib.WGPUCallbackMode_AllowProcessEvents,
        callback=_map_callback(),
        userdata1=handle,
    )
    libf.wgpuBufferMapAsync(buffer._internal, mode, offset, size, info)
    for _ in range(MAX_MAP_POLLS):
        if statuses:
            break
        libf.wgpuDevicePoll(buffer._device._internal, True, ffi.NULL)
    if statuses != [lib.WGPUMapAsyncStatus_Success]:
        raise RuntimeError(f"Could not map buffer {buffer.label!r} (status {statuses}).")
    # The state wgpu-py's own mapping leaves, which read_mapped, write_mapped and unmap use.
    buffer._map_state = enums.BufferMapState.mapped
    buffer._mapped_status = (offset, offset + size, mode)
    buffer._mapped_memoryviews = []


def read_now(device: Any, buffer: Any) -> bytes:
    """The bytes of buffer (which must allow COPY_SRC), as wgpu-py's queue.read_buffer
    reads them, through a staging buffer mapped here (map_now)."""
    wgpu = import_wgpu()
    staging = device.create_buffer(
        size=buffer.size, usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST
    )
    encoder = device.create_command_encoder()
    encoder.copy_buffer_to_buffer(buffer, 0, staging, 0, buffer.size)
    device.queue.submit([encoder.finish()])
    map_now(staging)
    data = bytes(staging.read_mapped(copy=False))
    staging.unmap()
    staging.destroy()
    return data


def wait_for_queue(device: Any) -> None:
    """Block this thread until the work submitted to the device is done.

    Cheaper than mapping a fence buffer, which costs a buffer, an empty submit and a
    hand-off to wgpu-py's poll thread and back: on the H100's host 0.13 to 0.21 ms, against
    0.02 to 0.03 (bench/worker_messages.py). It polls through wgpu-py's private
    _poll_wait (wgpu is pinned to 0.32). The empty submit is what a wait waits for:
    wgpu-native frees the buffers destroyed before it once it is done. Never while one of
    wgpu-py's own mappings (map_sync) is pending: its poll thread polls then too, and on
    the H100 the two stalled each other (commit 54e54c1); map_now's never are.
    """
    device.queue.submit([])
    device._poll_wait()


def _load_only(backend: str) -> None:
    """Have wgpu-native load one backend: otherwise it opens every one it knows as its
    instance is made, EGL's displays too. A process that made its instance already keeps
    it, and open_device still lists only the adapters of the backend asked for."""
    from wgpu.backends.wgpu_native.extras import set_instance_extras

    with contextlib.suppress(RuntimeError):
        set_instance_extras(backends=[INSTANCE_BACKENDS[backend]])


def open_device(
    backend: str = "", *, timestamps: bool = True
) -> tuple[wgpu.GPUDevice, Environment]:
    """Open a device on the best adapter for the backend.

    "" prefers Vulkan (then Metal, D3D12, OpenGL) and, within a backend, a real GPU over
    llvmpipe; "vulkan", "opengl", "metal" or "d3d12" insist on one backend. timestamps:
    ask for timestamp queries where the adapter has them (False: what timing costs).
    """
    wgpu = import_wgpu()
    import wgpu.backends.wgpu_native as native
    from wgpu.backends.wgpu_native._ffi import ffi

    from kernels.engine.webgpu import device_limits
    from kernels.engine.wgpu_types import parse_ahead

    parse_ahead(ffi)
    wanted = backend.strip().lower()
    if wanted and wanted not in BACKEND_ORDER:
        raise ValueError(f"unknown backend {backend!r}; use one of {', '.join(BACKEND_ORDER)}")
    if wanted:
        _load_only(wanted)
    try:
        adapters = wgpu.gpu.enumerate_adapters_sync()
    except Exception as e:
        raise NoAdapter(f"Could not list GPU adapters: {e}") from e
    candidates = [
        a
        for a in adapters
        if a.info["backend_type"].lower() == wanted
        or (not wanted and a.info["backend_type"].lower() in BACKEND_ORDER)
    ]
    if not candidates:
        found = "; ".join(a.summary for a in adapters) or "none"
        which = f"{backend} adapter" if wanted else "GPU adapter"
        raise NoAdapter(
            f"No {which} found (adapters found: {found}). Install a GPU driver or "
            "Mesa's llvmpipe (mesa-vulkan-drivers) to replay kernels."
        )

    def rank(adapter: Any) -> tuple[int, int]:
        info = adapter.info
        kind = info["adapter_type"].lower()
        return (
            BACKEND_ORDER.index(info["backend_type"].lower()),
            ADAPTER_TYPE_ORDER.index(kind) if kind in ADAPTER_TYPE_ORDER else 3,
        )

    adapter = min(candidates, key=rank)
    try:
        # Without required_limits wgpu-py asks for the adapter's own maxima (llvmpipe: 32 KiB
        # of workgroup storage, 1,024 invocations per workgroup); a page gets WebGPU's
        # defaults, so a kernel that only runs on more must fail here as it does there.
        # Timestamp queries are the replay's own (a program's device answers without
        # them: the shim has no query sets), so asking for them changes nothing it sees.
        features = [TIMESTAMPS] if timestamps and TIMESTAMPS in adapter.features else []
        device = adapter.request_device_sync(
            label="kernelbin",
            required_features=features,
            required_limits=device_limits(adapter.limits),
        )
    except Exception as e:
        raise NoAdapter(f"Could not open a device on {adapter.summary}: {e}") from e
    info = adapter.info
    env = Environment(
        adapter=info["device"] or adapter.summary,
        backend=info["backend_type"],
        description=info["description"],
        software=info["adapter_type"] == "CPU",
        wgpu=wgpu.__version__,
        wgpu_native=native.__version__,
        timestamps=TIMESTAMPS in device.features,
    )
    return device, env
