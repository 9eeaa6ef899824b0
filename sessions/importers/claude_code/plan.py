"""Pass 1½: from the index, which lines to show, in which order, and what to note.

Walking back from the leaf (`last-prompt`'s leafUuid, or the last conversational line)
through parentUuid, across compactions through logicalParentUuid. Duplicate uuids from
a resumed session keep their first copy. Side branches that only continue the same
responses (parallel tool calls, hooks) are merged in; rewound attempts are noted, not
mixed in. Everything is done on the index's arrays, never on parsed lines.
"""

from __future__ import annotations

import itertools
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from sessions.importers.claude_code.index import Index, Lookup, Stats, as_numpy
from sessions.importers.claude_code.lines import (
    ASSISTANT,
    BOUNDARY,
    CONVERSATION,
    HARNESS,
    PROMPT,
    RESULT_WITH_TEXT,
    SIDECHAIN,
    STEERING,
    SYSTEM,
    UNKNOWN,
)
from sessions.importers.specs import ImportProblem

# Leaves tried when the last line's chain holds no human prompt.
MAX_LEAF_TRIES = 64


@dataclass
class Branch:
    root: int
    lines: int = 0
    prompt: int = -1  # first human prompt line in it
    replies: int = 0


@dataclass
class Plan:
    main: array[int]  # line indices of the conversation, in order
    after: dict[int, list[int]]  # side-branch lines merged in after a main line
    tail: list[int]  # displayable lines connected to nothing, shown at the end
    branches: dict[int, list[Branch]]  # abandoned attempts noted after a main line
    detached: list[Branch]
    read_results: set[int]  # tool-result lines that hold results for no shown call
    sidechains: dict[int, list[int]]  # sub-agent key → its lines, in file order
    session_id: str
    duplicates: int
    replays: int
    # A sub-agent's transcript imported on its own: its agentId ("" when it is not one).
    lone_agent: str = ""


@dataclass
class _Graph:
    """The index's lines as arrays, linked to their parents."""

    kinds: npt.NDArray[np.uint8]
    flags: npt.NDArray[np.uint8]
    side: npt.NDArray[np.bool_]  # sub-agent lines (sidechains)
    dup: npt.NDArray[np.bool_]  # later copies of a uuid (a resumed session)
    parent: npt.NDArray[np.int64]  # the line of each line's parent, -1 for none
    by_uuid: Lookup

    @property
    def trunk(self) -> npt.NDArray[np.bool_]:
        """Conversation lines that may be on the main line."""
        return np.isin(self.kinds, CONVERSATION) & ~self.dup & ~self.side

    @classmethod
    def of(cls, index: Index) -> _Graph:
        flags = as_numpy(index.flags, np.uint8)
        by_uuid = Lookup(as_numpy(index.uuids))
        dup = np.ones(len(index), dtype=bool)
        dup[by_uuid.lines] = False
        kinds = as_numpy(index.kinds, np.uint8)
        side = (flags & SIDECHAIN) != 0
        parent = by_uuid.find(as_numpy(index.parents))
        _file_order(parent, np.isin(kinds, CONVERSATION) & ~dup & ~side)
        return cls(kinds=kinds, flags=flags, side=side, dup=dup, parent=parent, by_uuid=by_uuid)


def _file_order(parent: npt.NDArray[np.int64], trunk: npt.NDArray[np.bool_]) -> None:
    """Transcripts written by hand or by other tools often leave parentUuid out: when no
    conversation line has a parent, each follows the one before it in the file."""
    lines = np.nonzero(trunk)[0]
    if len(lines) < 2 or (parent[lines] >= 0).any():
        return
    parent[lines[1:]] = lines[:-1]


@dataclass
class _SideLines:
    """What became of the lines off the main line."""

    after: dict[int, list[int]] = field(default_factory=dict)
    tail: list[int] = field(default_factory=list)
    branches: dict[int, list[Branch]] = field(default_factory=dict)
    detached: list[Branch] = field(default_factory=list)
    replays: int = 0


def plan_main_line(index: Index) -> Plan:
    if not len(index):
        raise _not_a_transcript(index.stats)
    graph = _Graph.of(index)
    lone_agent = _lone_agent(index, graph)
    main = _main_line(index, graph)
    on_main = np.zeros(len(index), dtype=bool)
    on_main[as_numpy(main)] = True
    side = _side_lines(index, graph, main, on_main)
    shown = on_main.copy()
    for lines in [*side.after.values(), side.tail]:
        shown[lines] = True
    session_names = {code: name for name, code in index.session_ids.items()}
    session_id = session_names.get(int(index.session_codes[main[0]]), "") if main else ""
    return Plan(
        main=main,
        after=side.after,
        tail=side.tail,
        branches=side.branches,
        detached=side.detached,
        read_results=_read_results(index, graph.flags, shown),
        sidechains=_sidechains(index, graph),
        session_id=session_id,
        duplicates=int(graph.dup.sum()),
        replays=side.replays,
        lone_agent=lone_agent,
    )


def _lone_agent(index: Index, graph: _Graph) -> str:
    """When every conversation line is a sub-agent's, the file is a sub-agent's transcript
    on its own: its lines are the conversation. Returns its agentId, or ""."""
    conversation = np.isin(graph.kinds, CONVERSATION)
    if not conversation.any() or (conversation & ~graph.side).any():
        return ""
    graph.side[:] = False
    return index.lone_agent_id or "unknown"


def _not_a_transcript(stats: Stats) -> ImportProblem:
    why = "; ".join(f"line {number}: {reason}" for number, reason in stats.skipped[:3])
    return ImportProblem(
        f"Not a Claude Code transcript: none of its {stats.lines:,} lines is a "
        "conversation line (JSON objects with a uuid)" + (f" ({why})." if why else ".")
    )


def _main_line(index: Index, graph: _Graph) -> array[int]:
    """The conversation's lines, in order: the chain back from the live leaf."""
    conversational = graph.trunk
    if not conversational.any():
        raise ImportProblem(
            "No user or assistant lines: this does not look like a Claude Code transcript."
        )
    candidates = np.nonzero(conversational)[0][::-1]
    hinted = -1
    if index.last_prompt and index.last_prompt[1] > candidates[0]:
        # Nothing was said after the last-prompt record: its leaf is the live one (it
        # differs from the last line after a rewind with no new prompt).
        hinted = graph.by_uuid.one(index.last_prompt[0])
        hinted = -1 if hinted < 0 or graph.side[hinted] else hinted

    # Normally the first leaf's chain is the conversation. A last line cut off from it
    # (a broken parentUuid) would leave no human prompt: then earlier leaves are tried.
    main = array("q")
    covered = np.zeros(len(index), dtype=bool)
    attempts = 0
    # (Iterated lazily: a list of every candidate would cost 36 bytes a line.)
    for leaf in itertools.chain([hinted] if hinted >= 0 else [], candidates):
        leaf = int(leaf)
        if covered[leaf]:
            continue
        chain = _walk_back(index, graph, leaf)
        covered[as_numpy(chain)] = True
        attempts += 1
        if not main:
            main = chain
        if (graph.kinds[as_numpy(chain)] == PROMPT).any():
            main = chain
            break
        if attempts >= MAX_LEAF_TRIES:
            break
    return main


def _walk_back(index: Index, graph: _Graph, leaf: int) -> array[int]:
    """The chain of parents from the first line to the leaf, across compactions."""
    chain, seen, i = array("q"), np.zeros(len(index), dtype=bool), leaf
    while i >= 0 and not seen[i]:
        seen[i] = True
        chain.append(i)
        nxt = int(graph.parent[i])
        if nxt < 0 and i in index.logical:
            nxt = graph.by_uuid.one(index.logical[i])
        if nxt < 0 and graph.kinds[i] == BOUNDARY:
            # A compaction whose logical parent is not in the file (lost, or never
            # written) continues the conversation that was live before it.
            before = np.nonzero(graph.trunk[:i])[0]
            nxt = int(before[-1]) if len(before) else -1
        i = nxt
    chain.reverse()
    return chain


def _side_lines(
    index: Index, graph: _Graph, main: array[int], on_main: npt.NDArray[np.bool_]
) -> _SideLines:
    """Lines off the main line: merged in, or noted as abandoned or detached branches."""
    side = _SideLines()
    off = np.nonzero(~on_main & ~graph.dup & ~graph.side)[0]
    if not len(off):
        return side
    kinds, parent = graph.kinds, graph.parent
    main_arr = as_numpy(main)
    messages = as_numpy(index.messages, np.uint32)
    main_messages = np.unique(messages[main_arr[kinds[main_arr] == ASSISTANT]])
    stamps = as_numpy(index.stamps, np.uint32)
    roots = _branch_roots(graph, off, on_main)
    prompt = kinds[off] == PROMPT
    reply = (kinds[off] == ASSISTANT) & ~np.isin(messages[off], main_messages)
    # Harness lines too: a /doctor or /status run off to the side is noted where it was.
    shown_kind = np.isin(kinds[off], (ASSISTANT, SYSTEM, UNKNOWN, BOUNDARY, STEERING, HARNESS))
    real_roots = np.unique(roots[prompt | reply])
    # Fake forks: their displayable lines are merged in after the line they hang off.
    merged = shown_kind & ~np.isin(roots, real_roots)
    for line, line_root in zip(off[merged].tolist(), roots[merged].tolist(), strict=True):
        p = int(parent[line_root])
        if p >= 0 and on_main[p]:
            side.after.setdefault(p, []).append(line)
        else:
            side.tail.append(line)  # stray notes connected to nothing: shown at the end
    for branch in _branches(off, roots, prompt, reply, real_roots):
        p = int(parent[branch.root])
        if p < 0 or not on_main[p]:
            side.detached.append(branch)
            continue
        k = main.index(p)
        sibling = main[k + 1] if k + 1 < len(main) else -1
        if sibling >= 0 and stamps[branch.root] and stamps[branch.root] == stamps[sibling]:
            side.replays += 1  # a compaction replay of the same messages: follow the first
            continue
        side.branches.setdefault(p, []).append(branch)
    return side


def _branch_roots(
    graph: _Graph, off: npt.NDArray[np.int64], on_main: npt.NDArray[np.bool_]
) -> npt.NDArray[np.int64]:
    """For each line off the main line, the first line of its side branch (its "root").

    The root is the line that hangs off the main line. Found with arrays, not objects:
    hook and parallel-call forks are common (one every few lines), real rewinds rare.
    """
    parent = graph.parent
    root = np.full(len(graph.kinds), -1, dtype=np.int64)
    off_parent = parent[off]
    hangs = (off_parent >= 0) & on_main[np.maximum(off_parent, 0)]
    root[off[hangs]] = off[hangs]
    waiting = off[~hangs]
    while len(waiting):
        above = parent[waiting]
        known = root[np.maximum(above, 0)]
        settled = (above >= 0) & (known >= 0)
        if not settled.any():
            break
        root[waiting[settled]] = known[settled]
        waiting = waiting[~settled]
    root[waiting] = waiting  # roots of their own: unconnected, or parent later in file
    return root[off]


def _branches(
    off: npt.NDArray[np.int64],
    roots: npt.NDArray[np.int64],
    prompt: npt.NDArray[np.bool_],
    reply: npt.NDArray[np.bool_],
    real_roots: npt.NDArray[np.int64],
) -> Iterator[Branch]:
    """The real side branches (with a prompt or a new reply), in the order of their roots."""
    by_root = np.argsort(roots, kind="stable")  # file order within each branch
    starts = np.searchsorted(roots[by_root], real_roots, side="left")
    ends = np.searchsorted(roots[by_root], real_roots, side="right")
    for line_root, start, end in zip(real_roots.tolist(), starts, ends, strict=True):
        mine = by_root[start:end]
        prompts = off[mine[prompt[mine]]]
        yield Branch(
            root=line_root,
            lines=int(end - start),
            prompt=int(prompts[0]) if len(prompts) else -1,
            replies=int(reply[mine].sum()),
        )


def _read_results(
    index: Index, flags: npt.NDArray[np.uint8], shown: npt.NDArray[np.bool_]
) -> set[int]:
    """Shown tool-result lines to read for themselves: results of no shown call, or text."""
    calls = Lookup(as_numpy(index.call_keys), as_numpy(index.call_lines))
    result_lines = as_numpy(index.result_lines)
    call_line = calls.find(as_numpy(index.result_keys))
    orphan = (call_line < 0) | ~shown[np.maximum(call_line, 0)]
    read_results = (
        set(result_lines[orphan & shown[result_lines]].tolist()) if len(result_lines) else set()
    )
    read_results |= set(np.nonzero(shown & ((flags & RESULT_WITH_TEXT) != 0))[0].tolist())
    return read_results


def _sidechains(index: Index, graph: _Graph) -> dict[int, list[int]]:
    """Each sub-agent's lines, in file order, by its agentId key (or its first uuid's)."""
    sidechains: dict[int, list[int]] = {}
    root_key: dict[int, int] = {}
    uuids = as_numpy(index.uuids)
    for i in np.nonzero(graph.side & ~graph.dup)[0].tolist():
        key = index.agents.get(i, 0)
        if not key:
            p = int(graph.parent[i])
            key = root_key.get(p) or int(uuids[i])
            root_key[i] = key
        sidechains.setdefault(key, []).append(i)
    return sidechains
