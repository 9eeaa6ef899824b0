"""Guided sessions over HTTP: start, converse, submit, retry, publish.

Replies stream as server-sent events from a POST (fetch reads the body as it arrives):

    event: turn     data: {"number", "role", "html", "replaces_live"}
    event: running  data: {"version", "html"}
    event: run      data: {"status", "html"}
    event: start    data: {"round"}
    event: delta    data: {"text"}        plain text the guardrail released
    event: error    data: {"kind", "message", "retry", "status", "retry_after", "incomplete"}
    event: done     data: {"usage_html", "pending"}

Without `Accept: text/event-stream` (no JavaScript) the same exchange runs to the end
and the page is shown again. StreamingHttpResponse over a plain generator works under
runserver and gunicorn's gthread workers (a reply holds one thread while it streams).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Generator, Iterator
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db.models import Count
from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponseBase,
    JsonResponse,
    StreamingHttpResponse,
)
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from config.accounts import SignedInRequest
from config.ratelimit import client_key, hit
from kernels import replay
from kernels.models import Run
from pages.access import get_session_for_user
from pages.host_context import host_context
from pages.navigation import stored_runs
from pages.outcome_context import outcome_context
from sessions.models import TITLE_LENGTH, Session, Turn
from tutor import engine, llm, progress
from tutor.free_form import TEMPLATES
from tutor.lessons import get_lesson, load_lessons
from tutor.models import ApiCall, GuidedSession
from tutor.replies import Events, budget_problem
from tutor.review import status_label

log = logging.getLogger(__name__)

INTERNAL_ERROR = (
    "Something went wrong on the server while writing the reply. Your message is saved; "
    "press Retry to ask again."
)


def _get_guided_for_user(request: SignedInRequest, slug: str, write: bool = False) -> GuidedSession:
    """The guided session at this slug if this user may open it (write: post to it).

    Learners see only their own sessions; staff may read every one but post to none but
    their own. Everyone else gets a 404, whether the session exists or not.
    """
    sessions = GuidedSession.objects.select_related("session", "kernel", "learner")
    mine = sessions.filter(learner=request.user)
    sessions = mine if write else sessions.for_user(request.user)
    return get_object_or_404(sessions, session__slug=slug)


def _wants_stream(request: HttpRequest) -> bool:
    return "text/event-stream" in request.headers.get("Accept", "")


def _refuse(
    request: HttpRequest, guided: GuidedSession, status: int, message: str, retry_after: int = 0
) -> HttpResponse:
    """A request we will not act on: JSON for the page's script, a message otherwise."""
    if _wants_stream(request):
        response = JsonResponse(
            {"error": message, "retry_after": retry_after or None}, status=status
        )
        if retry_after:
            response["Retry-After"] = str(retry_after)
        return response
    messages.error(request, message)
    return redirect(guided.get_absolute_url())


# -- rendering pieces the page and the stream share ---------------------------------------


def _usage_context(guided: GuidedSession) -> dict[str, Any]:
    totals = guided.usage_totals()
    budget = settings.TUTOR_SESSION_TOKEN_BUDGET
    return {
        # Thousands separators: these are the numbers a learner compares with the budget.
        "usage": {key: f"{value:,}" for key, value in totals.items()},
        "calls": totals["calls"],
        "budget": f"{budget:,}",
        "budget_percent": min(100, round(100 * totals["total"] / budget)) if budget else 100,
        "daily_used": f"{ApiCall.used_by(guided.learner):,}",
        "daily_budget": f"{settings.TUTOR_USER_DAILY_TOKEN_BUDGET:,}",
    }


def _run_context(guided: GuidedSession, execution: replay.Replay | None) -> dict[str, Any]:
    """The run panel's context: the outcome, or why there is none, and what a host
    program did and what its readbacks were compared with."""
    context = {**outcome_context(execution), "execution": execution}
    if execution is not None and execution.version.host_program:
        # No findings (False): the archive's name the fix ("round the workgroup count up");
        # in a lesson the review leads the learner there with a question instead.
        chosen = guided.compared_with(execution.version)
        context["host"] = host_context(
            execution.version, execution.outcome, False, chosen, run=execution.run
        )
    return context


def _badge_runs(turns: list[Turn]) -> dict[int, Run]:
    """The run each version's badge shows, by version id: the one its latest submission
    recorded (run with the comparison the learner chose, which the run a reader would
    see does not take), else the run a reader would see."""
    recorded = {
        turn.kernel_version_id: turn.meta["run"]["id"]
        for turn in turns
        if turn.kernel_version_id and (turn.meta.get("run") or {}).get("id")
    }
    found = Run.objects.defer("outcome").in_bulk(recorded.values())
    runs = {version: found[run] for version, run in recorded.items() if run in found}
    others = [turn.kernel_version for turn in turns if turn.kernel_version_id not in runs]
    runs.update(stored_runs([version for version in others if version])[0])
    return runs


def _render_turn(request: HttpRequest, guided: GuidedSession, turn: Turn) -> str:
    if turn.kernel_version_id:
        # Its badge says how the version ran, as the page's turns do (_turns_with_runs).
        same = list(guided.session.turns.filter(kernel_version=turn.kernel_version_id))
        turn.replayed = _badge_runs(same).get(turn.kernel_version_id)
    return render_to_string(
        "tutor/_turn.html",
        {"turn": turn, "session": guided.session, "can_embed": False},
        request=request,
    )


class EventStream:
    """Engine events as server-sent events; releases the reply lock however it ends.

    Django calls close() when the response is closed, also when the browser went away
    mid-stream or the stream never started; close() then stops the engine (which
    discards the unfinished reply) and releases the lock.
    """

    def __init__(self, request: HttpRequest, guided: GuidedSession, events: Events) -> None:
        self.request = request
        self.guided = guided
        self.events = events
        self.closed = False
        self._iterator = self._run()
        # Renews the reply lock's lease until the exchange ends.
        self.heartbeat = guided.reply_heartbeat()

    def __iter__(self) -> Iterator[bytes]:
        return self._iterator

    def _run(self) -> Generator[bytes, None, None]:
        try:
            # Sent at once, so proxies and the browser see the stream open.
            yield b": reply stream\n\n"
            for name, data in self.events:
                yield self.encode(name, self.payload(name, data))
        except Exception:
            log.exception("Tutor stream failed for session %s", self.guided.session.slug)
            self.guided.set_error(INTERNAL_ERROR)
            yield self.encode(
                "error", {"kind": "internal", "message": INTERNAL_ERROR, "retry": True}
            )
        finally:
            self._finish()

    def close(self) -> None:
        # Called by Django when the response closes, from outside the generator.
        self._iterator.close()
        self._finish()

    def _finish(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.heartbeat.stop()
        try:
            self.events.close()
        finally:
            self.guided.release_reply()

    @staticmethod
    def encode(name: str, data: dict[str, Any]) -> bytes:
        return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()

    def payload(self, name: str, data: dict[str, Any]) -> dict[str, Any]:
        request, guided = self.request, self.guided
        if name == "turn":
            turn = data["turn"]
            return {
                "number": turn.number,
                "role": turn.role,
                "html": _render_turn(request, guided, turn),
                "replaces_live": bool(data.get("replaces_live")),
            }
        if name == "running":
            version = data["version"]
            return {
                "version": version.number if version else None,
                # Only a version with a host program can be compared with (its readbacks).
                "comparable": bool(version and version.host_program),
                "html": render_to_string(
                    "tutor/_running.html", {"version": version, "kernel": guided.kernel}
                ),
            }
        if name == "run":
            execution = data["execution"]
            context = {**_run_context(guided, execution), "kernel": guided.kernel}
            status = (execution.outcome or {}).get("status", "")
            return {
                "status": status or "not_run",
                # The submission's badge in the conversation follows the run.
                "version_id": execution.version.pk,
                "status_label": status_label(execution.outcome) if status else "not run",
                "html": render_to_string("tutor/_run.html", context, request=request),
            }
        if name == "done":
            guided.refresh_from_db()
            # Token counts are for staff running the server, not for learners.
            usage = (
                render_to_string("tutor/_usage.html", {"guided": guided, **_usage_context(guided)})
                if request.user.is_staff
                else ""
            )
            return {
                "usage_html": usage,
                "objectives_html": render_to_string(
                    "tutor/_objectives.html", {"objectives": _objectives(guided)}
                ),
                "pending": guided.pending_turn() is not None,
            }
        return data

    def consume(self) -> list[str]:
        """Run the whole exchange without streaming; the error messages, if any."""
        errors = []
        try:
            for name, data in self.events:
                if name == "error":
                    errors.append(data["message"])
        except Exception:
            log.exception("Tutor exchange failed for session %s", self.guided.session.slug)
            self.guided.set_error(INTERNAL_ERROR)
            errors.append(INTERNAL_ERROR)
        finally:
            self._finish()
        return errors


def _exchange(
    request: HttpRequest, guided: GuidedSession, start: Callable[[bool], Events]
) -> HttpResponseBase:
    if not guided.claim_reply():
        return _refuse(
            request,
            guided,
            409,
            "The tutor is still busy with your previous message. Wait for it to finish.",
        )
    streaming = _wants_stream(request)
    try:
        stream = EventStream(request, guided, start(streaming))
    except Exception:
        guided.release_reply()
        raise
    if streaming:
        response = StreamingHttpResponse(stream, content_type="text/event-stream; charset=utf-8")
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"
        return response
    for error in stream.consume():
        messages.error(request, error)
    return redirect(f"{guided.get_absolute_url()}#composer")


def _message_limit(request: HttpRequest, guided: GuidedSession) -> HttpResponse | None:
    wait = hit("tutor-message", client_key(request), settings.TUTOR_MESSAGES_PER_MINUTE, 60)
    if wait:
        return _refuse(
            request,
            guided,
            429,
            f"Too many messages: at most {settings.TUTOR_MESSAGES_PER_MINUTE} a minute. "
            f"Try again in {wait} s (your text is still in the box).",
            retry_after=wait,
        )
    if llm.configured() and (problem := budget_problem(guided)):
        return _refuse(
            request,
            guided,
            429,
            f"{problem} You can still submit kernels: they are run and reviewed automatically.",
        )
    return None


# -- pages -------------------------------------------------------------------------------


@require_GET
def index(request: HttpRequest) -> HttpResponse:
    """The lessons, for anyone to look at; starting one takes an account."""
    mine = (
        GuidedSession.objects.filter(learner=request.user)
        .select_related("session")
        .annotate(turn_count=Count("session__turns"))
        .order_by("-created")
        if request.user.is_authenticated
        else GuidedSession.objects.none()
    )
    return render(
        request,
        "tutor/index.html",
        {
            "lessons": load_lessons(),
            "templates": TEMPLATES.values(),
            "mine": mine,
            "online": llm.configured(),
            "model": settings.TUTOR_MODEL,
        },
    )


@require_POST
@login_required
def start(request: SignedInRequest) -> HttpResponse:
    choice = request.POST.get("lesson", "")
    lesson = template = None
    if choice == "free" and request.POST.get("template"):
        template = TEMPLATES.get(request.POST["template"])
        if template is None:
            messages.error(request, "There is no such template; pick one from the list.")
            return redirect("tutor:index")
    elif choice != "free":
        lesson = get_lesson(choice)
        if lesson is None:
            messages.error(request, "There is no such lesson; pick one from the list.")
            return redirect("tutor:index")
    wait = hit("tutor-start", client_key(request), settings.TUTOR_STARTS_PER_HOUR, 3600)
    if wait:
        messages.error(
            request, f"You have started many sessions in the last hour. Try again in {wait} s."
        )
        return redirect("tutor:index")
    guided = engine.start_session(request.user, lesson, template)
    return redirect(guided)


@require_POST
@login_required
def continue_from(request: SignedInRequest, slug: str, number: int) -> HttpResponse:
    """A guided session of the reader's own that carries on from a turn they can read."""
    origin = get_object_or_404(get_session_for_user(request, slug).turns, number=number)
    wait = hit("tutor-start", client_key(request), settings.TUTOR_STARTS_PER_HOUR, 3600)
    if wait:
        messages.error(
            request, f"You have started many sessions in the last hour. Try again in {wait} s."
        )
        return redirect(f"{origin.session.get_absolute_url()}?turn={number}#turn-{number}")
    return redirect(engine.continue_session(request.user, origin))


def _origin_link(request: HttpRequest, guided: GuidedSession) -> str:
    """Where a continued session came from, while its reader may still open it."""
    origin = guided.continued_from
    if origin is None or not Session.objects.viewable_by(request.user).filter(pk=origin.session_id):
        return ""
    return f"{origin.session.get_absolute_url()}?turn={origin.number}#turn-{origin.number}"


def _turns_with_runs(session: Session) -> list[Turn]:
    """The session's turns, each that reviewed a kernel with its stored run for its badge."""
    turns = list(session.turns.select_related("kernel_version__kernel").order_by("number"))
    runs = _badge_runs(turns)
    for turn in turns:
        if turn.kernel_version_id:
            turn.replayed = runs.get(turn.kernel_version_id)
    return turns


def _objectives(guided: GuidedSession) -> list[tuple[str, int | None]]:
    """The lesson's objectives, each with the first version whose run met it (or None)."""
    met = progress.met_so_far(guided)
    objectives = (guided.lesson or {}).get("objectives") or []
    return [(text, met.get(i)) for i, text in enumerate(objectives)]


@never_cache
@require_GET
@login_required
def session_page(request: SignedInRequest, slug: str) -> HttpResponse:
    guided = _get_guided_for_user(request, slug)
    session = guided.session
    latest = guided.latest_version()
    context = {
        "guided": guided,
        "session": session,
        "kernel": guided.kernel,
        "lesson": guided.lesson,
        "objectives": _objectives(guided),
        "turns": _turns_with_runs(session),
        "editor_source": latest.source if latest else guided.starter,
        "host_source": latest.host_program if latest else guided.host_starter,
        "host_editor": bool(guided.host_starter or (latest and latest.host_program)),
        "latest": latest,
        "origin_link": _origin_link(request, guided),
        "can_write": guided.learner_id == request.user.pk,
        "online": llm.configured(),
        "model": settings.TUTOR_MODEL,
        "pending": guided.pending_turn() is not None,
        "message_max": settings.TUTOR_MESSAGE_MAX_CHARS,
        "kernel_max": settings.TUTOR_KERNEL_MAX_CHARS,
        **_run_context(guided, guided.replay(latest) if latest else None),
        "comparable": guided.comparable_versions(),
        **_usage_context(guided),
    }
    return render(request, "tutor/session.html", context)


# -- actions -----------------------------------------------------------------------------


@require_POST
@login_required
def say(request: SignedInRequest, slug: str) -> HttpResponseBase:
    guided = _get_guided_for_user(request, slug, write=True)
    text = request.POST.get("text", "").strip()
    if not text:
        return _refuse(request, guided, 400, "Write a message first.")
    if len(text) > settings.TUTOR_MESSAGE_MAX_CHARS:
        return _refuse(
            request,
            guided,
            400,
            f"That message is too long: at most {settings.TUTOR_MESSAGE_MAX_CHARS:,} characters.",
        )
    if refused := _message_limit(request, guided):
        return refused
    return _exchange(request, guided, lambda stream: engine.say(guided, text, stream=stream))


def _compare_with(request: HttpRequest, guided: GuidedSession) -> int | bool | None:
    """The earlier version the learner chose to compare with: its number, None for none,
    False for a choice that is not in the list."""
    chosen = request.POST.get("compare_with", "")
    if not chosen:
        return None
    comparable = {str(version.number): version.number for version in guided.comparable_versions()}
    return comparable.get(chosen, False)


@require_POST
@login_required
def submit(request: SignedInRequest, slug: str) -> HttpResponseBase:
    guided = _get_guided_for_user(request, slug, write=True)
    # Keep the learner's code exactly as typed, apart from Windows line ends.
    source = request.POST.get("source", "").replace("\r\n", "\n")
    # None: the page had no host editor, and the host program carries over.
    host = request.POST.get("host_program")
    host = None if host is None else host.replace("\r\n", "\n")
    note = request.POST.get("note", "").strip()
    compare_with = _compare_with(request, guided)
    if compare_with is False:
        return _refuse(
            request, guided, 400, "Choose a version to compare with from the list, or none."
        )
    if not source.strip():
        return _refuse(request, guided, 400, "The editor is empty: write a kernel first.")
    for what, text in (("kernel", source), ("host program", host or "")):
        if len(text) > settings.TUTOR_KERNEL_MAX_CHARS:
            return _refuse(
                request,
                guided,
                400,
                f"That {what} is too long: at most {settings.TUTOR_KERNEL_MAX_CHARS:,} characters.",
            )
    if len(note) > settings.TUTOR_MESSAGE_MAX_CHARS:
        return _refuse(request, guided, 400, "The note with this submission is too long.")
    wait = hit("tutor-submit", client_key(request), settings.TUTOR_SUBMISSIONS_PER_MINUTE, 60)
    if wait:
        return _refuse(
            request,
            guided,
            429,
            f"Too many submissions: at most {settings.TUTOR_SUBMISSIONS_PER_MINUTE} a minute. "
            f"Try again in {wait} s.",
            retry_after=wait,
        )
    return _exchange(
        request,
        guided,
        lambda stream: engine.submit(
            guided, source, note, stream=stream, host=host, compare_with=compare_with
        ),
    )


@require_POST
@login_required
def retry(request: SignedInRequest, slug: str) -> HttpResponseBase:
    guided = _get_guided_for_user(request, slug, write=True)
    if guided.pending_turn() is None:
        return _refuse(
            request, guided, 409, "There is nothing to retry: every message has its reply."
        )
    if refused := _message_limit(request, guided):
        return refused
    return _exchange(request, guided, lambda stream: engine.retry(guided, stream=stream))


VISIBILITIES = [
    (Session.Visibility.UNLISTED, "Unlisted: anyone with the link can read it; it is not listed"),
    (Session.Visibility.PUBLIC, "Public: listed in the archive and its search"),
]


@never_cache
@require_http_methods(["GET", "POST"])
@login_required
def publish(request: SignedInRequest, slug: str) -> HttpResponse:
    """GET: a preview of exactly what publishing makes readable, and the choice of public
    or unlisted (none made for the learner). POST: publish as chosen; no choice, no change."""
    guided = _get_guided_for_user(request, slug, write=True)
    if request.method == "GET":
        hidden = set(guided.chatter().values_list("pk", flat=True))
        turns = [t for t in _turns_with_runs(guided.session) if t.pk not in hidden and not t.hidden]
        context = {
            "guided": guided,
            "session": guided.session,
            "kernel": guided.kernel,
            "turns": turns,
            "left_out": len(hidden),
            "versions": guided.kernel.versions.count(),
            "visibilities": VISIBILITIES,
        }
        return render(request, "tutor/publish.html", context)
    visibility = request.POST.get("visibility", "")
    if visibility not in (Session.Visibility.PUBLIC, Session.Visibility.UNLISTED):
        messages.error(request, "Choose public or unlisted: it stays as it is until you do.")
        return redirect("tutor:publish", slug=slug)
    guided.publish(visibility)
    label = (
        "in the archive" if visibility == Session.Visibility.PUBLIC else "to anyone with the link"
    )
    messages.success(
        request,
        f"Published {label}. Turn numbers are frozen now, so links and embeds keep pointing "
        "at the same turns.",
    )
    return redirect(guided.session)


@require_POST
@login_required
def unpublish(request: SignedInRequest, slug: str) -> HttpResponse:
    guided = _get_guided_for_user(request, slug, write=True)
    guided.session.unpublish()
    messages.success(
        request,
        "This session is private again: its archive page, turns and embeds answer as for any "
        "private session. Publishing it again keeps its turn numbers.",
    )
    return redirect(guided)


@require_POST
@login_required
def rename(request: SignedInRequest, slug: str) -> HttpResponse:
    """The learner names their session; the slug, and so every link, stays."""
    guided = _get_guided_for_user(request, slug, write=True)
    title = " ".join(request.POST.get("title", "").split())
    if not title or len(title) > TITLE_LENGTH:
        messages.error(request, f"A title is 1 to {TITLE_LENGTH} characters.")
        return redirect(guided)
    guided.session.title = title
    guided.session.save(update_fields=["title", "updated"])
    return redirect(guided)
