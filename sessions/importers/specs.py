"""What an importer hands the one writer (sessions/importers/writer.py), and what the
writer reports back: plain data, no database work.
"""

from __future__ import annotations

import mimetypes
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sessions.models import Session
from sessions.programs import ProgramState


class ImportProblem(Exception):
    """A file that cannot be imported; the message says where and why."""


@dataclass
class ImportReport:
    """What an import did, for the command's output and the upload page."""

    session: Session
    created: bool
    turns: int
    kernels: int
    versions: int
    format: str
    # Transcript imports only: lines read, lines skipped (number, why) and other notes.
    lines: int | None = None
    skipped: list[tuple[int, str]] = field(default_factory=list)
    skipped_total: int = 0
    redaction: str = ""
    notes: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, written: Written, **details: Any) -> ImportReport:
        """The report on what write_session wrote, with the importer's own details."""
        return cls(
            session=written.session,
            created=written.created,
            turns=written.turns,
            kernels=written.kernels,
            versions=written.versions,
            **details,
        )

    def summary(self) -> str:
        verb = "Created" if self.created else "Updated"
        counts = ", ".join(
            f"{n} {word}{'' if n == 1 else 's'}"
            for n, word in (
                (self.turns, "turn"),
                (self.kernels, "kernel"),
                (self.versions, "kernel version"),
            )
        )
        return f"{verb} session '{self.session.slug}': {counts}."

    def details(self) -> list[str]:
        """Everything after the summary line, one line each."""
        lines = []
        if self.lines is not None:
            lines.append(
                f"Read {self.lines:,} line{'' if self.lines == 1 else 's'} ({self.format})."
            )
        if self.redaction:
            lines.append(self.redaction)
        lines += self.notes
        if self.skipped_total:
            lines.append(
                f"Skipped {self.skipped_total:,} line{'' if self.skipped_total == 1 else 's'}:"
            )
            lines += [f"  line {number}: {why}" for number, why in self.skipped]
            if self.skipped_total > len(self.skipped):
                lines.append(f"  … and {self.skipped_total - len(self.skipped):,} more.")
        return lines


@dataclass
class TurnSpec:
    number: int
    role: str
    content: str
    timestamp: datetime | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    # (kernel name, version number): the version this turn submitted or reviewed.
    kernel: tuple[str, int] | None = None
    # Kept, with its number, out of the reader's way (importer housekeeping).
    hidden: bool = False
    # The number of the program state this turn wrote or reviewed.
    state: int | None = None


@dataclass
class KernelSpec:
    name: str
    title: str = ""
    harness: dict[str, Any] = field(default_factory=dict)


@dataclass
class VersionSpec:
    kernel: str
    number: int
    source: str
    turn: int | None = None  # the number of the turn that introduced it
    note: str = ""
    expected_status: str = ""
    harness_override: dict[str, Any] | None = None
    host_program: str = ""  # the learner's WebGPU host code, if the version has one
    meta: dict[str, Any] = field(default_factory=dict)
    state: int | None = None  # the number of the program state it was written in


@dataclass
class FileSpec:
    """A file the session's host programs may fetch() (sessions.programs.SessionFile)."""

    name: str
    data: bytes
    content_type: str = ""

    @classmethod
    def of(cls, name: str, data: bytes) -> FileSpec:
        """The file, its type guessed from its name."""
        return cls(name=name, data=data, content_type=mimetypes.guess_type(name)[0] or "")


@dataclass
class ImageSpec:
    """A picture the turns show (sessions.models.SessionImage), already re-encoded."""

    sha256: str
    content_type: str
    data: bytes
    width: int
    height: int


@dataclass
class StateSpec:
    """The learner's project after a turn (sessions.programs.ProgramState): every file by
    its path in the project. It comes before the turns and versions that name it."""

    number: int
    # A file's content as text or bytes. The same object as in the state before means
    # the same content: it is neither encoded nor hashed again.
    files: dict[str, str | bytes]
    entry: str = ""
    kind: str = ProgramState.Kind.WEBGPU
    # The shader modules its files hold: (kernel name, version number).
    modules: list[tuple[str, int]] = field(default_factory=list)


# What an importer hands the writer, in order: a turn, or a kernel, or a version of a
# kernel handed over before, or a session file, or a picture, or a program state.
Item = TurnSpec | KernelSpec | VersionSpec | FileSpec | ImageSpec | StateSpec


@dataclass
class SessionSpec:
    """Which session to write and which of its fields to set."""

    slug: str
    # Set whether the session is new or not.
    fields: dict[str, Any] = field(default_factory=dict)
    # Set only on a new session: a re-import keeps what a curator changed since.
    defaults: dict[str, Any] = field(default_factory=dict)
    # None leaves an existing session's tags alone.
    tags: list[str] | None = None
    # A recording's identity. With match_source_key, a session holding it is updated
    # in place, whatever its slug; otherwise the session at `slug` is.
    source_key: str = ""
    match_source_key: bool = False
    # The slug was asked for (an option), not derived from a title.
    slug_given: bool = True
    # The import carries the session's files: those it has now are replaced. Otherwise
    # (a transcript) they are kept: a curator uploaded them.
    replace_files: bool = False


@dataclass
class Written:
    session: Session
    created: bool
    turns: int
    kernels: int
    versions: int
    notes: list[str]
    states: int = 0
