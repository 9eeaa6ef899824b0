"""Claude's replies in a guided session: the streamed answer, the guardrail, the rounds of
run_kernel, and the record of every API call and its tokens.

A reply is a loop of rounds. Each round asks Claude once (streaming what the guardrail
releases), records the call, stores the text as a tutor turn, and runs the tools the
answer asked for, storing each call and result as tool turns; a round without tool calls
ends the reply. The events yielded are those tutor/engine.py describes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx2
from django.conf import settings

from kernels import replay
from sessions.models import Session, Turn
from sessions.programs import KernelVersion
from tutor import guardrail, llm, prompts
from tutor.models import ApiCall, GuardrailEvent, GuidedSession
from tutor.review import status_label

if TYPE_CHECKING:
    # The SDK is imported when a reply is asked for (tutor/llm.py, build_client).
    import anthropic
    from anthropic.lib.streaming import MessageStream
    from anthropic.types import Message, ToolUseBlock, Usage

# (name, data): the events tutor/engine.py describes.
Event = tuple[str, dict[str, Any]]
# A reply's events as they come; closing it stops the reply.
Events = Generator[Event, None, None]

INCOMPLETE_NOTE = "*(Cut off: this reply is incomplete. Press Retry for a whole one.)*"
# How soon to try again when every reply slot of this process is taken.
BUSY_RETRY_AFTER = 5

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


# -- tokens --------------------------------------------------------------------------------


def budget_problem(guided: GuidedSession) -> str:
    """Why Claude may not answer in this session now (a token budget is spent), or ""."""
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


def _usage(usage: Usage | None) -> dict[str, int]:
    if usage is None:
        return {}
    return {
        "input_tokens": usage.input_tokens or 0,
        "output_tokens": usage.output_tokens or 0,
        "cache_read_tokens": getattr(usage, "cache_read_input_tokens", None) or 0,
        "cache_write_tokens": getattr(usage, "cache_creation_input_tokens", None) or 0,
    }


def _snapshot_usage(live: MessageStream | None) -> dict[str, int]:
    if live is None:
        return {}
    try:
        return _usage(live.current_message_snapshot.usage)
    except AssertionError:
        return {}


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


# -- the run_kernel tool ---------------------------------------------------------------------


@dataclass
class ToolRun:
    text: str
    is_error: bool
    execution: replay.Replay | None
    markdown: str


def run_kernel_tool(guided: GuidedSession, arguments: dict[str, Any]) -> ToolRun:
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
    execution = replay.run_now(version, compare_with=guided.compared_with(version))
    if outcome := execution.outcome:
        markdown = (
            f"**{guided.kernel.name} v{version.number}: {status_label(outcome)}.** "
            f"{outcome.get('message', '')}"
        )
        return ToolRun(prompts.run_text(outcome), False, execution, markdown)
    why = execution.busy or execution.problem
    return ToolRun(why, True, execution, f"**{guided.kernel.name} v{version.number}:** {why}")


# -- one reply, round by round ---------------------------------------------------------------


@dataclass
class Answer:
    """One round's answer from Claude, its API call recorded."""

    call: ApiCall
    # The guardrail's verdict on the answer's text.
    guarded: guardrail.Guarded
    tool_uses: list[ToolUseBlock]
    # Model, usage, stop reason and request id: they go on the round's first turn.
    meta: dict[str, Any]


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


def _known(guided: GuidedSession) -> frozenset[str]:
    """The code the learner already has: quoting it back gives nothing away."""
    latest = guided.latest_version()
    sources = [guided.starter, guided.host_starter]
    if latest is not None:
        sources += [latest.source, latest.host_program]
    return guardrail.known_units(sources)


def _error(guided: GuidedSession, kind: str, message: str, retry: bool, **extra: Any) -> Event:
    guided.set_error(message)
    return "error", {"kind": kind, "message": message, "retry": retry, **extra}


# Replies being written in this process (at most settings.TUTOR_CONCURRENT_REPLIES).
_slots_lock = threading.Lock()
_slots_taken = 0


def _take_slot() -> bool:
    global _slots_taken
    with _slots_lock:
        if _slots_taken >= settings.TUTOR_CONCURRENT_REPLIES:
            return False
        _slots_taken += 1
        return True


def _give_slot() -> None:
    global _slots_taken
    with _slots_lock:
        _slots_taken -= 1


def tutor_reply(
    guided: GuidedSession,
    pending: Turn | None,
    reviewed: KernelVersion | None = None,
    stream: bool = True,
) -> Iterator[Event]:
    """Claude's answer to the pending turn, with as many run_kernel rounds as allowed,
    within the request's time budget, if a reply slot of this process is free."""
    if not _take_slot():
        yield _error(
            guided,
            "busy",
            "The tutor is writing as many replies as this server allows at once. Your "
            f"message is saved. Press Retry in {BUSY_RETRY_AFTER} s or later.",
            retry=True,
            retry_after=BUSY_RETRY_AFTER,
        )
        return
    try:
        yield from _rounds(guided, pending, reviewed, stream)
    finally:
        _give_slot()


def _rounds(
    guided: GuidedSession, pending: Turn | None, reviewed: KernelVersion | None, stream: bool
) -> Iterator[Event]:
    client = llm.get_client()
    notes = _notes(guided, pending)
    rounds = 0
    ends = time.time() + settings.TUTOR_REQUEST_BUDGET
    while True:
        if ends - time.time() < 1:
            yield _error(
                guided,
                "out_of_time",
                f"The tutor ran out of the {settings.TUTOR_REQUEST_BUDGET:g} s a message may "
                "take. Your message is saved. Press Retry to ask again.",
                retry=True,
            )
            return
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
        yield "start", {"round": rounds}
        deadline = min(time.time() + settings.TUTOR_REPLY_DEADLINE, ends)
        answer = yield from _ask(client, guided, params, stream, deadline, pending)
        if answer is None:
            return
        first_turn = yield from _store_text(guided, answer, pending, reviewed, notes)
        if not answer.tool_uses:
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
        reviewed = (yield from _use_tools(guided, answer, first_turn)) or reviewed
        rounds += 1


def _ask(
    client: anthropic.Anthropic,
    guided: GuidedSession,
    params: dict[str, Any],
    stream: bool,
    deadline: float,
    pending: Turn | None,
) -> Generator[Event, None, Answer | None]:
    """Ask Claude once, streaming the text the guardrail releases; record the call. None
    when the API failed or the reply was cut off (a deadline passed, the stream broke or
    ended early): the learner is told, and what had arrived is kept as a reply marked
    incomplete, never as a whole one."""
    import anthropic  # loaded by then: the client is the SDK's (tutor/llm.py)

    known = _known(guided)
    guard = guardrail.StreamGuard(known)
    live: MessageStream | None = None
    headers = llm.deadline_headers(deadline)
    try:
        if stream:
            with client.messages.stream(**params, extra_headers=headers) as live:
                for event in live:
                    if event.type == "text" and (shown := guard.feed(event.text)):
                        yield "delta", {"text": shown}
                message = _whole_message(live)
            if tail := guard.finish():
                yield "delta", {"text": tail}
            request_id = live.request_id or ""
        else:
            message = client.messages.create(**params, extra_headers=headers)
            request_id = getattr(message, "_request_id", None) or ""
    except GeneratorExit:
        # The browser went away mid-reply: the reply is discarded, the tokens were spent.
        _record_call(guided, _snapshot_usage(live), params["model"], ApiCall.Outcome.ERROR)
        raise
    except (anthropic.APIError, httpx2.TransportError) as error:
        llm.log_failure(error, guided.session.slug)
        call = _record_call(guided, _snapshot_usage(live), params["model"], ApiCall.Outcome.ERROR)
        kept = bool(guard.text.strip())
        if kept:
            yield _store_incomplete(guided, guard.text, known, pending, call)
        yield _api_error(guided, error, incomplete=kept)
        return None
    return _answer(guided, message, request_id, known)


def _whole_message(live: MessageStream) -> Message:
    """The streamed message, if it arrived whole (a stream that ends without its
    message_stop was cut off: the SDK would give what it had as if it were all)."""
    message: Message | None
    try:
        message = live.get_final_message()
    except AssertionError:  # not even message_start arrived
        message = None
    if message is None or message.stop_reason is None:
        raise httpx2.RemoteProtocolError("the stream ended before the reply did")
    return message


def _store_incomplete(
    guided: GuidedSession, text: str, known: frozenset[str], pending: Turn | None, call: ApiCall
) -> Event:
    """What arrived of a reply cut off, guarded like any reply, marked incomplete: shown
    as such, never sent back to Claude as its answer, and the learner's turn still
    pending (Retry answers it)."""
    guarded = guardrail.redact(text, known)
    meta: dict[str, Any] = {"kind": "reply", "automatic": False, "incomplete": True}
    if pending is not None:
        meta["reply_to"] = pending.number
    _guard_meta(meta, guarded)
    turn = guided.add_turn(
        Turn.Role.TUTOR, f"{guarded.text.rstrip()}\n\n{INCOMPLETE_NOTE}", meta=meta
    )
    call.attach(turn)
    _record_guardrail(guided, turn, guarded)
    return "turn", {"turn": turn, "replaces_live": True}


def _api_error(guided: GuidedSession, error: Exception, incomplete: bool) -> Event:
    failure = llm.describe_failure(error)
    kept = " What had arrived of the reply is kept, marked incomplete." if incomplete else ""
    retry_hint = (
        f" Press Retry in {failure.retry_after} s or later."
        if failure.retry_after
        else " Press Retry to ask again."
    )
    return _error(
        guided,
        failure.kind,
        f"{failure.message} Your message is saved.{kept}{retry_hint}",
        retry=True,
        status=failure.status,
        retry_after=failure.retry_after,
        incomplete=incomplete,
    )


def _answer(
    guided: GuidedSession, message: Message, request_id: str, known: frozenset[str]
) -> Answer:
    """Record a successful call, and split its answer into guarded text and tool calls."""
    usage = _usage(message.usage)
    call = _record_call(guided, usage, message.model, ApiCall.Outcome.OK, request_id=request_id)
    if guided.session.tutor_model != message.model:
        Session.objects.filter(pk=guided.session_id).update(tutor_model=message.model[:100])
    text = "".join(block.text for block in message.content if block.type == "text")
    meta = {
        "model": message.model,
        "usage": usage,
        "stop_reason": message.stop_reason,
        "request_id": request_id,
    }
    return Answer(
        call=call,
        guarded=guardrail.redact(text, known),
        tool_uses=[block for block in message.content if block.type == "tool_use"],
        meta=meta,
    )


def _store_text(
    guided: GuidedSession,
    answer: Answer,
    pending: Turn | None,
    reviewed: KernelVersion | None,
    notes: list[str],
) -> Generator[Event, None, Turn | None]:
    """Store the answer's text, as the guardrail left it, as a tutor turn; None when there
    is no text. A reply that hands over code is recorded, and the next round told."""
    guarded = answer.guarded
    if not guarded.text.strip():
        return None
    meta = {"kind": "reply", "automatic": False, **answer.meta}
    if pending is not None:
        meta["reply_to"] = pending.number
    _guard_meta(meta, guarded)
    # The round's usage goes on its first turn: the text, else the first tool call.
    turn = guided.add_turn(
        Turn.Role.TUTOR,
        guarded.text.strip(),
        meta=meta,
        kernel_version=reviewed if not answer.tool_uses else None,
    )
    answer.call.attach(turn)
    if _record_guardrail(guided, turn, guarded) and GUARD_NOTE not in notes:
        notes.append(GUARD_NOTE)
    yield "turn", {"turn": turn, "replaces_live": True}
    return turn


def _guard_meta(meta: dict[str, Any], guarded: guardrail.Guarded) -> None:
    if guarded.redacted:
        meta["guardrail"] = {"rules": guarded.rules, "withheld": len(guarded.findings)}


def _record_guardrail(guided: GuidedSession, turn: Turn, guarded: guardrail.Guarded) -> bool:
    """Record what the guardrail withheld from a turn (whose meta says so: _guard_meta);
    whether it withheld anything."""
    if not guarded.redacted:
        return False
    GuardrailEvent.objects.create(
        guided=guided,
        turn=turn,
        kind=GuardrailEvent.Kind.REDACTED,
        rules=guarded.rules,
        withheld=guarded.withheld,
    )
    guided.count("guardrail_count")
    return True


def _use_tools(
    guided: GuidedSession, answer: Answer, first_turn: Turn | None
) -> Generator[Event, None, KernelVersion | None]:
    """Store each tool call, run it, and store its result. Returns the last version that
    ran, which the next round's reply reviews."""
    reviewed = None
    for tool_use in answer.tool_uses:
        arguments = tool_use.input if isinstance(tool_use.input, dict) else {}
        call = _store_tool_call(guided, tool_use, arguments, answer if first_turn is None else None)
        yield "turn", {"turn": call, "replaces_live": first_turn is None}
        if first_turn is None:
            first_turn = call
        if tool_use.name == "run_kernel":
            yield "running", {"version": guided.latest_version()}
            result = run_kernel_tool(guided, arguments)
        else:
            text = f"Unknown tool {tool_use.name!r}; the only tool is run_kernel."
            result = ToolRun(text, True, None, text)
        yield "turn", {"turn": _store_tool_result(guided, tool_use, result)}
        if result.execution is not None:
            yield "run", {"execution": result.execution}
            if result.execution.outcome is not None:
                reviewed = result.execution.version
    return reviewed


def _store_tool_call(
    guided: GuidedSession,
    tool_use: ToolUseBlock,
    arguments: dict[str, Any],
    first_of: Answer | None,
) -> Turn:
    """The tool turn of a call; first_of: the answer whose first turn it is (no text came
    before it), which gets the round's usage."""
    on_version = f" on version {arguments['version']}" if arguments.get("version") else ""
    meta = {
        "kind": "tool_call",
        "tool": tool_use.name,
        "tool_use_id": tool_use.id,
        "input": arguments,
        "summary": f"The tutor called {tool_use.name}{on_version}",
    }
    if first_of is not None:
        meta.update(first_of.meta)
    call = guided.add_turn(
        Turn.Role.TOOL,
        f"The tutor runs the learner's kernel: `{tool_use.name}`{on_version}.",
        meta=meta,
    )
    if first_of is not None:
        first_of.call.attach(call)
    return call


def _store_tool_result(guided: GuidedSession, tool_use: ToolUseBlock, result: ToolRun) -> Turn:
    execution = result.execution
    ran = execution if execution is not None and execution.outcome is not None else None
    return guided.add_turn(
        Turn.Role.TOOL,
        result.markdown,
        kernel_version=ran.version if ran else None,
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
