"""The outcome of a replay: its status, and the one shape every outcome has.

Shared by the runner, the worker, the pool and the web side. An outcome is JSON (it
crosses the worker's pipe and is stored on a Run), so it is a TypedDict, not a class.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

if TYPE_CHECKING:
    import numpy as np


class Status(StrEnum):
    PASSED = "passed"
    MISMATCH = "mismatch"
    NONFINITE = "nonfinite"
    COMPILE_ERROR = "compile_error"
    PIPELINE_ERROR = "pipeline_error"
    TIMEOUT = "timeout"
    CRASHED = "crashed"
    THREW = "threw"
    REJECTED = "rejected"
    NO_REFERENCE = "no_reference"
    INFRA_ERROR = "infra_error"

    @property
    def label(self) -> str:
        return LABELS[self]

    @property
    def cacheable(self) -> bool:
        """A finished run is reused for the same inputs, a timeout too (running it again on
        each view would only take a worker for the whole deadline again: "Run again" asks
        for a fresh one); a run cut short by us is not."""
        return self not in (Status.INFRA_ERROR, Status.CRASHED)


LABELS = {
    Status.PASSED: "passed",
    Status.MISMATCH: "wrong results",
    Status.NONFINITE: "NaN or infinity in the output",
    Status.COMPILE_ERROR: "does not compile",
    Status.PIPELINE_ERROR: "pipeline or binding error",
    Status.TIMEOUT: "timed out",
    Status.CRASHED: "crashed",
    Status.THREW: "threw an exception",
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

    stage    "compile" when the shader compiler died, "javascript" when QuickJS did
             (running a host program), else "run"
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
                       expression as written), line, and (version 5 on) guarded:
                       whether an if, return, loop, select, min or clamp comes before it
    loops              kind ("for", "while", "loop"), line, condition as written
    shared             its var<workgroup> accesses (variable, index as written, line,
                       kind "read" or "write"), the lines of the workgroup barriers in its
                       body and barriers_elsewhere (how many others the module holds);
                       absent from outcomes of runners before version 5
    calls              the functions its body calls, each once (version 5 on)
    """

    name: str
    stage: str
    line: int
    workgroup_size: list[int] | None
    workgroup_storage: int
    builtins: dict[str, str]
    writes: list[dict[str, Any]]
    loops: list[dict[str, Any]]
    shared: NotRequired[dict[str, Any]]
    calls: NotRequired[list[str]]


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


class WarningCode(StrEnum):
    """What a warning is about; pages, templates and the reviewer decide by it.

    LOOP_CAP        llvmpipe ends a loop after 65,535 iterations, and a loop the run
                    ran can reach that (as the run set it up, data's iterations) or
                    may (its bound is known only as it runs)
    DROPPED_WRITES  llvmpipe drops stores past a buffer's end, and a store the run ran
                    is not guarded against that (no bounds check before it)
    UNUSED_BINDING  a harness binds a buffer at a binding the kernel does not declare:
                    the binding was left out of the bind group
    NOTE            a sentence of a run stored before warnings had codes
    """

    LOOP_CAP = "llvmpipe_loop_cap"
    DROPPED_WRITES = "llvmpipe_dropped_writes"
    UNUSED_BINDING = "unused_binding"
    NOTE = "note"


class RunWarning(TypedDict):
    """Something about a run that could mislead a reader: a code, the facts it is about
    (data: kernel, entry_point, line, and per code: condition, and iterations where the
    run counted them, for LOOP_CAP; buffer and index for DROPPED_WRITES; pass (1-based),
    group, binding and buffer for UNUSED_BINDING), and
    text, the sentence a reader is shown (made from code and data by run_warnings.py)."""

    code: str
    text: str
    data: dict[str, Any]


class PassBuffer(TypedDict):
    """A storage buffer as it stood after a pass (kernels/engine/host/capture.py).

    name    the buffer's label, else the program's variable for it
    dtype   f32, u32 or i32 (the WGSL variable it is bound to as read_write: array<f32>,
            array<vec4<u32>> ...), u8 where the type cannot be told (a struct, f16)
    shape   the harness's shape for it, else [elements, vector width] or [cells]; of the
            cells kept when not all were
    count   the buffer's cells
    kept    the cells kept: count, fewer where the buffer is over the capture's cap
    values  the cells kept, packed as outputs' are (pack_values: a list up to 64 cells,
            else {"dtype", "shape", "base64"}; never-written cells null, or keeping their
            sentinel bits); absent when none were kept
    note    why not every cell is kept ("too large to keep whole", "never submitted")
    """

    name: str
    dtype: str
    shape: list[int]
    count: int
    kept: int
    values: NotRequired[list[int | float | str | None] | dict[str, Any]]
    note: NotRequired[str]


class WholeBuffer(TypedDict):
    """One storage buffer kept whole after one pass, on a reader's request (a job's
    "whole": {"pass", "buffer", ...}, echoed here as asked; kernels/engine/host/capture.py).

    asked    the job's request as it came: "pass" (the pass's number), "buffer" (its name)
             and whatever else the caller put there to find its request again
    dtype, shape, count   as the buffer's PassBuffer says, of every cell
    bytes    the buffer's size
    data     its bytes, little-endian: never in JSON (the worker sends them after the
             outcome's frame, the pool puts them back here); absent with a problem
    problem  why it is not kept: no such pass or buffer, over the cap, never submitted
    """

    asked: dict[str, Any]
    dtype: NotRequired[str]
    shape: NotRequired[list[int]]
    count: NotRequired[int]
    bytes: NotRequired[int]
    data: NotRequired[bytes]
    problem: NotRequired[str]


class PassRecord(TypedDict):
    """One compute pass a run encoded, in the order the GPU ran them (across encoders and
    submits): its number (1-based), name (the pass's label, else "pass N"), the line of
    beginComputePass, and how many dispatches it made. What the GPU did in it is added
    here: the storage buffers after it, its GPU time.

    buffers  each storage buffer it bound writable, as it stood after it (PassBuffer;
             a run that captured them: the run a reader sees)
    gpu_ms   the pass's time on the device in milliseconds: the difference of the
             timestamps the device wrote at its beginning and end (timestamp queries),
             the median of outcome["speed"]["repeats"] runs; None where the device
             cannot time passes (outcome["speed"]["clock"] says why). On a software
             adapter (environment "software") it is the CPU emulating the GPU.
    bytes    the bytes the pass must move at least: each storage or uniform buffer its
             dispatches bind, counted once as read (read-only bindings), once as written
             (write-only ones) or both (read_write), over the bound range
    flops    the arithmetic it must do, in floating-point operations (a multiply-add is
             two), where it can be counted (a harness pass with the declared shapes of a
             known operation); else absent
    timed    for a Triton or CUDA launch kind (a "pass" there): how many of its launches
             gpu_ms is the median of (its second to 21st), each between two CUDA events
    Other runners (CUDA, Triton) fill the same keys the same way, in the same units.
    """

    number: int
    name: str
    line: int | None
    dispatches: int
    buffers: NotRequired[list[PassBuffer]]
    gpu_ms: NotRequired[float | None]
    bytes: NotRequired[int]
    flops: NotRequired[int]
    timed: NotRequired[int]


class Peaks(TypedDict):
    """What the device can do at most, measured once per worker (kernels/engine/peaks.py):
    bandwidth_gbs (GB/s, 10^9 bytes, of a copy pass: read + written bytes over its time)
    and fma_gflops (10^9 floating-point operations a second of a pass of multiply-adds,
    counting one as two), with the clock that timed them."""

    bandwidth_gbs: float
    fma_gflops: float
    clock: str


class SpeedReport(TypedDict):
    """outcome["speed"]: how long the run took on the device, and against what.

    clock        "timestamp-query" (the device timed each pass), "none" (it cannot:
                 no figure is given, problem says so)
    adapter      the adapter the figures are of (environment's label)
    emulated     True on a software adapter (llvmpipe): the figures are the CPU's time
                 emulating a GPU and say nothing about a GPU's speed
    repeats      how many runs each pass's gpu_ms is the median of (1: the run itself;
                 a cheap harness run is repeated after it, its outputs already read)
    gpu_ms       the passes' total on the device (sum of their gpu_ms); None without a clock
    upload_ms    host-to-device writes (writeBuffer, mapped writes), wall clock; None
                 where the program's own copies are not followed (Triton, CUDA)
    readback_ms  device-to-host reads (mapAsync of a read), wall clock, the wait for the
                 work before each read excluded; None as upload_ms
    program_ms   for a host program: from its first submit to the end of its last
                 readback, wall clock: its passes, the round trips between them and its
                 own work in between (what versions of a program are compared by)
    peaks        the worker's Peaks, where measured
    reference    the reference implementation's time on the same machine, where there is
                 one: name (e.g. "numpy"), ms (median of the same repeats), and speedup
                 (reference ms / gpu_ms; above 1 the kernel is faster)
    gpu_reference  the same reference done by PyTorch on the worker's CUDA GPU, where it
                 has one (gpu_reference.py): name, ms (median of runs, each between two
                 CUDA events), runs, where (the GPU's name) and speedup as above
    gpu_reference_loading  True where the worker's PyTorch was still loading when this
                 ran: compared with numpy alone, the run does not stand in for later ones
    problem      why a figure is missing ("" when none is)
    """

    clock: str
    adapter: str
    emulated: bool
    repeats: int
    gpu_ms: float | None
    upload_ms: float | None
    readback_ms: float | None
    program_ms: NotRequired[float]
    peaks: NotRequired[Peaks]
    reference: NotRequired[dict[str, Any]]
    gpu_reference: NotRequired[dict[str, Any]]
    gpu_reference_loading: NotRequired[bool]
    problem: str


class CheckReport(TypedDict):
    """outcome["check"] of a program run.

    against  "reference" (a harness's numpy reference), "program" (another version's
             readbacks), "values" (expected values the job gave), "none"
    name     the reference's name, for "reference"
    problem  why there is no verdict although one was asked for ("" when there is one)
    """

    against: str
    name: str
    problem: str


class ProgramReport(TypedDict):
    """outcome["program"] of a program run: its console (level, text, line), the lines
    the console cap left out, its trace (host/trace.py's Trace), the error it stopped at
    (host/program.py's ProgramError, or None) and how many dispatches it made."""

    console: Sequence[Mapping[str, Any]]
    console_dropped: int
    trace: Mapping[str, Any] | None
    error: Mapping[str, Any] | None
    dispatches: int


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
    warnings     what about the run could mislead a reader, as RunWarning items (a
                 code and its data); a stored outcome (run_warnings.as_stored) holds
                 their sentences here, as outcomes stored before codes do, and the
                 items under warning_items; warnings_of() reads any of them
    outputs      per output buffer, compare_output's verdict: name, dtype, shape, count,
                 bad, unwritten, nonfinite, max_abs_err, max_rel_err, worst_index,
                 first_bad, grid, and got/expected for small buffers (pack_values; read
                 them with output_values); compared "device" on a passing output that
                 was checked on the device, whose errors are float32's (gpu_compare.py)
    compile      on compile_error: where and what, as CompileError
    analysis     kernel name -> SourceFacts: what the reviewer needs from each source,
                 read in the worker (absent from outcomes of older runners)
    report       for a harness with a report: classification_report's accuracy and
                 confusion (kind, count, accuracy, predictions, confusion, labels_count)
    layout       for a harness with struct buffers: each one's bytes field by field, with
                 its padding (layout.LayoutDict and "buffer", its harness name)
    store_counts for a pass whose dispatch runs more or fewer invocations than its output
                 has elements: how many values each invocation stored there, as "pass"
                 (1-based), "buffer", "stores" ([stores, invocations] pairs, most
                 invocations first) and "others" (invocations of the counts left out);
                 store_counts.py. Absent when no pass needed it or it could not count
    cases        for a harness with cases: each case's name, description, status,
                 message, outputs (cell values only for the worst, which the top level
                 shows), layout and report; the top level is the worst case's
    passes       every compute pass the run encoded, in order, as PassRecord (at most
                 MAX_PASSES; the program's or, for a harness, its shown case's), with
                 each pass's GPU time, bytes and flops
    speed        SpeedReport: the run's GPU total, uploads and readbacks, the clock and
                 adapter, the peaks and the reference's time (absent from runs stored
                 before runs were timed)
    program      for a program run: ProgramReport (console, trace, error, dispatches)
    trace        for a harness run: the trace its program left (host/trace.py's Trace),
                 of the case shown; a program run's is in program
    check        for a program run: what its readbacks were checked against (CheckReport)
    crash        on crashed, when the kernel itself ended its workers: Crash; such an
                 outcome is kept like a finished run (see cacheable)
    detail       for staff only: the dead workers' ids and the tails of their stderr, a
                 traceback; kept apart from the outcome a reader sees (kernels.finishing.finish)
    cut          what the worker left out so that the outcome stays under its size cap
                 (worker.MAX_OUTCOME_BYTES): "the program's trace", "the program's
                 console", the values of an output; absent when nothing was cut
    whole        for a job that asked to keep one buffer whole after one pass: WholeBuffer
    """

    status: str
    message: str
    error: NotRequired[str]
    environment: dict[str, Any]
    timings: Timings
    warnings: list[RunWarning] | list[str]
    warning_items: NotRequired[list[RunWarning]]
    outputs: list[dict[str, Any]]
    compile: NotRequired[CompileError]
    analysis: NotRequired[dict[str, SourceFacts]]
    report: NotRequired[dict[str, Any]]
    layout: NotRequired[list[dict[str, Any]]]
    store_counts: NotRequired[list[dict[str, Any]]]
    cases: NotRequired[list[dict[str, Any]]]
    passes: NotRequired[list[PassRecord]]
    speed: NotRequired[SpeedReport]
    program: NotRequired[ProgramReport]
    trace: NotRequired[Mapping[str, Any]]
    check: NotRequired[CheckReport]
    crash: NotRequired[Crash]
    detail: NotRequired[str]
    cut: NotRequired[list[str]]
    whole: NotRequired[WholeBuffer]


def cacheable(outcome: Outcome) -> bool:
    """Whether this outcome stands in for new runs of the same inputs: a finished run's
    does, one cut short by us does not, unless the kernel itself crashed its workers
    (running it again would only crash another). Nor does one made while the worker's
    PyTorch reference was loading: the next run is compared with it too."""
    speed = outcome.get("speed")
    if speed and speed.get("gpu_reference_loading"):
        return False
    return Status(outcome["status"]).cacheable or "crash" in outcome


def no_timings() -> Timings:
    return {"compile_ms": None, "run_ms": None, "wall_ms": None}


def new_outcome(
    status: Status,
    message: str,
    environment: dict[str, Any],
    timings: Timings | None = None,
    warnings: list[RunWarning] | None = None,
    outputs: list[dict[str, Any]] | None = None,
) -> Outcome:
    """An outcome with the keys every one has; the rest are added by what made it."""
    return {
        "status": str(status),
        "message": message,
        "environment": environment,
        "timings": timings or no_timings(),
        "warnings": warnings or [],
        "outputs": outputs or [],
    }


def failure(
    status: Status,
    message: str,
    error: str = "",
    environment: dict[str, Any] | None = None,
    wall_ms: float | None = None,
) -> Outcome:
    """An outcome with nothing to show but why: the kernel did not run to the end."""
    outcome = new_outcome(status, message, environment or {})
    outcome["timings"]["wall_ms"] = wall_ms
    outcome["error"] = error
    return outcome


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


# Cells a kernel never wrote keep these bits. For f32 it is a quiet NaN with a payload
# that arithmetic does not produce, so "never written" differs from "computed NaN".
SENTINEL_BITS = {"f32": 0x7FC0DEAD, "u32": 0xDEADBEEF, "i32": 0xDEADBEEF}
# An output's cells up to this many travel as a JSON list, more as packed bytes. Packed
# is cheaper at every size (encoded, sent, stored and parsed: 11 against 30 us for 16
# cells, 0.6 against 7 ms for 4,096), but a list is what a person reading replay.json
# can read, and below this size the difference is under 0.1 ms an outcome.
LIST_UP_TO = 64
# Packed dtypes: little-endian, whatever the machine.
PACKED_DTYPES = {"f32": "<f4", "u32": "<u4", "i32": "<i4", "f64": "<f8", "u8": "u1"}
_SPECIAL = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def pack_values(values: np.ndarray, dtype: str) -> list[int | float | str | None] | dict[str, Any]:
    """An output's cells as the outcome carries them (dtype: one of PACKED_DTYPES).

    Up to LIST_UP_TO cells: a JSON list in row-major order, never-written cells as None,
    NaN and infinities as "NaN", "Infinity", "-Infinity". More: {"dtype", "shape",
    "base64"}, the cells' little-endian bytes, never-written cells keeping their
    sentinel bits. output_values reads either back.
    """
    import numpy as np  # imported where used: the pool, in the web process, needs none

    if values.size > LIST_UP_TO:
        data = np.ascontiguousarray(values, dtype=PACKED_DTYPES[dtype]).tobytes()
        return {
            "dtype": dtype,
            "shape": list(values.shape),
            "base64": base64.b64encode(data).decode("ascii"),
        }
    flat = values.reshape(-1)
    if flat.dtype.kind != "f":
        shown: list[int | float | str | None] = [int(v) for v in flat.tolist()]
    else:
        shown = list(flat.astype(np.float64).tolist())
        for i in np.flatnonzero(~np.isfinite(flat)):
            shown[i] = json_number(float(flat[i]))
    if dtype in SENTINEL_BITS and flat.dtype.itemsize == 4:
        for i in np.flatnonzero(flat.view(np.uint32) == SENTINEL_BITS[dtype]):
            shown[i] = None
    return shown


def output_values(output: Mapping[str, Any], key: str) -> np.ma.MaskedArray | None:
    """An output's "got" or "expected" cells as an array of the output's shape, the
    never-written cells masked; None when the outcome does not carry them.

    Reads both forms pack_values writes, and the lists of outcomes stored before
    values were packed (the same lists, at any size).
    """
    import numpy as np

    raw = output.get(key)
    if raw is None:
        return None
    shape = tuple(output.get("shape") or ())
    if isinstance(raw, dict):
        dtype = raw["dtype"]
        flat = np.frombuffer(base64.b64decode(raw["base64"]), dtype=PACKED_DTYPES[dtype])
        shape = tuple(raw["shape"])
        never = (
            flat.view(np.uint32) == SENTINEL_BITS[dtype]
            if dtype in SENTINEL_BITS
            else np.zeros(flat.size, dtype=bool)
        )
    else:
        integers = key == "got" and output.get("dtype") in ("u32", "i32")
        never = np.array([v is None for v in raw], dtype=bool)
        cells = [
            0 if v is None else _SPECIAL.get(v, math.nan) if isinstance(v, str) else v for v in raw
        ]
        flat = np.array(cells, dtype=np.int64 if integers else np.float64)
    if math.prod(shape) != flat.size:
        shape = (flat.size,)
    return np.ma.MaskedArray(flat.reshape(shape), mask=never.reshape(shape))


def output_list(output: Mapping[str, Any], key: str) -> list[Any] | None:
    """output_values as a flat list of Python numbers, None for never-written cells."""
    values = output_values(output, key)
    if values is None:
        return None
    cells: list[Any] = values.ravel().tolist()
    return cells


def json_number(x: float) -> float | str:
    """JSON has no NaN or infinities: they travel as the strings JavaScript prints."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return x


def run_trace(outcome: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The trace a run left: a harness run's, or its program's; None for a run without one
    (compile-only, or stored before harness runs kept theirs)."""
    outcome = outcome or {}
    return outcome.get("trace") or (outcome.get("program") or {}).get("trace") or None
