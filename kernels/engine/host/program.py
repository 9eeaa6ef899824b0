"""Run a learner's WebGPU host program and say how it went.

run_program() runs the JavaScript against the shim and replays its WebGPU calls on the
worker's device; program_outcome() turns what came back into an Outcome, comparing the
program's readbacks with expected values when there are some; replay_program() does both,
and when the outputs are wrong runs the program a second time with storage buffers filled
with a sentinel, to find the cells no kernel wrote (the first run keeps WebGPU's zeroed
buffers, so a correct program computes what it computes in a browser).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

import numpy as np

from kernels.engine.analysis import analyse
from kernels.engine.compare import compare_output, mark_unwritten, no_reference_message, verdict
from kernels.engine.device import Environment
from kernels.engine.harness import Buffer, HarnessError
from kernels.engine.host.capture import Captured, Whole, whole_entry, with_buffers
from kernels.engine.host.check import (
    Unchecked,
    new_check,
    program_report,
    reference_arguments,
    reference_expected,
    reference_key,
)
from kernels.engine.host.gpu import SENTINEL_WORD, HostError, Readback, Timeline
from kernels.engine.host.js import Interrupted, OutOfMemory, Script, ScriptError
from kernels.engine.host.kept_inputs import ProgramInputs
from kernels.engine.host.program_errors import (
    JS_HEAP_BYTES,
    STATUS_OF_ERROR,
    ProgramError,
    host_error,
    js_message,
    out_of_memory,
    program_error,
    stuck,
    thrown,
    timed_out,
)
from kernels.engine.host.trace import NP_VIEWS, Trace, new_trace
from kernels.engine.inputs import Memo, no_memo, parsed_harness
from kernels.engine.limits import DEFAULT_LIMITS, Limits
from kernels.engine.outcome import (
    CheckReport,
    Outcome,
    PassRecord,
    ProgramReport,
    SpeedReport,
    Status,
    WholeBuffer,
    new_outcome,
)
from kernels.engine.resident import DeviceBuffers
from kernels.engine.run_warnings import program_warnings
from kernels.engine.speed import add_references, speed_report

COMPARABLE = ("f32", "u32", "i32")


class ConsoleLine(TypedDict):
    level: str  # log, info, debug, warn, error; page: text written into the page (page.js)
    text: str
    line: int | None


@dataclass
class ProgramResult:
    readbacks: list[Readback] = field(default_factory=list)
    console: list[ConsoleLine] = field(default_factory=list)
    console_dropped: int = 0
    trace: Trace | None = None
    error: ProgramError | None = None
    dispatches: int = 0
    passes: list[PassRecord] = field(default_factory=list)
    # What each pass's writable buffers held after it, by pass number (a run that captured).
    captured: dict[int, list[Captured]] = field(default_factory=dict)
    whole: WholeBuffer | None = None  # the buffer a job asked to keep whole
    run_ms: float = 0.0
    speed: SpeedReport | None = None
    # The bytes the program put in each buffer from the host, whole, by buffer name.
    written: dict[str, bytes] = field(default_factory=dict)
    # The buffers it wrote a fetched file into whole, and nothing else, by name: the
    # file's sha256 (host/kept_inputs.py found them as they were written).
    as_fetched: dict[str, str] = field(default_factory=dict)

    def report(self) -> ProgramReport:
        """The JSON for the replay page: console, trace and error (readbacks are in trace)."""
        return {
            "console": self.console,
            "console_dropped": self.console_dropped,
            "trace": self.trace,
            "error": self.error,
            "dispatches": self.dispatches,
        }


def run_program(
    device: Any,
    env: Environment,
    source: str,
    files: Mapping[str, bytes] | None = None,
    limits: Limits = DEFAULT_LIMITS,
    deadline: float | None = None,
    *,
    sentinel: bool = False,
    heap_bytes: int = JS_HEAP_BYTES,
    memo: Memo = no_memo,
    capture: bool = False,
    whole: Whole | None = None,
    kept: DeviceBuffers | None = None,
    fetched: Mapping[str, bytes] | None = None,
) -> ProgramResult:
    """Run source (a WebGPU host program) to its end, its deadline or its first error.

    deadline is a time.monotonic() value (default: 10 s from now). files are what fetch()
    may load, by name. sentinel=True fills new storage buffers with the never-written
    sentinel instead of zeros (the diagnostic run). capture: keep what each pass's
    writable buffers held after it (host/capture.py), and whole: one of them after one
    pass, whole. kept: the worker's device buffers, where the program's inputs (what it
    uploads whole of fetched, by sha256) are kept between runs (host/kept_inputs.py).
    """
    started = time.perf_counter()
    deadline = time.monotonic() + 10.0 if deadline is None else deadline
    # The diagnostic run's times are not shown: it is not timed.
    timeline = Timeline(
        device,
        env,
        limits,
        files or {},
        sentinel,
        source,
        memo,
        capture=capture,
        whole=whole,
        timed=not sentinel,
        kept=kept,
        inputs=ProgramInputs(kept, fetched) if kept is not None and fetched else None,
    )
    script = Script(source, deadline, heap_bytes)
    result = ProgramResult(trace=timeline.trace)
    repeats = 1
    try:
        result.error = _drive(script, timeline)
        # A program out of time is not kept waiting for the GPU to read its timestamps.
        if result.error is None or result.error["kind"] != "timeout":
            repeats = timeline.time_passes()
    finally:
        timeline.release()
    try:
        console = script.console()
        result.console, result.console_dropped = console["lines"], console["dropped"]
    except Exception:  # noqa: S110 - a context that ran out of memory may not answer
        pass
    result.readbacks = timeline.readbacks
    result.dispatches = timeline.dispatches
    result.passes = timeline.passes
    result.speed = speed_report(
        env,
        timeline.passes,
        repeats,
        timeline.upload_ms,
        timeline.readback_ms,
        timeline.program_ms(),
    )
    result.captured = timeline.capture.read if timeline.capture else {}
    result.whole = whole_entry(timeline.capture)
    result.written = {timeline.names[key]: bytes(data) for key, data in timeline.written.items()}
    if timeline.inputs is not None:
        result.as_fetched = {
            timeline.names[b]: sha for b, sha in timeline.inputs.as_fetched().items()
        }
    result.run_ms = round((time.perf_counter() - started) * 1000, 2)
    return result


def _drive(script: Script, timeline: Timeline) -> ProgramError | None:
    """Turn by turn: run JavaScript until it waits, replay its calls, answer its requests."""
    try:
        script.start()
        while True:
            script.run_jobs()
            taken = script.take()
            for entry in taken.record:
                # Replaying is Python's time, which QuickJS's deadline does not cover.
                if time.monotonic() > script.deadline:
                    return timed_out(entry.get("line") if isinstance(entry, dict) else None)
                answer = timeline.apply(entry, script.blob)
                if "request" in entry:
                    data = None
                    if isinstance(answer, tuple):
                        answer, data = answer
                    try:
                        script.answer(entry["request"], answer, data, entry["op"] == "fetch")
                    except OutOfMemory as e:
                        # Its bytes (a fetch's, a mapAsync's) did not fit: the call's line.
                        raise OutOfMemory(e.line or entry.get("line")) from None
            script.drop_blobs()
            if taken.state == "failed":
                return thrown(taken.error or {}, script.source)
            if time.monotonic() >= script.deadline:
                # Busy to its deadline in a job whose interruption nothing observed (a
                # loop in a then() callback the program dropped): no line to name.
                return timed_out(None)
            if taken.record:
                continue
            if taken.state == "done" and not taken.timers:
                return None
            if not script.run_timer():
                return stuck(taken)
    except HostError as e:
        return host_error(e)
    except Interrupted as e:
        return timed_out(e.line)
    except OutOfMemory as e:
        return out_of_memory(e.line)
    except ScriptError as e:
        kind = "syntax" if e.name == "SyntaxError" else "javascript"
        return program_error(
            kind, js_message(e.name, e.message, e.line), e.line, f"{e.name}: {e.message}"
        )


def readback_values(readback: Readback) -> np.ndarray:
    return np.frombuffer(readback.data, dtype=NP_VIEWS.get(readback.dtype, np.uint8))


def expected_from(result: ProgramResult) -> list[np.ndarray]:
    """Another run's readbacks as expected values (an earlier version against the final one)."""
    return [readback_values(r).astype(np.float64) for r in result.readbacks]


def program_outcome(
    result: ProgramResult,
    env: Environment,
    expected: Sequence[np.ndarray | None] | None = None,
    atol: float = 1e-5,
    rtol: float = 1e-5,
    sentinel: ProgramResult | None = None,
    memo: Memo = no_memo,
) -> Outcome:
    """The outcome of a run. expected lines up with result.readbacks (None: show only);
    sentinel is the diagnostic run, whose never-written cells mark the wrong ones here.
    memo: the worker's, which keeps what llvmpipe's warnings read of each source."""
    outcome = new_outcome(
        Status.NO_REFERENCE,
        "",
        env.as_dict(),
        {"compile_ms": None, "run_ms": result.run_ms, "wall_ms": None},
        program_warnings(env.software, result.trace or new_trace(), memo),
    )
    outcome["program"] = result.report()
    outcome["passes"] = with_buffers(
        result.passes, result.captured, sentinel.captured if sentinel else None
    )
    if result.speed is not None:
        outcome["speed"] = result.speed
    if result.whole is not None:
        outcome["whole"] = result.whole
    if result.error is not None:
        error = result.error
        outcome["status"], outcome["message"] = (
            str(STATUS_OF_ERROR[error["kind"]]),
            error["message"],
        )
        outcome["error"] = error["detail"]
        if "compile" in error:
            outcome["compile"] = error["compile"]
        return outcome
    outputs = []
    for index, readback in enumerate(result.readbacks):
        if readback.dtype not in COMPARABLE:
            continue
        want = expected[index] if expected is not None and index < len(expected) else None
        values = readback_values(readback)
        if want is not None and want.size != values.size:
            want = None
        if want is not None and sentinel is not None and index < len(sentinel.readbacks):
            bits = np.frombuffer(sentinel.readbacks[index].data, dtype=np.uint32)
            values = mark_unwritten(values, want, bits, SENTINEL_WORD, atol, rtol)
        buf = Buffer(
            name=readback.source or readback.buffer,
            usage="read_write",
            dtype=readback.dtype,
            # A reference's values come in its harness buffer's shape: drawn as it is drawn.
            shape=(values.size,) if want is None else want.shape,
            fill="zeros",
        )
        outputs.append(compare_output(buf, values, want, atol, rtol))
    outcome["outputs"] = outputs
    compared = [o for o in outputs if o["bad"] is not None]
    if not result.readbacks and result.captured:
        outcome["message"] = (
            "The program ran to its end but never read a buffer back (mapAsync and "
            "getMappedRange): in a browser it would show nothing. Below is what its buffers "
            "held after each pass, copied on the server."
        )
    elif not result.readbacks:
        what = "dispatched work but" if result.dispatches else "never dispatched and"
        outcome["message"] = (
            f"The program ran to its end but {what} never read a buffer back "
            f"(mapAsync and getMappedRange), so there is nothing to show.{_idle(result)}"
        )
    elif compared:
        status, outcome["message"] = verdict(compared)
        outcome["status"] = str(status)
    else:
        outcome["message"] = no_reference_message(outputs)
    return outcome


def _idle(result: ProgramResult) -> str:
    """Why a program that made no WebGPU object at all may have done nothing."""
    trace = result.trace or new_trace()
    if trace["buffers"] or trace["modules"] or result.dispatches:
        return ""
    return (
        " It made no buffer or shader module: if its page starts it from an onclick "
        "attribute, that is in the page's HTML, which is not replayed (only its scripts "
        "are); a call at the end of the script, or addEventListener, starts it here."
    )


def needs_diagnosis(outcome: Outcome, result: ProgramResult) -> bool:
    """Whether a second, sentinel-filled run could say more: wrong outputs, and a program
    that read nothing back, whose buffers are all a reader sees (never-written cells
    marked in them)."""
    wrong = outcome["status"] in (Status.MISMATCH, Status.NONFINITE)
    return wrong or (result.error is None and not result.readbacks and bool(result.captured))


Expected = Sequence[np.ndarray | None]


def replay_program(
    device: Any,
    env: Environment,
    source: str,
    files: Mapping[str, bytes] | None = None,
    limits: Limits = DEFAULT_LIMITS,
    deadline: float | None = None,
    expected: Expected | Callable[[ProgramResult], Expected | None] | None = None,
    atol: float = 1e-5,
    rtol: float = 1e-5,
    memo: Memo = no_memo,
    capture: bool = True,
    whole: Whole | None = None,
    kept: DeviceBuffers | None = None,
    fetched: Mapping[str, bytes] | None = None,
) -> Outcome:
    """Run, compare, and on a mismatch run again with the sentinel to find unwritten cells.

    expected may be a function of the run (a reference computed from what it wrote).
    capture: keep each pass's buffers (off only to measure what that costs); whole: one
    of them after one pass, whole (host/capture.py). kept and fetched: as run_program's.
    """
    deadline = time.monotonic() + 10.0 if deadline is None else deadline
    # The run, and the diagnostic run (the same, its buffers starting with the sentinel).
    run = functools.partial(
        run_program,
        device,
        env,
        source,
        files,
        limits,
        deadline,
        memo=memo,
        capture=capture,
        kept=kept,
        fetched=fetched,
    )
    result = run(whole=whole)
    if callable(expected):
        expected = expected(result) if result.error is None else None
    outcome = program_outcome(result, env, expected, atol, rtol, memo=memo)
    if not needs_diagnosis(outcome, result) or time.monotonic() >= deadline:
        return outcome
    diagnostic = run(sentinel=True)
    if diagnostic.error is not None:
        return outcome
    return program_outcome(result, env, expected, atol, rtol, sentinel=diagnostic, memo=memo)


# Seconds a program job may run when the job does not say: under the pool's default
# deadline (10 s), so the program's own interrupt, which names the line, comes first.
JOB_SECONDS = 8.0


def run_program_job(
    device: Any,
    env: Environment,
    job: Mapping[str, Any],
    memo: Memo = no_memo,
    kept: DeviceBuffers | None = None,
) -> Outcome:
    """A worker job of kind "program" (kernels/engine/worker.py):

        {"kind": "program", "source": str, "files": {name: base64} | null,
         "file_shas": {name: sha256} | null  (of files: each decoded once per worker),
         "file_refs": {name: sha256} | null, "files_dir": str | null  (files on disk),
         "wgsl": {name: str} | null  (the version's WGSL, fetch()ed by these names),
         "expected": [list of numbers | null, ...] | null  (one per readback, in order),
         "harness": {...} | null  (its reference, fed with the inputs the program wrote),
         "reference_program": {"source": str, "wgsl": {name: str} | null} | null
                     (another version, whose readbacks are the expected values),
         "tolerance": {"atol": float, "rtol": float} | null, "limits": {...} | null,
         "deadline_s": float | null,
         "fixtures_dir": str | null  (where a harness's files are: its report's labels),
         "whole": {"pass": int, "buffer": str, ...} | null  (host/capture.py's Whole)}

    The first of expected, harness (with a reference) and reference_program that the job
    gives is what the readbacks are checked against; outcome["check"] says which, and
    why there is no verdict when there cannot be one (CheckReport).

    Raises ValueError for a malformed job (invalid limits, files that are not base64).
    """
    limits = Limits.from_dict(job.get("limits") or {})
    files, fetched = _job_files(job, memo)
    deadline = time.monotonic() + float(job.get("deadline_s") or JOB_SECONDS)
    tolerance = job.get("tolerance") or {}
    report: dict[str, Any] = {}
    check, expected, harness_tolerance = _expectation(
        device, env, job, files, limits, deadline, report, memo, fetched
    )
    atol, rtol = harness_tolerance or (1e-5, 1e-5)
    outcome = replay_program(
        device,
        env,
        job["source"],
        {**files, **_wgsl_files(job.get("wgsl"))},
        limits,
        deadline,
        expected,
        atol=float(tolerance.get("atol", atol)),
        rtol=float(tolerance.get("rtol", rtol)),
        memo=memo,
        whole=Whole.from_job(job.get("whole")),
        kept=kept,
        fetched=fetched,
    )
    if check["problem"] and outcome["status"] == Status.NO_REFERENCE:
        outcome["message"] += f" No verdict: {check['problem']}."
    outcome["check"] = check
    if report and outcome["outputs"]:
        outcome["report"] = report
    # What the reviewer reads of the version's kernel, as after a harness run.
    if kernel := (job.get("wgsl") or {}).get("kernel.wgsl"):
        outcome["analysis"] = analyse({"self": kernel}, memo)
    return outcome


SHA256 = re.compile(r"[0-9a-f]{64}")


def _job_files(job: Mapping[str, Any], memo: Memo) -> tuple[dict[str, bytes], dict[str, bytes]]:
    """The job's files by name, and those it names by sha256 by their sha256 (what a
    program's kept inputs are found by). A file named by its sha256 is decoded or read
    once per worker (memo) and checked to be the file of that sha256."""
    attached = job.get("files") or {}
    shas = job.get("file_shas") or {}
    files, fetched = {}, {}
    for name, data in attached.items():
        if sha := shas.get(name):
            decode = functools.partial(_decoded, data, sha)
            files[name] = fetched[sha] = memo(("file", sha), decode)
        else:
            files[name] = base64.b64decode(data, validate=True)
    for name, sha in (job.get("file_refs") or {}).items():
        read = functools.partial(_read_file, job["files_dir"], sha)
        files[name] = fetched[sha] = memo(("file", sha), read)
    return files, fetched


def _read_file(folder: str, sha: str) -> bytes:
    """A file the job names by its sha256, read from the folder the web process wrote it
    to (kernels/jobs.py with_files)."""
    if not SHA256.fullmatch(sha):
        raise ValueError(f"the job names a file by {sha[:80]!r}, which is not a sha256")
    return _checked((Path(folder) / sha).read_bytes(), sha)


def _decoded(text: str, sha: str) -> bytes:
    return _checked(base64.b64decode(text, validate=True), sha)


def _checked(data: bytes, sha: str) -> bytes:
    if hashlib.sha256(data).hexdigest() != sha:
        raise ValueError(f"file {sha[:80]!r} is not the file of that sha256")
    return data


def _wgsl_files(wgsl: Mapping[str, str] | None) -> dict[str, bytes]:
    return {name: text.encode() for name, text in (wgsl or {}).items()}


def _expectation(
    device: Any,
    env: Environment,
    job: Mapping[str, Any],
    files: Mapping[str, bytes],
    limits: Limits,
    deadline: float,
    report: dict[str, Any],
    memo: Memo,
    fetched: Mapping[str, bytes],
) -> tuple[
    CheckReport,
    Expected | Callable[[ProgramResult], Expected | None] | None,
    tuple[float, float] | None,
]:
    """What the job's readbacks are checked against, and the harness's tolerance; a
    harness's classification report of the run goes into report. fetched: the job's files
    by their sha256 (reference_key)."""
    if job.get("expected") is not None:
        values = [None if v is None else np.array(v, dtype=np.float64) for v in job["expected"]]
        return new_check("values"), values, None
    spec = job.get("harness")
    if spec:
        try:
            harness = parsed_harness(spec, None, memo)
        except HarnessError as e:
            raise ValueError(f"the job's harness is invalid: {e}") from None
        if harness.reference is not None:
            check = new_check("reference", harness.reference.name)

            def by_reference(result: ProgramResult) -> Expected | None:
                trace = result.trace if result.trace is not None else new_trace()
                fixtures = Path(job["fixtures_dir"]) if job.get("fixtures_dir") else None
                made = program_report(harness, trace, result.written, result.readbacks, fixtures)
                report.update(made or {})
                try:
                    key = reference_key(harness, trace, result.written, fetched, result.as_fetched)
                    expected = reference_expected(
                        harness, trace, result.written, result.readbacks, memo, key
                    )
                except Unchecked as e:
                    check["problem"] = str(e)
                    return None
                speed, name = result.speed, check["name"]
                if speed is not None and speed["gpu_ms"] is not None:
                    # On the inputs the program wrote, beside its passes' time.
                    args = functools.partial(reference_arguments, harness, trace, result.written)
                    add_references(speed, memo, key, name, args)
                return expected

            return check, by_reference, (harness.tolerance.atol, harness.tolerance.rtol)
    other = job.get("reference_program")
    if other:
        check = new_check("program")
        reference_files = {**files, **_wgsl_files(other.get("wgsl"))}
        result = run_program(
            device, env, other["source"], reference_files, limits, deadline, memo=memo
        )
        if result.error is not None:
            check["problem"] = f"the version compared with did not run: {result.error['message']}"
        elif not result.readbacks:
            check["problem"] = "the version compared with read nothing back"
        else:
            return check, expected_from(result), None
        return check, None, None
    return new_check("none"), None, None
