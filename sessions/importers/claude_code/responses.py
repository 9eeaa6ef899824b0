"""Assistant responses: streamed over several lines (one per content block) that share a
message.id, merged back into one response, and emitted as turns when it closes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sessions.importers.claude_code.index import Stats
from sessions.importers.claude_code.lines import (
    blocks_of,
    dict_at,
    str_or_none,
    texts_of,
    timestamp_of,
)
from sessions.importers.claude_code.tools import ToolCalls
from sessions.importers.claude_code.turns import TurnMaker, short
from sessions.importers.specs import Item, TurnSpec
from sessions.models import Turn


@dataclass
class Response:
    """One assistant response, merged from the lines that share its message.id."""

    message_id: str
    uuid: str
    timestamp: datetime | None
    blocks: list[dict[str, Any]] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)
    usage: Any = None
    model: str = ""
    stop_reason: Any = None
    lines: int = 0

    def add(self, line: dict[str, Any]) -> None:
        message = dict_at(line, "message")
        self.lines += 1
        for block in blocks_of(message):
            key = _block_key(block)
            if key is None or key not in self.seen:
                self.blocks.append(block)
                if key is not None:
                    self.seen.add(key)
        # The last line carries the response's final usage: never add lines up.
        if message.get("usage") is not None:
            self.usage = message["usage"]
        self.model = str_or_none(message.get("model")) or self.model
        if message.get("stop_reason") is not None:
            self.stop_reason = message["stop_reason"]


def _block_key(block: dict[str, Any]) -> str | None:
    kind = block.get("type")
    if kind == "tool_use":
        return f"tool_use:{block.get('id')}"
    if kind == "text":
        return f"text:{block.get('text')}"
    if kind == "thinking":
        return f"thinking:{block.get('thinking')}:{block.get('signature')}"
    return None


class Responses:
    """The open response, fed line by line; anything else shown closes it first."""

    def __init__(self, turns: TurnMaker, tools: ToolCalls, stats: Stats) -> None:
        self.turns = turns
        self.tools = tools
        self.stats = stats
        self.open: Response | None = None

    def add(self, line: dict[str, Any]) -> Iterator[Item]:
        """An assistant line: part of the open response, or the start of the next."""
        message = dict_at(line, "message")
        blocks = blocks_of(message)
        if line.get("isApiErrorMessage"):
            yield from self.close()
            text = f"*{short(texts_of(blocks) or 'API error', 2000)}*"
            yield self.turns.note(text, line, "api_error")
            return
        if (
            message.get("model") == "<synthetic>"
            and texts_of(blocks).strip() == "No response requested."
        ):
            self.stats.hidden["harness"] += 1
            return
        message_id = str_or_none(message.get("id")) or f"line:{line.get('uuid')}"
        if self.open is None or self.open.message_id != message_id:
            yield from self.close()
            self.open = Response(
                message_id=message_id,
                uuid=str(line.get("uuid", "")),
                timestamp=timestamp_of(line.get("timestamp")),
            )
        self.open.add(line)

    def close(self) -> Iterator[Item]:
        """Emit the open response: thinking, text, tool calls, in block order."""
        response, self.open = self.open, None
        if response is None:
            return
        items = self._items(response)
        # This response's own turns, not those of a sub-agent nested under one of its calls.
        depth = self.turns.nesting.get("depth", 0)
        turns = [i for i in items if isinstance(i, TurnSpec) and i.meta.get("depth", 0) == depth]
        if turns:
            tutor = next(
                (t for t in turns if t.role == Turn.Role.TUTOR and "kind" not in t.meta), turns[-1]
            )
            tutor.meta["model"] = response.model
            tutor.meta["message_id"] = response.message_id
            if response.usage is not None:
                tutor.meta["usage"] = response.usage
            if response.lines > 1:
                tutor.meta["lines"] = response.lines
        yield from items

    def _items(self, response: Response) -> list[Item]:
        """The response's blocks as turns: runs of text blocks make one tutor turn each."""
        items: list[Item] = []
        texts: list[str] = []

        def flush_text(index: int) -> None:
            if texts:
                meta = {
                    "message_id": response.message_id,
                    "source_id": f"{response.message_id}:{index}",
                }
                content = "\n\n".join(texts)
                items.append(self.turns.turn(Turn.Role.TUTOR, content, response.timestamp, meta))
                texts.clear()

        start = 0
        for k, block in enumerate(response.blocks):
            kind = block.get("type")
            if kind == "text":
                if not texts:
                    start = k
                texts.append(str(block.get("text", "")))
                continue
            flush_text(start)
            source_id = f"{response.message_id}:{k}"
            if kind in ("thinking", "redacted_thinking"):
                thought = str(block.get("thinking") or "").strip()
                if not thought:
                    # Newer versions do not record thinking: only its signature is left.
                    self.stats.hidden["empty thinking"] += 1
                    continue
                meta = {"kind": "thinking", "summary": short(thought, 90), "source_id": source_id}
                items.append(self.turns.turn(Turn.Role.TUTOR, thought, response.timestamp, meta))
            elif kind == "tool_use":
                items.extend(self.tools.call(block, response))
            else:
                items.append(
                    self.turns.raw(
                        block,
                        f"A content block of type {json.dumps(kind)} this importer does not "
                        "know, kept as recorded.",
                        source_id,
                        hidden=False,
                    )
                )
        flush_text(start)
        return items
