"""A replay worker process: one warm wgpu device, jobs in, outcomes out.

Started by kernels.engine.pool as `python -m kernels.engine.worker` with the repository
root as cwd; never imports Django. Messages both ways are framed as a 4-byte big-endian
length and UTF-8 JSON (kernels/engine/messages.py):

    worker -> pool   {"type": "hello", "environment": {...}, "pid": n, "warm_up": [status, ...]}
                     once its device is open and its warm-up jobs have run (warm_up())
                     or {"type": "hello", "error": "...", "pid": n} when no adapter opens
    pool -> worker   {"type": "job", "id": str, "sources": {...}, "harness": {...} | null,
                      "fixtures_dir": str, "limits": {...}}   (limits optional)
                     or {"type": "job", "id": str, "kind": "program", ...}: a host
                      program (kernels.engine.host.program.run_program_job says what)
    worker -> pool   {"type": "result", "id": str, "outcome": {...}, "attachment": n}
                     and, where n > 0, a frame of n raw bytes after it: the bytes of the
                     buffer a job asked to keep whole (outcome["whole"]["data"]), which
                     base64 in the JSON made 14 to 22 times slower to send (bench/whole_buffer.py)

A worker without an adapter stays up and answers every job with an infra_error outcome
that gives the reason, so the pool needs no special path for it and recycles it like
any other. The worker exits cleanly when its stdin closes. A job that never ends is the
pool's to kill: nothing in-process can cancel a dispatch.
"""

from __future__ import annotations

import base64
import ctypes
import dataclasses
import faulthandler
import logging
import os
import resource
import signal
import stat
import struct
import sys
import tempfile
import threading
import time
import traceback
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, cast

from kernels.engine import gpu_reference
from kernels.engine.messages import HEADER, dumps, encode_frame, read_frame
from kernels.engine.outcome import Outcome, Status, failure

if TYPE_CHECKING:
    from kernels.engine.device import Environment
    from kernels.engine.resident import DeviceBuffers

MAX_FILE_BYTES = 16 * 1024 * 1024
MEMO_BYTES = 512 * 1024 * 1024
MEMO_ENTRIES = 256
# The most JSON an outcome may be when it leaves the worker (result_frame()). A legitimate
# outcome is far smaller: outputs carry their cells only up to a size (outcome.pack_values).
MAX_OUTCOME_BYTES = 8 * 1024 * 1024
# A program job still running this long past its own deadline is stuck where QuickJS cannot
# interrupt it (a regular expression backtracking in C): Answer's watchdog answers for it and
# ends the worker, before the pool's deadline (kernels/replay.py PROGRAM_MARGIN later) would
# kill it without a word.
STUCK_GRACE = 1.0
PROGRAM_SECONDS = 8.0  # a program job's deadline when it names none (host/program.py)
# Address space a worker may map. lavapipe reserves 1.3 GB of it for a device before any
# job; the heaviest program measured (three 128 MiB buffers, a 64 MiB readback, a
# JavaScript heap run out) peaked at 2.8 GB, and a harness at its caps (512 MiB of
# buffers, the memo's 512 MiB of arrays) stays below 4 GiB too. Past it an allocation
# fails in the worker, not in the web process.
MEMORY_BYTES = 4 * 1024**3
# Added to the worker's nice value: the web process (and /healthz) comes first.
NICENESS = 10
PR_SET_PDEATHSIG = 1

log = logging.getLogger("kernels.engine.worker")


def result_frames(job_id: Any, outcome: Outcome, retire: bool = False) -> list[bytes]:
    """What the worker writes for a job: its result_frame, then, for a buffer kept whole
    (outcome["whole"]["data"], at most WHOLE_MAX_BYTES), a raw frame of its bytes, the
    result's "attachment": written as they are (joined, they were a copy of 64 MiB more:
    84 ms on the H100)."""
    whole = outcome.get("whole")
    data = whole.pop("data", b"") if whole is not None else b""
    frame = result_frame(job_id, outcome, retire, attachment=len(data))
    return [frame, HEADER.pack(len(data)), data] if data else [frame]


def result_frame(job_id: Any, outcome: Outcome, retire: bool = False, attachment: int = 0) -> bytes:
    """The result message, its outcome cut to MAX_OUTCOME_BYTES of JSON first: what the
    program controls goes, biggest part first, and outcome["cut"] says what went (the
    page says so). The web process never receives, stores or parses more. retire: the
    worker exits after this answer. attachment: the bytes of the raw frame that follows
    it (result_frames)."""
    head: dict[str, Any] = {
        "type": "result",
        "id": job_id,
        "retire": retire,
        "attachment": attachment,
    }
    frame = encode_frame({**head, "outcome": outcome})
    if len(frame) <= MAX_OUTCOME_BYTES:
        return frame
    shown = cast(dict[str, Any], outcome)
    program: dict[str, Any] = shown.get("program") or {}
    parts: list[tuple[str, dict[str, Any], str]] = [
        ("the program's trace", program, "trace"),
        ("the program's trace", shown, "trace"),
        ("the program's console", program, "console"),
        *(
            (f"the values of output {output.get('name', '')}", output, key)
            for output in shown.get("outputs", [])
            for key in ("got", "expected")
        ),
        *(
            (f"the buffers after pass {record.get('number')}", record, "buffers")
            for record in shown.get("passes", [])
        ),
        ("the staff detail", shown, "detail"),
    ]
    sizes = [(len(dumps(holder.get(key))), what, holder, key) for what, holder, key in parts]
    cut: list[str] = []
    total = len(frame)
    for size, what, holder, key in sorted(sizes, key=lambda part: -part[0]):
        if total <= MAX_OUTCOME_BYTES or key not in holder:
            continue
        holder.pop(key)
        total -= size
        cut.append(what)
    outcome["cut"] = cut
    frame = encode_frame({**head, "outcome": outcome})
    if len(frame) <= MAX_OUTCOME_BYTES:
        return frame
    too_big = failure(
        Status.REJECTED,
        f"The run's outcome was over {MAX_OUTCOME_BYTES // 1024**2} MiB even without its "
        "trace, console and values, so it is not kept.",
        environment=outcome.get("environment"),
    )
    return encode_frame({**head, "outcome": too_big})


class Memo:
    """The runner's memo for this worker: fixture arrays, each harness's inputs and
    reference results, and compiled shaders and pipelines; least recently used first out
    past max_bytes of arrays or max_entries in all. The runner makes the arrays
    read-only, so no job can change another's input."""

    def __init__(self, max_bytes: int = MEMO_BYTES, max_entries: int = MEMO_ENTRIES) -> None:
        self.max_bytes = max_bytes
        self.max_entries = max_entries
        self.values: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
        self.sizes: dict[tuple[Any, ...], int] = {}

    def __call__(self, key: tuple[Any, ...], compute: Callable[[], Any]) -> Any:
        if key in self.values:
            self.values.move_to_end(key)
            return self.values[key]
        value = compute()
        self.values[key], self.sizes[key] = value, _nbytes(value)
        while len(self.values) > 1 and (
            len(self.values) > self.max_entries or sum(self.sizes.values()) > self.max_bytes
        ):
            oldest, _ = self.values.popitem(last=False)
            del self.sizes[oldest]
        return value


def _nbytes(value: Any) -> int:
    import numpy as np  # loaded by then: only a job's arrays are memoised

    if isinstance(value, np.ndarray):
        return value.nbytes
    if isinstance(value, bytes):
        return len(value)
    if isinstance(value, dict):
        return sum(_nbytes(item) for item in value.values())
    if isinstance(value, tuple | list):
        return sum(_nbytes(item) for item in value)
    return 0


def run_job(
    device: Any, env: Environment, job: dict[str, Any], memo: Memo, kept: DeviceBuffers
) -> Outcome:
    """One job's outcome. A bug in the runner becomes a "crashed" outcome, not an exit."""
    from kernels.engine.host.capture import Whole
    from kernels.engine.host.program import run_program_job
    from kernels.engine.limits import Limits
    from kernels.engine.run import execute

    try:
        limits = Limits.from_dict(job.get("limits") or {})
    except ValueError as e:
        return failure(Status.REJECTED, f"The job's limits are invalid: {e}", str(e), env.as_dict())
    try:
        whole = Whole.from_job(job.get("whole"))
    except ValueError as e:
        return failure(Status.REJECTED, f"The job is invalid: {e}", str(e), env.as_dict())
    try:
        if job.get("kind") == "program":
            return run_program_job(device, env, job, memo, kept)
        return execute(
            device,
            env,
            job["sources"],
            job.get("harness"),
            Path(job["fixtures_dir"]),
            limits,
            memo=memo,
            kept=kept,
            whole=whole,
        )
    except Exception:
        # A reader is told that it is Kernelbin's fault, never the exception's text (which
        # a hostile program could shape); staff find the traceback on the run.
        log.exception("runner failed")
        message = (
            "The replay runner failed on this run: a fault in Kernelbin, not in the kernel "
            "or program. It is not kept; run it again later."
        )
        outcome = failure(Status.CRASHED, message, "", env.as_dict())
        outcome["detail"] = traceback.format_exc()
        return outcome


# What a worker runs once before it says hello, on its own: the first of each kind pays
# for imports, QuickJS's first context and wgpu-py's first use of each C struct (cffi
# parses each type's declaration on first use: seconds on a busy machine), which readers
# should not wait for. A harness and a program that fetches, writes, dispatches and reads.
WARM_WGSL = """@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x < arrayLength(&y)) {
        y[id.x] = 2.0 * x[id.x];
    }
}
"""
WARM_HARNESS = {
    "buffers": {
        "x": {
            "usage": "read",
            "dtype": "f32",
            "shape": [64],
            "random": {"seed": 1, "low": -1.0, "high": 1.0},
        },
        "y": {"usage": "read_write", "dtype": "f32", "shape": [64], "output": True},
    },
    "passes": [{"kernel": "self", "bind": {"0": "x", "1": "y"}, "dispatch": [1, 1, 1]}],
    "reference": {"name": "double", "args": ["x"], "outputs": ["y"]},
}
WARM_PROGRAM = """const adapter = await navigator.gpu.requestAdapter();
const device = await adapter.requestDevice();
const x = new Float32Array(await (await fetch("x.bin")).arrayBuffer());
const code = await (await fetch("kernel.wgsl")).text();
const usage = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST | GPUBufferUsage.COPY_SRC;
const input = device.createBuffer({ label: "x", size: x.byteLength, usage });
const output = device.createBuffer({ label: "y", size: x.byteLength, usage });
const read = device.createBuffer({
  size: x.byteLength, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST,
});
device.queue.writeBuffer(input, 0, x);
const pipeline = device.createComputePipeline({
  layout: "auto", compute: { module: device.createShaderModule({ code }), entryPoint: "main" },
});
const bindGroup = device.createBindGroup({
  layout: pipeline.getBindGroupLayout(0),
  entries: [input, output].map((buffer, binding) => ({ binding, resource: { buffer } })),
});
const encoder = device.createCommandEncoder();
const pass = encoder.beginComputePass();
pass.setPipeline(pipeline);
pass.setBindGroup(0, bindGroup);
pass.dispatchWorkgroups(1);
pass.end();
encoder.copyBufferToBuffer(output, 0, read, 0, x.byteLength);
device.queue.submit([encoder.finish()]);
await read.mapAsync(GPUMapMode.READ);
console.log(new Float32Array(read.getMappedRange())[1]);
read.unmap();
"""
WARM_JOBS: list[dict[str, Any]] = [
    {"sources": {"self": WARM_WGSL}, "harness": WARM_HARNESS, "fixtures_dir": "."},
    {
        "kind": "program",
        "source": WARM_PROGRAM,
        "files": {"x.bin": base64.b64encode(struct.pack("<64f", *range(64))).decode()},
        "wgsl": {"kernel.wgsl": WARM_WGSL},
        "expected": [[2.0 * i for i in range(64)]],
    },
]


def import_job_modules() -> None:
    """Import the runner, the program host and the peaks, and numpy under them."""
    import kernels.engine.host.program
    import kernels.engine.peaks
    import kernels.engine.run  # noqa: F401


def warm_up(device: Any, env: Environment) -> list[str]:
    """Run WARM_JOBS on a memo and buffers of their own (a reader's first job finds the
    worker's empty); each one's status. One that does not pass is logged, and the worker
    serves anyway."""
    from kernels.engine.resident import DeviceBuffers

    statuses = []
    for job in WARM_JOBS:
        outcome = run_job(device, env, job, Memo(), DeviceBuffers())
        statuses.append(outcome["status"])
        if outcome["status"] != "passed":
            log.warning("warm-up job %s: %s", outcome["status"], outcome.get("message"))
    return statuses


class Answer:
    """The one answer the worker sends for a job: the outcome, when the job ends; for a
    program job stuck past its deadline, a timeout naming where it was, sent by a watchdog
    thread (QuickJS runs without Python's lock, so it can), after which the worker exits
    and the pool starts another ("retire")."""

    def __init__(self, channel: BinaryIO, job: dict[str, Any], env: Environment | None) -> None:
        self.channel = channel
        self.job_id = job.get("id")
        self.env = env
        self.started = time.monotonic()
        self.lock = threading.Lock()
        self.sent = False
        self.watchdog: threading.Timer | None = None
        if job.get("kind") == "program" and env is not None:
            seconds = float(job.get("deadline_s") or PROGRAM_SECONDS) + STUCK_GRACE
            self.watchdog = threading.Timer(seconds, self.stuck)
            self.watchdog.daemon = True
            self.watchdog.start()

    def send(self, outcome: Outcome) -> None:
        with self.lock:
            if self.sent:  # the watchdog answered and is ending the process
                return
            self.sent = True
            if self.watchdog is not None:
                self.watchdog.cancel()
            self.channel.writelines(result_frames(self.job_id, outcome))
            self.channel.flush()

    def stuck(self) -> None:
        from kernels.engine.host.js import native_line

        with self.lock:
            if self.sent:
                return
            self.sent = True
            outcome = stuck_outcome(native_line(), time.monotonic() - self.started, self.env)
            self.channel.write(result_frame(self.job_id, outcome, retire=True))
            self.channel.flush()
        os._exit(0)


def stuck_outcome(line: int, seconds: float, env: Environment | None) -> Outcome:
    """A program stopped inside a built-in QuickJS cannot interrupt; line as native_line()."""
    where = f" at line {line}" if line > 0 else ""
    inside = (
        "a regular expression, which runs in C where its deadline cannot stop it (one that "
        "backtracks can take hours on a few dozen characters)"
        if line
        else "a JavaScript built-in that cannot be interrupted"
    )
    message = (
        f"The program was still running{where} at its deadline, inside {inside}; the worker "
        "running it was stopped."
    )
    outcome = failure(
        Status.TIMEOUT, message, message, env.as_dict() if env else {}, round(seconds * 1000, 2)
    )
    error = {"kind": "timeout", "message": message, "line": line if line > 0 else None}
    outcome["program"] = {
        "console": [],
        "console_dropped": 0,
        "trace": None,
        "error": {**error, "call": "", "detail": message},
        "dispatches": 0,
    }
    return outcome


def _durations(steps: dict[str, float]) -> dict[str, float]:
    """Seconds from each step's start to the next one's (the last one's to now)."""
    ends = [*list(steps.values())[1:], time.monotonic()]
    return {
        name: round(end - start, 3) for (name, start), end in zip(steps.items(), ends, strict=True)
    }


def protect_protocol() -> BinaryIO:
    """The protocol channel, on a private copy of stdout.

    fd 1 is then pointed at stderr, so whatever native code prints (Mesa, LLVM) lands in
    the log instead of in the middle of a frame.
    """
    channel = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return channel


def limit_resources() -> None:
    """Caps of the worker's own, so that no replay can starve the web process: a lower CPU
    priority, an address space of MEMORY_BYTES, no big files, no core dumps."""
    os.nice(NICENESS)
    limits = (
        (resource.RLIMIT_AS, MEMORY_BYTES),
        (resource.RLIMIT_FSIZE, MAX_FILE_BYTES),
        (resource.RLIMIT_CORE, 0),
    )
    for limit, value in limits:
        _, hard = resource.getrlimit(limit)
        capped = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(limit, (capped, capped))


def die_with_parent() -> None:
    """Ask Linux to kill this worker if the pool's process dies without closing it.

    Otherwise a kernel still running when the web process is killed keeps a core busy
    until it ends on its own.
    """
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    parent = os.environ.get("KERNELBIN_PARENT_PID")
    if parent and os.getppid() != int(parent):
        # The parent died before prctl took effect.
        sys.exit(1)


def private_runtime_dir() -> str:
    """A directory only this user can use, shared by all workers so respawns leave no litter
    (and the peaks measured by the first, kernels/engine/peaks.py).

    A fresh one when the shared path is not ours (someone else made it first).
    """
    path = Path(tempfile.gettempdir()) / f"kernelbin-xdg-{os.getuid()}"
    try:
        path.mkdir(mode=0o700, exist_ok=True)
        info = path.lstat()
        private = stat.S_IMODE(info.st_mode) == 0o700 and info.st_uid == os.getuid()
        if stat.S_ISDIR(info.st_mode) and private:
            return str(path)
    except OSError:
        pass
    return tempfile.mkdtemp(prefix="kernelbin-xdg-")


def main() -> int:
    channel = protect_protocol()
    # A native crash (naga overflowing its stack) leaves a Python traceback on stderr:
    # the pool reads from it whether the shader compiler died.
    faulthandler.enable()
    # Before the caps: CUDA cannot open under them (gpu_reference.py).
    reference = gpu_reference.start()
    limit_resources()
    die_with_parent()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    if not os.environ.get("XDG_RUNTIME_DIR"):
        # Mesa complains on every start when it is unset.
        os.environ["XDG_RUNTIME_DIR"] = private_runtime_dir()

    from kernels.engine.device import NoAdapter, open_device

    device = env = None
    steps = {"device": time.monotonic()}
    # wgpu-py is imported here, before the thread that opens the device starts: the two
    # threads then never import one module at once.
    import wgpu.backends.wgpu_native  # noqa: F401

    with ThreadPoolExecutor(1, thread_name_prefix="open-device") as opener:
        # The driver opens the device without Python's lock: meanwhile this thread imports
        # what every job needs (numpy and the runner), which it would otherwise do after
        # (about 0.2 s and 0.1 s on the H100's host, bench/worker_start.py).
        opening = opener.submit(open_device, os.environ.get("KERNELBIN_WGPU_BACKEND", ""))
        import_job_modules()
    from kernels.engine.host.js import make_spare
    from kernels.engine.host.program_errors import JS_HEAP_BYTES
    from kernels.engine.peaks import kept_peaks
    from kernels.engine.resident import DeviceBuffers

    try:
        device, env = opening.result()
        steps["peaks"] = time.monotonic()
        # What its device can do at most, which each run's times are read against: measured
        # by the first worker on this machine, kept for the workers started after it.
        peaks = kept_peaks(device, env, Path(private_runtime_dir()))
        env = dataclasses.replace(env, peaks=peaks)
        steps["warm-up"] = time.monotonic()
        hello: dict[str, Any] = {
            "type": "hello",
            "environment": env.as_dict(),
            "pid": os.getpid(),
            "warm_up": warm_up(device, env),
            "start_s": _durations(steps),
        }
        no_adapter = ""
    except (NoAdapter, ValueError) as e:
        no_adapter = str(e)
        hello = {"type": "hello", "error": no_adapter, "pid": os.getpid()}
    channel.write(encode_frame(hello))
    channel.flush()
    if env is not None:
        make_spare(JS_HEAP_BYTES)  # the first program's context
    # After the warm-up, which is not to wait for PyTorch to load.
    gpu_reference.use(reference)

    memo, kept = Memo(), DeviceBuffers()
    stdin = sys.stdin.buffer
    while True:
        message = read_frame(stdin)
        if message is None:
            return 0
        if message.get("type") != "job":
            log.warning("ignoring a %r message", message.get("type"))
            continue
        answer = Answer(channel, message, env)
        if env is None:
            answer.send(failure(Status.INFRA_ERROR, no_adapter, no_adapter))
            continue
        answer.send(run_job(device, env, message, memo, kept))
        if message.get("kind") == "program":
            # The next program's QuickJS context, made while this worker waits for it.
            make_spare(JS_HEAP_BYTES)


if __name__ == "__main__":
    sys.exit(main())
