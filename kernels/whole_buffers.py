"""Buffers kept whole on request: where a run's capture kept only the first cells of a
buffer after a pass (kernels/engine/host/capture.py's MAX_CELLS, MAX_RUN_BYTES), a reader
may ask for all of them. The version runs again, as a job of its own (whole_buffer_job)
through the same backend and pool as any replay, and what it keeps is stored once per
job, pass and buffer (KeptBuffer, its bytes a Blob).

ask() validates a request against the run the reader saw and starts (or joins) that run;
finishing.finish() hands the bytes to keep(); states() says, for a pass's buffers, what a
page offers: the kept buffer, its run in flight, why it failed, or the form.
"""

from __future__ import annotations

import hashlib
import io
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import numpy as np
from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import QuerySet, Subquery

from config.ratelimit import peek, record
from kernels import pictures, replay
from kernels.engine.host.capture import NP_TYPES, WHOLE_MAX_BYTES, WORD
from kernels.engine.outcome import PassBuffer, PassRecord, WholeBuffer, pack_values
from kernels.jobs import Job, ReplayProblem, job_for
from kernels.models import KeptBuffer, Run
from sessions.programs import Blob, KernelVersion


class Refused(Exception):
    """A request for a buffer whole that is not run: the reader is told why, with the
    HTTP status that says it (and when to ask again, where that helps)."""

    def __init__(self, message: str, status: int = 400, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


def whole_buffer_job(job: Job, number: int, buffer: str) -> Job:
    """The job running `job` again that keeps one buffer whole after pass `number`: a job
    of its own (its runs are shared and stored as a replay's are), whose request carries
    the plain job's key back to keep() (the engine echoes it)."""
    asked = {"pass": number, "buffer": buffer, "job": [job.source_sha256, job.harness_digest]}
    key = json.dumps(["whole", job.harness_digest, number, buffer])
    digest = hashlib.sha256(key.encode()).hexdigest()
    return Job(job.source_sha256, digest, {**job.payload, "whole": asked})


def buffer_bytes(entry: PassBuffer) -> int:
    return int(entry["count"]) * (1 if entry["dtype"] == "u8" else WORD)


def is_cut(entry: PassBuffer) -> bool:
    """Whether the capture kept fewer cells than the buffer has, of a pass that ran."""
    return entry["kept"] < entry["count"] and not entry.get("note", "").startswith("never")


def _megabytes(size: int) -> str:
    return f"{size / 1024**2:,.1f} MB" if size >= 1024**2 else f"{size / 1024:,.0f} KB"


def cut_buffer(run: Run | None, number: int, name: str) -> PassBuffer:
    """The buffer as the reader's run captured it after pass `number`, if it was cut and
    may be kept whole; Refused saying why not."""
    if run is None or run.state != Run.State.DONE:
        raise Refused(
            "This version has no finished run yet: open its page and let it run first.", 409
        )
    passes = [p for p in run.outcome.get("passes") or [] if "buffers" in p]
    record: PassRecord | None = next((p for p in passes if p["number"] == number), None)
    if record is None:
        there = f"passes 1 to {len(passes)}" if passes else "no pass with its buffers"
        raise Refused(f"This run has no pass {number} (it has {there}).", 404)
    entry = next((b for b in record.get("buffers", []) if b["name"] == name), None)
    if entry is None:
        names = ", ".join(b["name"] for b in record.get("buffers", [])) or "none"
        raise Refused(
            f"Pass {number} wrote no buffer named {name!r} (the buffers it wrote: {names}).", 404
        )
    if not is_cut(entry):
        why = "never ran" if entry.get("note") else "is kept whole on the page already"
        raise Refused(f"Buffer {name} after pass {number} {why}.", 400)
    if buffer_bytes(entry) > WHOLE_MAX_BYTES:
        raise Refused(
            f"Buffer {name} is {_megabytes(buffer_bytes(entry))}, over the "
            f"{_megabytes(WHOLE_MAX_BYTES)} a buffer kept whole may be.",
            422,
        )
    return entry


def ask(
    version: KernelVersion, number: int, name: str, client: str
) -> tuple[Run | KeptBuffer, bool]:
    """Keep buffer `name` after pass `number` of this version whole: the kept buffer if it
    is kept already, else the run keeping it (joined while in flight, or started and given
    a few seconds to finish), and whether this request started it (what its pages show
    changed). client: the rate limit's key for the reader asking."""
    try:
        job = job_for(version)
    except ReplayProblem as error:
        raise Refused(str(error), 422) from None
    shown = replay.for_reader(version, job=job)
    cut_buffer(shown.finished_run, number, name)
    kept = kept_buffer(job, number, name).first()
    if kept is not None:
        return kept, False
    whole = whole_buffer_job(job, number, name)
    runs = Run.objects.filter(
        source_sha256=whole.source_sha256, harness_digest=whole.harness_digest
    )
    in_flight = runs.exclude(state=Run.State.DONE).exclude(replay.lost()).first()
    if in_flight is not None:
        # Joined: it costs nothing, and nothing waits for it here (the page that the
        # answer leads to polls the run it shows).
        return in_flight, False
    limit = settings.WHOLE_BUFFERS_PER_HOUR
    if wait := peek("whole-buffer", client, limit, 3600):
        raise Refused(
            f"You have asked for {limit} whole buffers in the last hour; try again in {wait} s.",
            429,
            retry_after=wait,
        )
    # A run that ended without keeping it (a timeout) is not asked again: it runs anew.
    ended = runs.filter(state=Run.State.DONE).exists()
    try:
        run = replay.start_run(whole, fresh=ended, wanted_for=replay.unattended_seconds())
    except replay.ReplayUnavailable as busy:
        raise Refused(str(busy), 503, retry_after=busy.retry_after) from None
    record("whole-buffer", client, 3600)  # counted once a run is started, not when refused
    # Waited for here whatever the backend (a task queue's run is polled): the reader who
    # asked sees the buffer on the page the answer leads to. The rate limit bounds these
    # waits: only a request that started a run waits.
    run = replay.wait(run, settings.REPLAY_DEADLINE + 5)
    if run.state != Run.State.DONE:
        return run, True
    return kept_buffer(job, number, name).first() or run, True


def kept_buffer(job: Job, number: int, name: str) -> QuerySet[KeptBuffer]:
    """The buffer kept whole of this job after pass `number` (none or one)."""
    return KeptBuffer.objects.filter(
        source_sha256=job.source_sha256,
        harness_digest=job.harness_digest,
        pass_number=number,
        buffer=name,
    )


def keep(run_id: int, whole: WholeBuffer, data: bytes, adapter: str) -> KeptBuffer | None:
    """Store the bytes a run kept whole (finishing.finish), once per job, pass and buffer,
    with the block means its picture draws; None where they do not fit what was asked."""
    asked = whole["asked"]
    job = asked.get("job")
    dtype, shape = whole.get("dtype", ""), whole.get("shape", [])
    if dtype not in NP_TYPES or not isinstance(job, list) or len(job) != 2:
        return None
    values = np.frombuffer(data, dtype=NP_TYPES[dtype])
    if values.size != whole.get("count"):
        return None
    means, block = pictures.block_means(values, shape)
    picture = {
        "shape": list(means.shape),
        "block": block,
        "values": pack_values(means.astype(np.float32), "f32"),
    }
    (sha,) = Blob.store([data])
    fields: dict[str, Any] = {
        "source_sha256": job[0],
        "harness_digest": job[1],
        "pass_number": asked["pass"],
        "buffer": asked["buffer"],
    }
    defaults = {
        "dtype": dtype,
        "shape": shape,
        "count": values.size,
        "blob_id": sha,
        "picture": picture,
        "run_id": run_id,
        "adapter": adapter[:200],
    }
    try:
        with transaction.atomic():
            kept, _ = KeptBuffer.objects.get_or_create(**fields, defaults=defaults)
    except IntegrityError:  # kept by another run a moment ago
        kept = KeptBuffer.objects.get(**fields)
    return kept


def newest_kept(source_sha256: str, harness_digest: str) -> Subquery:
    """The id of the newest buffer kept whole of this job, as a subquery: a stored answer
    about the job made before it was kept lacks it (pages/reader_pages.py)."""
    return Subquery(_newest(source_sha256, harness_digest))


def newest_kept_id(run: Run) -> int | None:
    """newest_kept's id for the run's job, read now: taken before an answer is made, it is
    never newer than what the answer shows."""
    return _newest(run.source_sha256, run.harness_digest).first()


def _newest(source_sha256: str, harness_digest: str) -> QuerySet[KeptBuffer, int]:
    kept = KeptBuffer.objects.filter(source_sha256=source_sha256, harness_digest=harness_digest)
    return kept.order_by("-pk").values_list("pk", flat=True)[:1]


def listed(run: Run, npy_url: str) -> list[dict[str, Any]]:
    """The buffers kept whole of the run's job, as replay.json lists them: each one's
    pass, name, dtype, shape and cells, and its .npy's URL (npy_url, with its query)."""
    kept = KeptBuffer.objects.of_run(run).order_by("pass_number", "buffer")
    rows = kept.values("pass_number", "buffer", "dtype", "shape", "count")
    return [
        {
            "pass": row["pass_number"],
            "buffer": row["buffer"],
            "dtype": row["dtype"],
            "shape": row["shape"],
            "count": row["count"],
            "url": download_url(npy_url, row["pass_number"], row["buffer"]),
        }
        for row in rows
    ]


def download_url(npy_url: str, number: int, name: str) -> str:
    """Where buffer `name` kept whole after pass `number` downloads (npy_url: the page's)."""
    return f"{npy_url}?{urlencode({'pass': number, 'buffer': name})}"


def npy(kept: KeptBuffer) -> list[bytes | memoryview]:
    """The kept buffer as a .npy file (numpy.load reads it: its dtype and shape), in its
    two parts: the header and the bytes as stored (up to 64 MiB, not copied)."""
    header = io.BytesIO()
    descr = np.dtype(NP_TYPES[kept.dtype]).str  # "<f4", "|u1"
    info = {"descr": descr, "fortran_order": False, "shape": tuple(kept.shape)}
    np.lib.format.write_array_header_1_0(header, info)
    return [header.getvalue(), kept.blob.data]


@dataclass
class State:
    """What a page shows beside a buffer the capture cut: "ask" (the form), "too_large",
    "pending" (its run is in flight), "failed" (message: why), or "kept" (kept: the
    KeptBuffer, without its bytes)."""

    kind: str
    size: int
    message: str = ""
    kept: KeptBuffer | None = None

    @property
    def megabytes(self) -> str:
        return _megabytes(self.size)


def states(run: Run | None, record: PassRecord) -> dict[str, State]:
    """For each buffer of this pass that the run's capture cut, what the page offers."""
    cut = [b for b in record.get("buffers", []) if is_cut(b)]
    if run is None or not cut:
        return {}
    number = record["number"]
    kept = {
        k.buffer: k
        for k in KeptBuffer.objects.of_run(run).filter(
            pass_number=number, buffer__in=[b["name"] for b in cut]
        )
    }
    job = Job(run.source_sha256, run.harness_digest, {})
    digests = {whole_buffer_job(job, number, b["name"]).harness_digest: b["name"] for b in cut}
    runs = Run.objects.filter(source_sha256=run.source_sha256, harness_digest__in=digests)
    latest: dict[str, Run] = {}
    # Outcomes are read only for the run shown of a buffer not kept (Django loads a
    # deferred field on use): each is a whole run's.
    for each in (
        runs.exclude(replay.lost()).defer("outcome", "picture", "detail").order_by("created")
    ):
        latest[digests[each.harness_digest]] = each
    found = {}
    for entry in cut:
        name, size = entry["name"], buffer_bytes(entry)
        whole = latest.get(name)
        if name in kept:
            found[name] = State("kept", size, kept=kept[name])
        elif size > WHOLE_MAX_BYTES:
            cap = _megabytes(WHOLE_MAX_BYTES)
            found[name] = State("too_large", size, f"over the {cap} a buffer kept whole may be")
        elif whole is not None and whole.state != Run.State.DONE:
            found[name] = State("pending", size)
        elif whole is not None and not kept_once(whole):
            found[name] = State("failed", size, message=failure(whole))
        else:
            found[name] = State("ask", size)
    return found


def kept_once(run: Run) -> bool:
    """Whether a finished run kept its buffer (since deleted by a curator, if it is not
    there now): its outcome says what it kept and no problem."""
    whole = run.outcome.get("whole") or {}
    return "bytes" in whole and "problem" not in whole


def failure(run: Run) -> str:
    """Why a finished run that was to keep a buffer whole kept none."""
    outcome = run.outcome
    problem = (outcome.get("whole") or {}).get("problem")
    if problem:
        return f"{problem[0].upper()}{problem[1:]}."
    return f"This time the version did not get that far: {outcome.get('message', '')}"
