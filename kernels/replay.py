"""Replaying a kernel version: resolve its sources and harness, reuse a finished run or start one.

A Run row is the unit of work and of caching. The backend that executes it is chosen
by settings (REPLAY_BACKEND); everything above the backend is the same for all.

Every page, the tutor and the replay command ask through two functions:
for_reader (the run a reader sees now, started if asked) and run_now (run it and wait
for the outcome as long as the caller can). Both answer with a Replay.
"""

from __future__ import annotations

import functools
import time
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import (
    BooleanField,
    ExpressionWrapper,
    Q,
    Subquery,
    TextField,
)
from django.db.models.functions import Cast
from django.utils import timezone
from django.utils.module_loading import import_string

from config import processes
from kernels.engine.outcome import (
    Outcome,
    Status,
    failure,
)
from kernels.engine.run_warnings import as_stored
from kernels.finishing import failed_outcome, finish, put_stored
from kernels.jobs import (
    CAPABILITY_NEEDS,
    GPU_KINDS,
    Job,
    ReplayProblem,
    capability,
    gpu_digests,
    job_for,
    with_files,
)
from kernels.models import Run, Worker
from sessions.programs import KernelVersion

if TYPE_CHECKING:
    from kernels.backends import Backend

BACKENDS = {
    "local": "kernels.backends.LocalBackend",
    "celery": "kernels.backends.CeleryBackend",
}


# Runs of one kernel looked at together when deciding what a reader sees.
RECENT = 20


def worker_name() -> str:
    """This process as recorded on the runs it takes (config.processes: host:start:pid),
    so that a run whose process is gone from this host is seen to be lost at once."""
    return processes.this_process()


class ReplayUnavailable(Exception):
    """The run cannot be started now; the reader is told why and when to retry."""

    def __init__(self, message: str, retry_after: int = 5) -> None:
        super().__init__(message)
        self.retry_after = retry_after


_backend: Backend | None = None


def backend() -> Backend:
    global _backend
    if _backend is None:
        path = BACKENDS.get(settings.REPLAY_BACKEND)
        if path is None:
            raise ReplayProblem(f"Unknown REPLAY_BACKEND {settings.REPLAY_BACKEND!r}")
        _backend = import_string(path)()
    return _backend


def unattended_seconds() -> float:
    """How long a run that nobody asks about is kept wanted: as long as a running run may
    take before it counts as lost (lost())."""
    return settings.REPLAY_DEADLINE + 60


def lost() -> Q:
    """Unfinished runs nobody will finish: running past any deadline (its worker died), or
    queued past the queue timeout (the queue lost it or is stuck). A Triton or CUDA run
    has its own deadline, twice (compute-sanitizer's pass, then the timed one)."""
    now = timezone.now()
    running_since = now - timedelta(seconds=unattended_seconds())
    gpu_since = now - timedelta(seconds=2 * settings.GPU_REPLAY_DEADLINE + 60)
    queued_since = now - timedelta(seconds=settings.REPLAY_QUEUE_TIMEOUT)
    running = Q(state=Run.State.RUNNING)
    gpu = Q(harness_digest__in=gpu_digests())
    return (
        (running & ~gpu & Q(started__lt=running_since))
        | (running & gpu & Q(started__lt=gpu_since))
        | Q(state=Run.State.QUEUED, created__lt=queued_since)
    )


def missing_capability(job: Job) -> str:
    """Why no connected worker can run the job ("" when one can): the capability it needs
    and no worker announced (kernels/workers.py). WebGPU jobs run wherever the backend
    runs them."""
    needs = capability(job)
    if needs not in GPU_KINDS or Worker.objects.offering(needs):
        return ""
    return (
        f"No connected replay worker offers {CAPABILITY_NEEDS[needs]}, so this program "
        "cannot run here now."
    )


def _find_run(job: Job) -> Run | None:
    """The run a reader should see now: one in flight, else the newest cached one, else
    one that just finished uncacheably (a timeout), so a reload does not run it again."""
    runs = Run.objects.filter(source_sha256=job.source_sha256, harness_digest=job.harness_digest)
    # One query answers the usual case: a cached run, nothing in flight.
    # Outcomes are loaded only for the run chosen (Django fetches a deferred field on use).
    recent = list(runs.exclude(lost()).defer("outcome", "picture").order_by("-created")[:RECENT])
    # A run whose process is gone from this host (a web process killed mid-run) is lost.
    unfinished = [run for run in recent if run.state != Run.State.DONE]
    if in_flight := [run for run in unfinished if not processes.is_gone(run.worker)]:
        return in_flight[0]
    # Until the backend has said which adapter it runs on, any adapter's result stands
    # in: every outcome names its own adapter. So does any GPU's, for a Triton or CUDA
    # program: its outcome says which GPU it ran on, and when.
    gpu = capability(job) in GPU_KINDS
    environment_id = None if gpu else backend().environment_id(wait=False)
    cached = [
        run for run in recent if run.cacheable and environment_id in (None, "", run.environment_id)
    ]
    if not cached and len(recent) == RECENT:
        older = runs.filter(state=Run.State.DONE, cacheable=True)
        if environment_id:
            older = older.filter(environment_id=environment_id)
        cached = list(older.order_by("-finished")[:1])
    if cached:
        return max(cached, key=lambda run: run.finished or run.created)
    recently = timezone.now() - timedelta(seconds=settings.REPLAY_RETRY_AFTER)
    done = [run for run in recent if run.state == Run.State.DONE]
    return next((run for run in done if (run.finished or run.created) >= recently), None)


def start_run(job: Job, fresh: bool = False, wanted_for: float | None = None) -> Run:
    """Reuse a finished run (unless fresh), join one in flight, or start a new one.

    wanted_for: how long the caller waits for it (None: until it ends). A local queue
    drops a job that nobody waits for any more before it runs (LocalBackend.start).
    """
    if capability(job) in GPU_KINDS:
        return _start_gpu_run(job, fresh)
    try:
        environment_id = backend().environment_id(wait=True)
    except ReplayUnavailable:
        raise
    except Exception as error:  # no adapter: say so, and cache nothing
        return _record_infra_error(job, str(error))
    chosen = backend()
    sent = with_files(job, on_disk=chosen.files_on_disk)
    create = functools.partial(_new_run, job, environment_id)
    # A fresh run looks for no cached one, so its INSERT goes first: when it succeeds,
    # none was in flight (run_one_in_flight_per_key) and the look for one, a query of its
    # own, is not needed. When it fails, look (lost runs are finished on the way).
    run = chosen.start(sent, environment_id, wanted_for, create) if fresh else None
    if run is None:
        shared = _shared_run(job, environment_id, fresh)
        if shared is not None:
            return shared
        run = chosen.start(sent, environment_id, wanted_for, create)
    if run is None:
        # Someone asked for the same run a moment ago: share it.
        same = Run.objects.for_key(job.source_sha256, job.harness_digest, environment_id)
        joined = same.exclude(state=Run.State.DONE).first()
        if joined is not None:
            return joined
        return start_run(job, fresh=False, wanted_for=wanted_for)
    return run


def _start_gpu_run(job: Job, fresh: bool) -> Run:
    """A Triton or CUDA program's run: a stored one of any GPU (unless fresh), the one in
    flight, or a new one queued for the workers that offer its kind (kernels.tasks)."""
    if not fresh:
        stored = Run.objects.filter(
            source_sha256=job.source_sha256,
            harness_digest=job.harness_digest,
            state=Run.State.DONE,
            cacheable=True,
        )
        if (newest := stored.order_by("-finished").first()) is not None:
            return newest
    if missing := missing_capability(job):
        raise ReplayUnavailable(missing, retry_after=60)
    run = _new_run(job, "", claimed=False)
    if run is None:
        same = Run.objects.for_key(job.source_sha256, job.harness_digest, "")
        joined = same.exclude(state=Run.State.DONE).first()
        if joined is not None:
            return joined
        return _start_gpu_run(job, fresh=False)
    from kernels.tasks import run_gpu_replay

    try:
        run_gpu_replay.apply_async(
            (run.pk, job.key(""), with_files(job).payload), queue=job.payload["kind"], retry=False
        )
    except Exception as error:  # kombu's errors, or a socket's
        run.delete()
        raise ReplayUnavailable(
            "The GPU queue cannot be reached right now, so this program cannot run. "
            "Results that were already stored still show.",
            retry_after=30,
        ) from error
    return run


def _shared_run(job: Job, environment_id: str, fresh: bool) -> Run | None:
    """The newest cached run (unless fresh), else the one in flight on this environment;
    the job's lost runs are finished on the way. One query reads them all: the job's
    unfinished runs, whether each is lost riding along as a column, and its cached run."""
    key = {"source_sha256": job.source_sha256, "harness_digest": job.harness_digest}
    # Each side of the OR carries its whole condition, so that each finds its rows by an
    # index (run_one_in_flight_per_key, the primary key) rather than by reading the table.
    wanted = Q(**key) & ~Q(state=Run.State.DONE)
    if not fresh:
        newest = Run.objects.cached(job.source_sha256, job.harness_digest, environment_id)
        wanted |= Q(pk=Subquery(newest.values("pk")[:1]))
    runs = Run.objects.filter(wanted).annotate(
        timed_out=ExpressionWrapper(lost(), output_field=BooleanField())
    )
    cached = in_flight = None
    for run in runs:
        if run.state == Run.State.DONE:
            cached = run
        # timed_out is the annotation above; django-stubs types a RunQuerySet's rows as
        # plain Runs.
        elif run.timed_out or processes.is_gone(run.worker):  # type: ignore[attr-defined]
            finish(run.pk, failed_outcome("This replay was lost: the worker running it stopped."))
        elif run.environment_id == environment_id:
            in_flight = run
    return cached or in_flight


def _new_run(job: Job, environment_id: str, claimed: bool | None = None) -> Run | None:
    """A new unfinished run of the job; None when one is in flight already (at most one
    is, by the constraint run_one_in_flight_per_key)."""
    fields: dict[str, Any] = {"state": Run.State.QUEUED}
    if backend().claims_on_start if claimed is None else claimed:
        # This process runs it: the run is created taken, as finishing.claim() would leave it.
        fields = {
            "state": Run.State.RUNNING,
            "started": timezone.now(),
            "worker": worker_name(),
            "attempts": 1,
        }
    # Inside a caller's transaction a savepoint keeps a clash from spoiling it; outside
    # one the INSERT is a transaction of its own, without a BEGIN and a COMMIT around it.
    in_transaction = transaction.get_connection().in_atomic_block
    try:
        with transaction.atomic() if in_transaction else nullcontext():
            return Run.objects.create(
                source_sha256=job.source_sha256,
                harness_digest=job.harness_digest,
                environment_id=environment_id,
                **fields,
            )
    except IntegrityError:
        return None


def _record_infra_error(job: Job, message: str) -> Run:
    outcome = failure(
        Status.INFRA_ERROR, f"No GPU adapter is available to run this kernel: {message}", message
    )
    now = timezone.now()
    return Run.objects.create(
        source_sha256=job.source_sha256,
        harness_digest=job.harness_digest,
        environment_id="none",
        state=Run.State.DONE,
        status=Status.INFRA_ERROR.value,
        cacheable=False,
        outcome=as_stored(outcome),
        started=now,
        finished=now,
    )


def wait(run: Run, timeout: float, answer_first: bool = False) -> Run:
    """Give a run up to timeout seconds to finish; return it as it is then (unfinished, if
    it was dropped unrun meanwhile).

    answer_first: for a reader waiting on a request, the outcome as soon as it is ready,
    stored after the answer has gone (store_answered(), which every request's end calls:
    kernels/apps.py). Another request sees the run unfinished until then, and waits on it.
    """
    if run.state == Run.State.DONE:
        return run
    deadline = time.monotonic() + timeout
    stored = backend().wait(run, timeout, answer_first)
    if stored is not None:
        put_stored(run, stored)
        return run
    # A run this process does not hold (a task queue's, or one another web process
    # started) is stored from elsewhere: poll it.
    while _refreshed(run) and run.state != Run.State.DONE and time.monotonic() < deadline:
        time.sleep(0.25)
    return run


def store_answered(**signal: Any) -> None:
    """Store the outcomes this thread answered with first (wait's answer_first); a
    receiver of request_finished, which a server sends once the response has gone."""
    if _backend is not None:
        _backend.store_answered()


def _refreshed(run: Run) -> bool:
    """Reload the run; False if it is gone (dropped)."""
    try:
        run.refresh_from_db()
    except Run.DoesNotExist:
        return False
    return True


@dataclass
class Replay:
    """One version's replay as a caller sees it: its run, or why there is none.

    problem: the version cannot be replayed as configured (a bad harness); asking again
    does not help. busy: there is no outcome now (every worker busy, the queue out of
    reach, the run not finished in time); retry_after says when to ask again.
    """

    version: KernelVersion
    run: Run | None = None
    problem: str = ""
    busy: str = ""
    retry_after: int | None = None
    # No connected worker offers what the version needs (missing_capability): the run
    # shown, if any, was stored earlier.
    missing: str = ""

    @property
    def finished_run(self) -> Run | None:
        """The run once it has finished, without loading its outcome; None until then."""
        return self.run if self.run is not None and self.run.state == Run.State.DONE else None

    @property
    def finished(self) -> bool:
        return self.finished_run is not None

    @property
    def outcome(self) -> Outcome | None:
        """The finished run's outcome; None until there is one."""
        run = self.finished_run
        return run.outcome if run is not None else None

    def summary(self) -> dict[str, Any]:
        """What a turn records about its run."""
        if (run := self.finished_run) is not None and (outcome := run.outcome):
            return {
                "id": run.pk,
                "status": outcome.get("status"),
                "message": outcome.get("message", "")[:300],
            }
        return {"status": "not_run", "message": self.problem or self.busy}


def newest_run(source_sha256: str, harness_digest: str) -> Subquery:
    """The id of the newest run of these sources under this harness, on any adapter, as
    a subquery: a stored answer about an older run is out of date."""
    runs = Run.objects.filter(source_sha256=source_sha256, harness_digest=harness_digest)
    return Subquery(runs.order_by("-pk").values("pk")[:1])


def stored_outcome_text(run: Run) -> str | None:
    """A finished run's outcome as the JSON text stored, read without parsing it (a cached
    replay.json sends it on as it is); None when the outcome is loaded already, or the
    run is unfinished."""
    if run.state != Run.State.DONE or "outcome" not in run.get_deferred_fields():
        return None
    stored = Run.objects.filter(pk=run.pk).annotate(text=Cast("outcome", TextField()))
    text: str | None = stored.values_list("text", flat=True).first()
    return text


def _busy(version: KernelVersion, unavailable: ReplayUnavailable) -> Replay:
    return Replay(version, busy=str(unavailable), retry_after=unavailable.retry_after)


def for_reader(
    version: KernelVersion,
    start: bool = False,
    fresh: bool = False,
    run_id: int | None = None,
    compare_with: KernelVersion | None = None,
    job: Job | None = None,
) -> Replay:
    """The run a reader sees of this version now (_find_run says which); nothing waits.

    With start, a run is started when there is none; with fresh, a new one whatever is
    stored (the reader's "Run again"). With run_id, that run of this version or none: a
    page polling the run it shows never starts another by asking. job: the version's job,
    when the caller has built it already.
    """
    if job is None:
        try:
            job = job_for(version, compare_with=compare_with)
        except ReplayProblem as error:
            return Replay(version, problem=str(error))
    if run_id is not None:
        runs = Run.objects.filter(
            pk=run_id, source_sha256=job.source_sha256, harness_digest=job.harness_digest
        )
        run = runs.first()
        if run is not None and run.state != Run.State.DONE:
            backend().want(run, unattended_seconds())  # the page polling it is still open
        return Replay(version, run)
    if missing := missing_capability(job):
        run = _find_run(job)
        return Replay(version, run, problem="" if run else missing, missing=missing)
    run = None if fresh else _find_run(job)
    if run is None and (start or fresh):
        try:
            # The page that asks polls it; a reader who left stops wanting it.
            run = start_run(job, fresh=fresh, wanted_for=unattended_seconds())
        except ReplayUnavailable as unavailable:
            return _busy(version, unavailable)
    return Replay(version, run)


def run_now(
    version: KernelVersion,
    harness: dict[str, Any] | None = None,
    fresh: bool = False,
    timeout: float | None = None,
    compare_with: KernelVersion | None = None,
    answer_first: bool = False,
) -> Replay:
    """Run this version (under its harness, or the one given) and wait for the outcome.

    A cached run stands in unless fresh. Waits up to timeout seconds, by default the
    replay deadline and a little for the queue: for callers that must show an outcome
    (the tutor, the draw-a-digit page, the replay command). answer_first: as wait's,
    for a reader's request.
    """
    try:
        job = job_for(version, harness, compare_with)
    except ReplayProblem as error:
        return Replay(version, problem=str(error))
    timeout = settings.REPLAY_DEADLINE + 5 if timeout is None else timeout
    try:
        run = start_run(job, fresh=fresh, wanted_for=timeout)
    except ReplayUnavailable as unavailable:
        return _busy(version, unavailable)
    run = wait(run, timeout, answer_first)
    if run.state != Run.State.DONE:
        late = "The run did not finish in time; try again."
        return Replay(version, run, busy=late, retry_after=2)
    return Replay(version, run)


def replay_health() -> dict[str, Any]:
    try:
        health = backend().health()
        # The workers that announced what they offer (kernels/workers.py), for staff.
        workers = Worker.objects.connected().values("name", "capabilities", "gpu", "seen")
        return {**health, "workers": [{**w, "seen": w["seen"].isoformat()} for w in workers]}
    except Exception as error:  # health must answer whatever is broken
        return {"ok": False, "error": str(error)[:200]}
