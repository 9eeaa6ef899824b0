"""Run WGSL compute kernels under a harness with wgpu-py and compare with a reference.

The device run, top to bottom: check the limits, make the inputs and the reference's
outputs, compile, dispatch, read back, compare. It runs inside the worker processes
(kernels/engine/worker.py), which hold one warm device each. wgpu is imported inside
the functions that use the GPU, so importing this module for its types costs nothing.

What wgpu-py 0.32 can and cannot tell us is recorded in shared/notes/wgpu-headless.md;
the error texts parsed here are pinned by tests/kernels/test_runner.py.
"""

# Kept whole: one class runs a harness, its compile, dispatches, bind groups, store counts and
# comparison all on the run's device, memo and buffers; split, each part would reach into the rest.

from __future__ import annotations

import functools
import hashlib
import math
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from kernels.engine import store_counts
from kernels.engine.analysis import analyse, misleading_on_cpu
from kernels.engine.cases import Case
from kernels.engine.compare import (
    classification_report,
    compare_output,
    mark_unwritten,
    no_reference_message,
    verdict,
)
from kernels.engine.device import Environment, import_wgpu
from kernels.engine.gpu_compare import BY_ADAPTER, CHECK_FROM, DeviceCheck
from kernels.engine.harness import (
    Binding,
    Harness,
    HarnessError,
    canonical_digest,
    parse_harness,
)
from kernels.engine.inputs import (
    NP_DTYPES,
    Memo,
    file_stamps,
    invalid,
    make_inputs,
    no_memo,
    struct_layouts,
    uniform_bytes,
)
from kernels.engine.layout import StructLayout
from kernels.engine.limits import DEFAULT_LIMITS, Limits, check_limits, readback_names
from kernels.engine.naga import (
    BINDING_COUNT,
    MISSING_DECLARATION,
    clean_wgpu_error,
    compile_message,
    parse_compile_error,
)
from kernels.engine.outcome import (
    SENTINEL_BITS,
    CompileError,
    Outcome,
    RunWarning,
    Status,
    Stop,
    new_outcome,
    no_timings,
)
from kernels.engine.resident import DeviceBuffers, RunBuffers, writable_buffers
from kernels.engine.run_warnings import Dispatched, backend_warnings, unused_binding
from kernels.engine.webgpu import module_refusal, pipeline_refusal
from kernels.engine.wgsl import declared_bindings

if TYPE_CHECKING:
    import wgpu

# A run of several cases takes the status of its worst, in this order.
SEVERITY = (Status.PASSED, Status.NO_REFERENCE, Status.NONFINITE, Status.MISMATCH)


@dataclass
class Inputs:
    """A harness's inputs and its reference's outputs, and the key they are kept under."""

    key: tuple[Any, ...]
    host: dict[str, np.ndarray]
    expected: dict[str, np.ndarray]


@dataclass
class CaseResult:
    """One case's verdict; a harness without cases is one unnamed case."""

    name: str
    description: str
    status: Status
    message: str
    outputs: list[dict[str, Any]]
    report: dict[str, Any] | None
    layout: list[dict[str, Any]]
    store_counts: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "name": self.name,
            "status": str(self.status),
            "message": self.message,
            "outputs": self.outputs,
            "layout": self.layout,
        }
        if self.description:
            entry["description"] = self.description
        if self.report is not None:
            entry["report"] = self.report
        return entry


def execute(
    device: wgpu.GPUDevice,
    env: Environment,
    sources: Mapping[str, str],
    harness: Harness | Mapping[str, Any] | None,
    fixtures_dir: Path,
    limits: Limits = DEFAULT_LIMITS,
    *,
    memo: Memo = no_memo,
    kept: DeviceBuffers | None = None,
    device_check_from: int | None = BY_ADAPTER,
) -> Outcome:
    """Run the harness's passes and return a JSON-serialisable outcome dict.

    sources maps kernel names to WGSL; "self" is the kernel being replayed. With no
    harness (None or {}) the sources are only compiled. memo and kept are what a worker
    keeps between runs: host arrays and compiled pipelines, and buffers on the device
    (kernels/engine/resident.py). device_check_from: outputs of more cells than this are
    checked on the device first (kernels/engine/gpu_compare.py); None never; BY_ADAPTER
    the adapter's CHECK_FROM. Never raises for anything a kernel or harness can do
    wrong; a bug in the runner itself does raise.
    """
    buffers = RunBuffers(device, kept if kept is not None else DeviceBuffers(budget=0))
    if device_check_from == BY_ADAPTER:
        device_check_from = CHECK_FROM["software" if env.software else "hardware"]
    run = _Run(device, env, sources, Path(fixtures_dir), limits, memo, buffers)
    run.device_check_from = device_check_from
    try:
        outcome = run.execute(harness)
    except Stop as stop:
        outcome = run.outcome(stop.status, stop.message, error=stop.error, compile=stop.compile)
    finally:
        buffers.release()
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
        buffers: RunBuffers,
    ) -> None:
        self.device = device
        self.env = env
        self.sources = sources
        self.fixtures_dir = fixtures_dir
        self.limits = limits
        self.memo = memo
        self.timings = no_timings()
        self.warnings: list[RunWarning] = []
        self.buffers = buffers
        self.device_check_from: int | None = None

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
        result = new_outcome(
            status, message, self.env.as_dict(), self.timings, self.warnings, outputs
        )
        if error:
            result["error"] = error
        if compile is not None:
            result["compile"] = compile
        if report is not None:
            result["report"] = report
        return result

    def execute(self, spec: Harness | Mapping[str, Any] | None) -> Outcome:
        if not spec:
            return self.compile_only()
        try:
            harness = spec if isinstance(spec, Harness) else parse_harness(spec, self.fixtures_dir)
        except HarnessError as e:
            raise invalid(e) from None
        for name in sorted(harness.kernel_names()):
            if not isinstance(self.sources.get(name), str):
                raise Stop(
                    Status.REJECTED,
                    f"No WGSL source was given for kernel {name!r}.",
                    f"sources has no {name!r}",
                )
        check_limits(harness, self.sources, self.limits)
        layouts = struct_layouts(harness, self.sources)
        cases: list[tuple[Harness, Case | None]] = [
            (harness.for_case(case), case) for case in harness.cases
        ] or [(harness, None)]
        # Inputs before the device, so a bad fixture file stops the run before it compiles.
        first = self.inputs(cases[0][0], layouts)
        self.warn_about_backend([h for h, _ in cases], layouts)

        started = time.perf_counter()
        try:
            pipelines = self.compile(harness)
        finally:
            self.timings["compile_ms"] = _ms(started)
        # llvmpipe would let these pass where a GPU does not: they are not run, not passed.
        if self.env.software and (why := misleading_on_cpu(harness, self.sources)):
            raise Stop(Status.REJECTED, why)
        self.writable = writable_buffers(harness, self.sources)

        started = time.perf_counter()
        try:
            results = [
                self.run_case(case_harness, case, layouts, pipelines, first if i == 0 else None)
                for i, (case_harness, case) in enumerate(cases)
            ]
        finally:
            self.timings["run_ms"] = _ms(started)
        return self.combine(results, bool(harness.cases))

    def inputs(self, harness: Harness, layouts: dict[str, StructLayout]) -> Inputs:
        # A harness's inputs and reference do not depend on the kernel (but for a struct's
        # layout): every version replayed under it shares them.
        key = (
            "inputs",
            canonical_digest(harness),
            *file_stamps(harness, self.fixtures_dir),
            *sorted(layouts.items()),
        )
        host, expected = self.memo(
            key, lambda: make_inputs(harness, layouts, self.fixtures_dir, self.limits, self.memo)
        )
        return Inputs(key, host, expected)

    def run_case(
        self,
        harness: Harness,
        case: Case | None,
        layouts: dict[str, StructLayout],
        pipelines: dict[tuple[str, str], Any],
        inputs: Inputs | None,
    ) -> CaseResult:
        """Dispatch, read back and compare; on wrong outputs, dispatch again with fresh
        buffers holding the sentinel to tell never-written cells from wrong ones."""
        inputs = inputs or self.inputs(harness, layouts)
        host, expected = inputs.host, inputs.expected
        readback = readback_names(harness)
        check = DeviceCheck(self.device, self.buffers, harness)
        got = self.dispatch(harness, inputs, pipelines, readback, check=check)
        # What the device passed needs no readback; what it flagged is compared here.
        passed = check.passed()
        got |= {name: self.read(harness, name) for name in check.names if name not in passed}
        result = self.compare(harness, host, got, expected, None, passed)
        fresh = any(b.fill == "fresh" for b in harness.bound_buffers())
        if result.status in (Status.MISMATCH, Status.NONFINITE) and fresh:
            diagnostic = self.dispatch(harness, inputs, pipelines, readback, sentinel=True)
            result = self.compare(harness, host, got, expected, diagnostic, passed)
        result.store_counts = self.count_stores(harness, inputs, pipelines)
        if case is not None:
            result.name, result.description = case.name, case.description
        result.layout = [
            {"buffer": name, **layout.describe(host[name].tobytes())}
            for name, layout in layouts.items()
        ]
        return result

    def combine(self, results: list[CaseResult], named: bool) -> Outcome:
        """The outcome: a lone case's own, or the worst case's with every case listed."""
        worst = max(results, key=lambda r: SEVERITY.index(r.status))
        outcome = self.outcome(
            worst.status, worst.message, outputs=worst.outputs, report=worst.report
        )
        if worst.layout:
            outcome["layout"] = worst.layout
        if worst.store_counts:
            outcome["store_counts"] = worst.store_counts
        if not named:
            return outcome
        passed = sum(r.status == Status.PASSED for r in results)
        if worst.status == Status.PASSED:
            outcome["message"] = f"All {len(results)} cases match the reference."
        elif worst.status == Status.NO_REFERENCE:
            outcome["message"] = f"Ran {len(results)} cases; there is no reference to compare with."
        else:
            outcome["message"] = (
                f"{passed} of {len(results)} cases pass; case {worst.name}: {worst.message}"
            )
        outcome["cases"] = [_case_entry(r, shown=r is worst) for r in results]
        return outcome

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

    def warn_about_backend(self, cases: list[Harness], layouts: Mapping[str, StructLayout]) -> None:
        """backend_warnings of each case's passes, read against the uniforms it fills."""
        dispatched = [
            Dispatched(
                p.kernel,
                self.sources[p.kernel],
                p.entry_point,
                p.dispatch,
                {
                    (b.group, b.binding): math.prod(shape)
                    for b in p.bind
                    if (shape := harness.buffer(b.buffer).shape)
                },
                {
                    (b.group, b.binding): data
                    for b in p.bind
                    if (data := uniform_bytes(harness.buffer(b.buffer), layouts)) is not None
                },
            )
            for harness in cases
            for p in harness.passes
        ]
        self.warnings += backend_warnings(self.env.software, dispatched, self.memo)

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
        inputs: Inputs,
        pipelines: dict[tuple[str, str], Any],
        readback: list[str],
        sentinel: bool = False,
        check: DeviceCheck | None = None,
        counting: tuple[int, Any, int, Any] | None = None,
    ) -> dict[str, np.ndarray]:
        """Run the passes and read back what the check does not take; sentinel=True is the
        diagnostic run, whose fresh buffers start with the sentinel instead of zeros.
        counting: (pass number, its counting pipeline, the counters' group and bind group): the
        passes up to that one, it counting its stores (count_stores)."""
        self.buffers.make(harness, inputs.host, inputs.key, self.writable, sentinel)
        if check is not None:
            check.plan(inputs.key, inputs.expected, readback, self.device_check_from, self.memo)
        encoder = self.device.create_command_encoder()
        self.buffers.clear(encoder)
        for number, p in enumerate(harness.passes, start=1):
            pipeline = pipelines[(p.kernel, p.entry_point)]
            if counting is not None and number == counting[0]:
                pipeline = counting[1]
            groups = {
                g: self.bind_group(number, p.kernel, pipeline, g, bindings)
                for g, bindings in sorted(p.groups().items())
            }
            compute = encoder.begin_compute_pass(label=f"pass {number}")
            compute.set_pipeline(pipeline)
            for g, group in groups.items():
                if group is not None:
                    compute.set_bind_group(g, group)
            if counting is not None and number == counting[0]:
                compute.set_bind_group(counting[2], counting[3])
            compute.dispatch_workgroups(*p.dispatch)
            compute.end()
            if counting is not None and number == counting[0]:
                break
        if check is not None:
            check.encode(encoder)
        skipped = check.names if check is not None else []
        with _dispatch_errors():
            self.device.queue.submit([encoder.finish()])
        return {name: self.read(harness, name) for name in readback if name not in skipped}

    def count_stores(
        self, harness: Harness, inputs: Inputs, pipelines: dict[tuple[str, str], Any]
    ) -> list[dict[str, Any]]:
        """For each pass whose dispatch and output disagree in size, how many values each
        invocation stores into the output (kernels/engine/store_counts.py): the passes
        run again up to it, its kernel counting. A copy that cannot be counted counts
        nothing; the run's verdict is never touched."""
        wgpu = import_wgpu()
        counted = []
        for number, p in enumerate(harness.passes, start=1):
            source = self.sources[p.kernel]
            counting = self.memo(
                ("store counts", inputs.key, number, hashlib.sha256(source.encode()).digest()),
                functools.partial(store_counts.for_pass, harness, p, source),
            )
            if counting is None:
                continue
            try:
                counts = self.dispatch_counting(harness, inputs, pipelines, number, counting)
            except (Stop, wgpu.GPUError):
                continue
            histogram = store_counts.histogram(counts)
            counted.append({"pass": number, "buffer": counting.buffer, **histogram})
        return counted

    def dispatch_counting(
        self,
        harness: Harness,
        inputs: Inputs,
        pipelines: dict[tuple[str, str], Any],
        number: int,
        counting: store_counts.Instrumented,
    ) -> np.ndarray:
        """Passes 1 to number again on fresh buffers, pass number's kernel the counting
        copy; its counters, one per invocation."""
        wgpu = import_wgpu()
        p = harness.passes[number - 1]
        digest = hashlib.sha256(counting.source.encode()).hexdigest()

        def compiled() -> Any:
            module = self.device.create_shader_module(code=counting.source)
            compute = {"module": module, "entry_point": p.entry_point}
            return self.device.create_compute_pipeline(layout="auto", compute=compute)

        pipeline = self.memo(("counting", digest, p.entry_point), compiled)
        counters = self.device.create_buffer(
            size=4 * counting.invocations,
            usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC,
        )
        try:
            group = self.device.create_bind_group(
                layout=pipeline.get_bind_group_layout(counting.group),
                entries=[{"binding": 0, "resource": {"buffer": counters}}],
            )
            self.dispatch(
                harness, inputs, pipelines, [], counting=(number, pipeline, counting.group, group)
            )
            with _dispatch_errors():
                data = self.device.queue.read_buffer(counters)
        finally:
            counters.destroy()
        return np.frombuffer(data, dtype=np.uint32)

    def read(self, harness: Harness, name: str) -> np.ndarray:
        buf = harness.buffer(name)
        with _dispatch_errors():
            data = self.device.queue.read_buffer(self.buffers.by_name[name])
        return np.frombuffer(data, dtype=NP_DTYPES[buf.dtype]).reshape(buf.shape).copy()

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
            (b, {"binding": b.binding, "resource": {"buffer": self.buffers.by_name[b.buffer]}})
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
            warning = unused_binding(number, kernel, group, b.binding, b.buffer)
            if warning not in self.warnings:  # once, not once per case and rerun
                self.warnings.append(warning)
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
        diagnostic: dict[str, np.ndarray] | None,
        passed: dict[str, dict[str, Any]],
    ) -> CaseResult:
        """Each output against the reference (cells wrong here and never written in the
        diagnostic run marked so; passed holds those the device passed), then the buffers
        the report asks to see."""
        atol, rtol = harness.tolerance.atol, harness.tolerance.rtol
        names = list(harness.reference.outputs) if harness.reference else self.shown(harness, got)
        outputs = []
        for name in names:
            if name in passed:
                outputs.append(passed[name])
                continue
            buf = harness.buffer(name)
            # An output no pass binds was never written: it still holds its start value.
            values = got[name] if name in got else host[name]
            want = expected.get(name)
            if diagnostic is not None and want is not None and name in diagnostic:
                sentinel = SENTINEL_BITS[buf.dtype]
                values = mark_unwritten(values, want, diagnostic[name], sentinel, atol, rtol)
            outputs.append(compare_output(buf, values, want, atol, rtol))
        checked = list(outputs)
        report = None
        if harness.report is not None:
            for name in harness.report.show:
                if name not in names:
                    values = got[name] if name in got else host[name]
                    shown = compare_output(harness.buffer(name), values, None, atol, rtol)
                    outputs.append({**shown, "intermediate": True})
            if harness.report.kind:
                probs = got.get(harness.report.probabilities, host[harness.report.probabilities])
                labels = got.get(harness.report.labels, host[harness.report.labels])
                report = classification_report(probs, labels)
        if harness.reference is None:
            message = no_reference_message(outputs)
            return CaseResult("", "", Status.NO_REFERENCE, message, outputs, report, [])
        status, message = verdict(checked)
        return CaseResult("", "", status, message, outputs, report, [])

    def shown(self, harness: Harness, got: dict[str, np.ndarray]) -> list[str]:
        report = set()
        if harness.report is not None:
            report = {harness.report.probabilities, harness.report.labels, *harness.report.show}
        marked = [b.name for b in harness.outputs()]
        return marked or [name for name in got if name not in report]


def _case_entry(result: CaseResult, shown: bool) -> dict[str, Any]:
    """A case in the outcome's list; the values of its cells only for the case shown at the
    top (the worst), so sixty-four cases do not carry sixty-four copies of every output."""
    entry = result.as_dict()
    if not shown:
        entry["outputs"] = [
            {key: value for key, value in output.items() if key not in ("got", "expected")}
            for output in result.outputs
        ]
    return entry


def refuse_as_a_browser(kernel: str, source: str) -> None:
    """naga accepts barriers in non-uniform control flow; Chrome's Tint does not."""
    info = module_refusal(kernel, source)
    if info is not None:
        raise Stop(Status.COMPILE_ERROR, compile_message(info), info["text"], compile=info)


@contextmanager
def _dispatch_errors() -> Iterator[None]:
    """wgpu's validation errors of the passes, which surface at submit or readback."""
    wgpu = import_wgpu()

    try:
        yield
    except wgpu.GPUValidationError as e:
        text = clean_wgpu_error(str(e))
        raise Stop(Status.PIPELINE_ERROR, f"The dispatch failed: {text}", text) from None


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 2)
