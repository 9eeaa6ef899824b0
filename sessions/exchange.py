"""Kernelbin's own exchange format, "kernelbin/1", and the one session writer.

The JSON export re-imports losslessly. A kernelbin/1 file is validated whole before
anything is written. `write_session` is the writer behind every import (kernelbin/1
here, Claude Code transcripts in sessions.claude_code): it takes turns and kernel
versions as an iterator and inserts them in batches inside one transaction, so memory
does not grow with the file and a failure anywhere writes nothing.
"""

from __future__ import annotations

import json
import re
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import IO, Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Max
from django.utils.dateparse import parse_datetime
from django.utils.text import slugify

from kernels.engine.outcome import Status
from kernels.harness import HarnessError, parse_harness
from kernels.models import Kernel, KernelVersion, sha256_text
from sessions.markdown import render_markdown
from sessions.models import Session, Tag, Turn
from sessions.redact import Scrubber

FORMAT = "kernelbin/1"


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
    format: str = FORMAT
    # Transcript imports only: lines read, lines skipped (number, why) and other notes.
    lines: int | None = None
    skipped: list[tuple[int, str]] = field(default_factory=list)
    skipped_total: int = 0
    redaction: str = ""
    notes: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, written: Written, **details) -> ImportReport:
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


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def export_session(session: Session) -> dict[str, Any]:
    turns = session.turns.select_related("kernel_version__kernel").order_by("number")
    kernels = session.kernels.prefetch_related("versions__turn").order_by("name")
    return {
        "format": FORMAT,
        "session": {
            "slug": session.slug,
            "title": session.title,
            "summary": session.summary,
            "learner": session.learner,
            "tutor_model": session.tutor_model,
            "source": session.source,
            "source_key": session.source_key,
            "visibility": session.visibility,
            "tags": [tag.name for tag in session.tags.all()],
            "created": _iso(session.created),
            "published_at": _iso(session.published_at),
        },
        "turns": [
            {
                "number": turn.number,
                "role": turn.role,
                "content": turn.content,
                "timestamp": _iso(turn.timestamp),
                "meta": turn.meta,
                "kernel": {
                    "name": turn.kernel_version.kernel.name,
                    "version": turn.kernel_version.number,
                }
                if turn.kernel_version
                else None,
            }
            for turn in turns
        ],
        "kernels": [
            {
                "name": kernel.name,
                "title": kernel.title,
                "harness": kernel.harness,
                "versions": [
                    {
                        "number": version.number,
                        "source": version.source,
                        "sha256": version.sha256,
                        "turn": version.turn.number if version.turn else None,
                        "note": version.note,
                        "expected_status": version.expected_status,
                        "harness_override": version.harness_override,
                        "meta": version.meta,
                    }
                    for version in kernel.versions.all()
                ],
            }
            for kernel in kernels
        ],
    }


def fence_for(text: str) -> str:
    """A backtick fence longer than any run of backticks inside the text."""
    longest = max((len(run) for run in _BACKTICKS.findall(text)), default=0)
    return "`" * max(3, longest + 1)


_BACKTICKS = re.compile(r"`{3,}")


def export_markdown(session: Session) -> str:
    lines = [f"# {session.title}", ""]
    if session.summary:
        lines += [session.summary, ""]
    details = [f"Source: {session.source}"]
    if session.learner:
        details.append(f"Learner: {session.learner}")
    if session.tutor_model:
        details.append(f"Tutor: {session.tutor_model}")
    lines += [" · ".join(details), ""]
    for turn in session.turns.select_related("kernel_version__kernel").order_by("number"):
        heading = f"## Turn {turn.number} · {turn.get_role_display()}"
        if turn.kernel_version:
            version = turn.kernel_version
            heading += f" · kernel `{version.kernel.name}` v{version.number}"
        lines += [heading, "", turn.content.rstrip(), ""]
    for kernel in session.kernels.prefetch_related("versions").order_by("name"):
        lines += [f"## Kernel `{kernel.name}`", ""]
        for version in kernel.versions.all():
            note = f": {version.note}" if version.note else ""
            fence = fence_for(version.source)
            lines += [f"### v{version.number}{note}", "", f"{fence}wgsl", version.source.rstrip()]
            lines += [fence, ""]
    return "\n".join(lines)


def read_export(stream: IO[bytes], size: int | None = None) -> dict[str, Any]:
    """Parse a kernelbin/1 file, refusing oversize or non-JSON input with a clear message."""
    limit = settings.IMPORT_MAX_BYTES
    raw = stream.read(limit + 1)
    if len(raw) > limit or (size is not None and size > limit):
        raise ImportProblem(f"The file is larger than the import limit of {limit:,} bytes.")
    if not raw.strip():
        raise ImportProblem("The file is empty.")
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as error:
        raise ImportProblem(f"The file is not UTF-8 text (byte {error.start}).") from None
    except json.JSONDecodeError as error:
        raise ImportProblem(
            f"Not valid JSON: {error.msg} at line {error.lineno}, column {error.colno}."
        ) from None
    return data


def _get(obj: dict, key: str, kind: type | tuple, where: str, required: bool = True) -> Any:
    if key not in obj:
        if required:
            raise ImportProblem(f"{where}: the field '{key}' is missing.")
        return None
    value = obj[key]
    if value is None and not required:
        return None
    # bool is an int subclass; a turn number of true is a mistake, not 1.
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise ImportProblem(f"{where}.{key}: expected {names}, got {type(value).__name__}.")
    return value


def _timestamp(obj: dict, key: str, where: str) -> datetime | None:
    value = _get(obj, key, str, where, required=False)
    if value is None:
        return None
    parsed = parse_datetime(value)
    if parsed is None:
        raise ImportProblem(f"{where}.{key}: not an ISO 8601 date-time: {value!r}.")
    return parsed


def _choice(value: str, choices: type, where: str) -> str:
    if value not in choices.values:
        allowed = ", ".join(choices.values)
        raise ImportProblem(f"{where}: '{value}' is not one of {allowed}.")
    return value


@dataclass
class _Plan:
    """A validated file, ready to write."""

    session: dict[str, Any]
    tags: list[str]
    turns: list[dict[str, Any]]
    kernels: list[dict[str, Any]]


def _validate(data: Any) -> _Plan:
    if not isinstance(data, dict):
        raise ImportProblem("The file must hold a JSON object.")
    tag = data.get("format")
    if tag != FORMAT:
        raise ImportProblem(f"Unknown format {tag!r}: this importer reads '{FORMAT}' files.")
    raw_session = _get(data, "session", dict, "file")
    session = {
        "slug": _get(raw_session, "slug", str, "session"),
        "title": _get(raw_session, "title", str, "session"),
        "summary": _get(raw_session, "summary", str, "session", required=False) or "",
        "learner": _get(raw_session, "learner", str, "session", required=False) or "",
        "tutor_model": _get(raw_session, "tutor_model", str, "session", required=False) or "",
        "source_key": _get(raw_session, "source_key", str, "session", required=False) or "",
        "created": _timestamp(raw_session, "created", "session"),
        "published_at": _timestamp(raw_session, "published_at", "session"),
    }
    if slugify(session["slug"]) != session["slug"] or not session["slug"]:
        raise ImportProblem(f"session.slug: {session['slug']!r} is not a valid slug.")
    if not session["title"].strip():
        raise ImportProblem("session.title: must not be empty.")
    source = _get(raw_session, "source", str, "session", required=False)
    session["source"] = _choice(source, Session.Source, "session.source") if source else None
    visibility = _get(raw_session, "visibility", str, "session", required=False) or "private"
    session["visibility"] = _choice(visibility, Session.Visibility, "session.visibility")
    tags = _get(raw_session, "tags", list, "session", required=False) or []
    if not all(isinstance(name, str) and slugify(name) for name in tags):
        raise ImportProblem("session.tags: must be a list of tag names.")

    raw_turns = _get(data, "turns", list, "file")
    turns, numbers = [], set()
    for index, raw in enumerate(raw_turns):
        where = f"turns[{index}]"
        if not isinstance(raw, dict):
            raise ImportProblem(f"{where}: must be an object.")
        number = _get(raw, "number", int, where)
        if number < 1:
            raise ImportProblem(f"{where}.number: turn numbers start at 1 (got {number}).")
        if number in numbers:
            raise ImportProblem(f"{where}.number: turn {number} appears more than once.")
        numbers.add(number)
        kernel_ref = _get(raw, "kernel", dict, where, required=False)
        if kernel_ref is not None:
            kernel_ref = (
                _get(kernel_ref, "name", str, f"{where}.kernel"),
                _get(kernel_ref, "version", int, f"{where}.kernel"),
            )
        turns.append(
            {
                "number": number,
                "role": _choice(_get(raw, "role", str, where), Turn.Role, f"{where}.role"),
                "content": _get(raw, "content", str, where),
                "timestamp": _timestamp(raw, "timestamp", where),
                "meta": _get(raw, "meta", dict, where, required=False) or {},
                "kernel": kernel_ref,
            }
        )

    raw_kernels = _get(data, "kernels", list, "file", required=False) or []
    kernels, versions_known = [], set()
    for index, raw in enumerate(raw_kernels):
        where = f"kernels[{index}]"
        if not isinstance(raw, dict):
            raise ImportProblem(f"{where}: must be an object.")
        name = _get(raw, "name", str, where)
        if slugify(name) != name:
            raise ImportProblem(f"{where}.name: {name!r} is not a valid kernel name.")
        if any(kernel["name"] == name for kernel in kernels):
            raise ImportProblem(f"{where}.name: kernel '{name}' appears more than once.")
        harness = _get(raw, "harness", dict, where, required=False) or {}
        _check_harness(harness, f"{where}.harness")
        versions = []
        for vindex, rawv in enumerate(_get(raw, "versions", list, where)):
            vwhere = f"{where}.versions[{vindex}]"
            if not isinstance(rawv, dict):
                raise ImportProblem(f"{vwhere}: must be an object.")
            number = _get(rawv, "number", int, vwhere)
            if number < 1 or any(v["number"] == number for v in versions):
                raise ImportProblem(f"{vwhere}.number: {number} is not a new number from 1 up.")
            turn = _get(rawv, "turn", int, vwhere, required=False)
            if turn is not None and turn not in numbers:
                raise ImportProblem(f"{vwhere}.turn: there is no turn {turn} in this file.")
            override = _get(rawv, "harness_override", dict, vwhere, required=False)
            if override is not None:
                _check_harness(override, f"{vwhere}.harness_override")
            expected = _get(rawv, "expected_status", str, vwhere, required=False) or ""
            if expected and expected not in set(Status):
                raise ImportProblem(f"{vwhere}.expected_status: unknown status '{expected}'.")
            versions.append(
                {
                    "number": number,
                    "source": _get(rawv, "source", str, vwhere),
                    "turn": turn,
                    "note": _get(rawv, "note", str, vwhere, required=False) or "",
                    "expected_status": expected,
                    "harness_override": override,
                    "meta": _get(rawv, "meta", dict, vwhere, required=False) or {},
                }
            )
            versions_known.add((name, number))
        title = _get(raw, "title", str, where, required=False) or ""
        kernels.append({"name": name, "title": title, "harness": harness, "versions": versions})

    for turn in turns:
        if turn["kernel"] is not None and turn["kernel"] not in versions_known:
            name, number = turn["kernel"]
            raise ImportProblem(
                f"turn {turn['number']}: refers to kernel '{name}' version {number}, "
                "which is not in the file."
            )
    return _Plan(session=session, tags=tags, turns=turns, kernels=kernels)


def _check_harness(harness: dict, where: str) -> None:
    if not harness:
        return
    try:
        parse_harness(harness)
    except HarnessError as error:
        raise ImportProblem(f"{where}: {error}") from None


# The writer ---------------------------------------------------------------------------


@dataclass
class TurnSpec:
    number: int
    role: str
    content: str
    timestamp: datetime | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    # (kernel name, version number): the version this turn submitted or reviewed.
    kernel: tuple[str, int] | None = None


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
    meta: dict[str, Any] = field(default_factory=dict)


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


@dataclass
class Written:
    session: Session
    created: bool
    turns: int
    kernels: int
    versions: int
    notes: list[str]


WRITE_BATCH = 500


def _unique_slug(base: str) -> str:
    base = base[:70].strip("-") or "session"
    taken = set(Session.objects.filter(slug__startswith=base).values_list("slug", flat=True))
    if base not in taken:
        return base
    return next(f"{base}-{n}" for n in range(2, len(taken) + 3) if f"{base}-{n}" not in taken)


def _claim_session(spec: SessionSpec, owner, notes: list[str]) -> tuple[Session, bool]:
    sessions = Session.objects.select_for_update()
    if spec.match_source_key and spec.source_key:
        session = sessions.filter(source_key=spec.source_key).first()
        if session is not None:
            if spec.slug_given and spec.slug != session.slug:
                if session.is_published:
                    raise ImportProblem(
                        f"This recording was imported before as '{session.slug}', which is "
                        "published: its slug is frozen (embeds use it). Leave out the slug, "
                        "or unpublish and rename it in the admin first."
                    )
                if Session.objects.filter(slug=spec.slug).exists():
                    raise ImportProblem(f"The slug '{spec.slug}' belongs to another session.")
                notes.append(f"Renamed the session from '{session.slug}' to '{spec.slug}'.")
                session.slug = spec.slug
            return session, False
        if spec.slug_given:
            if Session.objects.filter(slug=spec.slug).exists():
                raise ImportProblem(
                    f"The slug '{spec.slug}' belongs to another session (a different "
                    "recording). Choose another slug."
                )
            slug = spec.slug
        else:
            slug = _unique_slug(spec.slug)
        return Session(slug=slug, owner=owner), True

    session = sessions.filter(slug=spec.slug).first()
    return (session, False) if session else (Session(slug=spec.slug, owner=owner), True)


class _Batches:
    """Inserts turns and kernel versions in batches and links them as it goes.

    A turn points at a kernel version and a version at the turn that made it. Links to
    rows already written are set at each flush, from the batch just inserted or from
    a bounded cache of version keys (the database answers the rare miss). Links that
    point forwards (a kernelbin/1 file lists its turns before its kernels) wait for
    finish(); a transcript import has none, so its bookkeeping does not grow with the
    file.
    """

    VERSION_CACHE = 4096

    def __init__(self, session: Session, frozen: bool, batch_size: int) -> None:
        self.session = session
        self.frozen = frozen
        self.batch_size = batch_size
        # Turns that existed before this import have pks up to here; the ones this
        # import does not overwrite are left over at the end.
        self.old_max_pk = Turn.objects.aggregate(top=Max("pk"))["top"] or 0
        self.turns: list[TurnSpec] = []
        self.versions: list[tuple[VersionSpec, Kernel]] = []
        self.kernels: dict[str, Kernel] = {}
        self.version_cache: OrderedDict[tuple[str, int], int] = OrderedDict()
        self.waiting_versions: list[tuple[int, int]] = []  # (version pk, turn number)
        self.waiting_turns: list[tuple[int, tuple[str, int]]] = []  # (turn number, version)
        self.batch_pks: dict[int, int] = {}  # the turns of the last batch written
        self.turn_count = 0
        self.version_count = 0

    def add(self, item: TurnSpec | KernelSpec | VersionSpec) -> None:
        if isinstance(item, TurnSpec):
            self.turns.append(item)
            if len(self.turns) >= self.batch_size:
                self.flush()
        elif isinstance(item, KernelSpec):
            if item.name in self.kernels:
                raise ImportProblem(f"Kernel '{item.name}' appears more than once.")
            self.kernels[item.name] = Kernel.objects.create(
                session=self.session, name=item.name, title=item.title, harness=item.harness
            )
        elif isinstance(item, VersionSpec):
            kernel = self.kernels.get(item.kernel)
            if kernel is None:
                raise ImportProblem(f"A version of kernel '{item.kernel}' comes before the kernel.")
            self.versions.append((item, kernel))
            if len(self.versions) >= self.batch_size:
                self.flush()
        else:
            raise TypeError(f"cannot write {type(item).__name__}")

    def flush(self) -> None:
        """Write the pending turns, then the pending versions, then the links they allow."""
        links = self._write_turns()
        self._write_versions()
        pairs = []
        for number, turn_pk, key in links:
            version_pk = self._version_pk(key)
            if version_pk is None:
                self.waiting_turns.append((number, key))
            else:
                pairs.append((version_pk, turn_pk))
        _set_column(Turn, "kernel_version_id", pairs)

    def _write_turns(self) -> list[tuple[int, int, tuple[str, int]]]:
        """Insert the pending turns; (number, pk, version) for each that links a version."""
        self.batch_pks: dict[int, int] = {}
        if not self.turns:
            return []
        numbers = [spec.number for spec in self.turns]
        old = Turn.objects.filter(session=self.session, number__in=numbers, pk__lte=self.old_max_pk)
        if self.frozen:
            self._check_identity(old)
        old.delete()
        created = Turn.objects.bulk_create(
            Turn(
                session=self.session,
                number=spec.number,
                role=spec.role,
                content=spec.content,
                html=render_markdown(spec.content),
                timestamp=spec.timestamp,
                meta=spec.meta,
            )
            for spec in self.turns
        )
        self.turn_count += len(created)
        self.batch_pks = {turn.number: turn.pk for turn in created}
        links = [
            (spec.number, turn.pk, spec.kernel)
            for spec, turn in zip(self.turns, created, strict=True)
            if spec.kernel
        ]
        self.turns = []
        return links

    def _check_identity(self, old) -> None:
        """A published turn number must keep pointing at the same recorded message."""
        new = {spec.number: spec.meta.get("source_id") for spec in self.turns}
        for number, meta in old.values_list("number", "meta"):
            was = meta.get("source_id") if isinstance(meta, dict) else None
            if was and new.get(number) and was != new[number]:
                raise ImportProblem(
                    f"Session '{self.session.slug}' is published and turn {number} would now "
                    "hold a different message: published turn numbers are frozen. Import it "
                    "under another slug instead."
                )

    def _write_versions(self) -> None:
        if not self.versions:
            return
        batch = self.batch_pks
        earlier = self._turn_pks(
            sorted({s.turn for s, _ in self.versions if s.turn is not None and s.turn not in batch})
        )
        created = KernelVersion.objects.bulk_create(
            KernelVersion(
                kernel=kernel,
                number=spec.number,
                source=spec.source,
                sha256=sha256_text(spec.source),
                turn_id=batch.get(spec.turn) or earlier.get(spec.turn),
                note=spec.note,
                expected_status=spec.expected_status,
                harness_override=spec.harness_override,
                meta=spec.meta,
            )
            for spec, kernel in self.versions
        )
        for (spec, kernel), version in zip(self.versions, created, strict=True):
            self._remember((kernel.name, spec.number), version.pk)
            if spec.turn is not None and version.turn_id is None:
                self.waiting_versions.append((version.pk, spec.turn))
        self.version_count += len(created)
        self.versions = []

    def _remember(self, key: tuple[str, int], pk: int) -> None:
        self.version_cache[key] = pk
        self.version_cache.move_to_end(key)
        if len(self.version_cache) > self.VERSION_CACHE:
            self.version_cache.popitem(last=False)

    def _version_pk(self, key: tuple[str, int]) -> int | None:
        if key in self.version_cache:
            self.version_cache.move_to_end(key)
            return self.version_cache[key]
        kernel = self.kernels.get(key[0])
        if kernel is None:
            return None
        pk = kernel.versions.filter(number=key[1]).values_list("pk", flat=True).first()
        if pk is not None:
            self._remember(key, pk)
        return pk

    def _turn_pks(self, numbers: list[int]) -> dict[int, int]:
        """The pks of turns this import wrote, by number."""
        found: dict[int, int] = {}
        for start in range(0, len(numbers), self.batch_size):
            chunk = numbers[start : start + self.batch_size]
            found.update(
                Turn.objects.filter(session=self.session, number__in=chunk)
                .filter(pk__gt=self.old_max_pk)
                .values_list("number", "pk")
            )
        return found

    def finish(self) -> None:
        self.flush()
        leftover = Turn.objects.filter(session=self.session, pk__lte=self.old_max_pk)
        if self.frozen and leftover.exists():
            lost = sorted(leftover.values_list("number", flat=True))
            listed = ", ".join(str(n) for n in lost[:10]) + (" …" if len(lost) > 10 else "")
            raise ImportProblem(
                f"Session '{self.session.slug}' is published and the file drops turns "
                f"{listed}: published turn numbers are frozen."
            )
        leftover.delete()

        turn_pks = self._turn_pks(sorted({number for _, number in self.waiting_versions}))
        pairs = []
        for version_pk, number in self.waiting_versions:
            if number not in turn_pks:
                raise ImportProblem(f"A kernel version refers to turn {number}, which is missing.")
            pairs.append((turn_pks[number], version_pk))
        _set_column(KernelVersion, "turn_id", pairs)

        turn_pks = self._turn_pks(sorted({number for number, _ in self.waiting_turns}))
        pairs = []
        for number, (name, version) in self.waiting_turns:
            version_pk = self._version_pk((name, version))
            if version_pk is None:
                raise ImportProblem(
                    f"turn {number}: refers to kernel '{name}' version {version}, which is "
                    "not in the file."
                )
            pairs.append((version_pk, turn_pks[number]))
        _set_column(Turn, "kernel_version_id", pairs)


def _set_column(model, column: str, pairs: list[tuple[int, int]]) -> None:
    """UPDATE model SET column = value WHERE id = pk, for (value, pk) pairs, in one go.

    bulk_update() writes one CASE WHEN per row, which is slow for thousands of rows;
    executemany of a one-row UPDATE is a fraction of that on SQLite and PostgreSQL.
    """
    if not pairs:
        return
    quote = connection.ops.quote_name
    table, column = quote(model._meta.db_table), quote(column)
    # Names from our own models, quoted; the values are parameters.
    sql = f"UPDATE {table} SET {column} = %s WHERE id = %s"  # noqa: S608
    with connection.cursor() as cursor:
        cursor.executemany(sql, pairs)


def write_session(
    spec: SessionSpec,
    items: Iterable[TurnSpec | KernelSpec | VersionSpec],
    *,
    owner=None,
    batch_size: int | None = None,
) -> Written:
    """Write one session and everything in it, or nothing.

    A session that exists is updated in place: its turns and kernels are replaced. When
    it has been published, its turn numbers are frozen: the new content must keep every
    old number, and a number must keep holding the same recorded message (same
    meta.source_id), or the import is refused.
    """
    notes: list[str] = []
    with transaction.atomic():
        session, created = _claim_session(spec, owner, notes)
        frozen = session.is_published
        for key, value in (spec.defaults if created else {}).items():
            setattr(session, key, value)
        for key, value in spec.fields.items():
            # Numbers handed out once stay frozen: the first publication date stays too.
            if key != "published_at" or session.published_at is None:
                setattr(session, key, value)
        if spec.source_key:
            holder = Session.objects.filter(source_key=spec.source_key).exclude(pk=session.pk)
            if holder.exists():
                notes.append(
                    f"Session '{holder.first().slug}' already holds this recording's source "
                    "key, so this copy has none."
                )
                session.source_key = ""
            else:
                session.source_key = spec.source_key
        session.save()
        if spec.tags is not None:
            session.tags.set(
                Tag.objects.get_or_create(slug=slugify(name), defaults={"name": name})[0]
                for name in spec.tags
            )
        session.kernels.all().delete()
        batches = _Batches(session, frozen, batch_size or WRITE_BATCH)
        for item in items:
            batches.add(item)
        batches.finish()
        session.touch()
    return Written(
        session=session,
        created=created,
        turns=batches.turn_count,
        kernels=len(batches.kernels),
        versions=batches.version_count,
        notes=notes,
    )


def _kernelbin_items(plan: _Plan) -> Iterable[TurnSpec | KernelSpec | VersionSpec]:
    for turn in plan.turns:
        yield TurnSpec(**turn)
    for kernel in plan.kernels:
        yield KernelSpec(name=kernel["name"], title=kernel["title"], harness=kernel["harness"])
        for version in kernel["versions"]:
            yield VersionSpec(kernel=kernel["name"], **version)


def import_session(
    data: Any,
    *,
    slug: str | None = None,
    title: str | None = None,
    visibility: str | None = None,
    source: str | None = None,
    owner=None,
    scrubber: Scrubber | None = None,
) -> ImportReport:
    """Validate a kernelbin/1 document and write it: a new session, or an update in place.

    The file is the authority here: every session field is set from it (a Claude Code
    re-import, by contrast, keeps what a curator changed). With a scrubber, every string
    in the document is cleaned (and redacted) before validation.
    """
    if scrubber is not None:
        data = scrubber.value(data)
    plan = _validate(data)
    fields = dict(plan.session)
    if slug is not None:
        fields["slug"] = slug
    if title is not None:
        fields["title"] = title
    if visibility is not None:
        fields["visibility"] = _choice(visibility, Session.Visibility, "visibility")
    fields["source"] = source or fields["source"] or Session.Source.IMPORTED
    session_slug = fields.pop("slug")
    source_key = fields.pop("source_key")
    for key in ("created", "published_at"):
        if not fields[key]:
            del fields[key]
    spec = SessionSpec(slug=session_slug, fields=fields, tags=plan.tags, source_key=source_key)
    written = write_session(spec, _kernelbin_items(plan), owner=owner)
    redaction = scrubber.summary() if scrubber else ""
    return ImportReport.of(written, redaction=redaction, notes=written.notes)
