"""Run WGSL compute kernels under a harness with wgpu-py and compare with a reference.

The device run, top to bottom: check the limits, make the inputs and the reference's
outputs, compile, dispatch, read back, compare. It runs inside the worker processes
(kernels/engine/worker.py), which hold one warm device each. wgpu is imported inside
the functions that use the GPU, so importing this module for its types costs nothing.

What wgpu-py 0.32 can and cannot tell us is recorded in shared/notes/wgpu-headless.md;
the error texts parsed here are pinned by tests/kernels/test_runner.py.
"""

from __future__ import annotations

import functools
import hashlib
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from kernels.engine.analysis import analyse
from kernels.engine.compare import (
    SENTINEL_BITS,
    classification_report,
    compare_output,
    no_reference_message,
    verdict,
)
from kernels.engine.device import Environment, import_wgpu
from kernels.engine.harness import (
    Binding,
    Buffer,
    Harness,
    HarnessError,
    canonical_digest,
    parse_harness,
    resolve_fixture,
)
from kernels.engine.limits import DEFAULT_LIMITS, Limits, MiB, check_limits, readback_names
from kernels.engine.naga import (
    BINDING_COUNT,
    MISSING_DECLARATION,
    clean_wgpu_error,
    compile_message,
    parse_compile_error,
)
from kernels.engine.outcome import CompileError, Outcome, Status, Stop, no_timings
from kernels.engine.references import REFERENCES
from kernels.engine.webgpu import module_refusal, pipeline_refusal
from kernels.engine.wgsl import declared_bindings, has_loop

if TYPE_CHECKING:
    import wgpu

INT_DTYPES = {"u32": np.uint32, "i32": np.int32}
NP_DTYPES = {"f32": np.float32, **INT_DTYPES}


def load_npy(path: Path) -> np.ndarray:
    array: np.ndarray = np.load(path, allow_pickle=False)
    return array


# memo(key, compute) returns compute()'s value, or the value kept from an earlier call
# with the same key. Worker processes keep one across jobs (kernels/engine/worker.py), so a
# fixture is read, and a harness's inputs and reference are computed, once per worker.
Memo = Callable[[tuple[Any, ...], Callable[[], Any]], Any]


def no_memo(key: tuple[Any, ...], compute: Callable[[], Any]) -> Any:
    return compute()


def execute(
    device: wgpu.GPUDevice,
    env: Environment,
    sources: Mapping[str, str],
    harness: Harness | Mapping[str, Any] | None,
    fixtures_dir: Path,
    limits: Limits = DEFAULT_LIMITS,
    *,
    memo: Memo = no_memo,
) -> Outcome:
    """Run the harness's passes and return a JSON-serialisable outcome dict.

    sources maps kernel names to WGSL; "self" is the kernel being replayed. With no
    harness (None or {}) the sources are only compiled. Never raises for anything a
    kernel or harness can do wrong; a bug in the runner itself does raise.
    """
    run = _Run(device, env, sources, Path(fixtures_dir), limits, memo)
    try:
        outcome = run.execute(harness)
    except Stop as stop:
        outcome = run.outcome(stop.status, stop.message, error=stop.error, compile=stop.compile)
    finally:
        run.release()
    # Read here, under the job's deadline: the web process never parses a kernel.
    outcome["analysis"] = analyse(sources)
    return outcome


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
        self.timings = no_timings()
        self.warnings: list[str] = []
        self.gpu_buffers: dict[str, Any] = {}

    def outcome(
        self,
        status: Status,
        message: str,
        *,
        error: str = "",
        outputs: list[dict[str, Any]] | None = None,
        compile: CompileError | None = None,
        report: dict[str, Any] | None = None,
    ) -> Outcome:
        result: Outcome = {
            "status": str(status),
            "message": message,
            "environment": self.env.as_dict(),
            "timings": self.timings,
            "warnings": self.warnings,
            "outputs": outputs or [],
        }
        if error:
            result["error"] = error
        if compile is not None:
            result["compile"] = compile
        if report is not None:
            result["report"] = report
        return result

    def release(self) -> None:
        # Free device memory now rather than when the garbage collector gets to it:
        # a worker runs hundreds of jobs on one device.
        for buf in self.gpu_buffers.values():
            buf.destroy()
        self.gpu_buffers.clear()

    def execute(self, spec: Harness | Mapping[str, Any] | None) -> Outcome:
        if not spec:
            return self.compile_only()
        try:
            harness = spec if isinstance(spec, Harness) else parse_harness(spec, self.fixtures_dir)
        except HarnessError as e:
            raise Stop(Status.REJECTED, f"The harness is invalid: {e}", str(e)) from None
        for name in sorted(harness.kernel_names()):
            if not isinstance(self.sources.get(name), str):
                raise Stop(
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

    def compile_only(self) -> Outcome:
        wgpu = import_wgpu()

        started = time.perf_counter()
        try:
            for kernel, source in self.sources.items():
                try:
                    self.device.create_shader_module(code=source)
                except wgpu.GPUValidationError as e:
                    info = parse_compile_error(kernel, str(e))
                    raise Stop(
                        Status.COMPILE_ERROR, compile_message(info), info["text"], compile=info
                    ) from None
                refuse_as_a_browser(kernel, source)
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
            values: np.ndarray
            if buf.dtype == "f32":
                values = rng.uniform(buf.random.low, buf.random.high, size=buf.shape)
            else:
                # The harness holds integers for integer dtypes: int() only tells mypy so.
                low, high = int(buf.random.low), int(buf.random.high)
                values = rng.integers(low, high, size=buf.shape)
            return values.astype(dtype)
        if buf.fill == "file" and buf.file is not None:
            return self.load_file(buf)
        return np.full(buf.shape, SENTINEL_BITS[buf.dtype], dtype=np.uint32).view(dtype)

    def load_file(self, buf: Buffer) -> np.ndarray:
        field = f"buffers.{buf.name}.file"
        try:
            path = resolve_fixture(buf.file or "", self.fixtures_dir, field)
        except HarnessError as e:
            raise Stop(Status.REJECTED, f"The harness is invalid: {e}", str(e)) from None
        if not path.is_file():
            raise Stop(
                Status.REJECTED,
                f"Fixture file {buf.file} (buffer {buf.name}) does not exist.",
                f"{field}: no such file {buf.file!r}",
            )
        # A float64 file converts to f32, so allow twice the buffer cap plus a header.
        if path.stat().st_size > 2 * self.limits.max_buffer_bytes + MiB:
            raise Stop(
                Status.REJECTED,
                f"Fixture file {buf.file} is too large.",
                f"{field}: {path.stat().st_size:,} bytes",
            )
        try:
            stat = path.stat()
            key = ("file", str(path), stat.st_mtime_ns, stat.st_size)
            array: np.ndarray = self.memo(key, lambda: load_npy(path))
        except (OSError, ValueError) as e:
            raise Stop(
                Status.REJECTED,
                f"Fixture file {buf.file} is not a readable .npy array.",
                f"{field}: {e}",
            ) from None
        if tuple(array.shape) != buf.shape:
            raise Stop(
                Status.REJECTED,
                f"Fixture file {buf.file} holds shape {list(array.shape)}, "
                f"but buffer {buf.name} has shape {list(buf.shape)}.",
                f"{field}: shape mismatch",
            )
        kinds = "biuf" if buf.dtype == "f32" else "biu"
        if array.dtype.kind not in kinds:
            raise Stop(
                Status.REJECTED,
                f"Fixture file {buf.file} holds {array.dtype} values, which do not "
                f"convert to {buf.dtype}.",
                f"{field}: dtype {array.dtype}",
            )
        if buf.dtype != "f32" and array.size:
            info = np.iinfo(INT_DTYPES[buf.dtype])
            if array.min() < info.min or array.max() > info.max:
                raise Stop(
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
            raise Stop(
                Status.REJECTED,
                f"The reference {ref.name} failed on the harness's buffers: {e}",
                f"{type(e).__name__}: {e}",
            ) from None
        results = result if isinstance(result, tuple) else (result,)
        if len(results) != len(ref.outputs):
            raise Stop(
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
                raise Stop(
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
        if any(has_loop(self.sources[k]) for k in harness.kernel_names()):
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
                        functools.partial(self.device.create_shader_module, code=source),
                    ),
                )
            except wgpu.GPUValidationError as e:
                info = parse_compile_error(kernel, str(e))
                raise Stop(
                    Status.COMPILE_ERROR, compile_message(info), info["text"], compile=info
                ) from None
            refuse_as_a_browser(kernel, source)
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
                    functools.partial(
                        self.device.create_compute_pipeline, layout="auto", compute=compute
                    ),
                )
            except wgpu.GPUValidationError as e:
                text = clean_wgpu_error(str(e))
            else:
                # wgpu-native does not count workgroup storage against the limit; Dawn does.
                text = pipeline_refusal(self.sources[p.kernel], p.entry_point, self.device.limits)
            if text:
                raise Stop(
                    Status.PIPELINE_ERROR,
                    f"Kernel {p.kernel}, entry point {p.entry_point}: {text}",
                    text,
                )
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
                raise Stop(Status.PIPELINE_ERROR, f"Buffer {buf.name}: {text}", text) from None
            except wgpu.GPUError as e:
                raise Stop(
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
            raise Stop(Status.PIPELINE_ERROR, f"The dispatch failed: {text}", text) from None

    def bind_group(
        self, number: int, kernel: str, pipeline: Any, group: int, bindings: list[Binding]
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

    def in_layout(
        self,
        layout: Any,
        entry: dict[str, Any],
        others: list[tuple[Binding, dict[str, Any]]],
        declared: int,
    ) -> bool:
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

    def bind_error(
        self, where: str, kernel: str, group: int, bindings: list[Binding], text: str
    ) -> Stop:
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
        return Stop(Status.PIPELINE_ERROR, message, text)

    # -- after the device --------------------------------------------------------------

    def compare(
        self,
        harness: Harness,
        host: dict[str, np.ndarray],
        got: dict[str, np.ndarray],
        expected: dict[str, np.ndarray],
    ) -> Outcome:
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
        report = None
        if harness.report is not None:
            probs = got.get(harness.report.probabilities, host[harness.report.probabilities])
            labels = got.get(harness.report.labels, host[harness.report.labels])
            report = classification_report(probs, labels)
        if not has_reference:
            return self.outcome(
                Status.NO_REFERENCE, no_reference_message(outputs), outputs=outputs, report=report
            )
        status, message = verdict(outputs)
        return self.outcome(status, message, outputs=outputs, report=report)

    def shown(self, harness: Harness, got: dict[str, np.ndarray]) -> list[str]:
        report = {harness.report.probabilities, harness.report.labels} if harness.report else set()
        marked = [b.name for b in harness.outputs()]
        return marked or [name for name in got if name not in report]


def refuse_as_a_browser(kernel: str, source: str) -> None:
    """naga accepts barriers in non-uniform control flow; Chrome's Tint does not."""
    info = module_refusal(kernel, source)
    if info is not None:
        raise Stop(Status.COMPILE_ERROR, compile_message(info), info["text"], compile=info)


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 2)
