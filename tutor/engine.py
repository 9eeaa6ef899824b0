"""The guided session at work: messages, submissions, runs, replies, failures.

Each entry point (start_session, say, submit, retry) is a generator of events that the
views turn into server-sent events, or consume whole for a browser without JavaScript.
Every fact is stored the moment it happens (the learner's turn before the API is called,
a tool call before the tool runs), so a failure anywhere loses nothing but the reply
being written, and that is discarded explicitly: the learner is told, and Retry writes
the reply to the same turn again.

Events are (name, data) pairs:
  turn     {"turn": Turn}                     a stored turn to show (or replace)
  running  {"version": KernelVersion}         a kernel run started
  run      {"execution": Replay}              its outcome (kernels.replay.run_now)
  start    {"round": int}                     the tutor starts writing (streamed below)
  delta    {"text": str}                      text the guardrail released
  error    {"kind", "message", "retry", ...}  what went wrong, in plain words
  done     {}                                 the exchange is complete
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator

from django.conf import settings
from django.db import transaction
from django.utils.text import slugify

from kernels import replay
from kernels.models import Kernel, KernelVersion
from sessions.models import Session, Turn
from tutor import guardrail, llm
from tutor.lessons import FREE_FORM_KERNEL, Lesson
from tutor.models import GuardrailEvent, GuidedSession
from tutor.replies import Event, budget_problem, tutor_reply
from tutor.review import offline_review

OFFLINE_NOTICE = (
    "The tutor is offline: this server has no Anthropic API key, so Claude cannot answer "
    "messages. Your message is saved. Every kernel you submit is still run and reviewed "
    "automatically from its results."
)


# -- starting ------------------------------------------------------------------------------


def _unique_slug(base: str) -> str:
    base = slugify(base)[:60] or "session"
    while True:
        slug = f"{base}-{secrets.token_hex(3)}"
        if not Session.objects.filter(slug=slug).exists():
            return slug


def _welcome(lesson: Lesson | None, online: bool) -> str:
    who = (
        "Claude reviews every run and answers your questions"
        if online
        else "The tutor is offline (no API key), so the offline reviewer explains every run"
    )
    if lesson is None:
        return (
            "**Free-form session.** Write any WGSL compute kernel in the editor. There is no "
            "harness, so each submission is compiled and validated, not checked against a "
            f"reference. {who}." + ("\n\nWhat would you like to build?" if online else "")
        )
    objectives = "\n".join(f"- {item}" for item in lesson.objectives)
    first = lesson.steps[0].get("goal") if lesson.steps else ""
    text = f"**{lesson.title}**\n\n{lesson.summary}\n\n"
    if objectives:
        text += f"By the end you can:\n\n{objectives}\n\n"
    text += (
        "The editor holds the starter code: the bindings are declared, the rest is yours to "
        f"write. **Submit & run** runs it on the server under the lesson's harness. {who}."
    )
    if first:
        text += f"\n\nFirst step: {first}."
    if online:
        text += "\n\nBefore you start: what do you already know about compute shaders?"
    return text


@transaction.atomic
def start_session(user, lesson: Lesson | None) -> GuidedSession:
    online = llm.configured()
    title = lesson.title if lesson else "Free-form WGSL session"
    session = Session.objects.create(
        slug=_unique_slug(lesson.slug if lesson else "free-form"),
        title=title,
        summary=lesson.summary if lesson else "A free-form guided session.",
        learner=user.get_username(),
        tutor_model=settings.TUTOR_MODEL if online else "",
        source=Session.Source.LIVE,
        visibility=Session.Visibility.PRIVATE,
        owner=user,
    )
    kernel = Kernel.objects.create(
        session=session,
        name=lesson.kernel_name if lesson else FREE_FORM_KERNEL,
        title=title,
        harness=lesson.harness if lesson else {},
    )
    guided = GuidedSession.objects.create(
        session=session,
        learner=user,
        lesson_slug=lesson.slug if lesson else "",
        lesson=lesson.as_dict() if lesson else {},
        kernel=kernel,
        starter=lesson.starter if lesson else "",
    )
    guided.add_turn(
        Turn.Role.TUTOR,
        _welcome(lesson, online),
        meta={"kind": "welcome", "automatic": True},
    )
    return guided


# -- what the learner does -----------------------------------------------------------------


def _automatic_turn(
    guided: GuidedSession, content: str, kind: str, version: KernelVersion | None = None
) -> Turn:
    """A tutor turn written without Claude: a notice, a note on a run, an offline review."""
    return guided.add_turn(
        Turn.Role.TUTOR,
        content,
        kernel_version=version,
        meta={"kind": kind, "automatic": True},
    )


def say(guided: GuidedSession, text: str, stream: bool = True) -> Iterator[Event]:
    asks = guardrail.asks_for_answer(text)
    turn = guided.add_turn(
        Turn.Role.LEARNER,
        text,
        meta={"kind": "message", **({"answer_request": True} if asks else {})},
    )
    if asks:
        guided.count("answer_requests")
        GuardrailEvent.objects.create(
            guided=guided, turn=turn, kind=GuardrailEvent.Kind.ANSWER_REQUEST
        )
    yield "turn", {"turn": turn}
    if not llm.configured():
        content = OFFLINE_NOTICE
        if asks:
            content += (
                "\n\nAbout writing it for you: the tutor never writes the kernel, online or "
                "offline. Working it out is the point; the reviews tell you where to look."
            )
        yield "turn", {"turn": _automatic_turn(guided, content, "offline_notice")}
        yield "done", {}
        return
    yield from tutor_reply(guided, turn, stream=stream)


def submit(
    guided: GuidedSession, source: str, note: str = "", stream: bool = True
) -> Iterator[Event]:
    latest = guided.latest_version()
    resubmit = latest is not None and latest.source == source
    name = guided.kernel.name
    with transaction.atomic():
        if resubmit:
            version = latest
            content = f"Submitted **{name}** v{version.number} again (unchanged)."
        else:
            version = KernelVersion.objects.create(
                kernel=guided.kernel, number=(latest.number + 1) if latest else 1, source=source
            )
            content = f"Submitted **{name}** v{version.number}:\n\n```wgsl\n{source.rstrip()}\n```"
        if note:
            content = f"{note}\n\n{content}"
        meta = {"kind": "submission", "resubmit": resubmit}
        if note:
            meta["note"] = note
        if note and guardrail.asks_for_answer(note):
            meta["answer_request"] = True
        turn = guided.add_turn(Turn.Role.LEARNER, content, kernel_version=version, meta=meta)
        if not resubmit:
            version.turn = turn
            version.save(update_fields=["turn"])
    if meta.get("answer_request"):
        guided.count("answer_requests")
        GuardrailEvent.objects.create(
            guided=guided, turn=turn, kind=GuardrailEvent.Kind.ANSWER_REQUEST
        )
    yield "turn", {"turn": turn}

    yield "running", {"version": version}
    execution = replay.run_now(version)
    turn.meta["run"] = execution.summary()
    turn.save(update_fields=["meta"])
    yield "run", {"execution": execution}

    outcome = execution.outcome
    if outcome is None:
        content = f"**The kernel was not run.** {execution.busy or execution.problem}"
        yield "turn", {"turn": _automatic_turn(guided, content, "run_note", version)}
        yield "done", {}
        return
    problem = budget_problem(guided) if llm.configured() else ""
    if llm.configured() and not problem:
        yield from tutor_reply(guided, turn, reviewed=version, stream=stream)
        return
    review = offline_review(outcome, version.source, version.harness, guided.lesson)
    if problem:
        review = f"*{problem} This review is automatic.*\n\n{review}"
    yield "turn", {"turn": _automatic_turn(guided, review, "review", version)}
    yield "done", {}


def retry(guided: GuidedSession, stream: bool = True) -> Iterator[Event]:
    pending = guided.pending_turn()
    if pending is None:
        yield (
            "error",
            {
                "kind": "nothing_pending",
                "message": "There is nothing to retry: the last message has its reply.",
                "retry": False,
            },
        )
        return
    if not llm.configured():
        yield "turn", {"turn": _automatic_turn(guided, OFFLINE_NOTICE, "offline_notice")}
        yield "done", {}
        return
    # A submission, or a run the tutor asked for, is what the reply reviews.
    reviewed = pending.kernel_version
    yield from tutor_reply(guided, pending, reviewed=reviewed, stream=stream)
