"""Run WGSL compute kernels under a harness and compare with a reference.

A harness is one more way to drive a program: each case is compiled to the WebGPU calls of
the host program it stands for (kernels/engine/host/harness_program.py) and those calls are
replayed by the executor every program goes through (kernels/engine/host/gpu.py's Timeline):
its limits, browser refusals, caches, trace and llvmpipe warnings are a harness run's too.
What is the harness's own: its inputs and reference, the cases, the comparison, the device
check of large outputs (gpu_compare.py), the diagnostic rerun with the never-written
sentinel, and the store counts. It runs inside the worker processes (worker.py), which
hold one warm device each. wgpu is imported inside the functions that use the GPU.

What wgpu-py 0.32 can and cannot tell us is recorded in shared/notes/wgpu-headless.md;
the error texts parsed here are pinned by tests/kernels/test_runner.py.
"""

from __future__ import annotations

import functools
import hashlib
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from kernels.engine import store_counts
from kernels.engine.analysis import analyse, misleading_on_cpu
from kernels.engine.case_results import CaseResult, case_entry, compare_case
from kernels.engine.cases import Case
from kernels.engine.device import Environment, import_wgpu
from kernels.engine.gpu_compare import BY_ADAPTER, CHECK_FROM, DeviceCheck
from kernels.engine.harness import Harness, HarnessError, canonical_digest
from kernels.engine.host.capture import Capture, Captured, Whole, whole_entry, with_buffers
from kernels.engine.host.gpu import VERSION_WGSL, HostError, Timeline
from kernels.engine.host.harness_program import COUNTERS, Counting, HarnessHost, harness_host
from kernels.engine.host.trace import Trace
from kernels.engine.inputs import (
    NP_DTYPES,
    Memo,
    file_stamps,
    invalid,
    make_inputs,
    no_memo,
    parsed_harness,
    struct_layouts,
)
from kernels.engine.layout import StructLayout
from kernels.engine.limits import DEFAULT_LIMITS, Limits, check_limits
from kernels.engine.naga import BINDING_COUNT, compile_message, parse_compile_error
from kernels.engine.outcome import (
    CompileError,
    Outcome,
    PassRecord,
    RunWarning,
    SpeedReport,
    Status,
    Stop,
    new_outcome,
    no_timings,
)
from kernels.engine.resident import DeviceBuffers, writable_buffers
from kernels.engine.run_warnings import program_warnings, unused_binding
from kernels.engine.speed import add_references, reference_flops, speed_report
from kernels.engine.webgpu import module_refusal
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
class Replayed:
    """One replay of a harness program: the bytes of each buffer read back, by harness name,
    the outputs the device check passed, the executor's trace, its passes and what their
    buffers held after them (host/capture.py), by pass number."""

    read: dict[str, bytes]
    passed: dict[str, dict[str, Any]]
    trace: Trace
    passes: list[PassRecord]
    speed: SpeedReport
    captured: dict[int, list[Captured]]
    capture: Capture | None


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
    capture: bool = True,
    whole: Whole | None = None,
) -> Outcome:
    """Run the harness's passes and return a JSON-serialisable outcome dict.

    sources maps kernel names to WGSL; "self" is the kernel being replayed. With no
    harness (None or {}) the sources are only compiled. memo and kept are what a worker
    keeps between runs: host arrays and compiled pipelines, and buffers on the device
    (kernels/engine/resident.py). device_check_from: outputs of more cells than this are
    checked on the device first (kernels/engine/gpu_compare.py); None never; BY_ADAPTER
    the adapter's CHECK_FROM. capture: keep each pass's buffers (outcome["passes"]; off
    only to measure what keeping them costs: bench/capture.py); whole: one of them after
    one pass kept whole (outcome["whole"], host/capture.py). Never raises for anything
    a kernel or harness can do wrong; a bug in the runner itself does raise.
    """
    if device_check_from == BY_ADAPTER:
        device_check_from = CHECK_FROM["software" if env.software else "hardware"]
    run = _Run(device, env, sources, Path(fixtures_dir), limits, memo, kept)
    run.device_check_from = device_check_from
    run.capture = capture
    run.whole = whole
    try:
        outcome = run.execute(harness)
    except Stop as stop:
        outcome = run.outcome(stop.status, stop.message, error=stop.error, compile=stop.compile)
    # Read here, under the job's deadline: the web process never parses a kernel.
    outcome["analysis"] = analyse(sources, memo)
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
        kept: DeviceBuffers | None,
    ) -> None:
        self.device = device
        self.env = env
        self.sources = sources
        self.fixtures_dir = fixtures_dir
        self.limits = limits
        self.memo = memo
        self.kept = kept if kept is not None else DeviceBuffers(budget=0)
        self.timings = no_timings()
        self.warnings: list[RunWarning] = []
        self.device_check_from: int | None = None
        self.capture = True
        self.whole: Whole | None = None
        self.writable: set[str] = set()
        self.refused = False  # the llvmpipe refusal was looked at, after the first compile
        self.compile_ms = 0.0
        self.trace: Trace | None = None

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
        if self.trace is not None:
            result["trace"] = self.trace
        return result

    def execute(self, spec: Harness | Mapping[str, Any] | None) -> Outcome:
        if not spec:
            return self.compile_only()
        try:
            harness = (
                spec
                if isinstance(spec, Harness)
                else parsed_harness(spec, self.fixtures_dir, self.memo)
            )
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
        self.harness = harness
        layouts = struct_layouts(harness, self.sources)
        cases: list[tuple[Harness, Case | None]] = [
            (harness.for_case(case), case) for case in harness.cases
        ] or [(harness, None)]
        # Inputs before the device, so a bad fixture file stops the run before it compiles.
        first = self.inputs(cases[0][0], layouts)
        self.writable = writable_buffers(harness, self.sources)
        started = time.perf_counter()
        try:
            results: list[CaseResult] = []
            for i, (case_harness, case) in enumerate(cases):
                results.append(self.run_case(case_harness, case, layouts, None if i else first))
                _one_whole(results)
        finally:
            self.timings["compile_ms"] = round(self.compile_ms, 2)
            self.timings["run_ms"] = round(_ms(started) - self.compile_ms, 2)
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
        inputs: Inputs | None,
    ) -> CaseResult:
        """Replay the case's program, read back and compare; on wrong outputs, replay it
        again with fresh buffers holding the sentinel to tell never-written cells from wrong
        ones."""
        inputs = inputs or self.inputs(harness, layouts)
        host, expected = inputs.host, inputs.expected
        program = self.program(harness, inputs)
        for u in program.unused:
            warning = unused_binding(u.number, u.kernel, u.group, u.binding, u.buffer)
            if warning not in self.warnings:  # once, not once per case
                self.warnings.append(warning)
        check = DeviceCheck(self.device, self.kept, harness)
        check.plan(inputs.key, expected, list(program.reads), self.device_check_from, self.memo)
        try:
            replayed = self.replay(
                program, inputs, check=check, capture=self.capture, whole=self.whole, timed=True
            )
        finally:
            check.release()
        self.trace = replayed.trace
        for warning in program_warnings(self.env.software, replayed.trace, self.memo):
            if warning not in self.warnings:
                self.warnings.append(warning)
        got = self.arrays(harness, replayed.read)
        result = compare_case(harness, host, got, expected, None, replayed.passed)
        fresh = frozenset(b.name for b in harness.bound_buffers() if b.fill == "fresh")
        marks = None
        if result.status in (Status.MISMATCH, Status.NONFINITE) and fresh:
            diagnostic = self.replay(program, inputs, sentinel=fresh, capture=self.capture)
            result = compare_case(
                harness, host, got, expected, self.arrays(harness, diagnostic.read), replayed.passed
            )
            marks = diagnostic.captured
        result.store_counts = self.count_stores(harness, inputs)
        if case is not None:
            result.name, result.description = case.name, case.description
        result.layout = [
            {"buffer": name, **layout.describe(host[name].tobytes())}
            for name, layout in layouts.items()
        ]
        shapes = {b.name: b.shape for b in harness.bound_buffers()}
        result.trace = replayed.trace
        result.passes = with_buffers(replayed.passes, replayed.captured, marks, shapes)
        result.whole = whole_entry(replayed.capture, shapes)
        result.speed = replayed.speed
        self.against_reference(harness, inputs, result)
        return result

    def against_reference(self, harness: Harness, inputs: Inputs, result: CaseResult) -> None:
        """The reference's time on the same machine beside the passes', and the arithmetic
        of a lone pass doing a known operation. The reference's time is taken once per
        worker and inputs: every version replayed on them compares with the same work."""
        ref = harness.reference
        if ref is None or result.speed is None or result.speed["gpu_ms"] is None:
            return
        args = [inputs.host[name] for name in ref.args]
        if len(result.passes) == 1 and (flops := reference_flops(ref.name, args)):
            result.passes[0]["flops"] = flops
        add_references(result.speed, self.memo, (inputs.key,), ref.name, lambda: args)

    def combine(self, results: list[CaseResult], named: bool) -> Outcome:
        """The outcome: a lone case's own, or the worst case's with every case listed."""
        worst = _worst(results)
        self.trace = worst.trace
        outcome = self.outcome(
            worst.status, worst.message, outputs=worst.outputs, report=worst.report
        )
        if worst.layout:
            outcome["layout"] = worst.layout
        if worst.store_counts:
            outcome["store_counts"] = worst.store_counts
        outcome["passes"] = worst.passes
        if worst.whole is not None:
            outcome["whole"] = worst.whole
        if worst.speed is not None:
            outcome["speed"] = worst.speed
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
        outcome["cases"] = [case_entry(r, shown=r is worst) for r in results]
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
                if (refused := module_refusal(kernel, source)) is not None:
                    message = compile_message(refused)
                    raise Stop(Status.COMPILE_ERROR, message, refused["text"], compile=refused)
        finally:
            self.timings["compile_ms"] = _ms(started)
        return self.outcome(Status.NO_REFERENCE, "Compiles; there is no harness to run it with.")

    # -- on the device -----------------------------------------------------------------

    def program(
        self, harness: Harness, inputs: Inputs, counting: Counting | None = None
    ) -> HarnessHost:
        """The case's program, compiled once per worker for the same harness, sources and
        inputs (its data is the inputs' own memory, not a copy)."""
        sources = hashlib.sha256(repr(sorted(self.sources.items())).encode()).hexdigest()
        counts = None
        if counting is not None:
            counts = (counting.number, hashlib.sha256(counting.copy.source.encode()).hexdigest())
        # inputs.key holds the case's harness digest already (Run.inputs).
        key = ("harness program", sources, inputs.key, counts)
        program: HarnessHost = self.memo(
            key,
            functools.partial(
                harness_host,
                harness,
                self.sources,
                host=inputs.host,
                writable=self.writable,
                counting=counting,
            ),
        )
        return program

    def replay(
        self,
        program: HarnessHost,
        inputs: Inputs,
        sentinel: frozenset[str] = frozenset(),
        check: DeviceCheck | None = None,
        capture: bool = False,
        whole: Whole | None = None,
        timed: bool = False,
    ) -> Replayed:
        """Replay the program's calls on the executor. sentinel: the diagnostic run's
        buffers, which start with the never-written sentinel. check: the device check of
        large outputs, run after the passes; an output it passes is not read back.
        capture: keep what each pass's writable buffers held after it (whole: one of them
        after one pass, whole). timed: time its
        passes (the run shown; not the diagnostic run or the store counts')."""
        wgpu = import_wgpu()
        files = {VERSION_WGSL: self.sources.get("self", "").encode()}
        files |= {f"{kernel}.wgsl": source.encode() for kernel, source in self.sources.items()}
        if program.counting:
            files["counting.wgsl"] = program.counting.encode()
        resident = {made: (*inputs.key, name) for made, name in program.inputs.items()}
        timeline = Timeline(
            self.device,
            self.env,
            self.limits,
            files,
            sentinel,
            program.code,
            self.memo,
            kept=self.kept,
            resident=resident,
            shadows=False,
            capture=capture,
            whole=whole,
            recorded=False,
            timed=timed,
        )
        passed: dict[str, dict[str, Any]] = {}
        skipped: set[int] = set()
        try:
            for index, entry in enumerate(program.fresh_entries()):
                if index in skipped:
                    continue
                if entry["op"] == "createBuffer" and not self.refused:
                    # Compiled: llvmpipe would let these pass where a GPU does not.
                    self.refused = True
                    if self.env.software and (why := misleading_on_cpu(self.harness, self.sources)):
                        raise Stop(Status.REJECTED, why)
                timeline.apply(entry, program.blob)
                if index == program.submit and check is not None and check.names:
                    check.run({n: timeline.objects[program.buffers[n]] for n in check.names})
                    passed = check.passed()
                    skipped = {i for name in passed for i in program.reads[name]}
            repeats = timeline.time_passes(repeat=timed)
        except HostError as e:
            # The trace up to the call that failed shows where it went wrong.
            self.trace = timeline.trace
            raise self.stop(e, program) from None
        except wgpu.GPUError as e:  # not a validation error: the device could not do it
            raise Stop(
                Status.CRASHED, "The device could not allocate the run's buffers.", str(e)
            ) from None
        finally:
            self.compile_ms += timeline.compile_ms
            timeline.release()
        read = {r.source: r.data for r in timeline.readbacks}
        speed = speed_report(
            self.env, timeline.passes, repeats, timeline.upload_ms, timeline.readback_ms
        )
        captured = timeline.capture.read if timeline.capture else {}
        return Replayed(
            read, passed, timeline.trace, timeline.passes, speed, captured, timeline.capture
        )

    def arrays(self, harness: Harness, read: Mapping[str, bytes]) -> dict[str, np.ndarray]:
        """The buffers read back as the harness shapes them."""
        arrays = {}
        for name, data in read.items():
            buf = harness.buffer(name)
            dtype = NP_DTYPES[buf.dtype]
            arrays[name] = np.frombuffer(data, dtype=dtype).reshape(buf.shape).copy()
        return arrays

    def stop(self, e: HostError, program: HarnessHost) -> Stop:
        """The executor's error, told as the harness's: what each call stands for."""
        what = program.what.get(e.line or 0, ())
        if e.compile is not None:
            text = e.compile["text"]
            return Stop(Status.COMPILE_ERROR, compile_message(e.compile), text, compile=e.compile)
        if e.kind == "limit":
            return Stop(Status.REJECTED, e.message, e.message)
        if what[:1] == ("pipeline",):
            _, kernel, entry_point = what
            return Stop(
                Status.PIPELINE_ERROR,
                f"Kernel {kernel}, entry point {entry_point}: {e.message}",
                e.message,
            )
        if what[:1] == ("bind group",):
            _, number, kernel, group, bindings = what
            return self.bind_error(
                f"Pass {number} ({kernel}), group {group}", kernel, group, bindings, e.message
            )
        if what[:1] == ("buffer",):
            return Stop(Status.PIPELINE_ERROR, f"Buffer {what[1]}: {e.message}", e.message)
        return Stop(Status.PIPELINE_ERROR, f"The dispatch failed: {e.message}", e.message)

    def count_stores(self, harness: Harness, inputs: Inputs) -> list[dict[str, Any]]:
        """For each pass whose dispatch and output disagree in size, how many values each
        invocation stores into the output (kernels/engine/store_counts.py): the passes
        replayed again up to it, its kernel counting. A copy that cannot be counted counts
        nothing; the run's verdict is never touched."""
        counted = []
        for number, p in enumerate(harness.passes, start=1):
            digest = hashlib.sha256(self.sources[p.kernel].encode()).digest()
            # What a version's invocations store does not change from run to run: counted
            # once per worker (the same version run again counts nothing).
            found = self.memo(
                ("stores counted", inputs.key, number, digest),
                functools.partial(self.count_pass, harness, inputs, number),
            )
            if found is not None:
                counted.append(found)
        return counted

    def count_pass(self, harness: Harness, inputs: Inputs, number: int) -> dict[str, Any] | None:
        p = harness.passes[number - 1]
        source = self.sources[p.kernel]
        copy = self.memo(
            ("store counts", inputs.key, number, hashlib.sha256(source.encode()).digest()),
            functools.partial(store_counts.for_pass, harness, p, source),
        )
        if copy is None:
            return None
        program = self.program(harness, inputs, Counting(number, copy))
        try:
            replayed = self.replay(program, inputs)
        except Stop:
            return None
        counts = np.frombuffer(replayed.read[COUNTERS], dtype=np.uint32)
        return {"pass": number, "buffer": copy.buffer, **store_counts.histogram(counts)}

    def bind_error(
        self, where: str, kernel: str, group: int, bindings: tuple[Any, ...], text: str
    ) -> Stop:
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


def _worst(results: list[CaseResult]) -> CaseResult:
    """The case a run of several shows: the first of the worst status (SEVERITY)."""
    return max(results, key=lambda r: SEVERITY.index(r.status))


def _one_whole(results: list[CaseResult]) -> None:
    """Only the case shown so far (combine's) keeps the bytes of the buffer its job asked
    for whole: 64 cases of 64 MiB would not fit in a worker."""
    shown = _worst(results)
    for result in results:
        if result is not shown and result.whole is not None:
            result.whole.pop("data", None)


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 2)
