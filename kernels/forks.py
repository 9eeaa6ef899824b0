"""Readers' forks: an edit of an archived version, run under that version's harness.

A fork is stored only once its run has started (or a stored run of the same content was
found), so a busy queue leaves nothing behind but the reader's edit, still in the form.

A fork of a Triton or CUDA version edits the file of its program state the version's
kernel is in, and runs that state's program on a GPU worker like the archived version.
GPU time is scarce: such a run is started only for a signed-in reader, within
GPU_FORKS_PER_DAY runs in 24 hours (staff unlimited), and never by a page view.
"""

from __future__ import annotations

import math
from datetime import timedelta

from django.conf import settings
from django.contrib.auth.models import AnonymousUser, User
from django.http import QueryDict
from django.utils import timezone
from django.utils.timesince import timeuntil

from kernels import jobs, replay
from kernels.jobs import GPU_KINDS
from kernels.models import Fork, GpuForkRun
from sessions.markdown import render_code
from sessions.programs import KernelVersion, StateFile, text_diff

# The period GPU_FORKS_PER_DAY counts over.
GPU_QUOTA_PERIOD = timedelta(hours=24)

# Fields a fork form may not send: a fork runs under the harness its version ran under.
HARNESS_FIELDS = ("harness", "harness_override")


def is_gpu_version(version: KernelVersion) -> bool:
    """A version of a Triton or CUDA kernel (its language, as the importer found it)."""
    return isinstance(version.meta, dict) and version.meta.get("language") in GPU_KINDS


def runs_on_view(fork: Fork) -> bool:
    """Whether a view of the fork's page starts its run when none is stored (a WebGPU
    fork's, on a new adapter); a GPU fork's run is started only by a reader's POST."""
    return not is_gpu_version(fork.version)


def file_of(version: KernelVersion) -> tuple[str, str]:
    """The file a fork of this Triton or CUDA version edits, and its text as archived."""
    path = jobs.version_file(version)
    blob = StateFile.objects.filter(state=version.state_id, path=path).values_list("blob__data")
    data = blob.first()
    return path, bytes(data[0]).decode(errors="replace") if data else ""


class ForkRefused(Exception):
    """Why a fork is not run, in words for the reader, with its HTTP status; sign_in: the
    reader may run it once signed in."""

    def __init__(
        self,
        message: str,
        status: int = 400,
        retry_after: int | None = None,
        sign_in: bool = False,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after
        self.sign_in = sign_in


def _sign_in_first() -> ForkRefused:
    # 403, not 401: the site signs in with a form, and a 401 must name an HTTP scheme.
    return ForkRefused(
        "Edited Triton and CUDA programs run on the GPU workers for signed-in readers "
        "only: sign in to run yours. Archived versions replay for everyone.",
        status=403,
        sign_in=True,
    )


def _text(value: str) -> str:
    # Kept exactly as typed, apart from Windows line ends.
    return value.replace("\r\n", "\n")


def _check_size(what: str, text: str) -> None:
    limit = settings.FORK_MAX_CHARS
    if len(text) > limit:
        raise ForkRefused(
            f"That {what} is {len(text):,} characters long; a fork may hold at most {limit:,}.",
            status=413,
        )


def read_edit(
    version: KernelVersion, data: QueryDict, user: User | AnonymousUser
) -> tuple[str, str]:
    """The kernel and host program a fork form sent for this version (for a Triton or
    CUDA version, the whole file it edits, and no host program); ForkRefused if they
    cannot be run, or not for this reader (a Triton or CUDA edit needs signing in)."""
    if is_gpu_version(version) and not user.is_authenticated:
        raise _sign_in_first()
    if any(name in data for name in HARNESS_FIELDS):
        raise ForkRefused(
            "A fork runs under the harness its version ran under, so that its outcome "
            "compares with the archived one; the harness cannot be changed here."
        )
    if is_gpu_version(version):
        return _read_file_edit(version, data), ""
    source = _text(data.get("source", ""))
    if not source.strip():
        raise ForkRefused("The kernel is empty: write the WGSL you want to run.")
    _check_size("kernel", source)
    if not version.host_program:
        if data.get("host", "").strip():
            raise ForkRefused(
                "This version has no host program: its harness is the host, so a fork "
                "changes only its kernel."
            )
        return source, ""
    host = _text(data.get("host", version.host_program))
    if not host.strip():
        raise ForkRefused("The host program is empty: it is what runs the kernel.")
    _check_size("host program", host)
    return source, host


def _read_file_edit(version: KernelVersion, data: QueryDict) -> str:
    path = jobs.version_file(version)
    if data.get("host", "").strip():
        raise ForkRefused(
            f"A fork of this program edits one file, {path}; its other files run as "
            "they were archived."
        )
    source = _text(data.get("source", ""))
    if not source.strip():
        raise ForkRefused(f"The file is empty: write the {path} you want to run.")
    _check_size("file", source)
    return source


def gpu_runs_left(user: User) -> int | None:
    """How many more runs of edited Triton and CUDA programs this reader may start now;
    None for staff, who have no limit."""
    if user.is_staff:
        return None
    started = GpuForkRun.objects.started_by(user, GPU_QUOTA_PERIOD).count()
    return max(0, settings.GPU_FORKS_PER_DAY - started)


def check_quota(user: User | AnonymousUser) -> None:
    """ForkRefused (429, with when the next run may start) once this reader has started
    GPU_FORKS_PER_DAY runs of edited Triton or CUDA programs in 24 hours; staff have no
    limit (they run the workers)."""
    if not isinstance(user, User):
        raise _sign_in_first()
    if gpu_runs_left(user) != 0:
        return
    limit = settings.GPU_FORKS_PER_DAY
    if limit <= 0:
        raise ForkRefused("Edited Triton and CUDA programs are run here for staff only.", 403)
    started = list(
        GpuForkRun.objects.started_by(user, GPU_QUOTA_PERIOD).values_list("created", flat=True)
    )
    # The next may start once all but limit - 1 of them are a day old.
    allowed = started[len(started) - limit] + GPU_QUOTA_PERIOD
    wait = max(1, math.ceil((allowed - timezone.now()).total_seconds()))
    raise ForkRefused(
        f"You have started {len(started)} runs of edited Triton and CUDA programs in the "
        f"last 24 hours, and a reader may start {limit}. Your next run may start at "
        f"{allowed:%H:%M} UTC (in {timeuntil(allowed)}); edits already run, and archived "
        "versions, show now.",
        status=429,
        retry_after=wait,
    )


def _start_gpu_fork(
    draft: Fork, job: jobs.Job, user: User | AnonymousUser
) -> tuple[replay.Replay, bool]:
    """A GPU fork's run, and whether it is charged: a stored one, or the one in flight,
    for nothing; else, when a worker offers what it needs and the reader's quota allows,
    a new one."""
    edited = draft.as_version()
    seen = replay.for_reader(edited, job=job)
    if seen.run is not None:
        return seen, False
    if seen.missing:
        raise ForkRefused(seen.missing, status=503, retry_after=60)
    check_quota(user)
    return replay.for_reader(edited, start=True, job=job), True


def start_fork(
    version: KernelVersion, source: str, host_program: str, user: User | AnonymousUser
) -> Fork:
    """The fork of this version with these sources, its run started or a stored one found;
    ForkRefused when it cannot run now (the queue is full, no GPU worker, the reader's
    GPU quota spent) or at all (a broken harness)."""
    draft = Fork(version=version, source=source, host_program=host_program)
    try:
        job = jobs.job_for(draft.as_version())
    except jobs.ReplayProblem as problem:
        raise ForkRefused(str(problem), status=422) from None
    if is_gpu_version(version):
        shown, charged = _start_gpu_fork(draft, job, user)
    else:
        shown, charged = replay.for_reader(draft.as_version(), start=True, job=job), False
    if shown.busy:
        raise ForkRefused(shown.busy, status=503, retry_after=shown.retry_after)
    fork = _store(version, source, host_program, job)
    if charged and isinstance(user, User) and shown.run is not None:
        # Two readers who asked at once share the run, and one of them pays for it
        # (GpuForkRun.run is unique).
        GpuForkRun.objects.get_or_create(run=shown.run, defaults={"user": user, "fork": fork})
    return fork


def _store(version: KernelVersion, source: str, host_program: str, job: jobs.Job) -> Fork:
    content = {"version": version, "source": source, "host_program": host_program}
    # An id is taken only by the same content: another edit whose hash begins the same
    # (or a forged one) gets the longer id, never the page and code of the first.
    for address in Fork.addresses(version.pk, source, host_program, job.harness_digest):
        fork, _ = Fork.objects.get_or_create(id=address, defaults=content)
        if fork.holds(version, source, host_program):
            return fork
    raise ForkRefused("This edit's address is taken by another fork; change it a little.", 409)


def diff_html(fork: Fork) -> dict[str, str]:
    """The fork's changes from its archived version: to the kernel, to the host program."""
    version = fork.version
    label = f"v{version.number}"
    if is_gpu_version(version):
        path, archived = file_of(version)
        label = f"{path} (v{version.number})"
    else:
        archived = version.source
    kernel = text_diff(archived, fork.source, label, "fork")
    host = text_diff(version.host_program, fork.host_program, label, "fork")
    return {
        "source": render_code(kernel, "diff") if kernel else "",
        "host": render_code(host, "diff") if host else "",
    }
