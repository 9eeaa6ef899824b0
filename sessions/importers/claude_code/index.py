"""Pass 1: read every line of a transcript once and keep a compact index.

Only the lines that take part in the conversation graph are indexed: their offset,
length, kind, and 64-bit hashes of uuid, parentUuid and message.id (about 60 bytes a
line, in arrays, not objects), plus which line holds each tool call and each tool
result, and the title candidates. Memory stays flat however long the transcript is.
"""

from __future__ import annotations

import json
from array import array
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import numpy as np
import numpy.typing as npt

from sessions.importers.claude_code.lines import (
    ASSISTANT,
    BOOKKEEPING_TYPES,
    BOUNDARY,
    PROMPT,
    RESULT,
    RESULT_WITH_TEXT,
    SIDECHAIN,
    TITLE_TYPES,
    blocks_of,
    decode_line,
    dict_at,
    key_of,
    kind_of,
    prompt_text,
    str_or_none,
)
from sessions.importers.jsonl import iter_lines
from sessions.importers.redact import Scrubber

MB = 1024 * 1024
# Lines listed one by one in the report; the rest are only counted.
SKIPPED_LISTED = 50
# Keys looked up at a time (bounds the temporary arrays of a lookup).
FIND_SLICE = 1 << 16


@dataclass
class Stats:
    """What the import counted, for its report (pass 2 adds what it did not show)."""

    lines: int = 0
    skipped: list[tuple[int, str]] = field(default_factory=list)
    skipped_total: int = 0
    hidden: Counter[str] = field(default_factory=Counter)
    images: int = 0  # documents left out, each marked by a placeholder
    images_kept: int = 0
    images_refused: Counter[str] = field(default_factory=Counter)  # why → how many
    # Failed or rejected edits of files that would have made versions, by what they are.
    rejected_edits: Counter[str] = field(default_factory=Counter)
    # Joined files: the number of the first line of each, counted across all of them.
    part_lines: list[int] = field(default_factory=lambda: [1])

    def skip(self, number: int, why: str) -> None:
        self.skipped_total += 1
        if len(self.skipped) < SKIPPED_LISTED:
            self.skipped.append((number, why))


class Index:
    """What pass 1 keeps of each conversational line (arrays, not objects)."""

    def __init__(self) -> None:
        self.offsets = array("q")
        self.lengths = array("I")  # lines over the cap (16 MB) are never indexed
        self.kinds = array("B")
        self.flags = array("B")
        self.uuids = array("q")
        self.parents = array("q")
        self.messages = array("I")  # 32 bits of message.id: only compared within a file
        self.stamps = array("I")  # 32 bits of the timestamp: only compared between siblings
        self.agents: dict[int, int] = {}  # sidechain line → its agentId key (0: none)
        self.call_keys, self.call_lines = array("q"), array("q")
        self.result_keys, self.result_lines = array("q"), array("q")
        self.logical: dict[int, int] = {}  # compact boundary line → logicalParentUuid key
        self.session_codes = array("H")
        self.session_ids: dict[str, int] = {}
        # Lines without uuid that are shown (unknown types): (anchor line, number, offset, length).
        self.extras: list[tuple[int, int, int, int]] = []
        self.sidechain_prompts: dict[int, int] = {}  # hash of a sub-agent's first prompt → line
        self._prompted: set[int] = set()  # agents whose first prompt is in sidechain_prompts
        self.agent_calls: dict[int, int] = {}  # tool call id key → agentId key (sidecars)
        # Claude Code 2.1's agent_progress lines, by the key of the call they report on.
        self.agent_progress: dict[int, list[int]] = {}
        # Claude Code's turn_duration lines (2.1): how long each prompt took to answer, by
        # the prompt's line.
        self.turn_durations: dict[int, int] = {}
        self._prompt_line = -1
        self.custom_title = self.ai_title = ""
        self.summaries: list[tuple[int, str]] = []
        self.last_prompt: tuple[int, int] | None = None  # (leaf key, lines indexed before it)
        self.model = self.version = self.cwd = ""
        self.lone_agent_id = ""  # the first sub-agent line's agentId
        self.stats = Stats()

    def __len__(self) -> int:
        return len(self.kinds)

    def release_graph(self) -> None:
        """Drop what only planning needs; reading the chosen lines needs the rest."""
        for name in ("uuids", "parents", "messages", "stamps", "session_codes"):
            setattr(self, name, array(getattr(self, name).typecode))

    def add(self, line: dict[str, Any], number: int, offset: int, length: int) -> None:
        kind = line.get("type")
        uuid = str_or_none(line.get("uuid"))
        if uuid is None:
            self._add_without_uuid(line, kind, number, offset, length)
            return
        idx = len(self.kinds)
        code = kind_of(line, kind)
        message = dict_at(line, "message")
        flags = SIDECHAIN if line.get("isSidechain") is True else 0
        blocks = blocks_of(message) if kind in ("user", "assistant") else []
        for block in blocks:
            btype = block.get("type")
            if btype == "tool_use" and str_or_none(block.get("id")):
                self.call_keys.append(key_of(block["id"]))
                self.call_lines.append(idx)
            elif btype == "tool_result" and str_or_none(block.get("tool_use_id")):
                self.result_keys.append(key_of(block["tool_use_id"]))
                self.result_lines.append(idx)
            elif btype == "text" and code == RESULT:
                flags |= RESULT_WITH_TEXT
        if code == ASSISTANT:
            model = str_or_none(message.get("model"))
            if model and model != "<synthetic>":
                # A sub-agent's model only stands in when the file has no other.
                self.model = self.model or model if flags & SIDECHAIN else model
        if kind == "progress" and dict_at(line, "data").get("type") == "agent_progress":
            call = str_or_none(line.get("parentToolUseID"))
            if call:
                self.agent_progress.setdefault(key_of(call), []).append(idx)
        if code == PROMPT and not flags & SIDECHAIN:
            self._prompt_line = idx
        elif kind == "system" and line.get("subtype") == "turn_duration":
            duration = line.get("durationMs")
            if isinstance(duration, int) and self._prompt_line >= 0 and not flags & SIDECHAIN:
                self.turn_durations[self._prompt_line] = duration
        if code == BOUNDARY and str_or_none(line.get("logicalParentUuid")):
            self.logical[idx] = key_of(line["logicalParentUuid"])
        if flags & SIDECHAIN:
            agent = str_or_none(line.get("agentId"))
            self.agents[idx] = key_of(agent) if agent else 0
            self.lone_agent_id = self.lone_agent_id or agent or ""
            # Its first prompt (the call's, repeated): a root, or in newer versions the
            # first prompt of its agentId, whose parentUuid may name the call's line.
            first = agent is not None and key_of(agent) not in self._prompted
            if code == PROMPT and (line.get("parentUuid") is None or first):
                self.sidechain_prompts[key_of(prompt_text(blocks))] = idx
                if agent is not None:
                    self._prompted.add(key_of(agent))
            self.version = self.version or str_or_none(line.get("version")) or ""
            self.cwd = self.cwd or str_or_none(line.get("cwd")) or ""
        else:
            self.version = str_or_none(line.get("version")) or self.version
            self.cwd = self.cwd or str_or_none(line.get("cwd")) or ""
        session_id = str_or_none(line.get("sessionId")) or ""
        code_of_session = self.session_ids.setdefault(session_id, len(self.session_ids))
        parent = str_or_none(line.get("parentUuid"))
        message_id = str_or_none(message.get("id"))
        stamp = str_or_none(line.get("timestamp"))
        self.offsets.append(offset)
        self.lengths.append(length)
        self.kinds.append(code)
        self.flags.append(flags)
        self.uuids.append(key_of(uuid))
        self.parents.append(key_of(parent) if parent else 0)
        self.messages.append((key_of(message_id) & 0xFFFFFFFF) if message_id else 0)
        self.stamps.append((key_of(stamp) & 0xFFFFFFFF) if stamp else 0)
        self.session_codes.append(min(code_of_session, 65535))

    def _add_without_uuid(
        self, line: dict[str, Any], kind: Any, number: int, offset: int, length: int
    ) -> None:
        if kind == "custom-title" and str_or_none(line.get("customTitle")):
            self.custom_title = line["customTitle"]
        elif kind == "ai-title" and str_or_none(line.get("aiTitle")):
            self.ai_title = line["aiTitle"]
        elif kind == "summary" and str_or_none(line.get("summary")):
            if len(self.summaries) < 100:
                leaf = str_or_none(line.get("leafUuid"))
                self.summaries.append((key_of(leaf) if leaf else 0, line["summary"]))
        elif kind == "last-prompt" and str_or_none(line.get("leafUuid")):
            self.last_prompt = (key_of(line["leafUuid"]), len(self.kinds))
        elif kind in TITLE_TYPES or kind in BOOKKEEPING_TYPES:
            self.stats.hidden["bookkeeping"] += 1
        else:
            # Unknown and without uuid: shown raw after the line it followed in the file.
            self.extras.append((len(self.kinds) - 1, number, offset, length))


def index_transcript(stream: BinaryIO, max_line: int, scrubber: Scrubber | None = None) -> Index:
    """Pass 1: read every line once; keep the index and the title candidates, and let
    the scrubber learn the secrets the session assigns (so pass 2 redacts them
    everywhere, before their assignment too)."""
    index = Index()
    stats = index.stats
    starts: list[int] = getattr(stream, "starts", [0])  # joined files (jsonl.JoinedFiles)
    for line in iter_lines(stream, max_line):
        stats.lines += 1
        while len(stats.part_lines) < len(starts) and line.offset >= starts[len(stats.part_lines)]:
            stats.part_lines.append(line.number)
        if line.data is None:
            stats.skip(
                line.number,
                f"{line.length:,} bytes, over the {max_line / MB:g} MB line limit",
            )
            continue
        if not line.data.strip():
            continue
        try:
            raw = decode_line(line.data, line.offset)
            parsed = json.loads(raw)
        except json.JSONDecodeError as error:
            if not line.ended:
                stats.skip(line.number, "truncated: the file ends in the middle of this line")
            else:
                stats.skip(line.number, f"not valid JSON ({error.msg} at column {error.colno})")
            continue
        except RecursionError:
            stats.skip(line.number, "JSON nested too deeply")
            continue
        if not isinstance(parsed, dict):
            stats.skip(line.number, f"valid JSON but not an object ({type(parsed).__name__})")
            continue
        if scrubber is not None:
            scrubber.learn_line(raw, parsed)
        index.add(parsed, line.number, line.offset, line.length)
    return index


class Lookup:
    """Sorted keys → line indices; the first occurrence in the file wins.

    `lines` must be in file order (as the index appends them); None means the keys'
    own positions. A stable sort keeps file order among equal keys.
    """

    def __init__(self, keys: np.ndarray, lines: np.ndarray | None = None) -> None:
        order = np.argsort(keys, kind="stable")
        keys = keys[order]
        lines = order if lines is None else lines[order]
        first = np.ones(len(keys), dtype=bool)
        first[1:] = keys[1:] != keys[:-1]
        if first.all():  # the usual case: no copies needed
            self.keys, self.lines = keys, lines
        else:
            self.keys, self.lines = keys[first], lines[first]

    def find(self, keys: np.ndarray) -> np.ndarray:
        """The line of each key (-1 where unknown), in slices to bound the temporaries."""
        found = np.full(len(keys), -1, dtype=np.int64)
        if not len(self.keys):
            return found
        for start in range(0, len(keys), FIND_SLICE):
            part = keys[start : start + FIND_SLICE]
            pos = np.minimum(np.searchsorted(self.keys, part), len(self.keys) - 1)
            hit = (self.keys[pos] == part) & (part != 0)
            found[start : start + FIND_SLICE][hit] = self.lines[pos[hit]]
        return found

    def one(self, key: int) -> int:
        return int(self.find(np.array([key], dtype=np.int64))[0])


def as_numpy(values: array[int], dtype: npt.DTypeLike = np.int64) -> np.ndarray:
    return np.frombuffer(values, dtype=dtype) if len(values) else np.zeros(0, dtype=dtype)
