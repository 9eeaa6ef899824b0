"""Whole answers kept for readers who are not signed in: a replay page, a fork's page and
a turn's replay.json, as the first such reader got them.

Such an answer depends on its session (kept under the session's stamp, which an edit or
a re-import changes), on the run it shows (kept with its id: another run of the same
job, a fresh run landing, makes it stale), on the site's origin and the adapter the
replay workers run on (in its key), and on nothing of the reader but the CSRF token of
the page's forms and the nonce of its stylesheet, which are put back per reader. One
precompiled query (pages/stamps.py) checks the stamp, the newest run and, for a turn's
replay page and replay.json, the newest buffer kept whole of its job; the answer is
then served without finding the turn, the version, its job or its run, and without
drawing anything. Only a finished, cacheable run's answer is kept, and only where a
reader who is not signed in may open the session. Readers who come at once for a page
not kept yet wait, in each web process, for the first of them to render it (at most
RENDER_WAIT_S), rather than each rendering it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, nullcontext
from functools import wraps
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse
from django.middleware.csrf import get_token
from django.shortcuts import render

from config.context_processors import site_origin
from kernels import replay
from kernels.models import Run
from pages.stamps import Prepared, stamp_of

RENDER_WAIT_S = 5.0
# Per key of a page being rendered: its lock, and how many requests hold or wait for it.
_rendering: dict[str, list[Any]] = {}  # [its lock, how many hold or wait for it]
_rendering_guard = threading.Lock()


def one_render_at_a_time(
    kind: str,
) -> Callable[[Callable[..., HttpResponse]], Callable[..., HttpResponse]]:
    """A view of a page kept for readers (kind: its key's first part; the URL's values
    follow), called with the page's key (None: not kept for this request); a request
    for a page another thread of this process is rendering waits for it first."""

    def wrap(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        @wraps(view)
        def guarded(request: HttpRequest, **values: object) -> HttpResponse:
            key = page_key(request, kind, *values.values())
            with _alone(key) if key is not None else nullcontext():
                return view(request, key=key, **values)

        return guarded

    return wrap


@contextmanager
def _alone(key: str) -> Iterator[None]:
    with _rendering_guard:
        held = _rendering.setdefault(key, [threading.Lock(), 0])
        held[1] += 1
    acquired = held[0].acquire(timeout=RENDER_WAIT_S)
    try:
        yield
    finally:
        if acquired:
            held[0].release()
        with _rendering_guard:
            held[1] -= 1
            if not held[1]:
                del _rendering[key]


def page_key(request: HttpRequest, *parts: object) -> str | None:
    """The key a page is kept under for this request; None where it is the reader's own:
    signed in, a query, or cookies other than the CSRF token (messages, a session)."""
    if request.method != "GET" or request.GET or request.user.is_authenticated:
        return None
    if set(request.COOKIES) - {settings.CSRF_COOKIE_NAME}:
        return None
    environment = replay.backend().environment_id(wait=False)
    return ":".join(str(part) for part in ("reader", *parts, site_origin(request), environment))


def stored(key: str | None, check: Prepared, **values: str) -> dict[str, Any] | None:
    """What was kept under key, if it still holds: check, given values and the job's
    digests (sources, harness), finds the session's id, its `updated`, the job's newest
    run and whatever else the answer depends on (keep's also) where a reader who is not
    signed in may see them."""
    kept: dict[str, Any] | None = cache.get(key) if key is not None else None
    if kept is None:
        return None
    sources, harness = kept["job"]
    row = check.first(**values, sources=sources, harness=harness)
    if row is None or (stamp_of(row), tuple(row[2:])) != (kept["stamp"], kept["newest"]):
        return None
    return kept


def keep(
    key: str | None,
    found: str | None,
    shown: replay.Replay,
    body: bytes,
    swaps: Mapping[str, str] | None = None,
    also: tuple[object, ...] = (),
) -> None:
    """Keep body under key, with found (the session's stamp, taken before the answer was
    made, so that it is never kept under a newer stamp than its own), if it shows a
    finished, cacheable run. also: what else the answer showed that the check reads
    after the newest run (taken before the answer was made, as found is). swaps: the
    reader's own strings in it, by name."""
    run = shown.run
    if key is None or found is None or run is None or shown.problem or shown.busy:
        return
    if run.state != Run.State.DONE or not run.cacheable:
        return
    kept = {
        "stamp": found,
        "newest": (run.pk, *also),
        "job": (run.source_sha256, run.harness_digest),
        "body": body,
        "swaps": dict(swaps or {}),
    }
    cache.set(key, kept, timeout=settings.PAGE_CACHE_SECONDS)


def render_page(
    request: HttpRequest, key: str | None, template: str, context: dict[str, Any]
) -> tuple[HttpResponse, dict[str, str]]:
    """The page, and the reader's own strings in it (for keep) when it may be kept."""
    if key is None:
        return render(request, template, context), {}
    # A token of our choosing, so that it can be found in the page and put back per reader.
    token = get_token(request)
    response = render(request, template, {**context, "csrf_token": token})
    # django-csp's middleware gives the request its nonce; HttpRequest's type has none.
    return response, {"token": token, "nonce": str(request.csp_nonce)}  # type: ignore[attr-defined]


def serve_page(request: HttpRequest, kept: dict[str, Any]) -> HttpResponse:
    """A kept page with this reader's CSRF token and stylesheet nonce in it (each also
    set in its cookie and header, as a page rendered for them would)."""
    body: bytes = kept["body"]
    swaps = kept["swaps"]
    body = body.replace(swaps["token"].encode(), get_token(request).encode())
    nonce = str(request.csp_nonce)  # type: ignore[attr-defined]  # set by django-csp
    body = body.replace(swaps["nonce"].encode(), nonce.encode())
    return HttpResponse(body)
