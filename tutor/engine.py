"""The guided session at work: messages, submissions, runs, replies, failures.

Each entry point (start_session, say, submit, retry) is a generator of events that the
views turn into server-sent events, or consume whole for a browser without JavaScript.
Every fact is stored the moment it happens (the learner's turn before the API is called,
a tool call before the tool runs), so a failure anywhere loses nothing but the end of
the reply being written: what had arrived is kept marked incomplete, the learner is told,
and Retry writes the reply to the same turn again.

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

import hashlib
import secrets
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.utils.text import slugify

from kernels import jobs, replay
from kernels.engine.outcome import Outcome, Status
from sessions.models import Session, Turn
from sessions.programs import Kernel, KernelVersion, text_diff
from tutor import guardrail, llm, progress, prompts
from tutor.free_form import FREE_FORM_HOST, FREE_FORM_KERNEL_STARTER, Template
from tutor.lessons import FREE_FORM_KERNEL, Lesson, LessonError, load_lessons, parse_lesson
from tutor.models import GuardrailEvent, GuidedSession
from tutor.replies import Events, budget_problem, tutor_reply
from tutor.review import findings, offline_review

OFFLINE_NOTICE = (
    "This session is guided by the automatic reviewer. It cannot answer messages: it reads "
    "your runs, not your words. Your message stays in the session as a note. What it can do: "
    "run every kernel you submit, say which cells are wrong or never written and what pattern "
    "they form, point at the builtin or index expression that produces them, and ask you a "
    "question that leads there."
)
NO_ANSWERS = (
    "About writing it for you: no tutor here writes the kernel. Working it out is the point; "
    "the review tells you where to look."
)
GUIDED_BY = "The automatic reviewer explains every run: which cells, what pattern, which line"


# -- starting ------------------------------------------------------------------------------


def _unique_slug(base: str) -> str:
    base = slugify(base)[:60] or "session"
    while True:
        slug = f"{base}-{secrets.token_hex(3)}"
        if not Session.objects.filter(slug=slug).exists():
            return slug


def _welcome_free_form(template: Template | None, who: str, online: bool) -> str:
    if template is None:
        text = (
            "**Free-form session.** Write any WGSL compute kernel in the kernel editor, and "
            "in the host program its buffers, their inputs, the dispatch and what to read "
            "back. **Submit & run** runs both on the server and shows the outputs. Nothing "
            "says what they should be, so there is no pass or fail: you can compare a run "
            "with an earlier version of yours instead."
        )
    else:
        text = (
            f"**Free-form session: {template.title}.** {template.description} The editor "
            "declares the buffers; **Submit & run** runs your kernel on them and compares "
            "the output with a reference, cell by cell."
        )
    return f"{text} {who}." + ("\n\nWhat would you like to build?" if online else "")


def _welcome(lesson: Lesson | None, online: bool, template: Template | None = None) -> str:
    who = "Claude reviews every run and answers your questions" if online else GUIDED_BY
    if lesson is None:
        return _welcome_free_form(template, who, online)
    objectives = "\n".join(f"- {item}" for item in lesson.objectives)
    first = lesson.steps[0].get("goal") if lesson.steps else ""
    text = f"**{lesson.title}**\n\n{lesson.summary}\n\n"
    if objectives:
        text += f"By the end you can:\n\n{objectives}\n\n"
    text += (
        "The editor holds the starter code: the bindings are declared, the rest is yours to "
        f"write. **Submit & run** runs it on the server under the lesson's harness. {who}."
    )
    if lesson.host_objectives:
        host = "\n".join(f"- {item}" for item in lesson.host_objectives)
        text += (
            "\n\nThis lesson's host code is yours too: the host program editor holds a "
            f"scaffold with TODOs for\n\n{host}\n\nIts readbacks are checked against the "
            "lesson's reference."
        )
    if first:
        text += f"\n\nFirst step: {first.rstrip('.')}."
    if online:
        text += "\n\nBefore you start: what do you already know about compute shaders?"
    return text


def _new_guided(
    user: User, lesson: Lesson | None, title: str, summary: str, slug: str
) -> GuidedSession:
    """A private session for this learner, with its kernel as the lesson sets it up."""
    session = Session.objects.create(
        slug=_unique_slug(slug),
        title=title,
        summary=summary,
        learner=user.get_username(),
        tutor_model=settings.TUTOR_MODEL if llm.configured() else "",
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
    return GuidedSession.objects.create(
        session=session,
        learner=user,
        lesson_slug=lesson.slug if lesson else "",
        lesson=lesson.as_dict() if lesson else {},
        kernel=kernel,
        starter=lesson.starter if lesson else "",
        host_starter=lesson.host_starter if lesson else "",
    )


@transaction.atomic
def start_session(
    user: User, lesson: Lesson | None, template: Template | None = None
) -> GuidedSession:
    """A lesson's session, or a free-form one (from a template: its buffers, dispatch and
    reference; without one, the learner's host program defines them)."""
    title = lesson.title if lesson else "Free-form WGSL session"
    summary = lesson.summary if lesson else "A free-form guided session."
    if template is not None:
        title, summary = f"Free-form: {template.title}", template.description
    guided = _new_guided(user, lesson, title, summary, lesson.slug if lesson else "free-form")
    if template is not None:
        guided.kernel.harness = template.harness
        guided.kernel.save(update_fields=["harness"])
        guided.starter = template.bindings
        guided.save(update_fields=["starter"])
    elif lesson is None:
        # Nothing defines the kernel's inputs: the learner's host program does.
        guided.starter, guided.host_starter = FREE_FORM_KERNEL_STARTER, FREE_FORM_HOST
        guided.save(update_fields=["starter", "host_starter"])
    guided.add_turn(
        Turn.Role.TUTOR,
        _welcome(lesson, llm.configured(), template),
        meta={"kind": "welcome", "automatic": True},
    )
    return guided


# -- continuing from a turn of another session ----------------------------------------


def kernel_at(turn: Turn) -> KernelVersion | None:
    """The kernel as it stood at this turn: the version the turn reviewed, else the one
    introduced last at or before it."""
    if turn.kernel_version_id:
        return turn.kernel_version
    versions = KernelVersion.objects.filter(
        kernel__session=turn.session_id, turn__number__lte=turn.number
    )
    return versions.select_related("kernel").order_by("-turn__number", "-number").first()


def _lesson_of(session: Session, version: KernelVersion | None) -> Lesson | None:
    """The lesson plan a session followed: a guided session's snapshot of it; for any
    other session (the showcase), the lesson whose kernel it was writing, by name (the
    one with the same harness where two lessons share a kernel)."""
    origin = GuidedSession.objects.filter(session=session).exclude(lesson={}).first()
    if origin is not None:
        try:
            return parse_lesson(origin.lesson)
        except LessonError:
            return None
    if version is None:
        return None
    named = [lesson for lesson in load_lessons() if lesson.kernel_name == version.kernel.name]
    same = [lesson for lesson in named if lesson.harness == version.harness]
    found = same or named
    return found[0] if found else None


def _met_at(origin: Turn, version: KernelVersion | None, lesson: Lesson | None) -> dict[int, int]:
    """The objectives met at that turn, by the version that met them: as a guided session
    recorded them up to it, else as the stored run of the kernel at the turn shows."""
    guided = GuidedSession.objects.filter(session=origin.session_id).first()
    if guided is not None:
        return progress.met_so_far(guided, before=origin.number + 1)
    if lesson is None or version is None:
        return {}
    shown = replay.for_reader(version)
    if not shown.finished or shown.outcome is None:
        return {}
    return {i: version.number for i in progress.objectives_met(lesson.as_dict(), shown.outcome)}


def _copy_kernels(guided: GuidedSession, version: KernelVersion, turn: Turn) -> None:
    """The kernel as it stood, keeping its version number (the next submission follows
    it); the other kernels its harness runs (a forward pass runs the layers' kernels) come
    along as they stood too, as their version 1."""
    kernel = guided.kernel
    kernel.name, kernel.harness = version.kernel.name, version.harness
    kernel.save(update_fields=["name", "harness"])
    try:
        sources = jobs.sources_for(version, jobs.parsed_harness(version))
    except jobs.ReplayProblem:
        sources = {"self": version.source}
    for name, source in sources.items():
        if name == "self":
            target = kernel
        else:
            target = Kernel.objects.create(session=guided.session, name=name, title=name)
        origin = turn.session.guided.continued_from if name == "self" else None
        KernelVersion.objects.create(
            kernel=target,
            number=version.number if name == "self" else 1,
            source=source,
            host_program=version.host_program if name == "self" else "",
            turn=turn,
            note=f"continued from v{version.number} at turn {origin.number}" if origin else "",
        )


def _welcome_back(
    origin: Turn, version: KernelVersion | None, lesson: Lesson | None, met: dict[int, int]
) -> str:
    online = llm.configured()
    text = f"**Continuing from turn {origin.number} of “{origin.session.title}”.**\n\n"
    if version is not None:
        host = " and its host program" if version.host_program else ""
        text += (
            f"The editor holds **{version.kernel.name}** v{version.number} as it stood there"
            f"{host}: this session continues from v{version.number}, so your next "
            f"submission is v{version.number + 1}. "
        )
    if lesson is not None:
        text += f"The session followed the lesson plan *{lesson.title}*, and so does this one. "
        if met:
            done = "; ".join(
                f"{lesson.objectives[i]} (v{n})"
                for i, n in sorted(met.items())
                if i < len(lesson.objectives)
            )
            text += f"Objectives met so far: {done}. "
    if online:
        text += (
            "Claude has a summary of the turns up to that point and reviews every run. "
            "What would you like to try from here?"
        )
    else:
        text += f"{GUIDED_BY}."
    return text


@transaction.atomic
def continue_session(user: User, origin: Turn) -> GuidedSession:
    """A guided session for this learner that carries on from a turn of another session:
    the lesson plan it followed, its kernel (and host program) as they stood there, and
    the turns up to it summarised for Claude (prompts.earlier_turns)."""
    source = origin.session
    version = kernel_at(origin)
    lesson = _lesson_of(source, version)
    met = _met_at(origin, version, lesson)
    title = f"{source.title} (continued from turn {origin.number})"[:200]
    guided = _new_guided(user, lesson, title, source.summary, f"{source.slug}-continued")
    guided.continued_from = origin
    guided.earlier_turns = prompts.earlier_turns(origin)
    guided.save(update_fields=["continued_from", "earlier_turns"])
    welcome = guided.add_turn(
        Turn.Role.TUTOR,
        _welcome_back(origin, version, lesson, met),
        # The objectives met before, so the page and the reviewer count them as met.
        meta={"kind": "welcome", "automatic": True, "met": {str(i): n for i, n in met.items()}},
    )
    if version is not None:
        _copy_kernels(guided, version, welcome)
        welcome.kernel_version = guided.latest_version()
        welcome.save(update_fields=["kernel_version"])
    return guided


# -- what the learner does -----------------------------------------------------------------


def _automatic_turn(
    guided: GuidedSession,
    content: str,
    kind: str,
    version: KernelVersion | None = None,
    **meta: object,
) -> Turn:
    """A tutor turn written without Claude: a notice, a note on a run, an offline review."""
    return guided.add_turn(
        Turn.Role.TUTOR,
        content,
        kernel_version=version,
        meta={"kind": kind, "automatic": True, **meta},
    )


def _offline_answer(guided: GuidedSession, asks: bool) -> str:
    """What the automatic reviewer can say to a message: what it can do, and the lesson's
    next hint (a question for the learner, written for them), one per message."""
    content = OFFLINE_NOTICE
    if asks:
        content += f"\n\n{NO_ANSWERS}"
    hints = (guided.lesson or {}).get("hints") or []
    given = guided.session.turns.filter(meta__kind="offline_notice").count()
    if given < len(hints):
        content += f"\n\nA hint from the lesson ({given + 1} of {len(hints)}): {hints[given]}"
    elif not hints:
        content += "\n\nSubmit your kernel and the review will start from what the run shows."
    return content


def say(guided: GuidedSession, text: str, stream: bool = True) -> Events:
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
        content = _offline_answer(guided, asks)
        yield "turn", {"turn": _automatic_turn(guided, content, "offline_notice")}
        yield "done", {}
        return
    yield from tutor_reply(guided, turn, stream=stream)


def _changes(guided: GuidedSession, latest: KernelVersion | None, source: str, host: str) -> str:
    """What a submission turn shows: the diff of each half that changed from the previous
    version (or from the starter code), not the whole kernel again; the whole kernel when
    there is nothing to compare with."""
    if latest is not None:
        old, old_host, label = latest.source, latest.host_program, f"v{latest.number}"
        new_label = f"v{latest.number + 1}"
    else:
        old, old_host, label, new_label = guided.starter, guided.host_starter, "starter", "v1"
    parts = []
    if source != old:
        if old.strip():
            changes = "the changes" if latest else "the changes to the starter code"
            diff = text_diff(old, source, label, new_label)
            parts.append(f"{changes}:\n\n```diff\n{diff.rstrip()}\n```")
        else:
            parts.append(f"the kernel:\n\n```wgsl\n{source.rstrip()}\n```")
    if host != old_host:
        if not host.strip():
            parts.append("no host program: the harness is its host")
        elif old_host.strip():
            changes = "the host program's changes" if latest else "the changes to the host starter"
            diff = text_diff(old_host, host, f"{label} host", f"{new_label} host")
            parts.append(f"{changes}:\n\n```diff\n{diff.rstrip()}\n```")
        else:
            parts.append(f"the host program:\n\n```js\n{host.rstrip()}\n```")
    if not parts:
        return ", the starter code as given."
    return ", " + "\n\nand ".join(parts)


def _store_submission(
    guided: GuidedSession, source: str, host: str | None, note: str, compare_with: int | None
) -> tuple[KernelVersion, Turn, dict[str, Any]]:
    """The submission as a kernel version (a new one unless both halves are unchanged)
    and the learner's turn that submits it."""
    latest = guided.latest_version()
    if host is None:  # a form without the host editor: the host program carries over
        host = latest.host_program if latest else ""
    resubmit = latest is not None and (latest.source, latest.host_program) == (source, host)
    name = guided.kernel.name
    if latest is not None and resubmit:
        version = latest
        content = f"Submitted **{name}** v{version.number} again (unchanged)."
    else:
        version = KernelVersion.objects.create(
            kernel=guided.kernel,
            number=(latest.number + 1) if latest else 1,
            source=source,
            host_program=host,
        )
        content = f"Submitted **{name}** v{version.number}{_changes(guided, latest, source, host)}"
    if note:
        content = f"{note}\n\n{content}"
    meta: dict[str, Any] = {"kind": "submission", "resubmit": resubmit}
    if compare_with is not None and compare_with < version.number:
        meta["compare_with"] = compare_with
        content += f"\n\nIts outputs are compared with those of v{compare_with}."
    if note:
        meta["note"] = note
    if note and guardrail.asks_for_answer(note):
        meta["answer_request"] = True
    turn = guided.add_turn(Turn.Role.LEARNER, content, kernel_version=version, meta=meta)
    if not resubmit:
        version.turn = turn
        version.save(update_fields=["turn"])
    return version, turn, meta


def submit(
    guided: GuidedSession,
    source: str,
    note: str = "",
    stream: bool = True,
    host: str | None = None,
    compare_with: int | None = None,
    automatic: bool = False,
) -> Events:
    """Store and run a submission: the WGSL, and the host program (None: the previous
    version's carries over; "": the harness is the host). compare_with: the number of an
    earlier version whose readbacks are the reference (a free-form session's choice).
    automatic: the automatic reviewer answers even where Claude would (tutor_eval compares
    the two)."""
    with transaction.atomic():
        version, turn, meta = _store_submission(guided, source, host, note, compare_with)
    if meta.get("answer_request"):
        guided.count("answer_requests")
        GuardrailEvent.objects.create(
            guided=guided, turn=turn, kind=GuardrailEvent.Kind.ANSWER_REQUEST
        )
    yield "turn", {"turn": turn}

    yield "running", {"version": version}
    execution = replay.run_now(version, compare_with=guided.compared_with(version))
    turn.meta["run"] = execution.summary()
    if execution.outcome is not None:
        turn.meta["met"] = progress.objectives_met(guided.lesson, execution.outcome)
        turn.meta["findings"] = findings(execution.outcome, version.harness)
    turn.save(update_fields=["meta"])
    yield "run", {"execution": execution}

    outcome = execution.outcome
    if outcome is None:
        content = f"**The kernel was not run.** {execution.busy or execution.problem}"
        yield "turn", {"turn": _automatic_turn(guided, content, "run_note", version)}
        yield "done", {}
        return
    online = llm.configured() and not automatic
    problem = budget_problem(guided) if online else ""
    if online and not problem:
        yield from tutor_reply(guided, turn, reviewed=version, stream=stream)
        return
    review, digest = _review(guided, version, turn, outcome)
    if number := meta.get("compare_with"):
        review = f"*Compared with what v{number} read back.*\n\n{review}"
    if meta.get("answer_request"):
        review = f"{NO_ANSWERS}\n\n{review}"
    if problem:
        review = f"*{problem} This review is automatic.*\n\n{review}"
    turn = _automatic_turn(guided, review, "review", version, body=digest)
    yield "turn", {"turn": turn}
    yield "done", {}


def _review(
    guided: GuidedSession, version: KernelVersion, turn: Turn, outcome: Outcome
) -> tuple[str, str]:
    """The automatic review of a submission's run and its digest: what the run shows, then
    what the version changed since the previous one and whether that fixed it, and the
    objectives it met. What an earlier review said is not said again word for word."""
    body = offline_review(outcome, version.source, version.harness, version.host_program)
    digest = hashlib.sha256(body.encode()).hexdigest()
    previous = progress.previous_submission(guided, version)
    told = [
        ""
        if turn.meta["resubmit"]
        else progress.since_previous(previous, version, outcome, turn.meta.get("findings") or []),
        progress.objectives_line(
            guided.lesson,
            progress.met_so_far(guided, before=turn.number),
            turn.meta.get("met") or [],
            outcome.get("status") == Status.PASSED,
        ),
    ]
    headline, _, rest = body.partition("\n\n")
    earlier = guided.session.turns.filter(meta__kind="review", meta__body=digest).last()
    if rest and earlier is not None and earlier.kernel_version is not None:
        rest = (
            f"Everything else the review of v{earlier.kernel_version.number} said (turn "
            f"{earlier.number}) holds for this run too."
        )
    return "\n\n".join(part for part in (headline, *told, rest) if part), digest


def retry(guided: GuidedSession, stream: bool = True) -> Events:
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
