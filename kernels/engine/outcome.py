"""The outcome of a replay: its status, and the one shape every outcome has.

Shared by the runner, the worker, the pool and the web side. An outcome is JSON (it
crosses the worker's pipe and is stored on a Run), so it is a TypedDict, not a class.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, NotRequired, TypedDict


class Status(StrEnum):
    PASSED = "passed"
    MISMATCH = "mismatch"
    NONFINITE = "nonfinite"
    COMPILE_ERROR = "compile_error"
    PIPELINE_ERROR = "pipeline_error"
    TIMEOUT = "timeout"
    CRASHED = "crashed"
    REJECTED = "rejected"
    NO_REFERENCE = "no_reference"
    INFRA_ERROR = "infra_error"

    @property
    def label(self) -> str:
        return LABELS[self]

    @property
    def cacheable(self) -> bool:
        """A finished run is reused for the same inputs; a run cut short by us is not."""
        return self not in (Status.TIMEOUT, Status.INFRA_ERROR, Status.CRASHED)


LABELS = {
    Status.PASSED: "passed",
    Status.MISMATCH: "wrong results",
    Status.NONFINITE: "NaN or infinity in the output",
    Status.COMPILE_ERROR: "does not compile",
    Status.PIPELINE_ERROR: "pipeline or binding error",
    Status.TIMEOUT: "timed out",
    Status.CRASHED: "crashed",
    Status.REJECTED: "rejected before running",
    Status.NO_REFERENCE: "ran (nothing to compare with)",
    Status.INFRA_ERROR: "could not run (no GPU adapter)",
}


class Timings(TypedDict):
    """Milliseconds; None for a step that did not happen.

    compile_ms and run_ms (dispatch and readback) are measured by the runner, wall_ms
    (the whole job, queue wait excluded) by the pool.
    """

    compile_ms: float | None
    run_ms: float | None
    wall_ms: float | None


class CompileError(TypedDict):
    """naga's error text as fields; line and column are 1-based, None without a span."""

    kernel: str
    line: int | None
    column: int | None
    message: str
    label: str
    notes: list[str]
    text: str


class Crash(TypedDict):
    """How a kernel ended the workers that ran it, as a reader may see it (no process ids).

    stage    "compile" when the shader compiler died, else "run"
    exit     how the last worker ended ("killed by SIGSEGV")
    workers  how many workers it ended in a row
    """

    stage: str
    exit: str
    workers: int


class EntryPointFacts(TypedDict):
    """An entry point as its source declares it (kernels/engine/analysis.py).

    workgroup_size     [x, y, z], or None when a size is not a constant we can evaluate
    workgroup_storage  bytes of var<workgroup> it uses, as a browser counts them
    builtins           parameter (or "param.member") -> builtin, e.g. "gid" ->
                       "global_invocation_id"
    writes             where it stores into read_write buffers: buffer, index (the
                       expression as written), line
    loops              kind ("for", "while", "loop"), line, condition as written
    """

    name: str
    stage: str
    line: int
    workgroup_size: list[int] | None
    workgroup_storage: int
    builtins: dict[str, str]
    writes: list[dict[str, Any]]
    loops: list[dict[str, Any]]


class BindingFacts(TypedDict):
    """A module-scope resource: @group/@binding (None when not a constant), its variable's
    name, address space and access ("" when not written) and type as written."""

    group: int | None
    binding: int | None
    name: str
    address_space: str
    access: str
    type: str


class SourceFacts(TypedDict):
    entry_points: list[EntryPointFacts]
    bindings: list[BindingFacts]


class Outcome(TypedDict):
    """What one replay ended in.

    status       a Status value
    message      one sentence for a reader
    error        the detail behind the message (naga's or wgpu's text, a traceback);
                 absent when there is none
    environment  Environment.as_dict() of the device it ran on (adapter, backend,
                 description, software, wgpu, wgpu_native, runner, label, id); {} when
                 no device was opened
    timings      Timings
    warnings     what about the backend could mislead a reader (llvmpipe's loop cap)
    outputs      per output buffer, compare_output's verdict: name, dtype, shape, count,
                 bad, unwritten, nonfinite, max_abs_err, max_rel_err, worst_index,
                 first_bad, grid, and got/expected for small buffers
    compile      on compile_error: where and what, as CompileError
    analysis     kernel name -> SourceFacts: what the reviewer needs from each source,
                 read in the worker (absent from outcomes of older runners)
    report       for a harness with a report: classification_report's accuracy and
                 confusion (kind, count, accuracy, predictions, confusion, labels_count)
    layout       for a harness with struct buffers: each one's bytes field by field, with
                 its padding (layout.LayoutDict and "buffer", its harness name)
    cases        for a harness with cases: each case's name, description, status,
                 message, outputs (cell values only for the worst, which the top level
                 shows), layout and report; the top level is the worst case's
    crash        on crashed, when the kernel itself ended its workers: Crash; such an
                 outcome is kept like a finished run (see cacheable)
    detail       for staff only: the dead workers' ids and the tails of their stderr, a
                 traceback; kept apart from the outcome a reader sees (kernels.replay.finish)
    """

    status: str
    message: str
    error: NotRequired[str]
    environment: dict[str, Any]
    timings: Timings
    warnings: list[str]
    outputs: list[dict[str, Any]]
    compile: NotRequired[CompileError]
    analysis: NotRequired[dict[str, SourceFacts]]
    report: NotRequired[dict[str, Any]]
    layout: NotRequired[list[dict[str, Any]]]
    cases: NotRequired[list[dict[str, Any]]]
    crash: NotRequired[Crash]
    detail: NotRequired[str]


def cacheable(outcome: Outcome) -> bool:
    """Whether this outcome stands in for new runs of the same inputs: a finished run's
    does, one cut short by us does not, unless the kernel itself crashed its workers
    (running it again would only crash another)."""
    return Status(outcome["status"]).cacheable or "crash" in outcome


def no_timings() -> Timings:
    return {"compile_ms": None, "run_ms": None, "wall_ms": None}


def failure(
    status: Status,
    message: str,
    error: str = "",
    environment: dict[str, Any] | None = None,
    wall_ms: float | None = None,
) -> Outcome:
    """An outcome with nothing to show but why: the kernel did not run to the end."""
    return {
        "status": str(status),
        "message": message,
        "error": error,
        "environment": environment or {},
        "timings": {"compile_ms": None, "run_ms": None, "wall_ms": wall_ms},
        "warnings": [],
        "outputs": [],
    }


class Stop(Exception):
    """Ends a run early with an outcome other than a comparison.

    Raised anywhere in the engine (limits, inputs, compiling, dispatching); execute()
    turns it into the outcome.
    """

    def __init__(
        self,
        status: Status,
        message: str,
        error: str = "",
        compile: CompileError | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.error = error
        self.compile = compile
