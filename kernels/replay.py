"""Replaying a kernel version: resolve its sources and harness, reuse a finished run or start one.

A Run row is the unit of work and of caching. The backend that executes it is chosen
by settings (REPLAY_BACKEND); everything above the backend is the same for all.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.module_loading import import_string

from kernels.harness import Harness, HarnessError, canonical_digest, parse_harness
from kernels.models import KernelVersion, Run
from kernels.outcomes import Status

log = logging.getLogger(__name__)

BACKENDS = {
    "local": "kernels.backends.LocalBackend",
}


class ReplayUnavailable(Exception):
    """The run cannot be started now; the reader is told why and when to retry."""

    def __init__(self, message: str, retry_after: int = 5) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ReplayProblem(Exception):
    """This version cannot be replayed as configured (a bad harness, a missing kernel)."""


@dataclass(frozen=True)
class Job:
    source_sha256: str
    harness_digest: str
    payload: dict

    def key(self, environment_id: str) -> str:
        return f"{self.source_sha256}:{self.harness_digest}:{environment_id}"


_backend = None


def backend():
    global _backend
    if _backend is None:
        path = BACKENDS.get(settings.REPLAY_BACKEND)
        if path is None:
            raise ReplayProblem(f"Unknown REPLAY_BACKEND {settings.REPLAY_BACKEND!r}")
        _backend = import_string(path)()
    return _backend


def sources_digest(sources: dict[str, str]) -> str:
    canonical = json.dumps(sources, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def parsed_harness(version: KernelVersion) -> Harness | None:
    spec = version.harness
    if not spec:
        return None
    try:
        return parse_harness(spec)
    except HarnessError as error:
        message = f"The harness of kernel '{version.kernel.name}' is invalid: {error}"
        raise ReplayProblem(message) from None


def sources_for(version: KernelVersion, harness: Harness | None) -> dict[str, str]:
    """Every source the passes use: this version as "self", and for other kernels of the
    session the version that was current when this one was introduced."""
    sources = {"self": version.source}
    names = (harness.kernel_names() if harness else set()) - {"self"}
    for name in sorted(names):
        others = KernelVersion.objects.filter(kernel__session=version.kernel.session_id)
        others = others.filter(kernel__name=name).order_by("-number")
        if version.turn_id is not None:
            earlier = others.filter(turn__number__lte=version.turn.number)
            others = earlier if earlier.exists() else others
        other = others.first()
        if other is None:
            raise ReplayProblem(f"The harness runs kernel '{name}', which this session lacks.")
        sources[name] = other.source
    return sources


def job_for(version: KernelVersion) -> Job:
    harness = parsed_harness(version)
    sources = sources_for(version, harness)
    spec = version.harness or {}
    payload = {
        "sources": sources,
        "harness": spec or None,
        "fixtures_dir": str(settings.FIXTURES_DIR),
    }
    digest = canonical_digest(spec) if spec else "compile-only"
    return Job(sources_digest(sources), digest, payload)


def _stale_before() -> timezone.datetime:
    # Longer than any queue wait plus deadline: such a run's worker is gone.
    return timezone.now() - timedelta(seconds=settings.REPLAY_DEADLINE * 3 + 120)


def expire_lost_runs(job: Job) -> None:
    lost = Run.objects.filter(
        source_sha256=job.source_sha256,
        harness_digest=job.harness_digest,
        created__lt=_stale_before(),
    ).exclude(state=Run.State.DONE)
    for run in lost:
        finish(run.pk, lost_outcome(), expected_states=(Run.State.QUEUED, Run.State.RUNNING))


def lost_outcome() -> dict:
    return {
        "status": Status.CRASHED.value,
        "message": "This replay was lost: the worker running it stopped. Run it again.",
        "error": "worker lost",
        "environment": {},
        "timings": {},
        "warnings": [],
        "outputs": [],
    }


def find_run(job: Job) -> Run | None:
    """The run a reader should see now: one in flight, else the newest cached one."""
    runs = Run.objects.filter(source_sha256=job.source_sha256, harness_digest=job.harness_digest)
    in_flight = runs.exclude(state=Run.State.DONE).filter(created__gte=_stale_before())
    if run := in_flight.order_by("-created").first():
        return run
    environment_id = backend().environment_id(wait=False)
    if environment_id:
        return Run.objects.cached(job.source_sha256, job.harness_digest, environment_id)
    # The backend has not said which adapter it runs on yet: show the newest result,
    # which names its own adapter.
    done = runs.filter(state=Run.State.DONE, cacheable=True)
    return done.order_by("-finished").first()


def start_run(job: Job, fresh: bool = False) -> Run:
    """Reuse a finished run (unless fresh), join one in flight, or start a new one."""
    expire_lost_runs(job)
    try:
        environment_id = backend().environment_id(wait=True)
    except ReplayUnavailable:
        raise
    except Exception as error:  # no adapter: say so, and cache nothing
        return _record_infra_error(job, str(error))
    if not fresh:
        cached = Run.objects.cached(job.source_sha256, job.harness_digest, environment_id)
        if cached:
            return cached
    try:
        with transaction.atomic():
            run = Run.objects.create(
                source_sha256=job.source_sha256,
                harness_digest=job.harness_digest,
                environment_id=environment_id,
                state=Run.State.QUEUED,
            )
    except IntegrityError:
        # Someone asked for the same run a moment ago: share it.
        joined = Run.objects.for_key(job.source_sha256, job.harness_digest, environment_id)
        joined = joined.exclude(state=Run.State.DONE).first()
        if joined is not None:
            return joined
        return start_run(job, fresh=False)
    try:
        backend().start(run, job)
    except ReplayUnavailable:
        run.delete()
        raise
    return run


def _record_infra_error(job: Job, message: str) -> Run:
    outcome = {
        "status": Status.INFRA_ERROR.value,
        "message": f"No GPU adapter is available to run this kernel: {message}",
        "error": message,
        "environment": {},
        "timings": {},
        "warnings": [],
        "outputs": [],
    }
    now = timezone.now()
    return Run.objects.create(
        source_sha256=job.source_sha256,
        harness_digest=job.harness_digest,
        environment_id="none",
        state=Run.State.DONE,
        status=Status.INFRA_ERROR.value,
        cacheable=False,
        outcome=outcome,
        started=now,
        finished=now,
    )


def mark_running(run_id: int) -> None:
    Run.objects.filter(pk=run_id, state=Run.State.QUEUED).update(
        state=Run.State.RUNNING, started=timezone.now()
    )


def finish(run_id: int, outcome: dict, expected_states: tuple = ()) -> bool:
    """Store a finished outcome on its run. Returns False if the run was already finished."""
    status = Status(outcome.get("status", Status.CRASHED.value))
    environment = outcome.get("environment") or {}
    runs = Run.objects.filter(pk=run_id)
    runs = runs.filter(state__in=expected_states) if expected_states else runs
    runs = runs.exclude(state=Run.State.DONE)
    return bool(
        runs.update(
            state=Run.State.DONE,
            status=status.value,
            cacheable=status.cacheable,
            outcome=outcome,
            adapter=environment.get("label", "")[:200],
            finished=timezone.now(),
        )
    )


def wait(run: Run, timeout: float) -> Run:
    """Give a run up to timeout seconds to finish; return it as it is then."""
    if run.state != Run.State.DONE:
        backend().wait(run, timeout)
        run.refresh_from_db()
    return run


def replay_health() -> dict:
    try:
        return backend().health()
    except Exception as error:  # health must answer whatever is broken
        return {"ok": False, "error": str(error)[:200]}
