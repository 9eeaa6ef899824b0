"""The host program's side of a run in words: a compact trace for Claude, and the automatic
reviewer's reading of what the host program did wrong.

A program run's outcome carries what the program did (outcome["program"]: its trace of
buffers, writes, passes, dispatches, copies and readbacks, its console and the error that
stopped it, with the program line of each). Everything here reads that record, and quotes
the learner's host line where it points; like the kernel's review, it asks a question that
leads to the cause and never writes the fix. Each scan of text is one pass, with no
regular expression.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from kernels.engine.outcome import Outcome
from tutor.quoting import quote, source_line

# Entries of each trace list told to Claude; the rest are counted.
SHOWN = 12
CONSOLE_LINES = 10


def program(outcome: Outcome) -> Mapping[str, Any]:
    """The program part of a program run's outcome; {} for a harness run."""
    return outcome.get("program") or {}


def _line(value: object) -> str:
    return f" (line {value})" if value else ""


def _bytes(size: object) -> str:
    return f"{size:,} B" if isinstance(size, int) else "? B"


def _listed(items: list[Any], words: Callable[[Any], str]) -> list[str]:
    shown = [words(item) for item in items[:SHOWN]]
    if len(items) > SHOWN:
        shown.append(f"… {len(items) - SHOWN} more")
    return shown


def trace_text(outcome: Outcome) -> str:
    """What the host program did, a line per fact: for Claude's run result and context."""
    ran = program(outcome)
    trace = ran.get("trace") or {}
    lines = []
    lines += _listed(
        trace.get("buffers") or [],
        lambda b: (
            f"buffer {b['name']}: {_bytes(b['size'])}, usage "
            f"{'|'.join(b['usage']) or 'none'}{_line(b.get('line'))}"
        ),
    )
    lines += _listed(
        trace.get("writes") or [],
        lambda w: (
            f"write {_bytes(w['size'])} into {w['buffer']} at offset {w['offset']} "
            f"as {w['dtype']}{_line(w.get('line'))}"
        ),
    )
    bind_groups = {group["name"]: group for group in trace.get("bind_groups") or []}
    dispatches = [d for p in trace.get("passes") or [] for d in p.get("dispatches") or []]
    lines += _listed(dispatches, lambda d: _dispatch_text(d, bind_groups))
    if trace.get("passes") is not None and not dispatches:
        lines.append("no dispatch: no compute pass launched a workgroup")
    lines += _listed(
        trace.get("copies") or [],
        lambda c: (
            f"copy {_bytes(c['size'])} from {c['source']} to {c['destination']}"
            f"{_line(c.get('line'))}"
        ),
    )
    lines += _listed(
        trace.get("readbacks") or [],
        lambda r: (
            f"read back {r['buffer']}"
            + (f" (copied from {r['source']})" if r.get("source") else "")
            + f": {_bytes(r['size'])} as {r['dtype']}{_line(r.get('line'))}"
        ),
    )
    for entry in (ran.get("console") or [])[:CONSOLE_LINES]:
        lines.append(f"console.{entry['level']}{_line(entry.get('line'))}: {entry['text'][:200]}")
    if error := ran.get("error"):
        lines.append(f"stopped: {error['message'][:400]}")
    check: Mapping[str, Any] = outcome.get("check") or {}
    if check.get("against") == "reference":
        lines.append(f"readbacks checked against numpy's {check.get('name')}")
    elif check.get("against") == "program":
        lines.append("readbacks checked against another version's readbacks")
    elif check:
        lines.append("readbacks shown without a verdict: nothing says what they should be")
    if check.get("problem"):
        lines.append(f"no verdict because {check['problem']}")
    return "\n".join(lines)


def _dispatch_text(dispatch: dict[str, Any], bind_groups: dict[str, Any]) -> str:
    groups = dispatch.get("workgroups") or []
    bound = []
    for index, name in sorted((dispatch.get("bind_groups") or {}).items()):
        entries = (bind_groups.get(name) or {}).get("entries") or []
        bindings = ", ".join(f"{e['binding']}={e['buffer']}" for e in entries)
        bound.append(f"group {index}: {bindings}")
    return (
        f"dispatchWorkgroups({', '.join(str(g) for g in groups)}) with {dispatch['pipeline']}"
        + (f" ({'; '.join(bound)})" if bound else "")
        + _line(dispatch.get("line"))
    )


def first_dispatch(outcome: Outcome) -> tuple[str, int, int | None] | None:
    """The entry point, the workgroups and the line of a program's first dispatch."""
    trace = program(outcome).get("trace") or {}
    entry_points = {p["name"]: p["entry_point"] for p in trace.get("pipelines") or []}
    for traced in trace.get("passes") or []:
        for dispatch in traced.get("dispatches") or []:
            groups = math.prod(dispatch.get("workgroups") or [1])
            return entry_points.get(dispatch["pipeline"], ""), groups, dispatch.get("line")
    return None


def _quoted_buffer(message: str) -> str:
    """The buffer a wgpu message names: Buffer 'name'."""
    start = message.find("Buffer '")
    if start < 0:
        return ""
    end = message.find("'", start + 8)
    return message[start + 8 : end] if end > start else ""


# What a missing usage flag stops, by the call that needed it.
USAGE_QUESTIONS = {
    "MAP_READ": "Which buffer may the host map for reading, and which usages did you give "
    "the one this line maps?",
    "COPY_SRC": "A copy reads its source: which usage lets a buffer be copied from, and did "
    "the buffer you copy out of get it?",
    "COPY_DST": "Something writes into this buffer (queue.writeBuffer, or a copy): which "
    "usage allows that, and did the buffer get it when you created it?",
    "STORAGE": "The kernel reads or writes this buffer as var<storage>: which usage must a "
    "buffer have to be bound there?",
    "UNIFORM": "The kernel declares this binding var<uniform>: which usage must its buffer have?",
}


def error_review(outcome: Outcome, host: str) -> list[str]:
    """The review of a run the host program stopped (not a WGSL compile error); [] when
    the host program did not stop it."""
    error = program(outcome).get("error")
    if not error or error.get("kind") == "compile":
        return []
    line = error.get("line")
    where = f"at line {line}" if line else "before its end"
    message = error["message"].rstrip()
    if not message.endswith((".", "!", "?")):
        message += "."
    parts = [f"**Your host program stopped {where}:** {message}"]
    if quoted := quote(source_line(host, line)):
        parts[0] += f" Line {line} reads {quoted}."
    parts.append(_error_cause(error, outcome))
    return [part for part in parts if part]


def _error_cause(error: dict[str, Any], outcome: Outcome) -> str:
    message = error.get("message", "")
    if error.get("kind") == "webgpu":
        for flag, question in USAGE_QUESTIONS.items():
            if f"BufferUsages({flag})" in message:
                return _usage_cause(flag, question, message, outcome)
        return (
            "WebGPU refused this call, as a browser would: its message above names what "
            f"does not fit. What does `{error.get('call') or 'this call'}` expect that your "
            "program gives it differently?"
        )
    if "is not defined" in message:
        return (
            "The program uses a name that is not declared where it is used: a buffer or "
            "value the TODOs ask you to create, or a typo. Which line should declare it?"
        )
    if error.get("kind") == "timeout":
        return "Which loop in your host program never ends, or waits on something that never comes?"
    if error.get("kind") == "limit":
        return "How big does this really need to be for the lesson's data?"
    return ""


def _usage_cause(flag: str, question: str, message: str, outcome: Outcome) -> str:
    name = _quoted_buffer(message)
    trace = program(outcome).get("trace") or {}
    made = next((b for b in trace.get("buffers") or [] if b["name"] == name), None)
    text = f"The call needs a buffer with the {flag} usage."
    if made is not None:
        usage = " | ".join(made["usage"]) or "no usage"
        text += f" Buffer `{name}` was created{_line(made.get('line'))} with {usage}."
    return f"{text} {question}"


def dispatch_shortfall(outcome: Outcome, host: str, count: int, name: str) -> str:
    """Too few invocations for the cells of an output, told from the host's dispatch."""
    found = first_dispatch(outcome)
    size = _workgroup_size(outcome, found[0] if found else "")
    if found is None or size is None:
        return ""
    _, groups, line = found
    total = groups * size
    if total >= count:
        return ""
    quoted = quote(source_line(host, line))
    at = f"line {line}" + (f", {quoted}" if quoted else "") if line else "your host program"
    return (
        f" Your host program dispatches {groups} workgroup{'s' if groups != 1 else ''} "
        f"({at}) × @workgroup_size {size} = {total} invocations, for {count} cells of "
        f"`{name}`: the last {count - total} have no invocation. dispatchWorkgroups counts "
        f"workgroups: how many workgroups of {size} does it take to cover {count} elements, "
        "and what does the expression on that line give?"
    )


def _workgroup_size(outcome: Outcome, entry_point: str) -> int | None:
    facts = (outcome.get("analysis") or {}).get("self")
    for entry in facts["entry_points"] if facts else []:
        if entry["name"] == entry_point or not entry_point:
            return math.prod(entry["workgroup_size"]) if entry["workgroup_size"] else None
    return None


def never_dispatched(outcome: Outcome) -> str:
    """The review of a program that read back without a dispatch; "" otherwise."""
    trace = program(outcome).get("trace") or {}
    if not program(outcome) or first_dispatch(outcome) is not None or not trace.get("readbacks"):
        return ""
    return (
        "**Your host program never dispatched the kernel:** it read a buffer back, but no "
        "compute pass launched a workgroup, so nothing ran on the GPU. Which call of the "
        "compute pass launches workgroups, and how many does your data need?"
    )
