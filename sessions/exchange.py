"""Kernelbin's own exchange format, "kernelbin/1": export, validation and import.

The JSON export re-imports losslessly. A file is validated whole before anything is
written, and the write is one transaction, so a bad file changes nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import IO, Any

from django.conf import settings
from django.db import transaction
from django.utils.dateparse import parse_datetime
from django.utils.text import slugify

from kernels.harness import HarnessError, parse_harness
from kernels.models import Kernel, KernelVersion
from kernels.outcomes import Status
from sessions.markdown import render_markdown
from sessions.models import Session, Tag, Turn

FORMAT = "kernelbin/1"


class ImportProblem(Exception):
    """A file that cannot be imported; the message says where and why."""


@dataclass
class ImportReport:
    session: Session
    created: bool
    turns: int
    kernels: int
    versions: int

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


def _fence(text: str) -> str:
    """A backtick fence longer than any run of backticks inside the text."""
    longest, run = 0, 0
    for char in text:
        run = run + 1 if char == "`" else 0
        longest = max(longest, run)
    return "`" * max(3, longest + 1)


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
            fence = _fence(version.source)
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


def import_session(
    data: Any,
    *,
    slug: str | None = None,
    title: str | None = None,
    visibility: str | None = None,
    source: str | None = None,
    owner=None,
) -> ImportReport:
    """Validate a kernelbin/1 document and write it: a new session, or an update in place."""
    plan = _validate(data)
    fields = plan.session
    if slug is not None:
        fields["slug"] = slug
    if title is not None:
        fields["title"] = title
    if visibility is not None:
        fields["visibility"] = _choice(visibility, Session.Visibility, "visibility")
    fields["source"] = source or fields["source"] or Session.Source.IMPORTED

    with transaction.atomic():
        session = Session.objects.select_for_update().filter(slug=fields["slug"]).first()
        created = session is None
        if created:
            session = Session(slug=fields["slug"], owner=owner)
        elif session.is_published:
            kept = {turn["number"] for turn in plan.turns}
            lost = session.turns.exclude(number__in=kept).values_list("number", flat=True)
            if lost:
                listed = ", ".join(str(n) for n in sorted(lost)[:10])
                raise ImportProblem(
                    f"Session '{session.slug}' is published and the file drops turns {listed}: "
                    "published turn numbers are frozen."
                )
        for key in ("title", "summary", "learner", "tutor_model", "source", "source_key"):
            setattr(session, key, fields[key])
        session.visibility = fields["visibility"]
        if fields["created"]:
            session.created = fields["created"]
        if fields["published_at"] and not session.published_at:
            session.published_at = fields["published_at"]
        session.save()
        session.tags.set(
            Tag.objects.get_or_create(slug=slugify(name), defaults={"name": name})[0]
            for name in plan.tags
        )

        session.kernels.all().delete()
        session.turns.all().delete()
        turns = Turn.objects.bulk_create(
            Turn(
                session=session,
                number=turn["number"],
                role=turn["role"],
                content=turn["content"],
                html=render_markdown(turn["content"]),
                timestamp=turn["timestamp"],
                meta=turn["meta"],
            )
            for turn in plan.turns
        )
        turn_by_number = {turn.number: turn for turn in turns}
        versions = {}
        for spec in plan.kernels:
            kernel = Kernel.objects.create(
                session=session, name=spec["name"], title=spec["title"], harness=spec["harness"]
            )
            for vspec in spec["versions"]:
                version = KernelVersion(
                    kernel=kernel,
                    number=vspec["number"],
                    source=vspec["source"],
                    turn=turn_by_number.get(vspec["turn"]),
                    note=vspec["note"],
                    expected_status=vspec["expected_status"],
                    harness_override=vspec["harness_override"],
                    meta=vspec["meta"],
                )
                version.save()
                versions[(kernel.name, version.number)] = version
        linked = []
        for spec, turn in zip(plan.turns, turns, strict=True):
            if spec["kernel"] is not None:
                turn.kernel_version = versions[spec["kernel"]]
                linked.append(turn)
        Turn.objects.bulk_update(linked, ["kernel_version"])
        session.touch()

    return ImportReport(
        session=session,
        created=created,
        turns=len(turns),
        kernels=len(plan.kernels),
        versions=len(versions),
    )
