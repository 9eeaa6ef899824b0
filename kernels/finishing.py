"""A run's end: claimed by the worker that runs it, its outcome made ready to store
(finished) and stored (store), put on a run in memory rather than read back, or the run
dropped unrun. kernels.replay starts runs and waits for them; the backends and the task
workers end them through here."""

from __future__ import annotations

import logging
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, cast

from django.conf import settings
from django.db import transaction
from django.db.models import Case, F, Value, When
from django.utils import timezone

from kernels import trace_pictures
from kernels.engine.outcome import (
    Outcome,
    Status,
    WholeBuffer,
    cacheable,
    failure,
    run_trace,
)
from kernels.engine.run_warnings import as_stored
from kernels.models import Run

logger = logging.getLogger(__name__)


def failed_outcome(message: str) -> Outcome:
    return failure(Status.CRASHED, f"{message} Run it again.", message)


def claim(run_id: int, worker: str) -> bool:
    """Mark a run as running on this worker. False when it is finished already, or when
    workers have died on it too often (then it is finished as crashed)."""
    claimed = Run.objects.filter(pk=run_id).exclude(state=Run.State.DONE)
    # One UPDATE in the usual case: the attempts left are part of its condition.
    if claimed.filter(attempts__lt=settings.REPLAY_MAX_ATTEMPTS).update(
        state=Run.State.RUNNING, started=timezone.now(), worker=worker, attempts=F("attempts") + 1
    ):
        return True
    attempts = claimed.values_list("attempts", flat=True).first()
    if attempts is not None:
        message = f"The replay worker stopped {attempts} times on this kernel."
        finish(run_id, failed_outcome(message))
    return False


@dataclass
class Finished:
    """An outcome made ready to store (finished()): the run's new values, and a buffer
    kept whole with its bytes, if any."""

    values: dict[str, Any]
    whole: WholeBuffer | None = None
    data: bytes | None = None

    @property
    def keeps_whole(self) -> bool:
        return self.whole is not None and self.data is not None


def finished(outcome: Outcome) -> Finished:
    """What finishing a run with this outcome stores, made without the database.

    What is for staff only (dead workers' ids and stderr) goes to Run.detail, apart from
    the outcome that readers see; the bytes of a buffer kept whole go to a KeptBuffer
    (kernels/whole_buffers.py), and only what it is to the outcome.
    """
    whole = outcome.get("whole")
    data = whole.pop("data", None) if whole is not None else None
    shown = cast(Outcome, as_stored({k: v for k, v in outcome.items() if k != "detail"}))
    shown.setdefault("status", Status.CRASHED.value)
    environment = outcome.get("environment") or {}
    values = {
        "state": Run.State.DONE,
        "status": Status(shown["status"]).value,
        "cacheable": cacheable(shown),
        "outcome": shown,
        "detail": outcome.get("detail", ""),
        "adapter": environment.get("label", "")[:200],
        "finished": timezone.now(),
    }
    return Finished(values, whole, data)


def store(run_id: int, done: Finished) -> dict[str, Any] | None:
    """Store a finished outcome on its run, in one UPDATE. Returns the values stored
    (put_stored() puts them on a Run in memory), or None if the run was already finished."""
    # Drawn here, once, in the process that stores the outcome (after a reader waiting
    # for it is answered: replay.json has no picture): pages only read it.
    values = {**done.values, "picture": _picture(done.values["outcome"])}
    fields: dict[str, Any] = dict(values)
    environment_id = (done.values["outcome"].get("environment") or {}).get("id")
    if environment_id:
        # A run queued before any worker had said where it runs learns it now (put_stored()).
        fields["environment_id"] = Case(
            When(environment_id="", then=Value(environment_id)), default=F("environment_id")
        )
    unfinished = Run.objects.filter(pk=run_id).exclude(state=Run.State.DONE)
    # A buffer kept whole is stored in the commit that marks its run done: a reader who
    # polls the run never finds it done without the buffer.
    with transaction.atomic() if done.keeps_whole else nullcontext():
        if not unfinished.update(**fields):
            return None
        if done.whole is not None and done.data is not None:
            _keep_whole(run_id, done.whole, done.data, values["adapter"])
    return values


def finish(run_id: int, outcome: Outcome) -> dict[str, Any] | None:
    """Store a finished outcome on its run: finished(), then store()."""
    return store(run_id, finished(outcome))


def _keep_whole(run_id: int, whole: WholeBuffer, data: bytes, adapter: str) -> None:
    from kernels.whole_buffers import keep  # it starts runs through this module

    try:
        with transaction.atomic():  # a savepoint: failing, it loses the bytes, not the run
            keep(run_id, whole, data, adapter)
    except Exception:  # the run is stored; its page says that nothing was kept
        logger.exception("A buffer kept whole could not be stored")


def _picture(outcome: Outcome) -> dict[str, Any] | None:
    try:
        return trace_pictures.program_picture(outcome)
    except Exception:  # a picture that cannot be drawn must not cost the run its outcome
        logger.exception("The picture of a run's trace could not be drawn")
        return None


def stored_picture(run: Run, own_source: str) -> dict[str, Any] | None:
    """The picture of what a finished run's host program did: as stored with it, or, for
    a run stored before pictures were, drawn now (own_source: the WGSL of a module whose
    code the trace lacks) and stored."""
    if run.picture is None and run_trace(run.outcome):
        run.picture = trace_pictures.program_picture(run.outcome, own_source)
        Run.objects.filter(pk=run.pk).update(picture=run.picture)
    return run.picture


def put_stored(run: Run, stored: dict[str, Any]) -> None:
    """Put what finish() stored on the run in memory, rather than reading it back."""
    for name, value in stored.items():
        setattr(run, name, value)
    if not run.environment_id:
        run.environment_id = (stored["outcome"].get("environment") or {}).get("id") or ""


def drop(run_id: int) -> None:
    """Forget a run whose job was dropped from the queue unrun (nobody waited for it any
    more): nothing is cached, and the next request for it starts it again."""
    Run.objects.filter(pk=run_id).exclude(state=Run.State.DONE).delete()
