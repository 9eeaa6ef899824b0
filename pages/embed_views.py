"""The embed of a replay: the outcome of the kernel a turn reviewed, with its pictures,
framed by any site like the session embeds (pages/embedding.py)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.template.loader import render_to_string
from django.urls import reverse
from django.views.decorators.clickjacking import xframe_options_exempt
from django.views.decorators.http import require_GET

from config.context_processors import site_origin
from kernels import replay
from pages import embedding
from pages.access import get_embeddable_session
from pages.outcome_context import outcome_context
from sessions.models import Turn


def _embed_error(request: HttpRequest, message: str, status: int) -> HttpResponse:
    return render(request, "embed/error.html", {"message": message}, status=status)


@require_GET
@xframe_options_exempt
@embedding.embed_policy
def replay_embed(request: HttpRequest, slug: str, number: int) -> HttpResponse:
    try:
        session = get_embeddable_session(slug)
        turn = (
            Turn.objects.select_related("kernel_version__kernel__session", "kernel_version__turn")
            .filter(session=session, number=number)
            .exclude(kernel_version=None)
            .first()
        )
        if turn is None or turn.kernel_version is None:
            raise Http404
        theme = embedding.parse_theme(request.GET)
    except Http404:
        return _embed_error(request, "There is no public kernel replay at this address.", 404)
    except embedding.BadRange as error:
        return _embed_error(request, str(error), 400)

    # As on the replay page, a kernel nobody has run yet starts running now.
    shown = replay.for_reader(turn.kernel_version, start=True)
    origin = site_origin(request)
    finished = (run := shown.finished_run) is not None and run.cacheable
    key = session.cache_key("replay-embed", number, theme, origin, shown.run and shown.run.pk)
    if finished and (page := cache.get(key)) is not None:
        return HttpResponse(page)
    context = replay_embed_context(turn, theme, origin, shown)
    page = render_to_string("embed/replay.html", context)
    if finished:
        cache.set(key, page, timeout=settings.PAGE_CACHE_SECONDS)
    return HttpResponse(page)


def replay_embed_context(
    turn: Turn, theme: str, origin: str, shown: replay.Replay
) -> dict[str, Any]:
    session = turn.session
    target = embedding.replay_target(turn, theme)
    link = f"{origin}{session.get_absolute_url()}"
    return {
        **outcome_context(shown),
        "session": session,
        "turn": turn,
        "kernel": shown.version.kernel,
        "theme": theme,
        "title": target.title,
        "problem": shown.problem,
        "busy": shown.busy,
        "oembed_href": embedding.oembed_href(origin, target.embed_url(origin)),
        "replay_link": origin + reverse("kernels:replay", args=[session.slug, turn.number]),
        "turn_link": f"{link}?turn={turn.number}#turn-{turn.number}",
        "site_url": origin,
    }


def stored_embed_page(target: embedding.Target, origin: str) -> str | None:
    """A replay's or a fork's embed page as it shows its stored run, to measure; None
    while there is none (nothing is started for it)."""
    if target.fork is not None:
        from pages.fork_views import fork_embed_context

        shown = replay.for_reader(target.fork.as_version())
        if not shown.finished:
            return None
        context = fork_embed_context(target.fork, target.theme, origin, shown)
        return render_to_string("embed/fork.html", context)
    if target.turn is None or target.turn.kernel_version is None:
        return None
    shown = replay.for_reader(target.turn.kernel_version)
    if not shown.finished:
        return None
    context = replay_embed_context(target.turn, target.theme, origin, shown)
    return render_to_string("embed/replay.html", context)
