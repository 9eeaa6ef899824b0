"""Pass 2 reads the lines the plan chose back from the file, by the index's offsets."""

from __future__ import annotations

import json
from collections import Counter, OrderedDict
from dataclasses import dataclass
from typing import Any, BinaryIO

from sessions.importers.claude_code.index import Index, Lookup, as_numpy
from sessions.importers.claude_code.lines import blocks_of, decode_line, key_of, str_or_none
from sessions.importers.jsonl import read_at
from sessions.importers.redact import Scrubber

# How many recently read lines stay parsed.
CACHED_LINES = 8


@dataclass
class ToolResult:
    block: dict[str, Any]
    detail: Any  # the line's toolUseResult, when it belongs to this result alone
    uuid: str
    timestamp: Any = None  # the line's, as recorded


class LineSource:
    """Lines of the file parsed and scrubbed (a few recent ones cached), tool results by id."""

    def __init__(self, stream: BinaryIO, index: Index, scrubber: Scrubber) -> None:
        self.stream = stream
        self.index = index
        self.scrub = scrubber
        self.cache: OrderedDict[int, dict[str, Any]] = OrderedDict()
        self.counted = bytearray(len(index))
        self.results = Lookup(as_numpy(index.result_keys), as_numpy(index.result_lines))

    def load(self, i: int) -> dict[str, Any]:
        """Line i of the index, parsed and scrubbed."""
        if i in self.cache:
            self.cache.move_to_end(i)
            return self.cache[i]
        offset = self.index.offsets[i]
        data = read_at(self.stream, offset, self.index.lengths[i])
        # Redactions are counted once per line, however often the line is read.
        counts = Counter(self.scrub.counts) if self.counted[i] else None
        # Only JSON objects are indexed.
        line: dict[str, Any] = self.scrub.value(json.loads(decode_line(data, offset)))
        if counts is not None:
            self.scrub.counts = counts
        self.counted[i] = 1
        self.cache[i] = line
        if len(self.cache) > CACHED_LINES:
            self.cache.popitem(last=False)
        return line

    def read(self, offset: int, length: int) -> Any:
        """A line the index does not hold (no uuid), parsed and scrubbed; read once."""
        return self.scrub.value(
            json.loads(decode_line(read_at(self.stream, offset, length), offset))
        )

    def result(self, tool_use_id: Any) -> ToolResult | None:
        """The result of a tool call, from whichever line holds it."""
        if not str_or_none(tool_use_id):
            return None
        i = self.results.one(key_of(tool_use_id))
        if i < 0:
            return None
        line = self.load(i)
        blocks = [b for b in blocks_of(line.get("message")) if b.get("type") == "tool_result"]
        for block in blocks:
            if block.get("tool_use_id") == tool_use_id:
                detail = line.get("toolUseResult") if len(blocks) == 1 else None
                return ToolResult(
                    block=block,
                    detail=detail,
                    uuid=str(line.get("uuid", "")),
                    timestamp=line.get("timestamp"),
                )
        return None
