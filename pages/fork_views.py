"""Readers' forks over HTTP: run an edit of a turn's version, and the fork's page, JSON
and embed (kernels/forks.py does the work)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.models import AnonymousUser
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.views.decorators.clickjacking import xframe_options_exempt
from django.views.decorators.http import require_GET, require_POST

from config.context_processors import site_origin
from config.ratelimit import client_key, hit
from kernels import forks, replay
from kernels.models import Fork
from pages import embedding, fork_form, reader_pages
from pages.host_context import host_context
from pages.outcome_context import editor_marks, outcome_context
from pages.pass_context import passes_context
from pages.replay_views import get_reviewed_turn, replay_json_response, replay_turn_number
from pages.stamps import Prepared, stamp_of
from sessions.models import Turn
from sessions.programs import KernelVersion


def _see_other(url: str) -> HttpResponse:
    # 303: the browser GETs the fork's page, and a reload does not post the form again.
    response = HttpResponseRedirect(url)
    response.status_code = 303
    return response


@require_POST
def fork(request: HttpRequest, slug: str, number: int) -> HttpResponse:
    """Run the reader's edit of the version this turn reviewed; 303 to the fork's page."""
    turn, version = get_reviewed_turn(request, slug, number)
    try:
        source, host = forks.read_edit(version, request.POST, request.user)
        limit = settings.FORK_RUNS_PER_MINUTE
        if wait := hit("fork", client_key(request), limit, 60):
            raise forks.ForkRefused(
                f"You have run {limit} forks in the last minute; try again in {wait} s.",
                status=429,
                retry_after=wait,
            )
        made = forks.start_fork(version, source, host, request.user)
    except forks.ForkRefused as refused:
        return _refused(request, turn, version, refused)
    return _see_other(made.get_absolute_url())


def _refused(
    request: HttpRequest, turn: Turn, version: KernelVersion, refused: forks.ForkRefused
) -> HttpResponse:
    """Why the edit was not run, with the edit back in the editor (unless it was too long
    to hold: then the archived version's)."""
    sent = {name: request.POST.get(name, "") for name in ("source", "host")}
    fits = all(len(text) <= settings.FORK_MAX_CHARS for text in sent.values())
    gpu_file = fork_form.gpu_file(version, request.user)
    archived_url = reverse("kernels:replay", args=[turn.session.slug, turn.number])
    context = {
        "session": version.kernel.session,
        "kernel": version.kernel,
        "archived": version,
        "turn": turn,
        "archived_url": archived_url,
        "message": str(refused),
        "retry_after": refused.retry_after,
        "sign_in_url": fork_form.sign_in_url(archived_url) if refused.sign_in else "",
        "gpu_file": gpu_file,
        "fork_action": request.path,
        "fork_source": sent["source"] if fits else (gpu_file or {}).get("text", version.source),
        "fork_host": (sent["host"] or version.host_program) if fits else version.host_program,
        "has_host": bool(version.host_program),
        "marks": editor_marks(None),
    }
    response = render(request, "kernels/fork_refused.html", context, status=refused.status)
    if refused.retry_after:
        response["Retry-After"] = str(refused.retry_after)
    return response


def get_fork(request: HttpRequest, fork_id: str) -> Fork:
    """The fork, if this user may open its session; 404 otherwise, private or not."""
    forks_seen = Fork.objects.viewable_by(request.user)
    return get_object_or_404(
        forks_seen.select_related("version__kernel__session", "version__turn"), pk=fork_id
    )


# A fork's session's stamp for a reader who is not signed in (none for a private one),
# and with it the newest run of a job (pages/reader_pages.py).
OPENABLE_FORK = Prepared(
    lambda fork: (
        Fork.objects.viewable_by(AnonymousUser())
        .filter(pk=fork)
        .values_list("version__kernel__session__pk", "version__kernel__session__updated")
    ),
    ["fork"],
)
STORED_FORK_PAGE = Prepared(
    lambda fork, sources, harness: (
        Fork.objects.viewable_by(AnonymousUser())
        .filter(pk=fork)
        .annotate(newest=replay.newest_run(sources, harness))
        .values_list("version__kernel__session__pk", "version__kernel__session__updated", "newest")
    ),
    ["fork", "sources", "harness"],
)


@require_GET
@reader_pages.one_render_at_a_time("fork")
def fork_page(request: HttpRequest, fork_id: str, key: str | None) -> HttpResponse:
    kept = reader_pages.stored(key, STORED_FORK_PAGE, fork=fork_id)
    if kept is not None:
        return reader_pages.serve_page(request, kept)
    found = OPENABLE_FORK.first(fork=fork_id) if key is not None else None
    made = get_fork(request, fork_id)
    version = made.version
    session = version.kernel.session
    # As on a replay page: a fork whose run is not stored (a new adapter) runs again;
    # a Triton or CUDA one's only when a reader runs it again from the form.
    shown = replay.for_reader(made.as_version(), start=forks.runs_on_view(made))
    number = replay_turn_number(version)
    origin = site_origin(request)
    target = embedding.fork_target(made)
    archived_url = reverse("kernels:replay", args=[session.slug, number])
    context = {
        **outcome_context(shown),
        "passes": passes_context(
            shown.outcome,
            request.GET.get("pass"),
            shown.finished_run,
            {
                "whole": reverse("kernels:fork_whole_buffer", args=[made.id]),
                "npy": reverse("kernels:fork_whole_buffer_npy", args=[made.id]),
            },
        ),
        "fork": made,
        "archived": version,
        "session": session,
        "kernel": version.kernel,
        "turn_number": number,
        "archived_url": archived_url,
        "fork_action": reverse("kernels:fork_turn", args=[session.slug, number]),
        "gpu_file": fork_form.gpu_file(version, request.user),
        "sign_in_url": fork_form.sign_in_url(made.get_absolute_url(), "fork-again"),
        "diff": forks.diff_html(made),
        "host": host_context(shown.version, shown.outcome, run=shown.run),
        "problem": shown.problem,
        "busy": shown.busy,
        "missing": shown.missing,
        "json_url": reverse("kernels:fork_json", args=[made.id]),
        "share_url": origin + made.get_absolute_url(),
        "embed_code": embedding.iframe_code(target, origin) if session.is_embeddable else "",
        "oembed_href": embedding.oembed_href(origin, origin + made.get_absolute_url())
        if session.is_embeddable
        else "",
        "has_host": bool(version.host_program),
        "share": {
            "title": embedding.fork_target(made).title,
            "description": f"A reader's edit of {version.kernel.name} v{version.number}, "
            f"run on the server.",
            "image": origin + reverse("kernels:fork_card", args=[made.id]),
        },
    }
    response, swaps = reader_pages.render_page(request, key, "kernels/fork.html", context)
    pending = bool(context["passes"] and context["passes"]["pending"])
    stamped = stamp_of(found) if found and not pending else None
    reader_pages.keep(key, stamped, shown, response.content, swaps)
    return response


@require_GET
def fork_json(request: HttpRequest, fork_id: str) -> HttpResponse:
    """The fork's outcome in the shape of a turn's replay.json, and what it forks."""
    made = get_fork(request, fork_id)
    version = made.version
    number = replay_turn_number(version)
    forked_from = {
        "session": version.kernel.session.slug,
        "turn": number,
        "version": version.number,
        "replay": reverse("kernels:replay", args=[version.kernel.session.slug, number]),
    }
    extra = {"fork": made.id, "forked_from": forked_from}
    npy = reverse("kernels:fork_whole_buffer_npy", args=[made.id])
    return replay_json_response(request, made.as_version(), extra, forks.runs_on_view(made), npy)


@require_GET
@xframe_options_exempt
@embedding.embed_policy
def fork_embed(request: HttpRequest, fork_id: str) -> HttpResponse:
    """The fork's outcome, framed by any site like the other embeds; never a private one."""
    try:
        made = get_object_or_404(
            Fork.objects.embeddable().select_related("version__kernel__session"), pk=fork_id
        )
        theme = embedding.parse_theme(request.GET)
    except Http404:
        message = "There is no public fork at this address."
        return render(request, "embed/error.html", {"message": message}, status=404)
    except embedding.BadRange as error:
        return render(request, "embed/error.html", {"message": str(error)}, status=400)
    # As on its page: a fork whose run is not stored (a new adapter) runs again.
    shown = replay.for_reader(made.as_version(), start=forks.runs_on_view(made))
    context = fork_embed_context(made, theme, site_origin(request), shown)
    return render(request, "embed/fork.html", context)


def fork_embed_context(made: Fork, theme: str, origin: str, shown: replay.Replay) -> dict[str, Any]:
    version = made.version
    session = version.kernel.session
    number = replay_turn_number(version)
    target = embedding.fork_target(made, theme)
    return {
        **outcome_context(shown),
        "archived": version,
        "session": session,
        "kernel": version.kernel,
        "turn_number": number,
        "theme": theme,
        "title": target.title,
        "problem": shown.problem,
        "busy": shown.busy,
        "oembed_href": embedding.oembed_href(origin, target.embed_url(origin)),
        "fork_link": origin + made.get_absolute_url(),
        "archived_link": origin + reverse("kernels:replay", args=[session.slug, number]),
    }
