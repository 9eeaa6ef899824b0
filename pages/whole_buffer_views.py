"""A buffer kept whole on request, for a turn's replay and a fork alike: the form beside a
buffer the capture cut posts here (the version runs again, kernels/whole_buffers.py), and
the kept buffer downloads as .npy. Asking is a POST only: no link, crawler or prefetch
starts a run."""

from __future__ import annotations

import re

from django.contrib import messages
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseRedirect,
    StreamingHttpResponse,
)
from django.http.response import HttpResponseBase
from django.shortcuts import render
from django.urls import reverse
from django.utils.http import content_disposition_header
from django.utils.text import slugify
from django.views.decorators.http import require_GET, require_POST

from config.ratelimit import client_key
from kernels import whole_buffers
from kernels.jobs import ReplayProblem, job_for
from kernels.models import KeptBuffer, Run
from pages.fork_views import get_fork
from pages.replay_views import get_reviewed_turn
from sessions.models import Session
from sessions.programs import KernelVersion

PASS_NUMBER = re.compile(r"[0-9]{1,6}")
MAX_NAME = 200


def _asked(values: dict[str, str]) -> tuple[int, str]:
    """The pass number and buffer name asked for; Refused (400) for anything else."""
    number, name = values.get("pass", ""), values.get("buffer", "")
    if not PASS_NUMBER.fullmatch(number):
        raise whole_buffers.Refused("pass must be a pass's number, from 1 to 999999.")
    if not name or len(name) > MAX_NAME or "\x00" in name:
        raise whole_buffers.Refused(
            f"buffer must name a buffer, in 1 to {MAX_NAME} characters (no NUL)."
        )
    return int(number), name


@require_POST
def ask_turn(request: HttpRequest, slug: str, number: int) -> HttpResponse:
    _, version = get_reviewed_turn(request, slug, number)
    page = reverse("kernels:replay", args=[slug, number])
    return _ask(request, version, version.kernel.session, page)


@require_POST
def ask_fork(request: HttpRequest, fork_id: str) -> HttpResponse:
    made = get_fork(request, fork_id)
    return _ask(request, made.as_version(), made.version.kernel.session, made.get_absolute_url())


def _ask(request: HttpRequest, version: KernelVersion, session: Session, page: str) -> HttpResponse:
    """Keep the buffer asked for whole; 303 to the page at its pass, which shows it kept,
    its run in flight, or why the run did not keep it."""
    try:
        number, name = _asked(request.POST.dict())
        found, ran = whole_buffers.ask(version, number, name, client_key(request))
    except whole_buffers.Refused as refused:
        context = {"message": str(refused), "page": page, "session": session, "version": version}
        response = render(
            request, "kernels/whole_buffer_refused.html", context, status=refused.status
        )
        if refused.retry_after:
            response["Retry-After"] = str(refused.retry_after)
        return response
    if ran:
        # Readers who are not signed in are served kept pages (pages/reader_pages.py): the
        # session's stamp changes, so that theirs show the buffer kept (or being kept) too.
        session.touch()
    if isinstance(found, KeptBuffer):
        messages.success(request, f"Buffer {name} after pass {number} is kept whole below.")
    elif found.state != Run.State.DONE:
        messages.info(
            request,
            f"Buffer {name} after pass {number} is being kept whole: the version runs again. "
            "Reload this page in a few seconds.",
        )
    else:
        messages.error(request, f"Buffer {name} was not kept: {whole_buffers.failure(found)}")
    response = HttpResponseRedirect(f"{page}?pass={number}#passes")
    response.status_code = 303
    return response


@require_GET
def download_turn(request: HttpRequest, slug: str, number: int) -> HttpResponseBase:
    _, version = get_reviewed_turn(request, slug, number)
    return _download(request, version, f"{slug}-turn-{number}")


@require_GET
def download_fork(request: HttpRequest, fork_id: str) -> HttpResponseBase:
    made = get_fork(request, fork_id)
    return _download(request, made.as_version(), f"fork-{made.id}")


def _download(request: HttpRequest, version: KernelVersion, stem: str) -> HttpResponseBase:
    """The kept buffer's values as .npy: its dtype and shape, numpy.load() reads it."""
    try:
        number, name = _asked(request.GET.dict())
        job = job_for(version)
    except whole_buffers.Refused as refused:
        return HttpResponse(str(refused), status=400, content_type="text/plain; charset=utf-8")
    except ReplayProblem as problem:
        raise Http404(str(problem)) from None
    kept = whole_buffers.kept_buffer(job, number, name).select_related("blob").first()
    if kept is None:
        raise Http404(
            f"Buffer {name} after pass {number} is not kept whole: ask for it on the page."
        )
    parts = whole_buffers.npy(kept)
    response = StreamingHttpResponse(parts, content_type="application/octet-stream")
    response["Content-Length"] = str(sum(len(part) for part in parts))
    filename = f"{stem}-pass-{number}-{slugify(name) or 'buffer'}.npy"
    response["Content-Disposition"] = content_disposition_header(True, filename) or ""
    response["X-Content-Type-Options"] = "nosniff"
    return response
