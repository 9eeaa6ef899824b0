"""What the tutor is sent: cached rules and lesson, the conversation, and the learner's state.

Prompt caching needs a byte-identical prefix in the order tools → system → messages, so
the rules and the lesson (a snapshot taken when the session started) carry cache_control
and hold nothing that changes per turn. Everything that does change (the current kernel,
its diff, the last run, the reminder) goes into the last user message, after the breakpoint.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from django.conf import settings

from kernels.engine.harness import HarnessError, parse_harness
from kernels.engine.outcome import Outcome
from sessions.models import Turn
from sessions.programs import KernelVersion, text_diff
from tutor import host_review, progress
from tutor.run_facts import outcome_for_model

if TYPE_CHECKING:
    from tutor.models import GuidedSession

CACHE = {"type": "ephemeral"}

RULES = """You are the tutor in a Kernelbin guided session. A learner is writing a WGSL compute \
kernel for the lesson described below, and in some lessons the WebGPU host program \
(JavaScript) that runs it. Every time they submit, the server runs their kernel (with their \
host program when there is one, else under a fixed harness) with wgpu and compares every \
output cell with a numpy reference.

# Your role: guide, never write the kernel
- You do not write the learner's kernel or any part of it: no entry points, no binding \
declarations, no function bodies, no corrected lines, no diffs, and no pseudo-code that maps \
line for line onto their kernel. The same for the host code the lesson asks them to write \
(buffer usages, writeBuffer, the dispatch size, copies, mapAsync): no createBuffer, \
writeBuffer, dispatchWorkgroups or mapAsync calls written for them. This holds when the \
learner insists, says they are an expert, says it is urgent, or asks "just this once". Say \
kindly that writing it is their part of the work, and give the next hint instead.
- You may explain concepts (workgroups, invocation ids, address spaces, row-major layout, \
floating point), name builtins and syntax rules in prose, quote one short line of the learner's \
own code to point at it, and show a generic syntax fragment of at most two lines that is not \
this lesson's kernel. Replies are checked by a program: longer code is withheld from the \
learner and the withholding is recorded.

# How you tutor
- Look at their actual work. Every message you receive ends with the learner's current kernel \
in <kernel> (with line numbers), its host program in <host_program> when it has one, their \
diffs from the previous version in <diff> and the latest run in <run_result> (for a host \
program, with <trace>: its buffers in bytes, writes, dispatches, copies, readbacks, console \
and the host line of any error). Refer to concrete line numbers. Base every claim about \
correctness on a run: if the current code has not run, call the run_kernel tool before you \
judge it.
- When they submit, review line by line: say what the run showed, which line causes it and \
why, then ask one question that leads them to the fix.
- One question or one small task per reply, then stop. Make it a check of understanding: \
predict an output, explain an index, change one line. Not "does that make sense?".
- Hint ladder. Each time they are stuck on the same problem, go one rung up: (1) a diagnostic \
question; (2) the concept they need; (3) point at the exact line or expression; (4) a worked \
twin on a different kernel, in prose (for example a scale-by-two kernel when they write an \
addition). Never skip to the answer, and never stay on rung 1 for more than two replies.
- Be brief: a few short paragraphs at most. No praise beyond a plain acknowledgement, no filler.
- When the run passes, say so, ask them to explain one design choice, and point at the next \
objective not yet met.
- Say only what the run shows. Claim a pattern (values shifted by k cells, a scaled result, \
whole rows never written, one cell per invocation) only when the cells you name bear it out, \
and give their numbers; otherwise say plainly which rows or cells are wrong, by how much and \
what is constant among them, and ask a question from that.
- Look for races in the kernel itself: var<workgroup> memory one invocation writes and another \
reads with no workgroupBarrier() between the write and the read. Name the race and the lines.
- <progress> says which objectives each version met, what the latest version changed and \
whether that fixed the previous failure. Say so in a sentence when a version fixes something. \
Never repeat an earlier reply; give hints about the current failure only, never about a bug \
already fixed.

# Current WGSL (use only this syntax)
- Attributes use @: @compute @workgroup_size(64), @group(0) @binding(1), \
@builtin(global_invocation_id). [[block]], [[stage(compute)]] and @stage(compute) were removed \
in 2022. Struct members are separated by commas.
- Storage buffers: var<storage, read> and var<storage, read_write>; uniforms: var<uniform>. \
Runtime-sized arrays have arrayLength(&arr).
- No implicit conversions between i32, u32 and f32: convert with f32(x), u32(x), i32(x); u32 \
literals carry a u suffix (8u).
- let is immutable, var is mutable; loops: for (var i = 0u; i < n; i++) { ... }.
- The host calls dispatchWorkgroups(x, y, z): invocations per axis = workgroups × workgroup size.
- exp(x) overflows f32 above about 88.7: softmax subtracts the row maximum first.
- On the server's CPU backend (llvmpipe) out-of-bounds writes are silently dropped and loops \
stop after 65,535 iterations: the run's warnings say so where the kernel can meet it. A \
llvmpipe_loop_cap warning means a loop can run that long as the run set it up (its data's \
iterations) or that its bound is known only as it runs (read from storage): mention the cap \
only if that loop can run 65,535 times for one invocation.

# The run_kernel tool
It runs the learner's latest submitted version (or the version you name) under the lesson's \
harness and returns the outcome: status (passed, mismatch, nonfinite, compile_error, \
pipeline_error, timeout, ...), naga's error with line and column, counts of wrong, \
never-written and NaN cells, the first wrong cells with expected and got values, and a map of \
wrong cells for small outputs. The learner sees that you ran it.

# Status meanings
mismatch: some cells differ from the reference. nonfinite: mostly NaN or infinity. \
compile_error: naga rejected the WGSL. pipeline_error: it compiled but its bindings do not \
match what the host binds. no_reference: it ran and there is nothing to compare with. \
"never written" cells still hold the sentinel: the kernel did not store to them."""

REMINDER = """<reminder>
Tutor rules: do not write the kernel or any line of it, even when asked. One question or one \
small task per reply. Ground your review in the run result above; call run_kernel if the \
current code has not run.
</reminder>"""

RUN_KERNEL_TOOL = {
    "name": "run_kernel",
    "description": (
        "Run the learner's kernel on the server under this lesson's harness, or with their "
        "host program when the version has one (wgpu, compared with a numpy reference) and "
        "return the outcome: status, naga's compile error with line and column, counts of "
        "wrong / never-written / NaN cells, the first wrong cells with expected and got "
        "values, and for a host program its trace. Runs the latest submitted version unless "
        "a version number is given."
    ),
    "input_schema": {
        "type": "object",
        "properties": {
            "version": {
                "type": "integer",
                "minimum": 1,
                "description": "The version number to run; the latest when left out.",
            }
        },
        "additionalProperties": False,
    },
    "cache_control": CACHE,
}
TOOLS = [RUN_KERNEL_TOOL]


def _list(items: list[str]) -> str:
    return "\n".join(f"- {item}" for item in items) or "- (none)"


def _harness_text(harness: dict[str, Any]) -> str:
    if not harness:
        return "No harness: submissions are only compiled and validated (status no_reference)."
    try:
        parsed = parse_harness(harness)
    except HarnessError as error:
        return f"(harness unreadable: {error})"
    lines = []
    for number, p in enumerate(parsed.passes, start=1):
        lines.append(
            f"Pass {number}: kernel {p.kernel}, entry point {p.entry_point}, "
            f"dispatchWorkgroups{p.dispatch}"
        )
        for b in p.bind:
            buf = parsed.buffer(b.buffer)
            fill = {"fresh": "starts zeroed, as a new WebGPU buffer"}.get(
                buf.fill, f"filled: {buf.fill}"
            )
            lines.append(
                f"  @group({b.group}) @binding({b.binding}) {buf.name}: {buf.usage} {buf.dtype} "
                f"shape {list(buf.shape)}, {fill}{', output' if buf.output else ''}"
            )
    if parsed.reference:
        lines.append(
            f"Reference: {parsed.reference.name}({', '.join(parsed.reference.args)}) → "
            f"{', '.join(parsed.reference.outputs)}; tolerance atol {parsed.tolerance.atol}, "
            f"rtol {parsed.tolerance.rtol}"
        )
    return "\n".join(lines)


def lesson_text(guided: GuidedSession) -> str:
    lesson = guided.lesson or {}
    if guided.is_free_form or not lesson:
        if harness := guided.kernel.harness:
            # A session continued from one without a lesson plan keeps that kernel's harness.
            return (
                "<lesson free-form>\nThere is no lesson plan: the learner carries on with "
                f"their kernel {guided.kernel.name}, run under this harness:\n"
                f"{_harness_text(harness)}\nAsk what they want to do next, then guide them "
                "as in a lesson.\n</lesson>"
            )
        return (
            "<lesson free-form>\nThis is a free-form session: the learner writes any WGSL compute "
            "kernel they choose, and a host program that defines its buffers, inputs, dispatch "
            "and readbacks. Nothing says what the outputs should be, so a run shows them "
            "without a verdict (status no_reference), unless the learner compares it with an "
            "earlier version of theirs. Ask what they want to build, then guide them as in a "
            "lesson.\n</lesson>"
        )
    kernel = lesson.get("kernel", {})
    steps = "\n".join(
        f"{i}. {s.get('goal', '')}" + (f"\n   Check: {s['check']}" if s.get("check") else "")
        for i, s in enumerate(lesson.get("steps") or [], start=1)
    )
    hints = "\n".join(f"{i}. {h}" for i, h in enumerate(lesson.get("hints") or [], start=1))
    return f"""<lesson slug="{lesson.get("slug", "")}">
# {lesson.get("title", "")}
{lesson.get("summary", "")}

## Objectives
{_list(lesson.get("objectives") or [])}

## Context
{lesson.get("context", "")}

## The kernel the learner writes: {kernel.get("name", "")}
{_harness_text(kernel.get("harness") or {})}

Starter code the learner was given (bindings declared, the rest is theirs):
```wgsl
{kernel.get("starter", "").rstrip()}
```

{_host_lesson_text(kernel)}
## Steps
{steps or "(none)"}

## Pitfalls to watch for
{_list(lesson.get("pitfalls") or [])}

## Hint ladder for this lesson (prose only)
{hints or "(none)"}
</lesson>"""


def _host_lesson_text(kernel: dict[str, Any]) -> str:
    """The host program the lesson asks for: its objectives and the scaffold given."""
    starter = kernel.get("host_starter") or ""
    if not starter.strip():
        return ""
    return f"""## The host program the learner writes (WebGPU JavaScript)
The learner's kernel is loaded by the program as kernel.wgsl. What they write:
{_list(kernel.get("host_objectives") or [])}

Host starter they were given (the scaffold; the TODOs are theirs):
```js
{starter.rstrip()}
```
"""


# The turns a continued session tells Claude about: the last ones before the point it
# continues from, each cut to a line.
EARLIER_TURNS = 60
EARLIER_TURN_CHARS = 300


def earlier_turns(origin: Turn) -> str:
    """The turns of a session up to this one, a line each, for a session continuing from
    it (GuidedSession.earlier_turns): who said what, and which kernel each submitted."""
    turns = origin.session.turns.filter(number__lte=origin.number)
    shown = list(turns.select_related("kernel_version__kernel").order_by("-number")[:EARLIER_TURNS])
    lines = []
    if len(shown) < origin.number:
        lines.append(f"(turns 1 to {shown[-1].number - 1} are left out)")
    for turn in reversed(shown):
        text = " ".join(turn.content.split())
        if len(text) > EARLIER_TURN_CHARS:
            text = text[:EARLIER_TURN_CHARS] + "…"
        line = f"#{turn.number} {turn.role}: {text}"
        if version := turn.kernel_version:
            line += f" [kernel {version.kernel.name} v{version.number}]"
        lines.append(line)
    body = "\n".join(lines)
    return (
        f'<earlier_session title="{origin.session.title}" continued_from_turn="{origin.number}">\n'
        "This session continues an earlier one from the turn below. The learner's kernel "
        "version 1 here is their kernel as it stood at that turn. What was said up to it, a "
        f"line per turn:\n{body}\n</earlier_session>"
    )


def system_blocks(guided: GuidedSession) -> list[dict[str, Any]]:
    lesson = lesson_text(guided)
    if guided.earlier_turns:
        # In the lesson's block: it is fixed for the session, and so is the cache prefix.
        lesson = f"{lesson}\n\n{guided.earlier_turns}"
    return [
        {"type": "text", "text": RULES, "cache_control": CACHE},
        {"type": "text", "text": lesson, "cache_control": CACHE},
    ]


# -- the conversation ------------------------------------------------------------------


def run_summary(turn: Turn) -> str:
    run = turn.meta.get("run") or {}
    if not run:
        return ""
    return f" It ran: {run.get('status', 'unknown')}. {run.get('message', '')}".rstrip()


def _block(turn: Turn) -> tuple[str, dict[str, Any]] | None:
    """The Messages-API block a stored turn stands for, or None for turns Claude never said."""
    meta = turn.meta
    if turn.role == Turn.Role.LEARNER:
        if turn.kernel_version and meta.get("kind") == "submission":
            compared = meta.get("compare_with")
            text = (
                f"[I submitted {turn.kernel_version.kernel.name} v{turn.kernel_version.number}"
                f"{' again' if meta.get('resubmit') else ''}"
                f"{f', compared with the outputs of v{compared}' if compared else ''}."
                f"{run_summary(turn)}]"
            )
            if note := meta.get("note"):
                text += f"\n\n{note}"
            return "user", {"type": "text", "text": text}
        return "user", {"type": "text", "text": turn.content}
    if turn.role == Turn.Role.TUTOR:
        if meta.get("kind") == "offline_notice" or meta.get("incomplete"):
            # The app's notice while Claude was unreachable, or a reply cut off: neither is
            # Claude's answer (Retry asks again for one).
            return None
        text = turn.content
        if meta.get("automatic") and meta.get("kind") != "welcome":
            text = f"(Automatic review by the offline reviewer.)\n\n{text}"
        return "assistant", {"type": "text", "text": text}
    if turn.role == Turn.Role.TOOL and meta.get("kind") == "tool_call":
        return "assistant", {
            "type": "tool_use",
            "id": meta["tool_use_id"],
            "name": meta.get("tool", "run_kernel"),
            "input": meta.get("input") or {},
        }
    if turn.role == Turn.Role.TOOL and meta.get("kind") == "tool_result":
        return "user", {
            "type": "tool_result",
            "tool_use_id": meta["tool_use_id"],
            "content": meta.get("result_text", ""),
            "is_error": bool(meta.get("is_error")),
        }
    return None


def _pair_tools(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Keep only tool calls answered by the next message, and results whose call is in the
    message before: a reply cut off between the two must not make the history invalid."""
    for index, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        following = messages[index + 1] if index + 1 < len(messages) else None
        answered = {
            b["tool_use_id"]
            for b in (following or {}).get("content", [])
            if b["type"] == "tool_result"
        }
        message["content"] = [
            b for b in message["content"] if b["type"] != "tool_use" or b["id"] in answered
        ]
    for index, message in enumerate(messages):
        if message["role"] != "user":
            continue
        previous = messages[index - 1] if index > 0 else None
        asked = {b["id"] for b in (previous or {}).get("content", []) if b["type"] == "tool_use"}
        kept = []
        for b in message["content"]:
            if b["type"] == "tool_result" and b["tool_use_id"] not in asked:
                continue
            kept.append(b)
        # tool_result blocks must open the message.
        kept.sort(key=lambda b: b["type"] != "tool_result")
        message["content"] = kept
    return [m for m in messages if m["content"]]


def conversation(guided: GuidedSession) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    turns = guided.session.turns.select_related("kernel_version__kernel").order_by("number")
    for turn in turns:
        found = _block(turn)
        if found is None:
            continue
        role, block = found
        if block["type"] == "text" and not block["text"].strip():
            continue
        if messages and messages[-1]["role"] == role:
            messages[-1]["content"].append(block)
        else:
            messages.append({"role": role, "content": [block]})
    messages = _pair_tools(messages)
    # Merging may be needed again after dropping unanswered calls.
    merged: list[dict[str, Any]] = []
    for message in messages:
        if merged and merged[-1]["role"] == message["role"]:
            merged[-1]["content"].extend(message["content"])
        else:
            merged.append(message)
    # The conversation opens with the app's welcome; the API wants a user message first,
    # so what the learner was shown goes into that message as context.
    opening = []
    while merged and merged[0]["role"] != "user":
        opening += [b["text"] for b in merged.pop(0)["content"] if b["type"] == "text"]
    if opening and merged:
        shown = "\n\n".join(opening)
        merged[0]["content"].insert(
            0, {"type": "text", "text": f"<opening shown_to_learner>\n{shown}\n</opening>"}
        )
    return merged


# -- the learner's state, every turn ------------------------------------------------------


def numbered(source: str) -> str:
    lines = source.splitlines() or [""]
    width = len(str(len(lines)))
    return "\n".join(f"{n:>{width}} | {line}" for n, line in enumerate(lines, start=1))


def _diff_text(version: KernelVersion) -> str:
    """<diff>: each half's changes from the previous version."""
    previous = version.previous()
    if previous is None:
        return f'<diff to="{version.number}">first version</diff>'
    diff = version.diff_from(previous)
    if previous.host_program != version.host_program:
        host = text_diff(
            previous.host_program,
            version.host_program,
            f"v{previous.number} host",
            f"v{version.number} host",
        )
        diff = f"{diff}{host}"
    return (
        f'<diff from="{previous.number}" to="{version.number}">\n'
        f"{diff.rstrip() or 'no changes'}\n</diff>"
    )


def run_text(outcome: Outcome) -> str:
    """A run's facts for Claude; a host program's trace with them."""
    facts = outcome_for_model(outcome)
    if host_review.program(outcome):
        facts += f"\n<trace>\n{host_review.trace_text(outcome)}\n</trace>"
    return facts


def state_text(guided: GuidedSession, notes: Sequence[str] = ()) -> str:
    """<kernel>, <diff>, <run_result>, notes and the reminder: the last user message's tail."""
    name = guided.kernel.name
    version = guided.latest_version()
    parts = []
    if version is None:
        parts.append(
            f'<kernel name="{name}" version="starter" submitted="no">\n'
            f"{numbered(guided.starter)}\n</kernel>"
        )
        parts.append("<diff>nothing submitted yet</diff>")
        parts.append("<run_result>nothing submitted yet</run_result>")
    else:
        parts.append(
            f'<kernel name="{name}" version="{version.number}">\n'
            f"{numbered(version.source)}\n</kernel>"
        )
        if version.host_program:
            parts.append(
                f'<host_program version="{version.number}">\n'
                f"{numbered(version.host_program)}\n</host_program>"
            )
        parts.append(_diff_text(version))
        outcome = guided.replay(version).outcome
        if outcome is None:
            parts.append(f'<run_result version="{version.number}">not run yet</run_result>')
        else:
            parts.append(
                f'<run_result version="{version.number}">\n{run_text(outcome)}\n</run_result>'
            )
        if told := progress.for_model(guided, version, outcome):
            parts.append(told)
    parts.extend(notes)
    parts.append(REMINDER)
    return "\n\n".join(parts)


def request(
    guided: GuidedSession, notes: Sequence[str] = (), final_round: bool = False
) -> dict[str, Any]:
    """Keyword arguments for messages.create / messages.stream."""
    messages = conversation(guided)
    state = {"type": "text", "text": state_text(guided, notes)}
    if messages and messages[-1]["role"] == "user":
        messages[-1]["content"].append(state)
    else:
        messages.append({"role": "user", "content": [state]})
    params = {
        "model": settings.TUTOR_MODEL,
        "max_tokens": settings.TUTOR_MAX_TOKENS,
        "system": system_blocks(guided),
        "tools": TOOLS,
        "messages": messages,
    }
    if final_round:
        # Out of tool rounds: it must answer with what it has.
        params["tool_choice"] = {"type": "none"}
    return params
