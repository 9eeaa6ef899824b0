"""Where a program's lines are in the learner's files, as a browser's console names them.

A program imported from a page is its inline scripts joined in page order (and the
handlers its attributes give after them: sessions/importers/claude_code/scripts.py), so
the engine's lines are lines of that joined code. A reader's browser, and their editor,
name the page's line instead: index.html:193. The importer keeps, with each version, where
each run of the joined code's lines starts in the file (KernelVersion.meta["host_lines"]);
the pages show every line of the program's run through it. A fork's program is the edited
joined code, so its lines are its own.
"""

from __future__ import annotations

import copy
import re
from bisect import bisect_right
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from sessions.programs import KernelVersion

# A file's path in a project is at most this long (sessions.programs.StateFile.path); a
# version's meta may come from an uploaded export, so what is longer is not read.
MAX_NAME = 200


@dataclass(frozen=True)
class FileLines:
    """file: the program's file in the project; starts: (first line in the program, its
    line in the file) of each run of lines, in order."""

    file: str
    starts: tuple[tuple[int, int], ...]

    def line(self, number: int) -> int:
        """The file's line of the program's line number."""
        at = bisect_right(self.starts, (number, float("inf"))) - 1
        if at < 0:
            return number
        first, line = self.starts[at]
        return line + number - first

    def where(self, number: int) -> str:
        return f"{self.file}:{self.line(number)}"


def file_lines(version: KernelVersion) -> FileLines | None:
    """Where the version's program lines are in its file; None for a fork (unsaved: its
    lines are its own) and for a version imported before lines were kept."""
    lines = version.meta.get("host_lines") if isinstance(version.meta, dict) else None
    if version.pk is None or not version.host_program or not isinstance(lines, dict):
        return None
    name, starts = lines.get("file"), lines.get("starts")
    if not isinstance(name, str) or not 0 < len(name) <= MAX_NAME:
        return None
    if not isinstance(starts, list) or not starts:
        return None
    pairs = []
    for start in starts:
        if not (isinstance(start, list) and len(start) == 2):
            return None
        if not all(isinstance(n, int) and n >= 1 for n in start):
            return None
        pairs.append((start[0], start[1]))
    return FileLines(name, tuple(sorted(pairs)))


def _in_words(text: str, line: int, lines: FileLines) -> str:
    """The text with its first "Line N" or "line N" (the engine's words, which come before
    any of the program's own: "Line N: TypeError: …", "still running at line N") naming
    the program's line N as the file's."""
    return re.sub(rf"(?<!WGSL )\b[Ll]ine {line}\b", lines.where(line), text, count=1)


# An outcome as stored (kernels.engine.outcome.Outcome) or read from JSON.
OutcomeT = TypeVar("OutcomeT", bound="Mapping[str, Any] | None")


def in_file(outcome: OutcomeT, lines: FileLines | None) -> OutcomeT:
    """A copy of the outcome whose error names its line in the file (in its words, and as
    error["where"]), and whose console lines carry theirs (line["where"])."""
    if outcome is None or lines is None:
        return outcome
    program = outcome.get("program")
    if not isinstance(program, dict):
        return outcome
    shown: dict[str, Any] = {**outcome, "program": {**program}}
    error = program.get("error")
    if isinstance(error, dict) and isinstance(error.get("line"), int):
        line = error["line"]
        shown["program"]["error"] = {
            **error,
            "message": _in_words(str(error.get("message", "")), line, lines),
            "where": lines.where(line),
        }
        shown["message"] = _in_words(str(outcome.get("message", "")), line, lines)
    shown["program"]["console"] = [
        {**entry, "where": lines.where(entry["line"])}
        if isinstance(entry.get("line"), int) and entry["line"]
        else entry
        for entry in program.get("console", [])
    ]
    return cast(OutcomeT, shown)


def picture_in_file(picture: dict[str, Any], lines: FileLines) -> dict[str, Any]:
    """A copy of a host picture (kernels/trace_pictures.py) whose lines are the file's."""
    shown = copy.deepcopy(picture)
    stack: list[Any] = [shown]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if isinstance(item.get("line"), int) and item["line"]:
                item["line"] = lines.line(item["line"])
            stack += item.values()
        elif isinstance(item, list):
            stack += item
    return shown
