"""Where replay jobs run. A backend takes a queued Run and its job, and sees it finished.

LocalBackend: a pool of worker processes inside this (web) process.
CeleryBackend: a Celery queue ("replay") served by `celery -A config worker -Q replay`
on any machine with wgpu (kernels/tasks.py); the web process never waits on it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, overload

from django.db import close_old_connections

from kernels import finishing, local_pool, replay
from kernels.engine.outcome import Outcome
from kernels.engine.pool import Busy, Pool
from kernels.jobs import Job
from kernels.models import Run


class Backend(Protocol):
    """What kernels.replay asks of the backend settings.REPLAY_BACKEND names."""

    # Whether waiting for a run here costs a thread only (replay.json may then hold a
    # request until the run ends).
    long_poll: bool
    # Whether a run is taken by this process as it is created, rather than by a worker
    # when its job starts.
    claims_on_start: bool

    # Whether its workers read a program's files from this machine's disk (by sha256), or
    # need them in the job.
    files_on_disk: bool

    def start_workers(self) -> None: ...
    @overload
    def environment_id(self, wait: Literal[True]) -> str: ...
    @overload
    def environment_id(self, wait: bool) -> str | None: ...
    def start(
        self,
        job: Job,
        environment_id: str,
        wanted_for: float | None,
        create: Callable[[], Run | None],
    ) -> Run | None: ...
    def want(self, run: Run, seconds: float) -> None: ...
    def wait(
        self, run: Run, timeout: float, answer_first: bool = False
    ) -> dict[str, Any] | None: ...
    def store_answered(self) -> None: ...
    def health(self) -> dict[str, Any]: ...


@dataclass
class InFlight:
    """A run this process holds: its job's key in the pool and the job's future; once the
    job ends, its outcome made ready to store (done), then stored."""

    key: str
    future: Future[Outcome]
    # Set once the outcome is ready (or the run dropped); readers answered first wake here.
    ready: threading.Event = field(default_factory=threading.Event)
    # Set once the outcome is stored (or the run dropped, or finished elsewhere first).
    stored: threading.Event = field(default_factory=threading.Event)
    done: finishing.Finished | None = None
    # What finishing.store stored; None while unstored, or when the run was dropped or
    # finished elsewhere first.
    values: dict[str, Any] | None = None
    # Readers waiting to be answered before the store (LocalBackend.wait); when there are
    # any as the outcome is ready, one of them stores it after its answer (handed,
    # claimed).
    early: int = 0
    handed: bool = False
    claimed: bool = False


class LocalBackend:
    # Waiting costs a thread only, so replay.json may hold a request until the run ends.
    long_poll = True
    # The pool's workers share this machine's disk: a program's files go by their sha256.
    files_on_disk = True
    # Runs are taken by this process as they are created (replay._new_run).
    claims_on_start = True

    def __init__(self) -> None:
        self._pool: Pool | None = None
        self._lock = threading.Lock()
        self._in_flight: dict[int, InFlight] = {}
        # The runs this thread was answered with first and is to store (store_answered()).
        self._local = threading.local()

    def pool(self) -> Pool:
        with self._lock:
            if self._pool is None:
                self._pool = local_pool.take_early() or local_pool.new_pool()
            return self._pool

    def start_workers(self) -> None:
        """Start the pool now: its workers open their devices and warm up in the
        background (kernels/engine/worker.py warm_up) while the server answers."""
        self.pool()

    @overload
    def environment_id(self, wait: Literal[True]) -> str: ...
    @overload
    def environment_id(self, wait: bool) -> str | None: ...
    def environment_id(self, wait: bool) -> str | None:
        """The id of the adapter our workers run on; without wait, None until one said."""
        if self._pool is None and not wait:
            return None
        try:
            environment: dict[str, Any] = self.pool().environment(timeout=60.0 if wait else 0.0)
            return str(environment["id"])
        except Exception:
            if wait:
                raise
            return None

    def start(
        self,
        job: Job,
        environment_id: str,
        wanted_for: float | None,
        create: Callable[[], Run | None],
    ) -> Run | None:
        """Queue the job, then make its run (create(): None when one is in flight already,
        and then so is this). Still queued after wanted_for seconds with nobody wanting it
        since (want), the job is dropped unrun, and so is its run (finishing.drop)."""
        key = job.key(environment_id)
        try:
            future = self.pool().submit(key, job.payload, wanted_for)
        except Busy as busy:
            raise replay.ReplayUnavailable(
                "Every replay worker is busy. Try again in a few seconds.", busy.retry_after
            ) from None
        # The INSERT after the job is sent: a worker runs it meanwhile. One that finds
        # another run in flight leaves the job's outcome unstored (it is that run's too).
        # Python's lock is let go first, so that the pool's thread sends the job now rather
        # than once the INSERT's Python is done.
        time.sleep(0)
        run = create()
        if run is None:
            return None
        held = InFlight(key, future)
        self._in_flight[run.pk] = held
        caller = threading.get_ident()
        future.add_done_callback(
            lambda done: self._ready(run.pk, held, pool_thread=threading.get_ident() != caller)
        )
        if held.values is not None:
            # The job ended before its INSERT did: stored just now, from here.
            finishing.put_stored(run, held.values)
        return run

    def _ready(self, run_id: int, held: InFlight, pool_thread: bool = True) -> None:
        """The job's done-callback, on a pool thread: its outcome made ready, then stored
        here, unless a reader is waiting to be answered first; one of those stores it
        once answered (store_answered()). pool_thread False: run by add_done_callback on
        the thread that made the run, whose job ended before its INSERT did."""
        # A pool thread keeps its own connection between stores as a web thread does
        # between requests (CONN_MAX_AGE): opening one costs more than the UPDATE (1.1
        # against 0.15 ms on SQLite). The thread that made the run manages its own, which
        # may be in a transaction (close_old_connections would close it there).
        if pool_thread:
            close_old_connections()
        try:
            if held.future.cancelled():
                finishing.drop(run_id)
                return
            done = finishing.finished(held.future.result())
            with self._lock:
                held.done = done
                # A buffer kept whole is stored before anyone is answered: the answer
                # links to its download.
                held.handed = held.early > 0 and not done.keeps_whole
            if held.handed:
                held.ready.set()
                return
            held.values = finishing.store(run_id, done)
        finally:
            if not held.handed:
                self._stored(run_id, held)
            if pool_thread:
                close_old_connections()

    def _stored(self, run_id: int, held: InFlight) -> None:
        self._in_flight.pop(run_id, None)
        held.stored.set()
        held.ready.set()

    def want(self, run: Run, seconds: float) -> None:
        """Someone wants this run for seconds more: its job is kept if still queued."""
        if held := self._in_flight.get(run.pk):
            self.pool().want(held.key, seconds)

    def wait(self, run: Run, timeout: float, answer_first: bool = False) -> dict[str, Any] | None:
        """Wait for a run this process holds; the values stored on it, if it was stored
        in time from here (None: the caller reads it from the database).

        answer_first: the values as soon as they are ready, before they are stored; the
        caller may then be the one to store them, once it has answered (store_answered())."""
        held = self._in_flight.get(run.pk)
        if held is None:
            return None
        self.want(run, timeout)
        if not answer_first:
            held.stored.wait(timeout)
            return held.values
        with self._lock:
            held.early += 1
        try:
            held.ready.wait(timeout)
        finally:
            with self._lock:
                held.early -= 1
                mine = held.handed and not held.claimed
                held.claimed = held.claimed or mine
        if mine:
            self._handed().append((run.pk, held))
        if held.handed and held.done is not None:
            return held.done.values
        return held.values

    def store_answered(self) -> None:
        """Store the outcomes this thread was answered with before they were stored."""
        handed = self._handed()
        while handed:
            run_id, held = handed.pop()
            try:
                if held.done is not None:
                    held.values = finishing.store(run_id, held.done)
            finally:
                self._stored(run_id, held)

    def _handed(self) -> list[tuple[int, InFlight]]:
        if not hasattr(self._local, "handed"):
            self._local.handed = []
        handed: list[tuple[int, InFlight]] = self._local.handed
        return handed

    def health(self) -> dict[str, Any]:
        if self._pool is None:
            return {"ok": True, "backend": "local", "started": False}
        status = self.pool().status()
        return {
            "ok": status["alive"] > 0,
            # A full queue turns new replays away with "busy": health says so too.
            "full": status["queued"] >= status["max_queue"],
            "backend": "local",
            "started": True,
            **status,
        }


class CeleryBackend:
    # Web workers never wait on the queue; readers' pages ask again instead.
    long_poll = False
    # Its workers are elsewhere: a program's files travel in the job.
    files_on_disk = False
    # A Celery worker takes a run when its task starts (kernels.tasks).
    claims_on_start = False

    def start_workers(self) -> None:
        """Nothing to start: the Celery workers run elsewhere (kernels/tasks.py)."""

    def environment_id(self, wait: bool) -> str:
        # Workers report where they run with each result; until the first one has, runs
        # are queued under "" and learn their environment when they finish.
        return Run.objects.fleet_environment_id() or ""

    def start(
        self,
        job: Job,
        environment_id: str,
        wanted_for: float | None,
        create: Callable[[], Run | None],
    ) -> Run | None:
        """Make the run (create(): None when one is in flight already), then queue its
        task, which names it. A queued task is not withdrawn when its requester leaves: it
        runs, and is cached."""
        from kernels.tasks import run_replay

        run = create()
        if run is None:
            return None
        try:
            run_replay.apply_async((run.pk, job.key(environment_id), job.payload), retry=False)
        except Exception as error:  # kombu raises OperationalError and friends, or socket errors
            run.delete()
            raise replay.ReplayUnavailable(
                "The replay queue cannot be reached right now, so this kernel cannot run. "
                "Results that were already stored still show.",
                retry_after=30,
            ) from error
        return run

    def want(self, run: Run, seconds: float) -> None:
        pass  # queued tasks all run

    def wait(self, run: Run, timeout: float, answer_first: bool = False) -> None:
        # For callers that must have the result (the tutor, the replay command); they
        # read it from the database.
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if Run.objects.filter(pk=run.pk, state=Run.State.DONE).exists():
                return
            time.sleep(0.1)

    def store_answered(self) -> None:
        """Nothing is answered before it is stored: the workers store it."""

    def health(self) -> dict[str, Any]:
        from config.celery import app

        try:
            with app.connection_for_write() as connection:
                connection.ensure_connection(max_retries=1, timeout=2)
            broker: dict[str, Any] = {"ok": True}
        except Exception as error:
            broker = {"ok": False, "error": type(error).__name__}
        in_flight = Run.objects.exclude(state=Run.State.DONE).exclude(replay.lost())
        latest = Run.objects.filter(state=Run.State.DONE).exclude(adapter="").order_by("-finished")
        return {
            "ok": broker["ok"],
            "backend": "celery",
            "broker": broker,
            "queued": in_flight.filter(state=Run.State.QUEUED).count(),
            "running": in_flight.filter(state=Run.State.RUNNING).count(),
            "environment": latest.values_list("adapter", flat=True).first(),
        }
