"""Run WGSL compute kernels under a harness with wgpu-py and compare with a reference.

A pure module: no Django. It runs inside the worker processes (kernels/worker.py), which
hold one warm device each; the web process only needs the pool. wgpu is imported inside
the functions that use the GPU, so importing this module for its types costs nothing.

What wgpu-py 0.32 can and cannot tell us is recorded in shared/notes/wgpu-headless.md;
the error texts parsed here are pinned by tests/kernels/test_runner.py.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from kernels.engine.outcome import Status
from kernels.harness import (
    Buffer,
    Harness,
    HarnessError,
    canonical_digest,
    parse_harness,
    resolve_fixture,
)
from kernels.references import REFERENCES

if TYPE_CHECKING:
    import wgpu

# Bump when the same inputs could end in a different outcome: it is part of the
# environment id, so cached runs from an older runner are not reused.
RUNNER_VERSION = 1

MiB = 1024 * 1024
NP_DTYPES = {"f32": np.float32, "u32": np.uint32, "i32": np.int32}
# Cells a kernel never wrote keep these bits. For f32 it is a quiet NaN with a payload
# that arithmetic does not produce, so "never written" differs from "computed NaN".
SENTINEL_BITS = {"f32": 0x7FC0DEAD, "u32": 0xDEADBEEF, "i32": 0xDEADBEEF}
SHOW_VALUES_UP_TO = 4096
FIRST_BAD = 10
GRID_SIZE = 64
# Grid cell codes, in rising order of severity: a block shows its worst cell.
OK, WRONG, NONFINITE, UNWRITTEN = 0, 1, 2, 3
GRID_CHARS = np.array([".", "x", "n", "u"])

BACKEND_ORDER = ("vulkan", "metal", "d3d12", "opengl")
ADAPTER_TYPE_ORDER = ("discretegpu", "integratedgpu", "virtualgpu", "unknown", "cpu")


@dataclass(frozen=True)
class Limits:
    """Caps checked before anything touches the device."""

    max_buffer_bytes: int = 128 * MiB
    max_total_bytes: int = 512 * MiB
    max_workgroups_per_dim: int = 65535
    # dispatch x*y*z times the entry point's workgroup size, summed over passes
    max_invocations: int = 2**26
    max_readback_bytes: int = 64 * MiB

    @classmethod
    def from_dict(cls, overrides: Mapping[str, object]) -> Limits:
        known = {f.name for f in dataclasses.fields(cls)}
        for key, value in overrides.items():
            if key not in known:
                raise ValueError(f"unknown limit {key!r}; known: {', '.join(sorted(known))}")
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"limit {key} must be a positive integer (got {value!r})")
        return cls(**overrides)  # type: ignore[arg-type]


DEFAULT_LIMITS = Limits()


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

    def as_dict(self) -> dict:
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


def open_device(backend: str = "") -> tuple[wgpu.GPUDevice, Environment]:
    """Open a device on the best adapter for the backend.

    "" prefers Vulkan (then Metal, D3D12, OpenGL) and, within a backend, a real GPU over
    llvmpipe; "vulkan", "opengl", "metal" or "d3d12" insist on one backend.
    """
    wgpu = import_wgpu()
    import wgpu.backends.wgpu_native as native

    wanted = backend.strip().lower()
    if wanted and wanted not in BACKEND_ORDER:
        raise ValueError(f"unknown backend {backend!r}; use one of {', '.join(BACKEND_ORDER)}")
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
        # No required_limits: wgpu-py then asks for the adapter's own limits.
        device = adapter.request_device_sync(label="kernelbin")
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
    )
    return device, env


def load_npy(path: Path) -> np.ndarray:
    return np.load(path, allow_pickle=False)


# memo(key, compute) returns compute()'s value, or the value kept from an earlier call
# with the same key. Worker processes keep one across jobs (kernels/worker.py), so a
# fixture is read, and a harness's inputs and reference are computed, once per worker.
Memo = Callable[[tuple, Callable[[], Any]], Any]


def no_memo(key: tuple, compute: Callable[[], Any]) -> Any:
    return compute()


class _Stop(Exception):
    """Ends a run early with an outcome other than a comparison."""

    def __init__(self, status: Status, message: str, error: str = "", **extra: object) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.error = error
        self.extra = extra


def execute(
    device: wgpu.GPUDevice,
    env: Environment,
    sources: Mapping[str, str],
    harness: Harness | Mapping | None,
    fixtures_dir: Path,
    limits: Limits = DEFAULT_LIMITS,
    *,
    memo: Memo = no_memo,
) -> dict:
    """Run the harness's passes and return a JSON-serialisable outcome dict.

    sources maps kernel names to WGSL; "self" is the kernel being replayed. With no
    harness (None or {}) the sources are only compiled. Never raises for anything a
    kernel or harness can do wrong; a bug in the runner itself does raise.
    """
    run = _Run(device, env, sources, Path(fixtures_dir), limits, memo)
    try:
        return run.execute(harness)
    except _Stop as stop:
        return run.outcome(stop.status, stop.message, error=stop.error, **stop.extra)
    finally:
        run.release()


class _Run:
    def __init__(
        self,
        device: wgpu.GPUDevice,
        env: Environment,
        sources: Mapping[str, str],
        fixtures_dir: Path,
        limits: Limits,
        memo: Memo,
    ) -> None:
        self.device = device
        self.env = env
        self.sources = sources
        self.fixtures_dir = fixtures_dir
        self.limits = limits
        self.memo = memo
        self.timings: dict[str, float | None] = {"compile_ms": None, "run_ms": None}
        self.warnings: list[str] = []
        self.gpu_buffers: dict[str, Any] = {}

    def outcome(self, status: Status, message: str, *, error: str = "", **extra: object) -> dict:
        result: dict = {
            "status": str(status),
            "message": message,
            "environment": self.env.as_dict(),
            "timings": self.timings,
            "warnings": self.warnings,
            "outputs": extra.pop("outputs", []),
        }
        if error:
            result["error"] = error
        result.update(extra)
        return result

    def release(self) -> None:
        # Free device memory now rather than when the garbage collector gets to it:
        # a worker runs hundreds of jobs on one device.
        for buf in self.gpu_buffers.values():
            buf.destroy()
        self.gpu_buffers.clear()

    def execute(self, spec: Harness | Mapping | None) -> dict:
        if not spec:
            return self.compile_only()
        try:
            harness = spec if isinstance(spec, Harness) else parse_harness(spec, self.fixtures_dir)
        except HarnessError as e:
            raise _Stop(Status.REJECTED, f"The harness is invalid: {e}", str(e)) from None
        for name in sorted(harness.kernel_names()):
            if not isinstance(self.sources.get(name), str):
                raise _Stop(
                    Status.REJECTED,
                    f"No WGSL source was given for kernel {name!r}.",
                    f"sources has no {name!r}",
                )
        check_limits(harness, self.sources, self.limits)
        # A harness's inputs and reference do not depend on the kernel: every version
        # replayed under it shares them.
        key = ("inputs", canonical_digest(harness), *self.file_stamps(harness))
        host, expected = self.memo(key, lambda: self.inputs(harness))
        self.warn_about_backend(harness)

        started = time.perf_counter()
        try:
            pipelines = self.compile(harness)
        finally:
            self.timings["compile_ms"] = _ms(started)

        started = time.perf_counter()
        try:
            got = self.dispatch(harness, host, pipelines, readback_names(harness))
        finally:
            self.timings["run_ms"] = _ms(started)
        return self.compare(harness, host, got, expected)

    def compile_only(self) -> dict:
        wgpu = import_wgpu()

        started = time.perf_counter()
        try:
            for kernel, source in self.sources.items():
                try:
                    self.device.create_shader_module(code=source)
                except wgpu.GPUValidationError as e:
                    info = parse_compile_error(kernel, str(e))
                    raise _Stop(
                        Status.COMPILE_ERROR, _compile_message(info), info["text"], compile=info
                    ) from None
        finally:
            self.timings["compile_ms"] = _ms(started)
        return self.outcome(Status.NO_REFERENCE, "Compiles; there is no harness to run it with.")

    # -- before the device -------------------------------------------------------------

    def inputs(self, harness: Harness) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """Every buffer's initial contents and the reference's outputs, read-only."""
        host = {b.name: self.host_array(b) for b in harness.buffers}
        expected = self.reference(harness, host)
        for array in (*host.values(), *expected.values()):
            array.setflags(write=False)
        return host, expected

    def file_stamps(self, harness: Harness) -> list[tuple[str, int, int]]:
        """Which version of each fixture file the inputs come from."""
        stamps = []
        for buf in harness.buffers:
            if buf.fill == "file" and buf.file is not None:
                try:
                    stat = resolve_fixture(buf.file, self.fixtures_dir).stat()
                except (HarnessError, OSError):
                    continue  # inputs() stops with the reason
                stamps.append((buf.file, stat.st_mtime_ns, stat.st_size))
        return stamps

    def host_array(self, buf: Buffer) -> np.ndarray:
        dtype = NP_DTYPES[buf.dtype]
        if buf.fill == "data":
            return np.array(buf.data, dtype=dtype).reshape(buf.shape)
        if buf.fill == "zeros":
            return np.zeros(buf.shape, dtype=dtype)
        if buf.fill == "random" and buf.random is not None:
            rng = np.random.default_rng(buf.random.seed)
            if buf.dtype == "f32":
                values = rng.uniform(buf.random.low, buf.random.high, size=buf.shape)
            else:
                values = rng.integers(buf.random.low, buf.random.high, size=buf.shape)
            return values.astype(dtype)
        if buf.fill == "file" and buf.file is not None:
            return self.load_file(buf)
        return np.full(buf.shape, SENTINEL_BITS[buf.dtype], dtype=np.uint32).view(dtype)

    def load_file(self, buf: Buffer) -> np.ndarray:
        field = f"buffers.{buf.name}.file"
        try:
            path = resolve_fixture(buf.file or "", self.fixtures_dir, field)
        except HarnessError as e:
            raise _Stop(Status.REJECTED, f"The harness is invalid: {e}", str(e)) from None
        if not path.is_file():
            raise _Stop(
                Status.REJECTED,
                f"Fixture file {buf.file} (buffer {buf.name}) does not exist.",
                f"{field}: no such file {buf.file!r}",
            )
        # A float64 file converts to f32, so allow twice the buffer cap plus a header.
        if path.stat().st_size > 2 * self.limits.max_buffer_bytes + MiB:
            raise _Stop(
                Status.REJECTED,
                f"Fixture file {buf.file} is too large.",
                f"{field}: {path.stat().st_size:,} bytes",
            )
        try:
            stat = path.stat()
            key = ("file", str(path), stat.st_mtime_ns, stat.st_size)
            array = self.memo(key, lambda: load_npy(path))
        except (OSError, ValueError) as e:
            raise _Stop(
                Status.REJECTED,
                f"Fixture file {buf.file} is not a readable .npy array.",
                f"{field}: {e}",
            ) from None
        if tuple(array.shape) != buf.shape:
            raise _Stop(
                Status.REJECTED,
                f"Fixture file {buf.file} holds shape {list(array.shape)}, "
                f"but buffer {buf.name} has shape {list(buf.shape)}.",
                f"{field}: shape mismatch",
            )
        kinds = "biuf" if buf.dtype == "f32" else "biu"
        if array.dtype.kind not in kinds:
            raise _Stop(
                Status.REJECTED,
                f"Fixture file {buf.file} holds {array.dtype} values, which do not "
                f"convert to {buf.dtype}.",
                f"{field}: dtype {array.dtype}",
            )
        if buf.dtype != "f32" and array.size:
            info = np.iinfo(NP_DTYPES[buf.dtype])
            if array.min() < info.min or array.max() > info.max:
                raise _Stop(
                    Status.REJECTED,
                    f"Fixture file {buf.file} holds values outside the {buf.dtype} range.",
                    f"{field}: out of range",
                )
        return array.astype(NP_DTYPES[buf.dtype])

    def reference(self, harness: Harness, host: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        ref = harness.reference
        if ref is None:
            return {}
        args = [host[name].astype(np.float64) for name in ref.args]
        try:
            result = REFERENCES[ref.name](*args)
        except Exception as e:
            raise _Stop(
                Status.REJECTED,
                f"The reference {ref.name} failed on the harness's buffers: {e}",
                f"{type(e).__name__}: {e}",
            ) from None
        results = result if isinstance(result, tuple) else (result,)
        if len(results) != len(ref.outputs):
            raise _Stop(
                Status.REJECTED,
                f"The reference {ref.name} returns {len(results)} arrays but the harness "
                f"names {len(ref.outputs)} outputs.",
                "reference.outputs: count mismatch",
            )
        expected = {}
        for name, value in zip(ref.outputs, results, strict=True):
            array = np.asarray(value, dtype=np.float64)
            buf = harness.buffer(name)
            if array.size != buf.count:
                raise _Stop(
                    Status.REJECTED,
                    f"The reference {ref.name} returns shape {list(array.shape)} for "
                    f"output {name}, which has shape {list(buf.shape)}.",
                    "reference.outputs: shape mismatch",
                )
            expected[name] = array.reshape(buf.shape)
        return expected

    def warn_about_backend(self, harness: Harness) -> None:
        if not self.env.software:
            return
        self.warnings.append(
            "Out-of-bounds writes are silently dropped on this backend (llvmpipe), "
            "so a missing bounds check does not show here."
        )
        if any(LOOP.search(strip_comments(self.sources[k])) for k in harness.kernel_names()):
            self.warnings.append(
                "llvmpipe stops any loop after 65,535 iterations per invocation, so a "
                "mismatch in a long loop may not happen on a real GPU."
            )

    # -- on the device -----------------------------------------------------------------

    def compile(self, harness: Harness) -> dict[tuple[str, str], Any]:
        """A pipeline per (kernel, entry point). A worker keeps them by source, so running
        the same source again (run again, the tutor's run_kernel) skips compiling."""
        wgpu = import_wgpu()

        modules = {}
        for kernel in dict.fromkeys(p.kernel for p in harness.passes):
            source = self.sources[kernel]
            digest = hashlib.sha256(source.encode()).hexdigest()
            try:
                modules[kernel] = (
                    digest,
                    self.memo(
                        ("module", digest),
                        lambda source=source: self.device.create_shader_module(code=source),
                    ),
                )
            except wgpu.GPUValidationError as e:
                info = parse_compile_error(kernel, str(e))
                raise _Stop(
                    Status.COMPILE_ERROR, _compile_message(info), info["text"], compile=info
                ) from None
        pipelines = {}
        for p in harness.passes:
            key = (p.kernel, p.entry_point)
            if key in pipelines:
                continue
            digest, module = modules[p.kernel]
            compute = {"module": module, "entry_point": p.entry_point}
            try:
                pipelines[key] = self.memo(
                    ("pipeline", digest, p.entry_point),
                    lambda compute=compute: self.device.create_compute_pipeline(
                        layout="auto", compute=compute
                    ),
                )
            except wgpu.GPUValidationError as e:
                text = clean_wgpu_error(str(e))
                raise _Stop(
                    Status.PIPELINE_ERROR,
                    f"Kernel {p.kernel}, entry point {p.entry_point}: {text}",
                    text,
                ) from None
        return pipelines

    def dispatch(
        self,
        harness: Harness,
        host: dict[str, np.ndarray],
        pipelines: dict[tuple[str, str], Any],
        readback: list[str],
    ) -> dict[str, np.ndarray]:
        wgpu = import_wgpu()

        usage = wgpu.BufferUsage
        for buf in harness.bound_buffers():
            flags = (
                usage.UNIFORM | usage.COPY_DST
                if buf.usage == "uniform"
                else usage.STORAGE | usage.COPY_SRC | usage.COPY_DST
            )
            try:
                if buf.fill == "zeros":
                    # wgpu zero-initialises new buffers: no host copy needed.
                    gpu = self.device.create_buffer(size=buf.nbytes, usage=flags, label=buf.name)
                else:
                    gpu = self.device.create_buffer_with_data(
                        data=host[buf.name], usage=flags, label=buf.name
                    )
            except wgpu.GPUValidationError as e:
                text = clean_wgpu_error(str(e))
                raise _Stop(Status.PIPELINE_ERROR, f"Buffer {buf.name}: {text}", text) from None
            except wgpu.GPUError as e:
                raise _Stop(
                    Status.CRASHED, f"The device could not allocate buffer {buf.name}.", str(e)
                ) from None
            self.gpu_buffers[buf.name] = gpu

        encoder = self.device.create_command_encoder()
        for number, p in enumerate(harness.passes, start=1):
            pipeline = pipelines[(p.kernel, p.entry_point)]
            groups = {
                g: self.bind_group(number, p.kernel, pipeline, g, bindings)
                for g, bindings in sorted(p.groups().items())
            }
            compute = encoder.begin_compute_pass(label=f"pass {number}")
            compute.set_pipeline(pipeline)
            for g, group in groups.items():
                if group is not None:
                    compute.set_bind_group(g, group)
            compute.dispatch_workgroups(*p.dispatch)
            compute.end()
        try:
            self.device.queue.submit([encoder.finish()])
            return {
                name: np.frombuffer(
                    self.device.queue.read_buffer(self.gpu_buffers[name]),
                    dtype=NP_DTYPES[harness.buffer(name).dtype],
                )
                .reshape(harness.buffer(name).shape)
                .copy()
                for name in readback
            }
        except wgpu.GPUValidationError as e:
            text = clean_wgpu_error(str(e))
            raise _Stop(Status.PIPELINE_ERROR, f"The dispatch failed: {text}", text) from None

    def bind_group(
        self, number: int, kernel: str, pipeline: Any, group: int, bindings: list
    ) -> Any:
        """The pass's bind group for one group, or None when the kernel uses none of it.

        Layouts are "auto", so they hold only the bindings the entry point uses. A
        harness binding the kernel ignores is left out with a warning; anything else
        that does not fit is the kernel's or the harness's error.
        """
        wgpu = import_wgpu()

        entries = [
            (b, {"binding": b.binding, "resource": {"buffer": self.gpu_buffers[b.buffer]}})
            for b in bindings
        ]
        layout = pipeline.get_bind_group_layout(group)
        where = f"Pass {number} ({kernel}), group {group}"
        try:
            return self.device.create_bind_group(layout=layout, entries=[e for _, e in entries])
        except wgpu.GPUValidationError as e:
            counts = BINDING_COUNT.search(str(e))
            if counts is None or int(counts[1]) <= int(counts[2]):
                raise self.bind_error(where, kernel, group, bindings, str(e)) from None
            declared = int(counts[2])

        used, unused = [], []
        for i, (b, entry) in enumerate(entries):
            others = entries[:i] + entries[i + 1 :]
            if declared and self.in_layout(layout, entry, others, declared):
                used.append((b, entry))
            else:
                unused.append(b)
        for b in unused:
            self.warnings.append(
                f"{where}: the harness binds @binding({b.binding}) to buffer {b.buffer}, "
                "but the kernel does not use that binding, so it was left out."
            )
        if not used:
            return None
        try:
            return self.device.create_bind_group(layout=layout, entries=[e for _, e in used])
        except wgpu.GPUValidationError as e:
            raise self.bind_error(where, kernel, group, bindings, str(e)) from None

    def in_layout(self, layout: Any, entry: dict, others: list, declared: int) -> bool:
        """Whether the layout declares entry's binding.

        wgpu checks the entry count first, then each entry in order, so with the count
        made right and this entry first, only a missing declaration of this very
        binding names it in the error.
        """
        wgpu = import_wgpu()

        fillers = [e for _, e in others][: declared - 1]
        try:
            self.device.create_bind_group(layout=layout, entries=[entry, *fillers])
        except wgpu.GPUValidationError as e:
            missing = MISSING_DECLARATION.search(str(e))
            return missing is None or int(missing[1]) != entry["binding"]
        return True

    def bind_error(self, where: str, kernel: str, group: int, bindings: list, text: str) -> _Stop:
        text = clean_wgpu_error(text)
        message = f"{where}: {text}"
        counts = BINDING_COUNT.search(text)
        if counts is not None and int(counts[1]) < int(counts[2]):
            bound = {b.binding for b in bindings}
            unbound = [
                f"@binding({binding}) {name}"
                for g, binding, name in declared_bindings(self.sources[kernel])
                if g == group and binding not in bound
            ]
            message = (
                f"{where}: the kernel uses {counts[2]} bindings but the harness binds "
                f"{counts[1]}" + (f"; not bound: {', '.join(unbound)}" if unbound else "") + "."
            )
        return _Stop(Status.PIPELINE_ERROR, message, text)

    # -- after the device --------------------------------------------------------------

    def compare(
        self,
        harness: Harness,
        host: dict[str, np.ndarray],
        got: dict[str, np.ndarray],
        expected: dict[str, np.ndarray],
    ) -> dict:
        has_reference = harness.reference is not None
        names = list(harness.reference.outputs) if harness.reference else self.shown(harness, got)
        outputs = []
        for name in names:
            buf = harness.buffer(name)
            # An output no pass binds was never written: it still holds its start value.
            values = got[name] if name in got else host[name]
            outputs.append(
                compare_output(
                    buf, values, expected.get(name), harness.tolerance.atol, harness.tolerance.rtol
                )
            )
        extra: dict = {}
        if harness.report is not None:
            probs = got.get(harness.report.probabilities, host[harness.report.probabilities])
            labels = got.get(harness.report.labels, host[harness.report.labels])
            extra["report"] = classification_report(probs, labels)
        if not has_reference:
            return self.outcome(
                Status.NO_REFERENCE, _no_reference_message(outputs), outputs=outputs, **extra
            )
        status, message = verdict(outputs)
        return self.outcome(status, message, outputs=outputs, **extra)

    def shown(self, harness: Harness, got: dict[str, np.ndarray]) -> list[str]:
        report = {harness.report.probabilities, harness.report.labels} if harness.report else set()
        marked = [b.name for b in harness.outputs()]
        return marked or [name for name in got if name not in report]


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 2)


# -- limits ------------------------------------------------------------------------------

COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)
LOOP = re.compile(r"\b(?:for|loop|while)\b")
# An attribute run followed by a function: "@compute @workgroup_size(8, 8) fn main(".
FUNCTION = re.compile(r"((?:@\w+\s*(?:\([^()]*\))?\s*)+)fn\s+(\w+)")
WORKGROUP_SIZE = re.compile(r"@workgroup_size\s*\(([^()]*)\)")
INT_LITERAL = re.compile(r"(0[xX][0-9a-fA-F]+|\d+)[iu]?")
DECLARATION = re.compile(
    r"(?:@group\s*\(\s*(\d+)\s*\)\s*@binding\s*\(\s*(\d+)\s*\)"
    r"|@binding\s*\(\s*(\d+)\s*\)\s*@group\s*\(\s*(\d+)\s*\))"
    r"\s*var\s*(?:<[^>]*>)?\s*(\w+)"
)


def strip_comments(source: str) -> str:
    return COMMENTS.sub(" ", source)


def workgroup_size(source: str, entry_point: str) -> int:
    """Invocations per workgroup of an entry point, read from its @workgroup_size.

    Understands literals and module-scope const/override names with a literal value. When
    it cannot tell, it says 1: the pre-check then under-counts, and the wall-clock
    deadline in the pool is what stops an oversized run.
    """
    text = strip_comments(source)
    for attrs, name in FUNCTION.findall(text):
        if name != entry_point:
            continue
        size = WORKGROUP_SIZE.search(attrs)
        if size is None:
            return 1
        total = 1
        for arg in size.group(1).split(","):
            value = _int_value(arg.strip(), text)
            if value is None:
                return 1
            total *= value
        return total
    return 1


def _int_value(expr: str, text: str) -> int | None:
    if not expr:
        return 1
    if INT_LITERAL.fullmatch(expr):
        return int(expr.rstrip("iu"), 0)
    if re.fullmatch(r"\w+", expr):
        match = re.search(
            rf"\b(?:const|override)\s+{expr}\s*(?::\s*\w+\s*)?=\s*([0-9a-fA-FxX]+[iu]?)\s*;", text
        )
        if match and INT_LITERAL.fullmatch(match.group(1)):
            return int(match.group(1).rstrip("iu"), 0)
    return None


def declared_bindings(source: str) -> list[tuple[int, int, str]]:
    """(group, binding, variable name) of every resource the module declares."""
    found = []
    for g1, b1, b2, g2, name in DECLARATION.findall(strip_comments(source)):
        found.append((int(g1 or g2), int(b1 or b2), name))
    return found


def check_limits(harness: Harness, sources: Mapping[str, str], limits: Limits) -> None:
    """Refuse a run over the limits before any memory or device time is spent on it."""

    def over(what: str, value: int, cap: int, unit: str = "") -> _Stop:
        value_text = f"{value:,}{unit}" + (f" ({_size(value)})" if unit else "")
        cap_text = f"{cap:,}{unit}" + (f" ({_size(cap)})" if unit else "")
        return _Stop(
            Status.REJECTED,
            f"Rejected before running: {what} is {value_text}, over the limit of {cap_text}.",
            f"{what}: {value} > {cap}",
        )

    for buf in harness.buffers:
        if buf.nbytes > limits.max_buffer_bytes:
            raise over(f"buffer {buf.name}", buf.nbytes, limits.max_buffer_bytes, " bytes")
    total = sum(b.nbytes for b in harness.buffers)
    if total > limits.max_total_bytes:
        raise over("the total size of all buffers", total, limits.max_total_bytes, " bytes")
    invocations = 0
    for number, p in enumerate(harness.passes, start=1):
        for axis, size in zip("xyz", p.dispatch, strict=True):
            if size > limits.max_workgroups_per_dim:
                raise over(
                    f"pass {number}'s dispatch in {axis}", size, limits.max_workgroups_per_dim
                )
        per_group = workgroup_size(sources[p.kernel], p.entry_point)
        invocations += math.prod(p.dispatch) * per_group
    if invocations > limits.max_invocations:
        raise over(
            "the number of invocations (workgroups times workgroup size, all passes)",
            invocations,
            limits.max_invocations,
        )
    readback = sum(harness.buffer(name).nbytes for name in readback_names(harness))
    if readback > limits.max_readback_bytes:
        raise over(
            "the size of the buffers read back", readback, limits.max_readback_bytes, " bytes"
        )


def readback_names(harness: Harness) -> list[str]:
    """The bound buffers copied back after the passes: outputs and report buffers."""
    names = [b.name for b in harness.outputs()]
    if not names and harness.reference is None:
        # Nothing marked: show every buffer the kernel could have written.
        names = [b.name for b in harness.buffers if b.usage == "read_write"]
    if harness.report is not None:
        names += [harness.report.probabilities, harness.report.labels]
    bound = {b.name for b in harness.bound_buffers()}
    return [name for name in dict.fromkeys(names) if name in bound]


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1024**3), ("MiB", MiB), ("KiB", 1024)):
        if n >= scale:
            return f"{n / scale:.4g} {unit}"
    return f"{n} B"


# -- error text --------------------------------------------------------------------------

HEADLINE = re.compile(r"Shader (?:'.*?' )?(?:parsing|validation) error: (.*)")
# The file name is "wgsl" for parse errors and empty for validation errors.
SPAN = re.compile(r"┌─ [^\n:]*:(\d+):(\d+)")
NOTE = re.compile(r"^\s*= (.*)$")
CARETS = re.compile(r"[\^\-]+")
# A label that only names a naga IR handle ("naga::ir::Expression [5]") tells a learner
# nothing; the notes say what is wrong.
IR_HANDLE = re.compile(r"naga::(?:ir::)?\w+ \[\d+\]")
BINDING_COUNT = re.compile(
    r"Number of bindings in bind group descriptor \((\d+)\) does not match the number of "
    r"bindings defined in the bind group layout \((\d+)\)"
)
MISSING_DECLARATION = re.compile(
    r"Unable to find a corresponding declaration for the given binding (\d+)"
)
WGPU_NOISE = ("Validation Error", "Caused by:")


def _naga_text(text: str) -> str:
    lines = text.splitlines()
    while lines and (
        not lines[0].strip()
        or lines[0].strip() in WGPU_NOISE
        or lines[0].strip().startswith("In wgpu")
    ):
        lines.pop(0)
    return "\n".join(lines).rstrip()


def parse_compile_error(kernel: str, text: str) -> dict:
    """naga's error text as fields: where (1-based line and column), what, and the label.

    Parse errors carry "┌─ wgsl:LINE:COL", validation errors "┌─ :LINE:COL", and some
    errors carry no span at all (then line and column are None).
    """
    naga = _naga_text(text)
    lines = naga.splitlines()
    headline = HEADLINE.search(naga)
    message = headline.group(1).strip() if headline else (lines[0].strip() if lines else "")
    span = SPAN.search(naga)
    line = column = None
    label = ""
    notes: list[str] = []
    if span is not None:
        line, column = int(span.group(1)), int(span.group(2))
        start = naga[: span.start()].count("\n") + 1
        block = []
        for row in lines[start:]:
            note = NOTE.match(row)
            if note:
                notes.append(note.group(1).strip())
            elif "│" in row:
                block.append(row)
            elif row.strip():
                break
        label = _caret_label(block, column)
    return {
        "kernel": kernel,
        "line": line,
        "column": column,
        "message": message,
        "label": "" if IR_HANDLE.fullmatch(label) else label,
        "notes": notes,
        "text": naga,
    }


def _caret_label(block: list[str], column: int) -> str:
    """The label codespan drew for the caret run that starts at column.

    codespan draws "N │ source", then a caret row; the label of the rightmost run follows
    it on the same row, the others hang below at their run's column behind "│" pipes.
    """
    rows = []
    for row in block:
        gutter, _, content = row.partition("│")
        rows.append((gutter.strip(), content[1:] if content.startswith(" ") else content))
    source = next((i for i, (gutter, _) in enumerate(rows) if gutter.isdigit()), None)
    if source is None or source + 1 >= len(rows):
        return ""
    index = column - 1
    carets = rows[source + 1][1]
    runs = list(CARETS.finditer(carets))
    if runs and runs[-1].start() == index and carets[runs[-1].end() :].strip():
        return carets[runs[-1].end() :].strip()
    for _, content in rows[source + 2 :]:
        if len(content) > index and content[index] not in " │":
            return content[index:].strip()
    return ""


def _compile_message(info: dict) -> str:
    who = "The kernel" if info["kernel"] == "self" else f"Kernel {info['kernel']}"
    where = f" (line {info['line']}, column {info['column']})" if info["line"] else ""
    detail = f" ({info['notes'][-1]})" if info["notes"] else ""
    return f"{who} does not compile{where}: {info['message']}{detail}"


def clean_wgpu_error(text: str) -> str:
    """wgpu's error text without its wrapper lines, with labels written as names."""
    kept = [
        row.strip()
        for row in text.splitlines()
        if row.strip()
        and row.strip() not in WGPU_NOISE
        and not row.strip().startswith(("In wgpu", "In a dispatch command"))
    ]
    cleaned = " ".join(kept)
    cleaned = cleaned.replace(" with '' label", "")
    return re.sub(r" with '([^']*)' label", r" '\1'", cleaned)


# -- comparison --------------------------------------------------------------------------


def compare_output(
    buf: Buffer, values: np.ndarray, expected: np.ndarray | None, atol: float, rtol: float
) -> dict:
    """Cell-by-cell verdict on one output: counts, first bad cells, values and a grid."""
    flat = np.ascontiguousarray(values).reshape(-1)
    unwritten = flat.view(np.uint32) == SENTINEL_BITS[buf.dtype]
    got = flat.astype(np.float64)
    got_finite = np.isfinite(got)
    codes = np.zeros(flat.size, dtype=np.int8)
    entry: dict = {
        "name": buf.name,
        "dtype": buf.dtype,
        "shape": list(buf.shape),
        "count": int(flat.size),
    }
    if expected is None:
        codes[~got_finite] = NONFINITE
        codes[unwritten] = UNWRITTEN
        entry.update(
            bad=None,
            unwritten=int(unwritten.sum()),
            nonfinite=int((~got_finite & ~unwritten).sum()),
            max_abs_err=None,
            max_rel_err=None,
            worst_index=None,
            first_bad=[],
        )
    elif (fast := _all_close(got, expected.reshape(-1), atol, rtol)) is not None:
        # Every cell written, finite and within tolerance: the usual passing run.
        err, rel = fast
        worst = int(np.argmax(err))
        entry.update(
            bad=0,
            unwritten=0,
            nonfinite=0,
            max_abs_err=json_number(float(err[worst])),
            max_rel_err=json_number(float(rel.max())),
            worst_index=_index(worst, buf.shape),
            first_bad=[],
        )
    else:
        exp = expected.reshape(-1)
        close = np.isclose(got, exp, rtol=rtol, atol=atol, equal_nan=True)
        nonfinite = ~unwritten & ~got_finite & np.isfinite(exp)
        wrong = ~unwritten & ~nonfinite & ~close
        codes[wrong] = WRONG
        codes[nonfinite] = NONFINITE
        codes[unwritten] = UNWRITTEN
        comparable = ~unwritten & got_finite & np.isfinite(exp)
        err = np.where(comparable, np.abs(got - exp), 0.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            rel = np.where(comparable & (exp != 0), err / np.abs(exp), 0.0)
        worst = int(np.argmax(err)) if comparable.any() else None
        bad_cells = np.flatnonzero(codes)
        entry.update(
            bad=int(bad_cells.size),
            unwritten=int(unwritten.sum()),
            nonfinite=int(nonfinite.sum()),
            max_abs_err=json_number(float(err.max())) if comparable.any() else None,
            max_rel_err=json_number(float(rel.max())) if comparable.any() else None,
            worst_index=_index(worst, buf.shape) if worst is not None else None,
            first_bad=[
                {
                    "index": _index(int(i), buf.shape),
                    "expected": json_number(float(exp[i])),
                    "got": None if unwritten[i] else _value(flat[i]),
                    "kind": ("wrong", "nonfinite", "unwritten")[codes[i] - 1],
                }
                for i in bad_cells[:FIRST_BAD]
            ],
        )
    if flat.size <= SHOW_VALUES_UP_TO:
        entry["got"] = [None if u else _value(v) for v, u in zip(flat, unwritten, strict=True)]
        if expected is not None:
            entry["expected"] = [json_number(float(v)) for v in expected.reshape(-1)]
    entry["grid"] = status_grid(codes, buf.shape)
    return entry


def _all_close(
    got: np.ndarray, exp: np.ndarray, atol: float, rtol: float
) -> tuple[np.ndarray, np.ndarray] | None:
    """Absolute and relative errors if every cell is within tolerance, else None.

    A few passes over the arrays instead of the per-cell masks below; NaN (written or
    the unwritten sentinel) never compares as close, so those take the slow path.
    """
    err = np.abs(got - exp)
    scale = np.abs(exp)
    with np.errstate(invalid="ignore"):
        if not (err <= atol + rtol * scale).all():
            return None
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.divide(err, scale, out=np.zeros_like(err), where=scale != 0)
    return err, rel


def _index(flat_index: int, shape: Sequence[int]) -> list[int]:
    return [int(i) for i in np.unravel_index(flat_index, tuple(shape))]


def _value(v: np.generic) -> int | float | str:
    if v.dtype.kind == "f":
        return json_number(float(v))
    return int(v)


def json_number(x: float) -> float | str:
    """JSON has no NaN or infinities: they travel as the strings JavaScript prints."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return x


def status_grid(codes: np.ndarray, shape: Sequence[int]) -> dict:
    """A map of at most 64 by 64 blocks, each showing the worst cell in it.

    The output is viewed as 2-D: 1-D as one row, more than 2-D with the leading
    dimensions flattened into rows.
    """
    cols = shape[-1]
    rows = codes.size // cols
    block_rows = math.ceil(rows / GRID_SIZE)
    block_cols = math.ceil(cols / GRID_SIZE)
    grid_rows = math.ceil(rows / block_rows)
    grid_cols = math.ceil(cols / block_cols)
    grid = {"rows": grid_rows, "cols": grid_cols, "block": [block_rows, block_cols]}
    if not codes.any():  # a passing output: every block is fine
        return {**grid, "cells": GRID_CHARS[OK] * (grid_rows * grid_cols)}
    padded = np.zeros((grid_rows * block_rows, grid_cols * block_cols), dtype=np.int8)
    padded[:rows, :cols] = codes.reshape(rows, cols)
    blocks = padded.reshape(grid_rows, block_rows, grid_cols, block_cols).max(axis=(1, 3))
    return {**grid, "cells": "".join(GRID_CHARS[blocks].ravel())}


def classification_report(probabilities: np.ndarray, labels: np.ndarray) -> dict:
    """Accuracy and confusion of argmax predictions; computed whatever the status."""
    probs = probabilities.astype(np.float64)
    classes = probs.shape[1]
    truth = labels.reshape(-1).astype(np.int64)
    # A row with NaN (or a never-written cell) predicts nothing rather than class 0.
    valid = np.isfinite(probs).all(axis=1)
    predictions = np.where(valid, np.argmax(np.nan_to_num(probs, nan=-np.inf), axis=1), -1)
    confusion = np.zeros((classes, classes), dtype=np.int64)
    known = (truth >= 0) & (truth < classes) & (predictions >= 0)
    np.add.at(confusion, (truth[known], predictions[known]), 1)
    in_range = truth[(truth >= 0) & (truth < classes)]
    return {
        "kind": "classification",
        "count": int(truth.size),
        "accuracy": float((predictions == truth).mean()) if truth.size else 0.0,
        "predictions": [int(p) for p in predictions],
        "confusion": confusion.tolist(),
        "labels_count": np.bincount(in_range, minlength=classes).tolist(),
    }


def verdict(outputs: list[dict]) -> tuple[Status, str]:
    count = sum(o["count"] for o in outputs)
    bad = sum(o["bad"] for o in outputs)
    unwritten = sum(o["unwritten"] for o in outputs)
    nonfinite = sum(o["nonfinite"] for o in outputs)
    worst = _worst(outputs)
    if bad == 0:
        error = f" (worst error {_fmt(worst[0])})" if worst else ""
        return Status.PASSED, f"All {count:,} cells match the reference{error}."
    details = []
    if unwritten:
        details.append(f"{unwritten:,} never written")
    if nonfinite:
        details.append(f"{nonfinite:,} NaN or infinite where the reference is finite")
    message = f"{bad:,} of {count:,} cells wrong"
    if details:
        message += f" ({', '.join(details)})"
    # Unwritten and non-finite cells have no error size; say the worst of the rest.
    if worst and bad > unwritten + nonfinite:
        error, name, index = worst
        where = f" in {name}" if len(outputs) > 1 else ""
        message += f"; worst error {_fmt(error)}{where} at {index}"
    # NaN or infinity is its own diagnosis (overflow, division by zero) when it
    # explains most of the bad cells.
    status = Status.NONFINITE if nonfinite > bad - nonfinite else Status.MISMATCH
    return status, message


def _worst(outputs: list[dict]) -> tuple[float, str, list[int]] | None:
    # An error too large for a float (stored as "Infinity") cannot be ranked; skip it.
    candidates = [
        (o["max_abs_err"], o["name"], o["worst_index"])
        for o in outputs
        if isinstance(o["max_abs_err"], float)
    ]
    return max(candidates, key=lambda c: c[0]) if candidates else None


def _no_reference_message(outputs: list[dict]) -> str:
    count = sum(o["count"] for o in outputs)
    unwritten = sum(o["unwritten"] for o in outputs)
    message = "Ran; there is no reference to compare with"
    if not outputs:
        return message + "."
    message += f" ({count:,} cells shown"
    if unwritten:
        message += f", {unwritten:,} never written"
    return message + ")."


def _fmt(x: float) -> str:
    return f"{x:.3g}"
