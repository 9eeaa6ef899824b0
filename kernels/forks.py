"""Readers' forks: an edit of an archived version, run under that version's harness.

A fork is stored only once its run has started (or a stored run of the same content was
found), so a busy queue leaves nothing behind but the reader's edit, still in the form.
"""

from __future__ import annotations

from django.conf import settings
from django.http import QueryDict

from kernels import jobs, replay
from kernels.jobs import GPU_KINDS
from kernels.models import Fork
from sessions.markdown import render_code
from sessions.programs import KernelVersion, text_diff

# Fields a fork form may not send: a fork runs under the harness its version ran under.
HARNESS_FIELDS = ("harness", "harness_override")


def is_gpu_version(version: KernelVersion) -> bool:
    """A version of a Triton or CUDA kernel (its language, as the importer found it)."""
    return isinstance(version.meta, dict) and version.meta.get("language") in GPU_KINDS


class ForkRefused(Exception):
    """Why a fork is not run, in words for the reader, with its HTTP status."""

    def __init__(self, message: str, status: int = 400, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


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


def read_edit(version: KernelVersion, data: QueryDict) -> tuple[str, str]:
    """The kernel and host program a fork form sent for this version; ForkRefused if they
    cannot be run."""
    if is_gpu_version(version):
        raise ForkRefused(
            "Edited copies of Triton and CUDA programs are not run here yet: only the "
            "archived versions replay, on the GPU workers."
        )
    if any(name in data for name in HARNESS_FIELDS):
        raise ForkRefused(
            "A fork runs under the harness its version ran under, so that its outcome "
            "compares with the archived one; the harness cannot be changed here."
        )
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


def start_fork(version: KernelVersion, source: str, host_program: str) -> Fork:
    """The fork of this version with these sources, its run started or a stored one found;
    ForkRefused when it cannot run now (the queue is full) or at all (a broken harness)."""
    draft = Fork(version=version, source=source, host_program=host_program)
    try:
        job = jobs.job_for(draft.as_version())
    except jobs.ReplayProblem as problem:
        raise ForkRefused(str(problem), status=422) from None
    shown = replay.for_reader(draft.as_version(), start=True, job=job)
    if shown.busy:
        raise ForkRefused(shown.busy, status=503, retry_after=shown.retry_after)
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
    kernel = text_diff(version.source, fork.source, label, "fork")
    host = text_diff(version.host_program, fork.host_program, label, "fork")
    return {
        "source": render_code(kernel, "diff") if kernel else "",
        "host": render_code(host, "diff") if host else "",
    }
