"""Claude Code transcripts (JSON Lines) into Kernelbin sessions.

The format is unofficial and changes between Claude Code versions (see
notes/claude-code-transcripts.md), so this reader is tolerant: a line it cannot read is
skipped and reported with its number, and a line or block of a type it does not know is
kept raw, in a collapsed turn, never dropped and never fatal.

Two passes over the file, so memory stays flat however long the transcript is:

1. `index.index_transcript` reads every line once and keeps a compact index.
2. `plan.plan_main_line` picks what to show, from the index alone.
3. `reader.TranscriptReader.items()` reads the chosen lines by offset and yields turns
   and kernel versions (`kernels`) for the writer, which inserts them in batches.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, BinaryIO

import numpy as np
from django.conf import settings
from django.utils.text import slugify

from sessions.importers.claude_code.index import Index, as_numpy, index_transcript
from sessions.importers.claude_code.layout import Layout
from sessions.importers.claude_code.lines import key_of, timestamp_of
from sessions.importers.claude_code.plan import Plan, plan_main_line
from sessions.importers.claude_code.reader import TranscriptReader
from sessions.importers.claude_code.turns import short
from sessions.importers.options import DEFAULTS, ImportOptions
from sessions.importers.redact import Scrubber
from sessions.importers.specs import FileSpec, ImportProblem, ImportReport, Item, SessionSpec
from sessions.importers.writer import write_session
from sessions.models import Session

FORMAT = "Claude Code JSONL"


def _title_from(index: Index, plan: Plan, first_prompt: str, scrubber: Scrubber) -> str:
    if index.custom_title.strip():
        return scrubber.text(index.custom_title)
    if index.ai_title.strip():
        return scrubber.text(index.ai_title)
    if own := _own_summaries(index, plan):
        return scrubber.text(own[-1])
    lines = [x for x in first_prompt.splitlines() if x.strip() and not x.lstrip().startswith("<")]
    return short(lines[0] if lines else first_prompt, 80) or "Imported session"


def _own_summaries(index: Index, plan: Plan) -> list[str]:
    """The legacy summaries that describe this conversation: those whose leaf is on its
    main line, else in the file. Claude Code also writes, at the top of a session's file,
    the summaries of other sessions of the same project, whose leaves are elsewhere."""
    if not index.summaries:
        return []
    leaves = np.array([leaf for leaf, _ in index.summaries], dtype=np.int64)
    uuids = as_numpy(index.uuids)
    for lines in (uuids[as_numpy(plan.main)], uuids):
        present = np.isin(leaves, lines) & (leaves != 0)
        if present.any():
            return [text for (_, text), ok in zip(index.summaries, present, strict=True) if ok]
    return []


def import_claude_code(
    stream: BinaryIO,
    *,
    options: ImportOptions = DEFAULTS,
    file_name: str = "",
    layout: Layout | None = None,
) -> ImportReport:
    """Import one Claude Code transcript, with the sub-agent files joined to it in
    `stream` (see layout.py); the same recording again updates its session."""
    title = options.title
    scrubber = Scrubber(options.redact)
    index = index_transcript(stream, settings.TRANSCRIPT_MAX_LINE_BYTES, scrubber)
    if layout is not None:
        index.agent_calls = {key_of(call): key_of(agent) for agent, call in layout.calls.items()}
    plan = plan_main_line(index)
    reader = TranscriptReader(stream, index, plan, scrubber)
    first_prompt = reader.first_prompt()
    if first_prompt is None and plan.lone_agent:
        # A sub-agent's file on its own: the main agent asked, with no prompt line of its
        # own when the request reads as harness text; its conversation is still there.
        first_prompt = f"Sub-agent {plan.lone_agent}"
    if first_prompt is None:
        raise ImportProblem(
            "This transcript has no human prompt on its conversation, so there is no tutoring "
            "session to import."
        )
    described = layout.descriptions.get(plan.lone_agent) if layout and plan.lone_agent else None
    session_title = (
        title
        or (f"Sub-agent: {scrubber.text(described)}" if described else "")
        or _title_from(index, plan, first_prompt, scrubber)
    )[:200]
    foreign = len(index.summaries) - len(_own_summaries(index, plan))
    index.release_graph()
    source_key = plan.session_id or (file_name.rsplit(".", 1)[0] if file_name else "")
    if plan.lone_agent:
        # A sub-agent's lines carry its parent's sessionId: its own key keeps the two apart.
        source_key = f"{source_key}/agent-{plan.lone_agent}"
    started = timestamp_of(reader.source.load(plan.main[0]).get("timestamp"))
    spec = _session_spec(options, session_title, source_key, started, scrubber.text(index.model))
    written = write_session(
        spec, _with_files(reader, options), owner=options.owner, progress=options.progress
    )
    stats = index.stats
    return ImportReport.of(
        written,
        format=FORMAT,
        lines=stats.lines,
        skipped=stats.skipped,
        skipped_total=stats.skipped_total,
        redaction=scrubber.summary(),
        notes=[
            *written.notes,
            *_joined(layout, stats.part_lines, stats.lines),
            *reader.notes(),
            *(
                [f"{foreign} summary line(s) of other sessions of the project: not the title."]
                if foreign
                else []
            ),
        ],
    )


def _session_spec(
    options: ImportOptions, session_title: str, source_key: str, started: Any, model: str
) -> SessionSpec:
    """Which session the transcript writes: a new one private, an existing one updated
    with what the person importing chose."""
    defaults: dict[str, Any] = {
        "title": session_title,
        "visibility": Session.Visibility.PRIVATE,
    }
    if started:
        defaults["created"] = started
    fields: dict[str, Any] = {
        "source": Session.Source.IMPORTED,
        "tutor_model": model[:100],
    }
    if options.title is not None:
        fields["title"] = session_title
    if options.visibility is not None:
        fields["visibility"] = options.visibility
    return SessionSpec(
        slug=options.slug or slugify(session_title)[:60].strip("-") or f"session-{source_key[:8]}",
        fields=fields,
        defaults=defaults,
        source_key=source_key[:200],
        match_source_key=True,
        slug_given=options.slug is not None,
    )


def _with_files(reader: TranscriptReader, options: ImportOptions) -> Iterator[Item]:
    """The transcript's items, then the project files given with it, but those the
    transcript wrote: each program state holds those as they stood then."""
    yield from reader.items()
    if options.files is not None:
        written = reader.history.project
        for name, data in options.files.files.items():
            if name not in written:
                yield FileSpec.of(name, data)


def _joined(layout: Layout | None, part_lines: list[int], lines: int) -> list[str]:
    """Which files were read as one, and where each one's lines are counted."""
    if layout is None or not layout.agents:
        return []
    ends = [*part_lines[1:], lines + 1]
    spans = [
        f"{layout.name_of(path)} (lines {first:,}–{end - 1:,})"
        for path, first, end in zip(layout.files, part_lines, ends, strict=False)
    ]
    count = len(layout.agents)
    return [f"Joined {count} sub-agent file{'s' if count != 1 else ''}: {'; '.join(spans)}."]
