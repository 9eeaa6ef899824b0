"""The one way in for session files: the import_transcript command and the upload form.

`import_file` tells the two formats apart (a Claude Code transcript is JSON Lines, a
kernelbin/1 export is one JSON document), refuses what is too big or not text before
reading it, and turns any failure into an ImportProblem with a message a person can
act on. The write is all or nothing either way, so a failure leaves nothing behind.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import BinaryIO, cast

from django.conf import settings
from django.utils.text import slugify

from sessions.importers.claude_code import import_claude_code
from sessions.importers.claude_code.layout import Layout, find_layout
from sessions.importers.jsonl import JoinedFiles
from sessions.importers.kernelbin import FORMAT, import_session, read_export
from sessions.importers.options import DEFAULTS, ImportOptions
from sessions.importers.project_files import fetch_report
from sessions.importers.specs import ImportProblem, ImportReport
from sessions.models import Session

logger = logging.getLogger(__name__)

SNIFF_BYTES = 64 * 1024
KERNELBIN = FORMAT
CLAUDE_CODE = "claude-code"


def _megabytes(size: int) -> str:
    return f"{size / (1024 * 1024):,.0f} MB"


def size_limit(name: str) -> int:
    """The largest file accepted: exports (.json) have their own, smaller limit."""
    if name.lower().endswith(".json"):
        return settings.IMPORT_MAX_BYTES
    return max(settings.TRANSCRIPT_MAX_BYTES, settings.IMPORT_MAX_BYTES)


def _looks_like_transcript_line(value: object) -> bool:
    return isinstance(value, dict) and "format" not in value and "type" in value


def sniff(stream: BinaryIO, name: str = "") -> str:
    """Which format the stream holds, from its first 64 KB and its name; rewinds it.

    A kernelbin/1 export is one JSON document (pretty-printed by our export); a
    transcript is one JSON object per line. A `.json` file is taken for an export
    unless its first line is a whole transcript line.
    """
    head = stream.read(SNIFF_BYTES)
    stream.seek(0)
    if not head.strip():
        raise ImportProblem("The file is empty.")
    if head.startswith(b"\x1f\x8b"):
        raise ImportProblem("The file is gzip-compressed: decompress it and import the .jsonl.")
    if head.startswith(b"PK\x03\x04"):
        raise ImportProblem("The file is a zip archive: extract the .jsonl and import that.")
    if b"\x00" in head:
        raise ImportProblem(
            "This is a binary file (it holds NUL bytes), not a Claude Code transcript "
            "(JSON Lines) or a kernelbin/1 export."
        )
    text = head.decode("utf-8", "replace").lstrip("\ufeff \t\r\n")
    first = text.split("\n", 1)[0]
    try:
        value = json.loads(first)
    except (json.JSONDecodeError, RecursionError):
        value = None
    if name.lower().endswith(".json"):
        return CLAUDE_CODE if _looks_like_transcript_line(value) else KERNELBIN
    if text.startswith("["):
        raise ImportProblem(
            "The file holds a JSON array: neither a Claude Code transcript (one JSON object "
            "per line) nor a kernelbin/1 export (one JSON object)."
        )
    if isinstance(value, dict):
        return KERNELBIN if "format" in value else CLAUDE_CODE
    # Not a whole object on line 1: a pretty-printed document (our export), or a
    # transcript whose first line is bad (its reader skips and reports such lines).
    if first.strip() == "{" or re.match(r'\{\s*"format"\s*:', text):
        return KERNELBIN
    return CLAUDE_CODE


def import_path(path: Path, *, options: ImportOptions = DEFAULTS) -> ImportReport:
    """Import a file, or a Claude Code session with its sub-agents' transcripts: the main
    file (with `<id>/subagents/` or older `agent-*.jsonl` files beside it) or its folder."""
    layout = find_layout(path)
    name = layout.main.name
    if not layout.agents:
        with layout.main.open("rb") as stream:
            size = layout.main.stat().st_size
            return import_file(stream, options=options, size=size, name=name, layout=layout)
    with JoinedFiles(layout.files) as joined:
        return import_file(
            cast(BinaryIO, joined), options=options, size=joined.size, name=name, layout=layout
        )


def import_file(
    stream: BinaryIO,
    *,
    options: ImportOptions = DEFAULTS,
    size: int | None = None,
    name: str = "",
    layout: Layout | None = None,
) -> ImportReport:
    """Import a Claude Code transcript or a kernelbin/1 export from a binary stream."""
    if size is None:
        size = stream.seek(0, 2)
        stream.seek(0)
    limit = size_limit(name)
    if size > limit:
        raise ImportProblem(
            f"The file is larger than the import limit of {limit:,} bytes "
            f"({_megabytes(size)} > {_megabytes(limit)})."
        )
    slug, visibility = options.slug, options.visibility
    if slug is not None and (not slug or slugify(slug) != slug):
        raise ImportProblem(f"{slug!r} is not a valid slug (lowercase letters, digits, '-').")
    if visibility is not None and visibility not in Session.Visibility.values:
        raise ImportProblem(f"Unknown visibility {visibility!r}.")
    fmt = sniff(stream, name)
    try:
        if fmt == KERNELBIN:
            report = import_session(read_export(stream, size=size), options=options)
        else:
            report = import_claude_code(stream, options=options, file_name=name, layout=layout)
    except ImportProblem:
        raise
    except Exception as error:
        # A transcript is untrusted input: whatever it does to the importer, the person
        # importing gets a message, not a traceback, and nothing is kept.
        logger.exception("Import of %r failed", name)
        raise ImportProblem(
            f"The import failed on an unexpected problem ({type(error).__name__}: "
            f"{str(error)[:200]})."
        ) from error
    # What the programs fetch, and what is missing, whichever format brought them.
    report.notes += [
        *(options.files.notes() if options.files else []),
        *fetch_report(report.session),
    ]
    return report
