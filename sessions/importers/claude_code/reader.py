"""Pass 2: the lines the plan chose, read by offset, as turns and kernel versions.

`TranscriptReader.items()` walks the main line with the side lines merged in after it,
notes abandoned and detached branches, and yields the turns and kernel versions for the
writer, which inserts them in batches. Human lines (prompts, slash commands, notes) are
made here; assistant responses in `responses`, tool calls in `tools`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, BinaryIO

import numpy as np

from sessions import ansi
from sessions.importers.claude_code import pictures
from sessions.importers.claude_code.index import Index, as_numpy
from sessions.importers.claude_code.kernels import KernelHistory
from sessions.importers.claude_code.lines import (
    ASSISTANT,
    BOUNDARY,
    COMPACT_SUMMARY,
    HARNESS,
    HIDDEN,
    PROMPT,
    REMINDER,
    RESULT,
    STEERING,
    SYSTEM,
    blocks_of,
    dict_at,
    human_words,
    is_harness_text,
    key_of,
    prompt_text,
    slash_command,
    str_or_none,
    tag_text,
    texts_of,
    timestamp_of,
    typed_command,
)
from sessions.importers.claude_code.plan import Branch, Plan
from sessions.importers.claude_code.responses import Responses
from sessions.importers.claude_code.source import LineSource
from sessions.importers.claude_code.subagents import Subagents
from sessions.importers.claude_code.tools import RESULT_MAX_CHARS, ToolCalls, result_text
from sessions.importers.claude_code.turns import TurnMaker, code, raw_json, short
from sessions.importers.redact import Scrubber
from sessions.importers.specs import Item, TurnSpec
from sessions.models import Turn


class TranscriptReader:
    """Pass 2: the chosen lines, read by offset, as turns and kernel versions."""

    def __init__(self, stream: BinaryIO, index: Index, plan: Plan, scrubber: Scrubber) -> None:
        self.index = index
        self.plan = plan
        self.stats = index.stats
        self.source = LineSource(stream, index, scrubber)
        self.history = KernelHistory(cwd=scrubber.text(index.cwd))
        self.turns = TurnMaker()
        self.tools = ToolCalls(self.source, self.turns, self.history, index, plan)
        self.subagents = Subagents(self.source, self.turns, self.tools, index, plan)
        self.tools.subagents = self.subagents
        self.responses = Responses(self.turns, self.tools, self.stats)
        # The lines shown, main line and merged side branches (one byte per line).
        self.shown = np.zeros(len(index), dtype=bool)
        self.shown[as_numpy(plan.main)] = True
        for lines in [*plan.after.values(), plan.tail]:
            self.shown[lines] = True
        self.shown_calls: set[int] | None = None

    def first_prompt(self) -> str | None:
        for i in self.plan.main:
            if self.index.kinds[i] == PROMPT:
                text = human_words(blocks_of(self.source.load(i).get("message")))
                return text or "(an image)"
        return None

    def items(self) -> Iterator[Item]:
        plan = self.plan
        extras: dict[int, list[tuple[int, int, int, int]]] = {}
        for extra in self.index.extras:
            anchor = extra[0] if extra[0] < 0 or self.shown[extra[0]] else len(self.index)
            extras.setdefault(anchor, []).append(extra)
        yield from self._extras(extras.pop(-1, []))
        # Lines written before the conversation began and not connected to it (a first
        # prompt left unanswered, then asked again) come first, where they were.
        start = plan.main[0] if plan.main else 0
        for branch in plan.detached:
            if branch.root < start:
                yield from self._before(branch)
        for i in plan.main:
            yield from self.line(i)
            for j in plan.after.get(i, ()):
                yield from self.line(j)
                if j in extras:
                    yield from self.responses.close()
                    yield from self._extras(extras.pop(j))
            for branch in plan.branches.get(i, ()):
                yield from self.responses.close()
                yield self._branch_note(branch, "abandoned")
            if i in extras:
                yield from self.responses.close()
                yield from self._extras(extras.pop(i))
        for i in plan.tail:
            yield from self.line(i)
        yield from self.responses.close()
        for anchor in sorted(extras):
            yield from self._extras(extras[anchor])
        for branch in plan.detached:
            if branch.root >= start:
                yield self._branch_note(branch, "detached")
        yield from self.subagents.unlinked()

    def _extras(self, extras: list[tuple[int, int, int, int]]) -> Iterator[Item]:
        for _, number, offset, length in extras:
            value = self.source.read(offset, length)
            kind = value.get("type")
            what = (
                f"a {json.dumps(kind)} line without a usable uuid"
                if kind in ("user", "assistant", "system", "progress", "attachment")
                else f"a line of type {json.dumps(kind)} this importer does not know"
            )
            yield self.turns.raw(
                value,
                f"Line {number}: {what}, kept as recorded.",
                f"line:{number}",
                value.get("timestamp"),
            )

    def _before(self, branch: Branch) -> Iterator[Item]:
        """A branch that began before the conversation: an unanswered prompt is the
        learner's turn, as it was; anything else a note."""
        if branch.prompt >= 0 and branch.replies == 0:
            line = self.source.load(branch.prompt)
            for item in self._prompt(line):
                if isinstance(item, TurnSpec) and item.role == Turn.Role.LEARNER:
                    item.meta.update(kind="unanswered", context="not answered")
                yield item
        else:
            yield self._branch_note(branch, "detached")

    def _branch_note(self, branch: Branch, how: str) -> TurnSpec:
        root = self.source.load(branch.root)
        first = ""
        if branch.prompt >= 0:
            text = human_words(blocks_of(self.source.load(branch.prompt).get("message")))
            first = f" It began with:\n\n> {short(text, 500)}"
        size = f"{branch.lines} line{'s' if branch.lines != 1 else ''}"
        if how == "abandoned":
            summary = f"An abandoned attempt (rewound): {size}, not shown"
            content = (
                "The conversation was rewound here and taken up again. The abandoned attempt "
                f"({size}, {branch.replies} tutor line{'s' if branch.replies != 1 else ''}) "
                f"is not shown.{first}"
            )
        else:
            summary = f"Lines not connected to this conversation: {size}, not shown"
            content = f"These lines do not connect to the conversation shown ({size}).{first}"
        return self.turns.note(content, root, "branch", summary, f"branch:{root.get('uuid', '')}")

    def line(self, i: int) -> Iterator[Item]:
        """Line i of the index as turns (none for a line shown elsewhere or hidden)."""
        kind = self.index.kinds[i]
        if kind == RESULT and i not in self.plan.read_results:
            return  # its results are shown under their calls
        if kind == HIDDEN:
            self.stats.hidden["progress and hook"] += 1
            return
        line = self.source.load(i)
        if kind == ASSISTANT:
            yield from self.responses.add(line)
            return
        if kind == RESULT:
            yield from self._orphan_results(line)
            return
        yield from self.responses.close()
        if kind == PROMPT:
            yield from self._prompt(line, self.index.turn_durations.get(i))
        elif kind == STEERING:
            yield from self._steering(line)
        elif kind == HARNESS:
            yield from self._harness(line, blocks_of(line.get("message")))
        elif kind == COMPACT_SUMMARY:
            text = prompt_text(blocks_of(line.get("message"))) or texts_of(
                blocks_of(line.get("message"))
            )
            yield self.turns.note(
                text,
                line,
                "compact_summary",
                "Summary of the earlier conversation, written when it was compacted",
            )
        elif kind == BOUNDARY:
            meta = dict_at(line, "compactMetadata")
            details = [str(meta["trigger"])] if str_or_none(meta.get("trigger")) else []
            if isinstance(meta.get("preTokens"), int):
                details.append(f"{meta['preTokens']:,} tokens before")
            suffix = f" ({', '.join(details)})" if details else ""
            yield self.turns.note(f"*Conversation compacted{suffix}.*", line, "compact_boundary")
        elif kind == SYSTEM:
            yield from self._system(line)
        else:
            yield self.turns.raw(
                line,
                f"A line of type {json.dumps(line.get('type'))} this importer does not know, "
                "kept as recorded.",
                str(line.get("uuid", "")),
                line.get("timestamp"),
            )

    def _prompt(self, line: dict[str, Any], duration: int | None = None) -> Iterator[Item]:
        blocks = blocks_of(line.get("message"))
        words = prompt_text(blocks)
        meta: dict[str, Any] = {"uuid": str(line.get("uuid", "")), "typed": True}
        if duration is not None:
            meta["duration_ms"] = duration  # how long Claude Code took to answer it
        if command := typed_command(words):
            meta["command"] = command.split(None, 1)[0]
            words = command
        parts = [words] if words else []
        images = [block for block in blocks if block.get("type") == "image"]
        stored, refs, notes = pictures.keep(images, self.stats)
        if refs:
            meta["images"] = refs
        parts += notes
        for block in blocks:
            if block.get("type") == "document":
                self.stats.images += 1
                source = dict_at(block, "source")
                media = source.get("media_type", block["type"])
                parts.append(f"*[{block['type']}: {media}, not stored]*")
            elif block.get("type") not in ("text", "image", None):
                parts.append(f"*[a {block.get('type')} block, kept raw:]*\n\n{raw_json(block)}")
        text = "\n\n".join(parts)
        meta["source_id"] = meta["uuid"]
        role = Turn.Role.LEARNER
        if self.plan.lone_agent:
            # A sub-agent's prompt comes from the main agent, not from the learner.
            role, meta["kind"], meta["typed"] = Turn.Role.TUTOR, "agent_prompt", False
            text = f"*The main agent's request to this sub-agent:*\n\n{text}"
        turn = self.turns.turn(
            role, text or "*(an image)*", timestamp_of(line.get("timestamp")), meta
        )
        versions = self.history.learner_text(text, {"uuid": meta["uuid"]})
        yield from stored
        yield from self.turns.with_versions(turn, versions)

    def _steering(self, line: dict[str, Any]) -> Iterator[Item]:
        attachment = line.get("attachment") or {}
        text = next(
            (
                attachment[k]
                for k in ("prompt", "content", "text")
                if str_or_none(attachment.get(k))
            ),
            "",
        )
        if not text:
            self.stats.hidden["harness"] += 1
            return
        uuid = str(line.get("uuid", ""))
        yield self.turns.turn(
            Turn.Role.LEARNER,
            text,
            timestamp_of(line.get("timestamp")),
            {"kind": "steering", "uuid": uuid, "source_id": uuid, "typed": True},
        )

    def _harness(
        self, line: dict[str, Any], blocks: list[dict[str, Any]], text: str | None = None
    ) -> Iterator[Item]:
        """Slash commands, their output, interrupts, notifications: system notes or nothing."""
        if line.get("isMeta"):
            self.stats.hidden["harness"] += 1
            return
        text = REMINDER.sub("", texts_of(blocks) if text is None else text).strip()
        if command := slash_command(text):
            yield self.turns.note(f"Ran `{' '.join(command).strip()}`", line, "command")
        elif (output := _output(text, "local-command")) is not None:
            if output:
                yield self.turns.note(code(output), line, "command_output", "Command output")
            else:
                self.stats.hidden["harness"] += 1
        elif (shell := tag_text(text, "bash-input")) is not None:
            yield self.turns.note(
                f"Ran in the shell:\n\n{code(shell.strip(), 'bash')}", line, "command"
            )
        elif (output := _output(text, "bash")) is not None:
            if output:
                yield self.turns.note(code(output), line, "command_output", "Shell output")
            else:
                self.stats.hidden["harness"] += 1
        elif text.startswith("[Request interrupted by user"):
            yield self.turns.note("*Interrupted by the user.*", line, "interrupt")
        elif text.startswith("<task-notification>"):
            summary = tag_text(text, "summary")
            yield self.turns.note(
                code(text),
                line,
                "notification",
                short(summary) if summary else "A background task finished",
            )
        elif text.startswith("Stop hook feedback:"):
            yield self.turns.note(code(text), line, "hook", "Stop hook feedback")
        else:
            self.stats.hidden["harness"] += 1  # caveats, IDE context, memory input

    def _system(self, line: dict[str, Any]) -> Iterator[Item]:
        subtype = line.get("subtype")
        content = line.get("content")
        if subtype == "local_command" and isinstance(content, str):
            yield from self._harness(line, [], content)
        elif subtype == "api_error":
            detail = str_or_none(content) or "The API returned an error; Claude Code retried."
            yield self.turns.note(f"*{detail}*", line, "api_error")
        elif isinstance(content, str) and content.strip():
            # Hook and harness messages are terminal text: lines and colours kept.
            text = (
                code(content) if "\n" in content.strip() or ansi.has_escapes(content) else content
            )
            yield self.turns.note(text, line, f"system_{subtype}" if subtype else "system")
        else:
            yield self.turns.raw(
                line,
                f"A system line ({subtype or 'no subtype'}) kept as recorded.",
                str(line.get("uuid", "")),
                line.get("timestamp"),
            )

    def _orphan_results(self, line: dict[str, Any]) -> Iterator[Item]:
        """Results whose call is not shown (lost to compaction or a resume), and stray text."""
        blocks = blocks_of(line.get("message"))
        for k, block in enumerate(blocks):
            if block.get("type") == "tool_result":
                if self._call_shown(block.get("tool_use_id")):
                    continue
                text, images = result_text(block.get("content"))
                self.stats.images += len(images)
                yield from self.responses.close()
                yield self.turns.turn(
                    Turn.Role.TOOL,
                    "A tool result whose call is not in this transcript:\n\n"
                    + code(text[:RESULT_MAX_CHARS]),
                    timestamp_of(line.get("timestamp")),
                    {
                        "kind": "tool_result",
                        "summary": "Result of a call not in this transcript",
                        "is_error": bool(block.get("is_error")),
                        "source_id": f"{line.get('uuid', '')}:{k}",
                    },
                )
            elif block.get("type") == "text":
                yield from self.responses.close()
                text = prompt_text([block])
                if text and not is_harness_text(text):
                    uuid = str(line.get("uuid", ""))
                    meta = {
                        "kind": "steering",
                        "uuid": uuid,
                        "source_id": f"{uuid}:{k}",
                        "typed": True,
                    }
                    yield self.turns.turn(
                        Turn.Role.LEARNER, text, timestamp_of(line.get("timestamp")), meta
                    )
                else:
                    yield from self._harness(line, [block])

    def _call_shown(self, tool_use_id: Any) -> bool:
        if not str_or_none(tool_use_id):
            return False
        if self.shown_calls is None:
            # Built once, and only for transcripts that have results to check at all.
            keys, lines = as_numpy(self.index.call_keys), as_numpy(self.index.call_lines)
            self.shown_calls = set(keys[self.shown[lines]].tolist()) if len(lines) else set()
        return key_of(tool_use_id) in self.shown_calls

    def notes(self) -> list[str]:
        """What the report says about what was left out, merged or not linked."""
        notes = []
        hidden = self.stats.hidden
        labels = {
            "harness": "harness lines (isMeta, command caveats, reminders, IDE context)",
            "progress and hook": "progress and hook lines",
            "bookkeeping": "bookkeeping lines (titles, file-history snapshots, queue operations)",
            "empty thinking": "empty thinking blocks (thinking not recorded)",
        }
        if hidden:
            listed = ", ".join(
                f"{count:,} {labels.get(k, k)}" for k, count in sorted(hidden.items())
            )
            notes.append(f"Not shown: {listed}.")
        if self.plan.duplicates:
            notes.append(
                f"Resumed session: {self.plan.duplicates:,} repeated lines (uuids seen before) "
                "were merged into their first copy."
            )
        if self.plan.replays:
            notes.append(f"{self.plan.replays} compaction replays were skipped.")
        abandoned = sum(len(b) for b in self.plan.branches.values())
        if abandoned:
            notes.append(
                f"{abandoned} abandoned attempt{'s' if abandoned != 1 else ''} (rewinds) noted, "
                "not mixed in."
            )
        if self.plan.detached:
            notes.append(f"{len(self.plan.detached)} group(s) of unconnected lines noted.")
        if self.plan.sidechains or self.subagents.from_progress:
            linked = len(self.subagents.linked)
            rebuilt = self.subagents.from_progress
            notes.append(
                f"Sub-agents: {linked} transcript(s) nested in their calls, "
                f"{len(self.plan.sidechains) - linked} shown on their own"
                + (f", {rebuilt} rebuilt from progress lines." if rebuilt else ".")
            )
        if hidden := self.turns.hidden:
            reasons = {
                "raw": "lines of types this importer does not know",
                "subagent": "notes of Claude Code's own agents (compaction, warm-up)",
                "sub-agent": "turns of Claude Code's own agents (compaction, warm-up)",
            }
            listed = ", ".join(f"{n:,} {reasons.get(k, k)}" for k, n in sorted(hidden.items()))
            notes.append(
                f"Hidden (kept with their numbers, out of the reader's way): {listed}. "
                "A curator can show them in the admin."
            )
        if rejected := self.stats.rejected_edits:
            listed = ", ".join(f"{n} of {kind} files" for kind, n in sorted(rejected.items()))
            notes.append(f"Failed or rejected edits, which made no version: {listed}.")
        for path, why in self.history.unresolved[:10]:
            notes.append(f"No version from an edit of {path}: {why}.")
        if self.stats.images_kept:
            kept = self.stats.images_kept
            notes.append(f"Kept {kept} image(s), re-encoded, shown in their turns.")
        if refused := self.stats.images_refused:
            why = "; ".join(f"{n} {reason}" for reason, n in sorted(refused.items()))
            notes.append(f"Images not kept (a note in each turn says so): {why}.")
        if self.stats.images:
            notes.append(
                f"{self.stats.images} document(s) or image(s) of results whose call is not "
                "shown were not stored (a placeholder marks each)."
            )
        return notes


def _output(text: str, prefix: str) -> str | None:
    """A command's stdout and stderr (<prefix-stdout>…), stripped; None when neither is there."""
    parts = [tag_text(text, f"{prefix}-{stream}") for stream in ("stdout", "stderr")]
    if parts == [None, None]:
        return None
    return "\n".join(part.strip() for part in parts if part and part.strip())
