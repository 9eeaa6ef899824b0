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
  run      {"execution": Execution}           its outcome
  start    {"round": int}                     the tutor starts writing (streamed below)
  delta    {"text": str}                      text the guardrail released
  error    {"kind", "message", "retry", ...}  what went wrong, in plain words
  done     {}                                 the exchange is complete
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass

import anthropic
from django.conf import settings
from django.db import transaction
from django.utils.text import slugify

from kernels import replay
from kernels.models import Kernel, KernelVersion, Run
from sessions.models import Session, Turn
from tutor import guardrail, llm, prompts
from tutor.lessons import FREE_FORM_KERNEL, Lesson
from tutor.models import ApiCall, GuardrailEvent, GuidedSession
from tutor.review import offline_review, outcome_for_model, status_label

log = logging.getLogger(__name__)

Event = tuple[str, dict]

OFFLINE_NOTICE = (
    "The tutor is offline: this server has no Anthropic API key, so Claude cannot answer "
    "messages. Your message is saved. Every kernel you submit is still run and reviewed "
    "automatically from its results."
)
GUARD_NOTE = (
    "<note>Your previous reply contained kernel code, which was withheld from the learner "
    "by the guardrail. Explain in prose and ask a question; do not write code.</note>"
)


def _answer_note(count: int) -> str:
    return (
        f"<note>The learner is asking you to write the kernel for them (request {count} in "
        "this session). Do not. In a sentence or two say why writing it themselves is the "
        "point of the session, then give the next rung of the hint ladder.</note>"
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


# -- running kernels -----------------------------------------------------------------------


@dataclass
class Execution:
    version: KernelVersion
    run: Run | None = None
    problem: str = ""
    busy: str = ""
    retry_after: int | None = None

    @property
    def outcome(self) -> dict | None:
        if self.run is not None and self.run.state == Run.State.DONE:
            return self.run.outcome
        return None

    def summary(self) -> dict:
        """What the submitting turn records about its run."""
        if outcome := self.outcome:
            return {
                "id": self.run.pk,
                "status": outcome.get("status"),
                "message": outcome.get("message", "")[:300],
            }
        return {"status": "not_run", "message": self.problem or self.busy}


def execute(version: KernelVersion) -> Execution:
    """Run a version under its harness now, waiting a little longer than the deadline."""
    try:
        job = replay.job_for(version)
    except replay.ReplayProblem as problem:
        return Execution(version, problem=str(problem))
    try:
        run = replay.start_run(job)
    except replay.ReplayUnavailable as busy:
        return Execution(
            version,
            busy=f"The kernel runners are busy: retry in {busy.retry_after} s.",
            retry_after=busy.retry_after,
        )
    deadline = time.monotonic() + settings.REPLAY_DEADLINE + 5
    run = replay.wait(run, settings.REPLAY_DEADLINE + 5)
    # Backends that never block (a task queue) store the result from elsewhere: poll it.
    while run.state != Run.State.DONE and time.monotonic() < deadline:
        time.sleep(0.25)
        run.refresh_from_db()
    if run.state != Run.State.DONE:
        return Execution(
            version, run=run, problem="The run did not finish in time; submit again to retry."
        )
    return Execution(version, run=run)


# -- tokens --------------------------------------------------------------------------------


def budget_problem(guided: GuidedSession) -> str:
    used = guided.tokens_used()
    if used >= settings.TUTOR_SESSION_TOKEN_BUDGET:
        return (
            f"This session has used its token budget ({used:,} of "
            f"{settings.TUTOR_SESSION_TOKEN_BUDGET:,} tokens), so the tutor cannot answer "
            "any more messages here."
        )
    daily = ApiCall.used_by(guided.learner)
    if daily >= settings.TUTOR_USER_DAILY_TOKEN_BUDGET:
        return (
            f"You have used your daily token budget ({daily:,} of "
            f"{settings.TUTOR_USER_DAILY_TOKEN_BUDGET:,} tokens in the last 24 hours). "
            "It frees up as the day goes on."
        )
    return ""


def _usage(usage) -> dict[str, int]:
    if usage is None:
        return {}
    return {
        "input_tokens": usage.input_tokens or 0,
        "output_tokens": usage.output_tokens or 0,
        "cache_read_tokens": getattr(usage, "cache_read_input_tokens", None) or 0,
        "cache_write_tokens": getattr(usage, "cache_creation_input_tokens", None) or 0,
    }


def _record_call(
    guided: GuidedSession,
    usage: dict[str, int],
    model: str,
    outcome: str,
    request_id: str = "",
) -> ApiCall:
    return ApiCall.objects.create(
        guided=guided,
        user=guided.learner,
        model=model[:100],
        outcome=outcome,
        request_id=(request_id or "")[:100],
        **usage,
    )


# -- the tutor's replies ---------------------------------------------------------------------


@dataclass
class ToolRun:
    text: str
    is_error: bool
    execution: Execution | None
    markdown: str


def run_kernel_tool(guided: GuidedSession, arguments: dict) -> ToolRun:
    number = arguments.get("version") if isinstance(arguments, dict) else None
    if number is not None and (not isinstance(number, int) or isinstance(number, bool)):
        return ToolRun("version must be an integer.", True, None, "The tool call was malformed.")
    version = (
        guided.kernel.versions.filter(number=number).first() if number else guided.latest_version()
    )
    if version is None:
        text = (
            f"There is no version {number}."
            if number
            else "The learner has not submitted a kernel yet: there is nothing to run."
        )
        return ToolRun(text, True, None, text)
    execution = execute(version)
    if outcome := execution.outcome:
        markdown = (
            f"**{guided.kernel.name} v{version.number}: {status_label(outcome)}.** "
            f"{outcome.get('message', '')}"
        )
        return ToolRun(outcome_for_model(outcome), False, execution, markdown)
    why = execution.busy or execution.problem
    return ToolRun(why, True, execution, f"**{guided.kernel.name} v{version.number}:** {why}")


def _notes(guided: GuidedSession, pending: Turn | None) -> list[str]:
    notes = []
    if pending is not None and pending.meta.get("answer_request"):
        notes.append(_answer_note(guided.answer_requests))
    last_reply = (
        guided.session.turns.filter(role=Turn.Role.TUTOR, meta__kind="reply")
        .order_by("-number")
        .first()
    )
    if last_reply is not None and last_reply.meta.get("guardrail"):
        notes.append(GUARD_NOTE)
    return notes


def _error(guided: GuidedSession, kind: str, message: str, retry: bool, **extra) -> Event:
    guided.set_error(message)
    return "error", {"kind": kind, "message": message, "retry": retry, **extra}


def tutor_reply(
    guided: GuidedSession,
    pending: Turn | None,
    reviewed: KernelVersion | None = None,
    stream: bool = True,
) -> Iterator[Event]:
    """Claude's answer to the pending turn, with as many run_kernel rounds as allowed."""
    client = llm.get_client()
    notes = _notes(guided, pending)
    rounds = 0
    while True:
        if problem := budget_problem(guided):
            yield _error(
                guided,
                "budget",
                f"{problem} Your message is saved; submitted kernels are still run and "
                "reviewed automatically.",
                retry=False,
            )
            return
        params = prompts.request(
            guided, notes, final_round=rounds >= settings.TUTOR_MAX_TOOL_ROUNDS
        )
        guard = guardrail.StreamGuard()
        live = None
        yield "start", {"round": rounds}
        try:
            if stream:
                with client.messages.stream(**params) as live:
                    for event in live:
                        if event.type == "text" and (shown := guard.feed(event.text)):
                            yield "delta", {"text": shown}
                    message = live.get_final_message()
                if tail := guard.finish():
                    yield "delta", {"text": tail}
                request_id = live.request_id or ""
            else:
                message = client.messages.create(**params)
                request_id = getattr(message, "_request_id", None) or ""
        except GeneratorExit:
            # The browser went away mid-reply: the reply is discarded, the tokens were spent.
            _record_call(guided, _snapshot_usage(live), params["model"], ApiCall.Outcome.ERROR)
            raise
        except anthropic.APIError as error:
            llm.log_failure(error, guided.session.slug)
            _record_call(guided, _snapshot_usage(live), params["model"], ApiCall.Outcome.ERROR)
            failure = llm.describe_failure(error)
            discarded = (
                " The part of the reply that had arrived was discarded." if guard.text else ""
            )
            retry_hint = (
                f" Press Retry in {failure.retry_after} s or later."
                if failure.retry_after
                else " Press Retry to ask again."
            )
            yield _error(
                guided,
                failure.kind,
                f"{failure.message} Your message is saved.{discarded}{retry_hint}",
                retry=True,
                status=failure.status,
                retry_after=failure.retry_after,
                discarded=bool(guard.text),
            )
            return

        usage = _usage(message.usage)
        call_record = _record_call(
            guided, usage, message.model, ApiCall.Outcome.OK, request_id=request_id
        )
        text = "".join(block.text for block in message.content if block.type == "text")
        tool_uses = [block for block in message.content if block.type == "tool_use"]
        guarded = guardrail.redact(text)
        meta = {
            "model": message.model,
            "usage": usage,
            "stop_reason": message.stop_reason,
            "request_id": request_id,
        }
        if guided.session.tutor_model != message.model:
            Session.objects.filter(pk=guided.session_id).update(tutor_model=message.model[:100])

        # The round's usage goes on its first turn: the text, else the first tool call.
        first_turn = None
        if guarded.text.strip():
            reply_meta = {"kind": "reply", "automatic": False, **meta}
            if pending is not None:
                reply_meta["reply_to"] = pending.number
            if guarded.redacted:
                reply_meta["guardrail"] = {
                    "rules": guarded.rules,
                    "withheld": len(guarded.findings),
                }
            first_turn = guided.add_turn(
                Turn.Role.TUTOR,
                guarded.text.strip(),
                meta=reply_meta,
                kernel_version=reviewed if not tool_uses else None,
            )
            call_record.attach(first_turn)
            if guarded.redacted:
                GuardrailEvent.objects.create(
                    guided=guided,
                    turn=first_turn,
                    kind=GuardrailEvent.Kind.REDACTED,
                    rules=guarded.rules,
                    withheld=guarded.withheld,
                )
                guided.count("guardrail_count")
                if GUARD_NOTE not in notes:
                    notes.append(GUARD_NOTE)
            yield "turn", {"turn": first_turn, "replaces_live": True}

        if not tool_uses:
            if first_turn is None:
                yield _error(
                    guided,
                    "empty",
                    "Claude returned an empty reply. Press Retry to ask again.",
                    retry=True,
                )
                return
            guided.clear_error()
            yield "done", {}
            return

        for tool_use in tool_uses:
            arguments = tool_use.input if isinstance(tool_use.input, dict) else {}
            on_version = f" on version {arguments['version']}" if arguments.get("version") else ""
            call_meta = {
                "kind": "tool_call",
                "tool": tool_use.name,
                "tool_use_id": tool_use.id,
                "input": arguments,
                "summary": f"The tutor called {tool_use.name}{on_version}",
            }
            if first_turn is None:
                call_meta.update(meta)
            call = guided.add_turn(
                Turn.Role.TOOL,
                f"The tutor runs the learner's kernel: `{tool_use.name}`{on_version}.",
                meta=call_meta,
            )
            replaces_live = first_turn is None
            if first_turn is None:
                first_turn = call
                call_record.attach(call)
            yield "turn", {"turn": call, "replaces_live": replaces_live}
            if tool_use.name == "run_kernel":
                yield "running", {"version": guided.latest_version()}
                result = run_kernel_tool(guided, arguments)
            else:
                text = f"Unknown tool {tool_use.name!r}; the only tool is run_kernel."
                result = ToolRun(text, True, None, text)
            execution = result.execution
            ran = execution is not None and execution.outcome is not None
            answer = guided.add_turn(
                Turn.Role.TOOL,
                result.markdown,
                kernel_version=execution.version if ran else None,
                meta={
                    "kind": "tool_result",
                    "tool": tool_use.name,
                    "tool_use_id": tool_use.id,
                    "is_error": result.is_error,
                    "result_text": result.text,
                    "summary": result.markdown.replace("**", "")[:120],
                    **({"run": execution.summary()} if execution else {}),
                },
            )
            yield "turn", {"turn": answer}
            if execution is not None:
                yield "run", {"execution": execution}
                if ran:
                    reviewed = execution.version
        rounds += 1


def _snapshot_usage(live) -> dict[str, int]:
    if live is None:
        return {}
    try:
        return _usage(live.current_message_snapshot.usage)
    except AssertionError:
        return {}


# -- what the learner does -----------------------------------------------------------------


def _offline(guided: GuidedSession, content: str, kind: str, version=None) -> Turn:
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
        yield "turn", {"turn": _offline(guided, content, "offline_notice")}
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
    execution = execute(version)
    turn.meta["run"] = execution.summary()
    turn.save(update_fields=["meta"])
    yield "run", {"execution": execution}

    outcome = execution.outcome
    if outcome is None:
        content = f"**The kernel was not run.** {execution.busy or execution.problem}"
        yield "turn", {"turn": _offline(guided, content, "run_note", version)}
        yield "done", {}
        return
    problem = budget_problem(guided) if llm.configured() else ""
    if llm.configured() and not problem:
        yield from tutor_reply(guided, turn, reviewed=version, stream=stream)
        return
    review = offline_review(outcome, version.source, version.harness, guided.lesson)
    if problem:
        review = f"*{problem} This review is automatic.*\n\n{review}"
    yield "turn", {"turn": _offline(guided, review, "review", version)}
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
        yield "turn", {"turn": _offline(guided, OFFLINE_NOTICE, "offline_notice")}
        yield "done", {}
        return
    # A submission, or a run the tutor asked for, is what the reply reviews.
    reviewed = pending.kernel_version
    yield from tutor_reply(guided, pending, reviewed=reviewed, stream=stream)
