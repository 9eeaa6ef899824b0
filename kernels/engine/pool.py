"""A pool of replay worker processes (kernels/engine/worker.py), each holding one warm device.

Used by the web process and by task workers. It never imports Django or wgpu, and it
never hangs its caller: every job's future is resolved, with the kernel's outcome or
with one the pool writes itself (timeout, crashed, infra_error), or cancelled when
nobody wanted it any more before it ran. A job past its deadline is killed with its
worker's process group, since wgpu-py waits forever on a busy queue and nothing
in-process can cancel a dispatch. A job whose worker dies is run once more on a fresh
worker, unless the shader compiler died on it; a second death is the kernel's doing.
"""

from __future__ import annotations

import collections
import itertools
import logging
import math
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernels.engine.device import NoAdapter
from kernels.engine.messages import encode_frame
from kernels.engine.outcome import Outcome, Status, failure, no_timings
from kernels.engine.process import Deadline, Death, WorkerProcess

log = logging.getLogger("kernels.engine.pool")

REPO_ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT = 60.0
# Workers a job may end before its crash is taken to be the kernel's, not a passing
# fault (the OOM killer, a signal from outside). Compiler crashes are not retried: naga
# is deterministic, so the same source crashes it again.
CRASH_ATTEMPTS = 2


class Busy(Exception):
    """The queue is full; ask again after retry_after seconds."""

    def __init__(self, retry_after: int) -> None:
        super().__init__(f"All replay workers are busy; retry in {retry_after} s.")
        self.retry_after = retry_after


@dataclass
class _Job:
    key: str
    id: str
    payload: bytes
    future: Future[Outcome] = field(default_factory=Future)
    # time.monotonic() past which nobody waits for it: still queued then, it is dropped.
    wanted_until: float = -math.inf

    def want(self, seconds: float | None) -> None:
        until = math.inf if seconds is None else time.monotonic() + seconds
        self.wanted_until = max(self.wanted_until, until)


class _WorkerDied(Exception):
    def __init__(self, death: Death) -> None:
        super().__init__(death.exit)
        self.death = death


@dataclass
class _Slot:
    number: int
    worker: WorkerProcess | None = None
    job: _Job | None = None
    start_error: str = ""
    thread: threading.Thread | None = None


class Pool:
    def __init__(
        self,
        size: int = 2,
        deadline: float = 10.0,
        max_queue: int = 16,
        backend: str = "",
        max_jobs_per_worker: int = 500,
        python: str = sys.executable,
        cwd: str | Path = REPO_ROOT,
        env_overrides: dict[str, str] | None = None,
    ) -> None:
        if size < 1 or max_queue < 1 or deadline <= 0 or max_jobs_per_worker < 1:
            raise ValueError("size, max_queue, deadline and max_jobs_per_worker must be positive")
        self.size = size
        self.deadline = float(deadline)
        self.max_queue = max_queue
        self.backend = backend
        self.max_jobs_per_worker = max_jobs_per_worker
        self.python = python
        self.cwd = str(cwd)
        self.env_overrides = dict(env_overrides or {})

        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._queue: collections.deque[_Job] = collections.deque()
        self._in_flight: dict[str, _Job] = {}
        self._dropped: list[_Job] = []
        self._ids = itertools.count(1)
        self._closed = False
        self._environment: dict[str, Any] | None = None
        self._warm_up: list[str] = []  # the statuses of the last worker's warm-up jobs
        # Where the last worker's start went, in seconds: in all and by its steps.
        self._started: dict[str, float] = {}
        self._unavailable = ""
        self._average_s = 1.0
        self._counts = {
            "completed": 0,
            "timeouts": 0,
            "crashes": 0,
            "respawns": 0,
            "abandoned": 0,
        }
        self._slots = [_Slot(number) for number in range(size)]
        for slot in self._slots:
            # Each slot spawns its own workers from its own thread: Linux ties a
            # worker's parent-death signal to the thread that started it.
            slot.thread = threading.Thread(
                target=self._serve, args=(slot,), name=f"replay-slot-{slot.number}"
            )
            slot.thread.daemon = True
            slot.thread.start()

    # -- the caller's side -----------------------------------------------------------

    def submit(
        self, key: str, job: dict[str, Any], wanted_for: float | None = None
    ) -> Future[Outcome]:
        """Queue a job; a job with the same key already queued or running shares its future.

        wanted_for: how many seconds the caller will wait for it (None: until it ends).
        A job still queued once every caller's time is up is dropped unrun and its
        future cancelled (on a pool thread), unless someone asked for it again in time
        (submit or want).

        Raises Busy at once when the queue is full. The job is encoded here, so a job that
        is not JSON raises in the caller rather than in a pool thread.
        """
        with self._lock:
            if self._closed:
                raise RuntimeError("the replay pool is closed")
            self._drop_unwanted()
            shared = self._in_flight.get(key)
            if shared is None and len(self._queue) >= self.max_queue:
                raise Busy(self._retry_after())
            if shared is None:
                shared = self._queue_job(key, job)
            shared.want(wanted_for)
            return shared.future

    def want(self, key: str, seconds: float) -> bool:
        """Someone waits seconds more for the job with this key; False if there is none."""
        with self._lock:
            job = self._in_flight.get(key)
            if job is not None:
                job.want(seconds)
            return job is not None

    def _queue_job(self, key: str, job: dict[str, Any]) -> _Job:
        job_id = f"{os.getpid()}-{next(self._ids)}"
        message = {"type": "job", "id": job_id, **job}
        if "fixtures_dir" in message:
            message["fixtures_dir"] = str(message["fixtures_dir"])
        queued = _Job(key=key, id=job_id, payload=encode_frame(message))
        self._queue.append(queued)
        self._in_flight[key] = queued
        self._changed.notify_all()
        return queued

    def _drop_unwanted(self) -> None:
        """Take the queued jobs nobody waits for out of the queue (the lock is held); a
        slot thread cancels their futures."""
        now = time.monotonic()
        for job in [job for job in self._queue if job.wanted_until < now]:
            self._queue.remove(job)
            del self._in_flight[job.key]
            self._dropped.append(job)
            self._counts["abandoned"] += 1
            self._changed.notify_all()

    def _cancel_dropped(self) -> None:
        # On a slot thread, outside the lock: a cancelled future runs its callbacks (the
        # caller's bookkeeping, which may use a database) in the thread that cancels it.
        with self._lock:
            dropped, self._dropped = self._dropped, []
        for job in dropped:
            log.info("dropped replay job %s: nobody waits for it any more", job.id)
            job.future.cancel()

    def run(self, key: str, job: dict[str, Any]) -> Outcome:
        return self.submit(key, job).result()

    def environment(self, timeout: float = 30.0) -> dict[str, Any]:
        """The environment a worker reported when it started; NoAdapter if it had none."""
        end = time.monotonic() + timeout
        with self._changed:
            while self._environment is None and not self._unavailable:
                remaining = end - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"no replay worker has started within {timeout} s")
                self._changed.wait(remaining)
            if self._environment is None:
                raise NoAdapter(self._unavailable)
            return dict(self._environment)

    def status(self) -> dict[str, Any]:
        with self._lock:
            workers = [s.worker for s in self._slots if s.worker is not None]
            live = [w for w in workers if w.process.poll() is None]
            return {
                "size": self.size,
                "alive": len(live),
                "busy": sum(1 for s in self._slots if s.job is not None),
                "queued": len(self._queue),
                "max_queue": self.max_queue,
                "deadline": self.deadline,
                **self._counts,
                "environment": self._environment["label"] if self._environment else None,
                "warm_up": list(self._warm_up),
                "started_s": dict(self._started),
                "error": None if self._environment else self._unavailable or None,
                "worker_pids": [w.pid for w in live],
                # Workers running a job: started (a worker says hello once its device is
                # open and warmed up) and given one.
                "busy_pids": [
                    s.worker.pid
                    for s in self._slots
                    if s.job is not None and s.worker is not None and s.worker.hello
                ],
            }

    def close(self) -> None:
        """Stop taking jobs, answer the queued ones, and end every worker."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            abandoned = list(self._queue)
            self._queue.clear()
            # Busy workers, and workers still starting: neither would notice the close.
            doomed = [
                s.worker
                for s in self._slots
                if s.worker is not None and (s.job is not None or not s.worker.hello)
            ]
            self._changed.notify_all()
        for job in abandoned:
            self._resolve(job, self._closed_outcome(), elapsed=None)
        self._cancel_dropped()
        for worker in doomed:
            worker.kill()
        for slot in self._slots:
            if slot.thread is not None:
                slot.thread.join(timeout=START_TIMEOUT)

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _retry_after(self) -> int:
        busy = sum(1 for s in self._slots if s.job is not None)
        waiting = len(self._queue) + busy + 1
        return max(1, math.ceil(waiting / self.size * self._average_s))

    # -- the slot threads ----------------------------------------------------------------

    def _serve(self, slot: _Slot) -> None:
        while True:
            if slot.worker is None and not self._closed:
                self._start(slot)
            job = self._take(slot)
            if job is None:
                break
            started = time.monotonic()
            try:
                outcome = self._attempts(slot, job)
            except Exception as e:
                # A bug here must still answer the caller.
                log.exception("replay slot %s failed", slot.number)
                if slot.worker is not None:
                    slot.worker.kill()
                    slot.worker = None
                outcome = failure(Status.CRASHED, f"The replay pool failed: {e}", repr(e))
            with self._lock:
                slot.job = None
            self._resolve(job, outcome, elapsed=time.monotonic() - started)
        if slot.worker is not None:
            slot.worker.stop()
            slot.worker = None

    def _take(self, slot: _Slot) -> _Job | None:
        while True:
            self._cancel_dropped()
            with self._changed:
                while not self._queue and not self._dropped and not self._closed:
                    self._changed.wait()
                if self._closed:
                    return None
                self._drop_unwanted()
                job = self._queue.popleft() if self._queue else None
                if job is not None and job.future.set_running_or_notify_cancel():
                    slot.job = job
                elif job is not None:
                    # Cancelled while it waited.
                    if self._in_flight.get(job.key) is job:
                        del self._in_flight[job.key]
                    job = None
            if job is not None:
                return job

    def _start(self, slot: _Slot) -> None:
        env = {
            # One BLAS thread for the float64 reference: idle OpenBLAS threads spin, and
            # on a CPU adapter they take the cores llvmpipe runs the kernel on (measured:
            # a 1000x784x128 matmul replay went from 1.45x to 1.1x a bare dispatch).
            "OPENBLAS_NUM_THREADS": "1",
            # glibc's malloc keeps what a job frees (a program's few MB through QuickJS,
            # numpy and JSON) for the next job, rather than handing it back to the kernel
            # and faulting it in again page by page; up to 128 MiB, under the worker's
            # 4 GiB. The README has what it measured (bench/profile_program.py).
            "MALLOC_MMAP_THRESHOLD_": str(32 * 1024**2),
            "MALLOC_TRIM_THRESHOLD_": str(128 * 1024**2),
            **os.environ,
            **self.env_overrides,
            "KERNELBIN_WGPU_BACKEND": self.backend,
            "KERNELBIN_PARENT_PID": str(os.getpid()),
        }
        spawned = time.monotonic()
        try:
            # Our own module under the configured interpreter; no shell, no user input.
            process = subprocess.Popen(  # noqa: S603
                [self.python, "-m", "kernels.engine.worker"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=self.cwd,
                env=env,
                start_new_session=True,
            )
        except OSError as e:
            self._failed_start(slot, f"could not start a replay worker: {e}")
            return
        worker = WorkerProcess(process)
        with self._lock:
            slot.worker = worker
        try:
            hello = worker.receive(time.monotonic() + START_TIMEOUT)
        except (Deadline, EOFError, OSError, ValueError) as e:
            worker.kill()
            with self._lock:
                slot.worker = None
            if self._closed:
                return
            reason = "did not start in time" if isinstance(e, Deadline) else "failed to start"
            tail = "\n".join(worker.stderr)
            self._failed_start(
                slot,
                f"the replay worker {reason} ({worker.exit_description()})"
                + (f":\n{tail}" if tail else ""),
            )
            return
        worker.hello = hello
        slot.start_error = ""
        steps = hello.get("start_s") or {}
        with self._changed:
            if hello.get("environment"):
                self._environment = hello["environment"]
                self._warm_up = list(hello.get("warm_up") or [])
                # The latest start, whole and by step (the rest is Python and imports).
                self._started = {"total": round(time.monotonic() - spawned, 3), **steps}
            else:
                self._unavailable = str(hello.get("error") or "the worker reported no adapter")
            self._changed.notify_all()
        log.info(
            "replay worker %s up in %.2f s (%s): %s",
            worker.pid,
            time.monotonic() - spawned,
            ", ".join(f"{step} {seconds:.2f} s" for step, seconds in steps.items()),
            worker.environment.get("label") or hello.get("error"),
        )

    def _failed_start(self, slot: _Slot, reason: str) -> None:
        log.error("%s", reason)
        slot.start_error = reason
        with self._changed:
            self._unavailable = reason
            self._changed.notify_all()

    def _attempts(self, slot: _Slot, job: _Job) -> Outcome:
        """The job's outcome; a worker that dies on it is replaced and the job run again,
        up to CRASH_ATTEMPTS workers in all, or none if it died in the shader compiler or
        in QuickJS (each runs the same input the same way again)."""
        deaths: list[Death] = []
        while True:
            try:
                return self._run(slot, job)
            except _WorkerDied as died:
                deaths.append(died.death)
            last = deaths[-1]
            if last.in_compiler or last.in_javascript or len(deaths) >= CRASH_ATTEMPTS:
                return self._crash_outcome(deaths)
            if self._closed:
                return self._closed_outcome()
            self._start(slot)

    def _run(self, slot: _Slot, job: _Job) -> Outcome:
        """One attempt at the job on the slot's worker; _WorkerDied if the worker dies."""
        worker = slot.worker
        if worker is None:
            return failure(
                Status.INFRA_ERROR,
                "No replay worker could be started.",
                slot.start_error or "no worker",
            )
        started = time.monotonic()
        deadline = started + self.deadline
        try:
            worker.send(job.payload, deadline)
            while True:
                reply = worker.receive(deadline)
                if reply.get("attachment"):
                    # The bytes of the buffer the job asked to keep whole, raw.
                    attached = worker.receive_bytes(deadline)
                    (reply["outcome"].get("whole") or {})["data"] = attached
                if reply.get("type") == "result" and reply.get("id") == job.id:
                    break
        except Deadline:
            worker.kill()
            self._retire(slot, "timeouts")
            return self._timeout_outcome(worker, started)
        except (EOFError, OSError, ValueError) as e:
            worker.end()
            if self._closed:
                self._retire(slot, None)
                return self._closed_outcome()
            self._retire(slot, "crashes")
            death = Death(worker.pid, worker.exit_description(), str(e), tuple(worker.stderr))
            log.warning("replay worker %s died mid-job (%s): %s", death.pid, death.exit, e)
            raise _WorkerDied(death) from None

        worker.jobs += 1
        if reply.get("retire"):
            # The worker answered for a program stuck where nothing could stop it, and exits.
            worker.end()
            self._retire(slot, None)
            with self._lock:
                self._counts["respawns"] += 1
        elif worker.jobs >= self.max_jobs_per_worker:
            log.info("recycling replay worker %s after %s jobs", worker.pid, worker.jobs)
            worker.stop()
            with self._lock:
                slot.worker = None
                self._counts["respawns"] += 1
        finished: Outcome = reply["outcome"]
        finished.setdefault("timings", no_timings())["wall_ms"] = _ms_since(started)
        return finished

    def _retire(self, slot: _Slot, count: str | None) -> None:
        """Forget the slot's (dead) worker; the slot thread starts a fresh one."""
        with self._lock:
            slot.worker = None
            if count is not None:
                self._counts[count] += 1
                self._counts["respawns"] += 1

    def _resolve(self, job: _Job, outcome: Outcome, elapsed: float | None) -> None:
        with self._lock:
            if self._in_flight.get(job.key) is job:
                del self._in_flight[job.key]
            if elapsed is not None:
                self._counts["completed"] += 1
                self._average_s = 0.8 * self._average_s + 0.2 * elapsed
        if not job.future.done():
            job.future.set_result(outcome)

    # -- outcomes the pool writes itself -------------------------------------------------

    def _timeout_outcome(self, worker: WorkerProcess, started: float) -> Outcome:
        log.warning("replay job on worker %s passed its %.1f s deadline", worker.pid, self.deadline)
        return failure(
            Status.TIMEOUT,
            f"Stopped after {self.deadline:.1f} s: the kernel did not finish within the "
            "replay deadline.",
            f"The deadline is {self.deadline:.1f} s of wall-clock time per replay; the worker "
            "was killed and replaced.",
            environment=worker.environment,
            wall_ms=_ms_since(started),
        )

    def _crash_outcome(self, deaths: list[Death]) -> Outcome:
        """The kernel ended its workers: what a reader is told (no process ids, no logs),
        and for staff, each worker's end and stderr."""
        last = deaths[-1]
        if last.in_compiler:
            stage = "compile"
            message = f"The kernel made the shader compiler crash ({last.exit} while compiling it)."
            error = (
                "The compiler crashed instead of reporting an error, so there is no line to "
                "point at. One known cause is very deep nesting (thousands of parentheses), "
                "which overflows its stack. Running it again would crash again, so this "
                "outcome is kept."
            )
        elif last.in_javascript:
            stage = "javascript"
            message = f"The program crashed the JavaScript engine running it ({last.exit})."
            error = (
                "QuickJS crashed instead of reporting an error, so there is no line to point "
                "at. One known cause is a value nested very deep, which overflows its stack. "
                "Running it again would crash again, so this outcome is kept."
            )
        else:
            stage = "run"
            message = (
                f"The kernel crashed the replay worker running it ({last.exit}), "
                f"{len(deaths)} times in a row."
            )
            error = (
                "A crash that repeats on a fresh worker comes from the kernel (or from the "
                "driver running it), not from a passing fault, so this outcome is kept."
            )
        outcome = failure(Status.CRASHED, message, error, environment=self._environment)
        outcome["crash"] = {"stage": stage, "exit": last.exit, "workers": len(deaths)}
        outcome["detail"] = "\n\n".join(death.report() for death in deaths)
        return outcome

    def _closed_outcome(self) -> Outcome:
        return failure(
            Status.INFRA_ERROR, "The replay pool was shut down before this job ran.", "closed"
        )


def _ms_since(started: float) -> float:
    return round((time.monotonic() - started) * 1000, 2)
