"""The PNG cards that shared links show (pages/cards.py draws them): a session's, a
turn's (the version it reviewed, or its session's) and a fork's. They show stored runs
only (a crawler never starts one) and are kept like pages: under the session's stamp
and the run shown, briefly while a run is missing."""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.core.cache import cache
from django.http import Http404, HttpRequest, HttpResponse
from django.views.decorators.http import require_GET

from kernels import replay
from pages import cards, navigation
from pages.access import get_session_for_user
from pages.fork_views import get_fork
from sessions.models import Session
from sessions.programs import KernelVersion


def _png(key: str, complete: bool, draw: Callable[[], bytes]) -> HttpResponse:
    body = cache.get(key)
    if body is None:
        body = draw()
        seconds = settings.PAGE_CACHE_SECONDS if complete else settings.EMBED_PENDING_CACHE_SECONDS
        cache.set(key, body, timeout=seconds)
    response = HttpResponse(body, content_type="image/png")
    response["Cache-Control"] = f"public, max-age={settings.EMBED_PENDING_CACHE_SECONDS}"
    return response


def _session_png(session: Session) -> HttpResponse:
    versions = list(
        KernelVersion.objects.filter(kernel__session=session)
        .select_related("kernel__session", "turn")
        .order_by("turn__number", "pk")
    )
    runs, complete = navigation.stored_runs(versions)
    chips = [
        cards.Chip(f"{v.kernel.name} v{v.number}", runs[v.pk].status if v.pk in runs else None)
        for v in versions
    ]
    key = session.cache_key("card", sorted((v, r.pk) for v, r in runs.items()))
    turns = session.turns.shown().count()
    return _png(
        key,
        complete,
        lambda: cards.session_card(session.title, session.summary, turns, chips),
    )


def _version_png(
    version: KernelVersion, session: Session, heading: str, key_part: str
) -> HttpResponse:
    shown = replay.for_reader(version)
    run = shown.run if shown.finished else None
    key = session.cache_key("card", key_part, run.pk if run else None)
    return _png(
        key,
        run is not None or bool(shown.problem),
        lambda: cards.version_card(
            heading,
            session.title,
            run.status if run else None,
            shown.outcome if run else None,
        ),
    )


@require_GET
def session_card(request: HttpRequest, slug: str) -> HttpResponse:
    return _session_png(get_session_for_user(request, slug))


@require_GET
def turn_card(request: HttpRequest, slug: str, number: int) -> HttpResponse:
    """The version the turn reviewed, else the session's card."""
    session = get_session_for_user(request, slug)
    turn = session.turns.select_related("kernel_version__kernel").filter(number=number).first()
    if turn is None:
        raise Http404(f"This session has no turn {number}.")
    if turn.kernel_version is None:
        return _session_png(session)
    version = turn.kernel_version
    heading = f"{version.kernel.name} v{version.number}"
    return _version_png(version, session, heading, f"version-{version.pk}")


@require_GET
def fork_card(request: HttpRequest, fork_id: str) -> HttpResponse:
    made = get_fork(request, fork_id)
    version = made.version
    heading = f"{version.kernel.name} v{version.number}, forked"
    return _version_png(made.as_version(), version.kernel.session, heading, f"fork-{made.id}")
