"""Tool calls as turns: the call, its result, the kernel versions it made, and the
transcript of a sub-agent it started."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from sessions.diffs import unified
from sessions.importers.claude_code import pictures
from sessions.importers.claude_code.decisions import (
    REJECTED,
    Answer,
    answers,
    answers_markdown,
    describe_questions,
    rejection_reason,
)
from sessions.importers.claude_code.index import Index
from sessions.importers.claude_code.kernels import (
    TRACKED_SUFFIXES,
    WGSL_SUFFIXES,
    KernelHistory,
    NewVersion,
    Outcome,
)
from sessions.importers.claude_code.lines import (
    REMINDER,
    str_or_none,
    timestamp_of,
)
from sessions.importers.claude_code.plan import Plan
from sessions.importers.claude_code.source import LineSource, ToolResult
from sessions.importers.claude_code.turns import TurnMaker, code, raw_json, short
from sessions.importers.specs import Item, TurnSpec
from sessions.markdown import fence_for
from sessions.models import Turn

if TYPE_CHECKING:
    from sessions.importers.claude_code.responses import Response
    from sessions.importers.claude_code.subagents import Subagents

# A tool result longer than this is cut in its turn (the call and its effect stay whole).
RESULT_MAX_CHARS = 20_000

_LEADING_BLANK = re.compile(r"\A\s*\n")
_TOOL_ERROR = re.compile(r"</?tool_use_error>")
_TICKS = re.compile(r"`+")
# The tail Claude Code adds to a sub-agent's report: "agentId: … <usage>…</usage>".
_USAGE_NUMBER = re.compile(r"duration_ms: ?([0-9]{1,12})")
_LANG_BY_SUFFIX = {
    "wgsl": "wgsl",
    "js": "js",
    "mjs": "js",
    "cjs": "js",
    "jsx": "js",
    "ts": "ts",
    "tsx": "ts",
    "mts": "ts",
    "html": "html",
    "htm": "html",
    "py": "python",
    "json": "json",
    "sh": "bash",
    "rs": "rust",
    "c": "c",
    "cpp": "cpp",
    "cu": "cuda",
}


def result_text(content: Any) -> tuple[str, list[dict[str, Any]]]:
    """A tool result's text, and the image blocks it held (shown under it)."""
    images: list[dict[str, Any]] = []
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        parts = []
        for item in content:
            if isinstance(item, str):
                parts.append(item)
            elif isinstance(item, dict) and item.get("type") == "text":
                parts.append(str(item.get("text", "")))
            elif isinstance(item, dict) and item.get("type") == "image":
                images.append(item)
            elif isinstance(item, dict) and item.get("type") == "tool_reference":
                parts.append(f"[tool: {item.get('tool_name')}]")
            else:
                parts.append(json.dumps(item, ensure_ascii=False))
        text = "\n".join(parts)
    elif content is None:
        text = ""
    else:
        text = json.dumps(content, ensure_ascii=False)
    # Blank lines go; the first line's indentation stays (cat -n numbers are padded).
    return _LEADING_BLANK.sub("", REMINDER.sub("", text)).rstrip(), images


def _file_kind(path: str) -> str:
    """What a tracked file is, in the report's words: a kernel only when it is WGSL; a
    script or a page by its suffix."""
    if path.lower().endswith(WGSL_SUFFIXES):
        return "kernel (.wgsl)"
    return "." + path.rsplit(".", 1)[-1].lower()


def lang_of(path: str) -> str:
    suffix = path.rsplit(".", 1)[-1].lower() if "." in path else ""
    return _LANG_BY_SUFFIX.get(suffix, "")


def edit_diffs(params: dict[str, Any], detail: Any) -> list[str]:
    """An Edit's or MultiEdit's change as unified diffs: Claude Code's own patch (with the
    file's line numbers and context) when the result has it, else old → new."""
    patch = detail.get("structuredPatch") if isinstance(detail, dict) else None
    hunks = [h for h in patch if isinstance(h, dict)] if isinstance(patch, list) else []
    if hunks:
        lines = []
        for hunk in hunks:
            where = [hunk.get(k) for k in ("oldStart", "oldLines", "newStart", "newLines")]
            lines.append("@@ -{},{} +{},{} @@".format(*where))
            lines += [str(x) for x in hunk.get("lines") or [] if isinstance(x, str)]
        return ["\n".join(lines)]
    many = params.get("edits")
    edits = many if isinstance(many, list) else [params]
    return [
        unified(str(e.get("old_string", "")), str(e.get("new_string", ""))) or "(no change)"
        for e in edits
        if isinstance(e, dict)
    ]


def describe(name: str, params: Any, target: str, detail: Any = None) -> str:
    """The call in Markdown: its name and target, and its input (a diff for an edit)."""
    head = f"**{name}**" + (f" `{target}`" if target and name not in ("Bash",) else "")
    if not isinstance(params, dict):
        return f"{head}\n\n{raw_json(params)}" if params is not None else head
    path = str(params.get("file_path", ""))
    if name == "Write" and isinstance(params.get("content"), str):
        return f"{head}\n\n{code(params['content'], lang_of(path))}"
    if name in ("Edit", "MultiEdit"):
        extra = " (all occurrences)" if params.get("replace_all") else ""
        return "\n\n".join([head + extra, *(code(d, "diff") for d in edit_diffs(params, detail))])
    if name == "Bash" and str_or_none(params.get("command")):
        description = (
            f" · {params['description']}" if str_or_none(params.get("description")) else ""
        )
        return f"{head}{description}\n\n{code(params['command'], 'bash')}"
    if name == "Read":
        span = ""
        if isinstance(params.get("offset"), int) or isinstance(params.get("limit"), int):
            span = f" (from line {params.get('offset', 1)}, {params.get('limit', 'all')} lines)"
        return head + span
    if name == "TodoWrite" and isinstance(params.get("todos"), list):
        marks: dict[Any, str] = {"completed": "x", "in_progress": "~"}
        todos = [
            f"- [{marks.get(t.get('status'), ' ')}] {t.get('content', '')}"
            for t in params["todos"]
            if isinstance(t, dict)
        ]
        return "\n".join([head, "", *todos])
    if name == "ExitPlanMode" and str_or_none(params.get("plan")):
        return f"{head}\n\n{params['plan']}"
    if name in ("Task", "Agent") and str_or_none(params.get("prompt")):
        quoted = "\n".join(f"> {x}" for x in params["prompt"][:4000].splitlines())
        rest = {k: v for k, v in params.items() if k not in ("prompt", "description")}
        return "\n\n".join([head, quoted, *([params_table(rest)] if rest else [])])
    if name == "PowerShell" and str_or_none(params.get("command")):
        rest = {k: v for k, v in params.items() if k != "command"}
        table = [params_table(rest)] if rest else []
        return "\n\n".join([head, code(params["command"]), *table])
    return f"{head}\n\n{params_table(params)}" if params else head


# A value longer than this, or on several lines, is shown in a block under the table.
CELL_MAX_CHARS = 200


def params_table(params: dict[str, Any]) -> str:
    """A call's parameters as a table (name, value) that wraps: short values in the
    table, long or multi-line ones and nested values each in a block of their own."""
    rows, blocks = [], []
    for key, value in params.items():
        name = str(key).replace("|", "\\|")
        if isinstance(value, str) and "\n" not in value and len(value) <= CELL_MAX_CHARS:
            cell = _cell(value) if value else "*(empty)*"
        elif isinstance(value, bool | int | float) or value is None:
            cell = _cell(json.dumps(value))
        elif isinstance(value, str):
            cell = "*(below)*"
            blocks.append(f"**{name}**\n\n{code(value)}")
        else:
            cell = "*(below)*"
            blocks.append(f"**{name}**\n\n{raw_json(value)}")
        rows.append(f"| `{name}` | {cell} |")
    table = "\n".join(["| Parameter | Value |", "| --- | --- |", *rows])
    return "\n\n".join([table, *blocks])


def _cell(value: str) -> str:
    """A value as a code span in a table cell (its pipes escaped, as tables need)."""
    ticks = "`" * (max((len(r) for r in _TICKS.findall(value)), default=0) + 1)
    pad = " " if value.startswith("`") or value.endswith("`") else ""
    return f"{ticks}{pad}{value.replace('|', chr(92) + '|')}{pad}{ticks}"


def _status(found: bool, rejected: bool, is_error: bool, text: str) -> str:
    if rejected:
        return " · rejected"
    if is_error:
        return " · error"
    if text.startswith("User has approved"):
        return " · approved"
    return "" if found else " · no result"


def _result_section(text: str, rejected: bool, is_error: bool, name: str, path: str) -> str:
    label = (
        "**Result** · rejected by the user"
        if rejected
        else "**Result** · error"
        if is_error
        else "**Result**"
    )
    shown = (
        text
        if len(text) <= RESULT_MAX_CHARS
        else (
            text[:RESULT_MAX_CHARS]
            + f"\n… ({len(text) - RESULT_MAX_CHARS:,} more characters not kept)"
        )
    )
    if not shown:
        return f"{label}\n\n*(no output)*"
    if name in ("Task", "Agent") and label == "**Result**":
        # A sub-agent's report is Markdown, written to be read as such.
        return f"**Report**\n\n{_report(shown)}"
    if name == "Read" and (numbered := _numbered_lines(shown)):
        start, body = numbered
        fence = fence_for(body)
        return f"{label}\n\n{fence}{lang_of(path) or 'text'} startline={start}\n{body}\n{fence}"
    return f"{label}\n\n{code(shown)}"


def _report(text: str) -> str:
    """A sub-agent's report without the tail Claude Code adds for the main agent."""
    at = text.rfind("\nagentId:")
    return text[:at].rstrip() if at >= 0 else text


def _numbered_lines(text: str) -> tuple[int, str] | None:
    """A file read as Claude Code shows it ("   12→code", or cat -n's tab): the first
    line's number and the lines without their numbers; None if it is not that."""
    start, lines = None, []
    for line in text.split("\n"):
        number, arrow, rest = line.partition("→")
        if not arrow:
            number, arrow, rest = line.partition("\t")
        number = number.strip()
        if not arrow or not number.isdigit() or len(number) > 7:
            return None
        start = int(number) if start is None else start
        lines.append(rest)
    return (start, "\n".join(lines)) if start is not None else None


def _agent_summary(
    params: Any, found: ToolResult | None, text: str, nested: list[Item]
) -> dict[str, Any]:
    """What the page says of a sub-agent on its folded conversation: its type, model,
    how many calls it made and turns it took, how long it ran, the tokens it used."""
    params = params if isinstance(params, dict) else {}
    detail = found.detail if found and isinstance(found.detail, dict) else {}
    turns = [i for i in nested if isinstance(i, TurnSpec)]
    model = str_or_none(params.get("model")) or next(
        (str(t.meta["model"]) for t in turns if str_or_none(t.meta.get("model"))), ""
    )
    duration = detail.get("totalDurationMs")
    if not isinstance(duration, int) and (usage := _USAGE_NUMBER.search(text[-2000:])):
        duration = int(usage[1])
    if not isinstance(duration, int):
        stamps = [t.timestamp for t in turns if t.timestamp is not None]
        duration = int((stamps[-1] - stamps[0]).total_seconds() * 1000) if stamps else None
    summary: dict[str, Any] = {
        "type": str(params.get("subagent_type") or ""),
        "model": model,
        "calls": sum(1 for t in turns if t.role == Turn.Role.TOOL),
        "turns": len(turns),
    }
    if isinstance(duration, int):
        summary["duration_ms"] = duration
    if isinstance(detail.get("totalTokens"), int):
        summary["tokens"] = detail["totalTokens"]
    return summary


class ToolCalls:
    """Each tool call becomes one tool turn, with its result and the versions it made."""

    def __init__(
        self,
        source: LineSource,
        turns: TurnMaker,
        history: KernelHistory,
        index: Index,
        plan: Plan,
    ) -> None:
        self.source = source
        self.turns = turns
        self.history = history
        self.index = index
        self.plan = plan
        self.stats = index.stats
        # Set by the reader: sub-agents' conversations, nested under their calls.
        self.subagents: Subagents | None = None
        # A sub-agent rebuilt from progress lines: its results, which the index lacks.
        self.local_results: dict[str, ToolResult] | None = None

    @contextmanager
    def results_from(self, results: dict[str, ToolResult]) -> Iterator[None]:
        outer, self.local_results = self.local_results, results
        try:
            yield
        finally:
            self.local_results = outer

    def _result(self, tool_id: str) -> ToolResult | None:
        if self.local_results is not None:
            return self.local_results.get(tool_id)
        return self.source.result(tool_id)

    def call(self, block: dict[str, Any], response: Response) -> list[Item]:
        name = str(block.get("name") or "tool")
        tool_id = str(block.get("id") or "")
        params = block.get("input")
        found = self._result(tool_id)
        text, image_blocks = result_text(found.block.get("content")) if found else ("", [])
        stored, image_refs, image_notes = pictures.keep(image_blocks, self.stats)
        is_error = bool(found and found.block.get("is_error"))
        if _TOOL_ERROR.search(text):
            is_error, text = True, _TOOL_ERROR.sub("", text).strip()
        rejected = REJECTED in text
        ok = found is not None and not is_error and not rejected
        target = self.target(name, params)
        meta: dict[str, Any] = {
            "kind": "tool_call",
            "tool": name,
            "tool_use_id": tool_id,
            "summary": f"{name} {target}".strip()
            + _status(found is not None, rejected, is_error, text),
            "is_error": is_error,
            "source_id": tool_id or f"{response.message_id}:{name}",
        }
        if rejected:
            meta["rejected"] = True
        detail = found.detail if found else None
        took = detail.get("durationMs") if isinstance(detail, dict) else None
        if isinstance(took, int):
            meta["duration_ms"] = took
        if found is None:
            meta["no_result"] = True
        if isinstance(params, dict) and str_or_none(params.get("file_path")):
            meta["file_path"] = params["file_path"]
        given = answers(params, found.detail, text) if found and name == "AskUserQuestion" else []
        parts = [describe(name, params, target, found.detail if found else None)]
        if name == "AskUserQuestion" and isinstance(params, dict):
            parts = [f"**{name}**\n\n{describe_questions(given, params)}"]
        versions: list[NewVersion] = []
        if found is None:
            parts.append("*No result was recorded for this call.*")
        elif text or not image_refs:
            path = str(params.get("file_path", "")) if isinstance(params, dict) else ""
            parts.append(_result_section(text, rejected, is_error, name, path))
        else:
            parts.append("**Result**")  # its images, shown under the turn
        parts += image_notes
        if image_refs:
            meta["images"] = image_refs
        detail = found.detail if found else None
        where: dict[str, Any] = {"tool_use_id": tool_id}
        if self.turns.nesting:
            where["subagent"] = True
        made = self.history.tool_call(name, params, Outcome(ok=ok, result=detail), where)
        path = str(params.get("file_path", "")) if isinstance(params, dict) else ""
        edit = name in ("Write", "Edit", "MultiEdit")
        if found and not ok and edit and path.lower().endswith(TRACKED_SUFFIXES):
            self.stats.rejected_edits[_file_kind(path)] += 1
        versions += made
        content = "\n\n".join(p for p in parts if p)
        turn = self.turns.turn(Turn.Role.TOOL, content, response.timestamp, meta)
        items: list[Item] = [
            *stored,
            *self.turns.with_versions(turn, versions, self.history.take_state()),
        ]
        if found is not None:
            items += self._decision(name, tool_id, found, text, given)
        if name in ("Task", "Agent") and self.subagents is not None:
            nested = self.subagents.conversation(tool_id, params, found, text)
            if nested:
                meta["subagent"] = True
                meta["agent"] = _agent_summary(params, found, text, nested)
                numbers = [i.number for i in nested if isinstance(i, TurnSpec)] or [0]
                meta["nested_range"] = [numbers[0], numbers[-1]]
                turn.content += (
                    f"\n\n*The sub-agent's conversation: turns {numbers[0]}–{numbers[-1]}, below.*"
                )
            items += nested
        return items

    def _decision(
        self, name: str, tool_id: str, found: ToolResult, text: str, given: list[Answer]
    ) -> list[TurnSpec]:
        """What the learner said inside the call's result, as the learner's own turn."""
        meta: dict[str, Any] = {"tool_use_id": tool_id}
        if given:
            asked = "questions" if len(given) > 1 else "question"
            meta.update(kind="answer", context=f"answered the {asked}")
            content = answers_markdown(given)
        elif reason := rejection_reason(text):
            meta.update(kind="rejection", context=f"rejected the {name} call", typed=True)
            content = reason
        else:
            return []
        meta["source_id"] = f"{tool_id}:{meta['kind']}"
        when = timestamp_of(found.timestamp)
        return [self.turns.turn(Turn.Role.LEARNER, content, when, meta)]

    def target(self, name: str, params: Any) -> str:
        """What the call works on, in a few words: a file, a command, a pattern."""
        if not isinstance(params, dict):
            return ""
        if str_or_none(params.get("file_path")):
            return self.history.title_for(params["file_path"])
        questions = params.get("questions")
        if isinstance(questions, list) and questions and isinstance(questions[0], dict):
            return short(str(questions[0].get("question", "")), 60)
        for key in ("command", "pattern", "url", "query", "description", "notebook_path", "prompt"):
            if str_or_none(params.get(key)):
                return short(params[key], 60)
        return ""
