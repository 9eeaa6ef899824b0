"""Pass 2's output: turns numbered in order and linked to the kernel versions they made
or reviewed, and the Markdown helpers their content is written with."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from sessions import ansi
from sessions.importers.claude_code.kernels import NewState, NewVersion
from sessions.importers.claude_code.lines import timestamp_of
from sessions.importers.specs import Item, KernelSpec, StateSpec, TurnSpec, VersionSpec
from sessions.markdown import fence_for
from sessions.models import Turn


def code(text: str, lang: str = "") -> str:
    """A fenced block; terminal output with colour codes is fenced as `ansi`."""
    fence = fence_for(text)
    if not lang and ansi.has_escapes(text):
        lang = "ansi"
    return f"{fence}{lang}\n{text.rstrip()}\n{fence}"


def short(text: str, limit: int = 80) -> str:
    text = " ".join(ansi.strip(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def raw_json(value: Any) -> str:
    return code(json.dumps(value, indent=2, ensure_ascii=False), "json")


class TurnMaker:
    """Numbers turns as they are made and links the tutor's reviews to kernel versions."""

    def __init__(self) -> None:
        self.number = 0
        self.review: tuple[str, int] | None = None  # the version the next tutor turn reviews
        self.review_state: int | None = None  # the program state it reviews
        self.kernels_seen: set[str] = set()
        # Set while a sub-agent's conversation is made: {"agent", "call", "depth"}.
        self.nesting: dict[str, Any] = {}
        self.hiding = False  # turns made now are hidden (importer housekeeping)
        self.hidden: Counter[str] = Counter()  # hidden turns, by why

    @contextmanager
    def nested(self, agent: str, call: str, hidden: bool = False) -> Iterator[None]:
        """Turns made inside belong to a sub-agent's conversation, under `call`."""
        outer, outer_hiding = self.nesting, self.hiding
        self.nesting = {"agent": agent, "call": call, "depth": outer.get("depth", 0) + 1}
        self.hiding = outer_hiding or hidden
        try:
            yield
        finally:
            self.nesting, self.hiding = outer, outer_hiding

    def turn(
        self,
        role: str,
        content: str,
        timestamp: datetime | None,
        meta: dict[str, Any],
        kernel: tuple[str, int] | None = None,
        hidden: bool = False,
    ) -> TurnSpec:
        self.number += 1
        hidden = hidden or self.hiding
        if hidden:
            self.hidden["sub-agent" if self.nesting else meta.get("kind", "")] += 1
        state = None
        if role == Turn.Role.TUTOR and meta.get("kind") != "thinking":
            if self.review:
                kernel, self.review = kernel or self.review, None
            state, self.review_state = self.review_state, None
        if self.nesting:
            # Folded under their call: one line each until opened.
            meta = {**meta, **self.nesting, "collapsed": True}
            meta.setdefault("summary", short(content, 90) or role)
        return TurnSpec(
            number=self.number,
            role=role,
            content=content or "*(empty)*",
            timestamp=timestamp,
            meta=meta,
            kernel=kernel,
            hidden=hidden,
            state=state,
        )

    def note(
        self,
        content: str,
        line: dict[str, Any],
        kind: str,
        summary: str = "",
        source_id: str = "",
        hidden: bool = False,
    ) -> TurnSpec:
        meta: dict[str, Any] = {"kind": kind, "source_id": source_id or str(line.get("uuid", ""))}
        if summary:
            meta["summary"] = summary
            meta["collapsed"] = True
        when = timestamp_of(line.get("timestamp"))
        return self.turn(Turn.Role.SYSTEM, content, when, meta, hidden=hidden)

    def raw(
        self, value: Any, why: str, source_id: str, timestamp: Any = None, hidden: bool = True
    ) -> TurnSpec:
        """Something this importer does not know, kept as recorded: a line of an unknown
        type is hidden (kept, out of the reader's way); a block of a response is not."""
        meta = {"kind": "raw", "summary": why, "collapsed": True, "source_id": source_id}
        content = f"{why}\n\n{raw_json(value)}"
        return self.turn(Turn.Role.SYSTEM, content, timestamp_of(timestamp), meta, hidden=hidden)

    def with_versions(
        self, turn: TurnSpec, versions: list[NewVersion], state: NewState | None = None
    ) -> Iterator[Item]:
        """A turn that made versions points at the first (the file's first shader that
        changed, which carries the program); the next tutor turn reviews it. A turn that
        changed the project points at the state it made."""
        if state is not None:
            yield StateSpec(
                number=state.number,
                files=dict(state.files),
                entry=state.entry,
                kind=state.kind,
                modules=state.modules,
            )
            turn.state = self.review_state = state.number
        if versions:
            turn.kernel = (versions[0].kernel, versions[0].number)
            self.review = turn.kernel
        yield from self._specs(versions, turn.number)
        yield turn

    def _specs(
        self, versions: list[NewVersion], turn_number: int
    ) -> Iterator[KernelSpec | VersionSpec]:
        for version in versions:
            if version.kernel not in self.kernels_seen:
                self.kernels_seen.add(version.kernel)
                yield KernelSpec(name=version.kernel, title=version.kernel_title[:200])
            yield VersionSpec(
                kernel=version.kernel,
                number=version.number,
                source=version.source,
                turn=turn_number,
                note=version.note[:200],
                meta=version.meta,
                host_program=version.host_program,
                state=version.state,
            )
