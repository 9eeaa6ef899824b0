"""A sub-agent's conversation, as turns nested under the call that started it.

Where it comes from, in order of preference:

- its own lines: a joined `subagents/agent-<id>.jsonl` (layout.py), an older
  `agent-<id>.jsonl`, or sidechain lines inside the main file (Claude Code 1.0). The
  call names the agent in its result (toolUseResult.agentId, or an "agentId: …" tail),
  or the agent's sidecar names the call, or the agent's first prompt is the call's;
- `progress` lines of type agent_progress in the main file (Claude Code 2.1), each
  holding one of the sub-agent's messages, under the call's id (parentToolUseID).

Every message is shown, through the same responses and tool calls as the main line,
each turn folded and marked with the agent and its depth (TurnMaker.nested).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from sessions.importers.claude_code.index import Index
from sessions.importers.claude_code.lines import (
    ASSISTANT,
    PROMPT,
    RESULT,
    blocks_of,
    dict_at,
    human_words,
    key_of,
    kind_of,
    str_or_none,
    timestamp_of,
)
from sessions.importers.claude_code.plan import Plan
from sessions.importers.claude_code.responses import Responses
from sessions.importers.claude_code.source import LineSource, ToolResult
from sessions.importers.claude_code.turns import TurnMaker
from sessions.importers.specs import Item
from sessions.models import Turn

if TYPE_CHECKING:
    from sessions.importers.claude_code.tools import ToolCalls

_AGENT_ID_TAIL = "agentId:"
COMPACTION_AGENT = "acompact"
WARMUP = "Warmup"


class Subagents:
    def __init__(
        self, source: LineSource, turns: TurnMaker, tools: ToolCalls, index: Index, plan: Plan
    ) -> None:
        self.source = source
        self.turns = turns
        self.tools = tools
        self.index = index
        self.plan = plan
        self.linked: set[int] = set()  # agents (by key) shown under their calls
        # Calls whose conversation was rebuilt from progress lines: a call that appears
        # again (a duplicated id, or one inside its own progress) is shown once, not
        # nested in itself until the recursion limit.
        self.rebuilt: set[str] = set()
        self.from_progress = 0  # conversations rebuilt from progress lines

    def conversation(
        self, tool_id: str, params: Any, found: ToolResult | None, text: str
    ) -> list[Item]:
        """The turns of the sub-agent this call started, nested; [] when none is known."""
        prompt = str(params.get("prompt", "")) if isinstance(params, dict) else ""
        key = self._agent_key(tool_id, prompt, found, text)
        if key and key not in self.linked:
            self.linked.add(key)
            lines = self.plan.sidechains[key]
            agent = str(self.source.load(lines[0]).get("agentId") or key)
            messages = ((self.index.kinds[i], self.source.load(i)) for i in lines)
            with self.turns.nested(agent, tool_id):
                return self._turns(messages, prompt)
        progress = self.index.agent_progress.get(key_of(tool_id), []) if tool_id else []
        if not progress or tool_id in self.rebuilt:
            return []
        self.rebuilt.add(tool_id)
        self.from_progress += 1
        held = [dict_at(dict_at(self.source.load(i), "data"), "message") for i in progress]
        kept = [(kind_of(m, m.get("type")), m) for m in held if m]
        with self.turns.nested(tool_id, tool_id), self.tools.results_from(_results(kept)):
            return self._turns(kept, prompt)

    def _agent_key(self, tool_id: str, prompt: str, found: ToolResult | None, text: str) -> int:
        """Which of the plan's sub-agents the call started (0: none of them)."""
        sidechains = self.plan.sidechains
        candidates = [self.index.agent_calls.get(key_of(tool_id), 0) if tool_id else 0]
        detail = found.detail if found else None
        if isinstance(detail, dict) and str_or_none(detail.get("agentId")):
            candidates.append(key_of(detail["agentId"]))
        if (at := text.rfind(_AGENT_ID_TAIL)) >= 0:
            words = text[at + len(_AGENT_ID_TAIL) :].split()
            candidates.append(key_of(words[0]) if words else 0)
        root = self.index.sidechain_prompts.get(key_of(prompt.strip())) if prompt else None
        if root is not None:
            candidates += [k for k, lines in sidechains.items() if lines and lines[0] == root]
        return next((k for k in candidates if k and k in sidechains), 0)

    def _turns(self, messages: Iterable[tuple[int, dict[str, Any]]], prompt: str) -> list[Item]:
        items: list[Item] = []
        responses = Responses(self.turns, self.tools, self.index.stats)
        for kind, line in messages:
            if kind == ASSISTANT:
                items += responses.add(line)
            elif kind == PROMPT:
                items += responses.close()
                words = human_words(blocks_of(line.get("message")))
                if words.strip() == prompt.strip():
                    continue  # the call's own prompt, shown in the call
                meta = {"kind": "agent_prompt", "source_id": f"agent:{line.get('uuid', '')}"}
                when = timestamp_of(line.get("timestamp"))
                items.append(self.turns.turn(Turn.Role.TUTOR, words, when, meta))
            elif kind != RESULT:
                items += responses.close()  # harness and system lines: not shown here
        items += responses.close()
        return items

    def unlinked(self) -> Iterator[Item]:
        """Sub-agents whose call is not shown: a note each, their conversation under it."""
        for key, lines in self.plan.sidechains.items():
            if key in self.linked:
                continue
            first = self.source.load(lines[0])
            agent = str(first.get("agentId") or first.get("uuid", ""))
            # Claude Code's own compaction agent wrote the summary shown at the
            # compaction, and its "Warmup" calls prime the cache before the first
            # prompt: housekeeping, kept hidden.
            warmup = human_words(blocks_of(first.get("message"))).strip() == WARMUP
            housekeeping = agent.startswith(COMPACTION_AGENT) or warmup
            yield self.turns.note(
                f"A sub-agent's conversation ({len(lines)} lines) whose call is not among the "
                "turns shown (not in this file, in an abandoned attempt, or lost to a "
                "compaction); it follows.",
                first,
                "subagent",
                f"Sub-agent {agent}, not linked to a call: {len(lines)} lines",
                f"agent:{agent}",
                hidden=housekeeping,
            )
            messages = ((self.index.kinds[i], self.source.load(i)) for i in lines)
            with self.turns.nested(agent, "", hidden=housekeeping):
                yield from self._turns(messages, "")


def _results(messages: list[tuple[int, dict[str, Any]]]) -> dict[str, ToolResult]:
    """The tool results among a sub-agent's messages, by the id of their call."""
    found = {}
    for kind, line in messages:
        if kind != RESULT:
            continue
        blocks = [b for b in blocks_of(line.get("message")) if b.get("type") == "tool_result"]
        for block in blocks:
            if str_or_none(block.get("tool_use_id")):
                found[block["tool_use_id"]] = ToolResult(
                    block=block,
                    detail=line.get("toolUseResult") if len(blocks) == 1 else None,
                    uuid=str(line.get("uuid", "")),
                    timestamp=line.get("timestamp"),
                )
    return found
