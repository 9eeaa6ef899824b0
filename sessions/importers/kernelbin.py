"""Kernelbin's own exchange format, "kernelbin/1": reading and validating a file.

The JSON export (sessions.export) re-imports losslessly. A kernelbin/1 file is
validated whole, every error naming the path of the field at fault, before anything
is written; then the one writer (`writer.write_session`) writes it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from itertools import chain
from typing import IO, Any

from django.conf import settings
from django.db.models import TextChoices
from django.utils.dateparse import parse_datetime
from django.utils.text import slugify

from kernels.engine.harness import HarnessError, parse_harness
from kernels.engine.outcome import Status
from sessions import images
from sessions.importers.options import ImportOptions
from sessions.importers.redact import Scrubber
from sessions.importers.specs import (
    FileSpec,
    ImageSpec,
    ImportProblem,
    ImportReport,
    Item,
    KernelSpec,
    SessionSpec,
    StateSpec,
    TurnSpec,
    VersionSpec,
)
from sessions.importers.writer import write_session
from sessions.models import Session, Turn
from sessions.programs import Kernel, ProgramState, check_file_name

FORMAT = "kernelbin/1"


def read_export(stream: IO[bytes], size: int | None = None) -> Any:
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


def _get(
    obj: dict[str, Any],
    key: str,
    kind: type | tuple[type, ...],
    where: str,
    required: bool = True,
) -> Any:
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


def _timestamp(obj: dict[str, Any], key: str, where: str) -> datetime | None:
    value = _get(obj, key, str, where, required=False)
    if value is None:
        return None
    parsed = parse_datetime(value)
    if parsed is None:
        raise ImportProblem(f"{where}.{key}: not an ISO 8601 date-time: {value!r}.")
    return parsed


def _choice(value: str, choices: type[TextChoices], where: str) -> str:
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
    files: list[FileSpec]
    images: list[ImageSpec]
    states: list[StateSpec]


def _validate(data: Any) -> _Plan:
    if not isinstance(data, dict):
        raise ImportProblem("The file must hold a JSON object.")
    tag = data.get("format")
    if tag != FORMAT:
        raise ImportProblem(f"Unknown format {tag!r}: this importer reads '{FORMAT}' files.")
    session, tags = _validate_session(_get(data, "session", dict, "file"))
    turns = _validate_turns(_get(data, "turns", list, "file"))
    numbers = {turn["number"] for turn in turns}
    kernels = _validate_kernels(_get(data, "kernels", list, "file", required=False) or [], numbers)
    _check_kernel_refs(turns, kernels)
    states = _validate_states(
        _get(data, "states", list, "file", required=False) or [],
        _validate_contents(_get(data, "contents", list, "file", required=False) or []),
    )
    _check_state_refs(turns, kernels, {state.number for state in states})
    files = _validate_files(_get(data, "files", list, "file", required=False) or [])
    images = _validate_images(_get(data, "images", list, "file", required=False) or [], turns)
    return _Plan(
        session=session,
        tags=tags,
        turns=turns,
        kernels=kernels,
        files=files,
        images=images,
        states=states,
    )


def _validate_session(raw_session: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The session header's fields, and its tags."""
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
    return session, tags


def _validate_turns(raw_turns: list[Any]) -> list[dict[str, Any]]:
    turns: list[dict[str, Any]] = []
    numbers: set[int] = set()
    for index, raw in enumerate(raw_turns):
        turns.append(_validate_turn(raw, f"turns[{index}]", numbers))
    return turns


def _validate_turn(raw: Any, where: str, numbers: set[int]) -> dict[str, Any]:
    """One turn; `numbers` holds the numbers of the turns before it, and gets its own."""
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
    return {
        "number": number,
        "role": _choice(_get(raw, "role", str, where), Turn.Role, f"{where}.role"),
        "content": _get(raw, "content", str, where),
        "timestamp": _timestamp(raw, "timestamp", where),
        "meta": _get(raw, "meta", dict, where, required=False) or {},
        "kernel": kernel_ref,
        "hidden": bool(_get(raw, "hidden", bool, where, required=False)),
        "state": _get(raw, "state", int, where, required=False),
    }


def _validate_kernels(raw_kernels: list[Any], turn_numbers: set[int]) -> list[dict[str, Any]]:
    kernels: list[dict[str, Any]] = []
    for index, raw in enumerate(raw_kernels):
        kernels.append(_validate_kernel(raw, f"kernels[{index}]", kernels, turn_numbers))
    return kernels


def _validate_kernel(
    raw: Any, where: str, earlier: list[dict[str, Any]], turn_numbers: set[int]
) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise ImportProblem(f"{where}: must be an object.")
    name = _get(raw, "name", str, where)
    if problem := Kernel.name_problem(name):
        raise ImportProblem(f"{where}.name: {name!r} is not a valid kernel name. {problem}")
    if any(kernel["name"] == name for kernel in earlier):
        raise ImportProblem(f"{where}.name: kernel '{name}' appears more than once.")
    harness = _get(raw, "harness", dict, where, required=False) or {}
    _check_harness(harness, f"{where}.harness")
    versions: list[dict[str, Any]] = []
    for vindex, rawv in enumerate(_get(raw, "versions", list, where)):
        vwhere = f"{where}.versions[{vindex}]"
        versions.append(_validate_version(rawv, vwhere, versions, turn_numbers))
    title = _get(raw, "title", str, where, required=False) or ""
    return {"name": name, "title": title, "harness": harness, "versions": versions}


def _validate_version(
    rawv: Any, vwhere: str, earlier: list[dict[str, Any]], turn_numbers: set[int]
) -> dict[str, Any]:
    if not isinstance(rawv, dict):
        raise ImportProblem(f"{vwhere}: must be an object.")
    number = _get(rawv, "number", int, vwhere)
    if number < 1 or any(v["number"] == number for v in earlier):
        raise ImportProblem(f"{vwhere}.number: {number} is not a new number from 1 up.")
    turn = _get(rawv, "turn", int, vwhere, required=False)
    if turn is not None and turn not in turn_numbers:
        raise ImportProblem(f"{vwhere}.turn: there is no turn {turn} in this file.")
    override = _get(rawv, "harness_override", dict, vwhere, required=False)
    if override is not None:
        _check_harness(override, f"{vwhere}.harness_override")
    expected = _get(rawv, "expected_status", str, vwhere, required=False) or ""
    if expected and expected not in set(Status):
        raise ImportProblem(f"{vwhere}.expected_status: unknown status '{expected}'.")
    return {
        "number": number,
        "source": _get(rawv, "source", str, vwhere),
        "turn": turn,
        "note": _get(rawv, "note", str, vwhere, required=False) or "",
        "expected_status": expected,
        "harness_override": override,
        "host_program": _get(rawv, "host_program", str, vwhere, required=False) or "",
        "meta": _get(rawv, "meta", dict, vwhere, required=False) or {},
        "state": _get(rawv, "state", int, vwhere, required=False),
    }


def _validate_files(raw_files: list[Any]) -> list[FileSpec]:
    """The session's files: names a program can fetch, base64 that decodes to what its
    sha256 says, each under SESSION_FILE_MAX_BYTES."""
    files: list[FileSpec] = []
    for index, raw in enumerate(raw_files):
        where = f"files[{index}]"
        if not isinstance(raw, dict):
            raise ImportProblem(f"{where}: must be an object.")
        name = _get(raw, "name", str, where)
        try:
            check_file_name(name)
        except ValueError as error:
            raise ImportProblem(f"{where}.name: {error}") from None
        if any(file.name == name for file in files):
            raise ImportProblem(f"{where}.name: file '{name}' appears more than once.")
        data = _decoded(_get(raw, "data", str, where), f"{where}.data")
        sha256 = _get(raw, "sha256", str, where, required=False)
        if sha256 is not None and sha256 != hashlib.sha256(data).hexdigest():
            raise ImportProblem(f"{where}.data: its sha256 is not the one the file gives.")
        content_type = _get(raw, "content_type", str, where, required=False) or ""
        files.append(FileSpec(name=name, data=data, content_type=content_type[:100]))
    return files


def _decoded(encoded: str, where: str) -> bytes:
    """A file's base64, decoded: refused before decoding when it is over the file limit."""
    limit = settings.SESSION_FILE_MAX_BYTES
    if len(encoded) > 4 * (limit // 3 + 1):
        raise ImportProblem(f"{where}: the file is over the limit of {limit:,} bytes.")
    try:
        return base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise ImportProblem(f"{where}: not base64.") from None


def _validate_contents(raw_contents: list[Any]) -> dict[str, bytes]:
    """The contents of the states' files, by the name (a sha256) the states use: text
    (as an import from outside has redacted it) or base64, each under the file limit."""
    contents: dict[str, bytes] = {}
    limit = settings.SESSION_FILE_MAX_BYTES
    for index, raw in enumerate(raw_contents):
        where = f"contents[{index}]"
        if not isinstance(raw, dict):
            raise ImportProblem(f"{where}: must be an object.")
        key = _get(raw, "sha256", str, where)
        text = _get(raw, "text", str, where, required=False)
        if text is not None:
            data = text.encode()
        else:
            data = _decoded(_get(raw, "data", str, where), f"{where}.data")
        if len(data) > limit:
            raise ImportProblem(f"{where}: over the limit of {limit:,} bytes.")
        contents[key] = data
    return contents


def _validate_states(raw_states: list[Any], contents: dict[str, bytes]) -> list[StateSpec]:
    states: list[StateSpec] = []
    for index, raw in enumerate(raw_states):
        where = f"states[{index}]"
        if not isinstance(raw, dict):
            raise ImportProblem(f"{where}: must be an object.")
        number = _get(raw, "number", int, where)
        if number < 1 or any(state.number == number for state in states):
            raise ImportProblem(f"{where}.number: {number} is not a new number from 1 up.")
        kind = _choice(_get(raw, "kind", str, where), ProgramState.Kind, f"{where}.kind")
        files: dict[str, str | bytes] = {}
        for path, key in _get(raw, "files", dict, where).items():
            try:
                check_file_name(path)
            except ValueError as error:
                raise ImportProblem(f"{where}.files: {error}") from None
            if not isinstance(key, str) or key not in contents:
                raise ImportProblem(f"{where}.files[{path!r}]: its content is not in the file.")
            files[path] = contents[key]
        entry = _get(raw, "entry", str, where, required=False) or ""
        if entry and entry not in files:
            raise ImportProblem(f"{where}.entry: '{entry}' is not one of the state's files.")
        modules = []
        for m_index, module in enumerate(_get(raw, "modules", list, where, required=False) or []):
            m_where = f"{where}.modules[{m_index}]"
            if not isinstance(module, dict):
                raise ImportProblem(f"{m_where}: must be an object.")
            modules.append(
                (_get(module, "kernel", str, m_where), _get(module, "version", int, m_where))
            )
        states.append(
            StateSpec(number=number, files=files, entry=entry, kind=kind, modules=modules)
        )
    return states


def _check_state_refs(
    turns: list[dict[str, Any]], kernels: list[dict[str, Any]], numbers: set[int]
) -> None:
    """Every program state a turn or a version names is in the file."""
    named = [(f"turn {turn['number']}", turn["state"]) for turn in turns]
    named += [
        (f"kernel '{kernel['name']}' version {version['number']}", version["state"])
        for kernel in kernels
        for version in kernel["versions"]
    ]
    for who, number in named:
        if number is not None and number not in numbers:
            raise ImportProblem(
                f"{who}: refers to program state {number}, which is not in the file."
            )


def _validate_images(raw_images: list[Any], turns: list[dict[str, Any]]) -> list[ImageSpec]:
    """The session's pictures, re-encoded here as on any import (the bytes of a file are
    never trusted); the turns that name one by its old sha256 are pointed at the new."""
    found: dict[str, ImageSpec] = {}
    renamed: dict[str, dict[str, Any]] = {}
    for index, raw in enumerate(raw_images):
        where = f"images[{index}]"
        if not isinstance(raw, dict):
            raise ImportProblem(f"{where}: must be an object.")
        try:
            image = images.from_base64(_get(raw, "data", str, where))
        except images.ImageRefused as refused:
            raise ImportProblem(f"{where}.data: {refused}.") from None
        found[image.sha256] = ImageSpec(
            sha256=image.sha256,
            content_type=image.content_type,
            data=image.data,
            width=image.width,
            height=image.height,
        )
        renamed[str(raw.get("sha256", image.sha256))] = image.ref
    for turn in turns:
        refs = turn["meta"].get("images")
        if isinstance(refs, list):
            turn["meta"]["images"] = [
                renamed[ref["sha256"]]
                for ref in refs
                if isinstance(ref, dict) and ref.get("sha256") in renamed
            ]
    return list(found.values())


def _check_kernel_refs(turns: list[dict[str, Any]], kernels: list[dict[str, Any]]) -> None:
    """Every kernel version a turn points at is in the file."""
    known = {
        (kernel["name"], version["number"]) for kernel in kernels for version in kernel["versions"]
    }
    for turn in turns:
        if turn["kernel"] is not None and turn["kernel"] not in known:
            name, number = turn["kernel"]
            raise ImportProblem(
                f"turn {turn['number']}: refers to kernel '{name}' version {number}, "
                "which is not in the file."
            )


def _check_harness(harness: dict[str, Any], where: str) -> None:
    if not harness:
        return
    try:
        parse_harness(harness)
    except HarnessError as error:
        raise ImportProblem(f"{where}: {error}") from None


def _items(plan: _Plan) -> Iterator[Item]:
    yield from plan.states
    for turn in plan.turns:
        yield TurnSpec(**turn)
    for kernel in plan.kernels:
        yield KernelSpec(name=kernel["name"], title=kernel["title"], harness=kernel["harness"])
        for version in kernel["versions"]:
            yield VersionSpec(kernel=kernel["name"], **version)
    yield from plan.files
    yield from plan.images


def import_session(
    data: Any, *, options: ImportOptions | None = None, source: str | None = None
) -> ImportReport:
    """Validate a kernelbin/1 document and write it: a new session, or an update in place.

    The file is the authority here: every session field is set from it, unless the
    options say otherwise (a Claude Code re-import, by contrast, keeps what a curator
    changed). A file brought from outside comes with options: every string in it is
    cleaned (and redacted, unless they turn that off) before validation. Without options,
    as for the showcase we ship, the document is taken as written.
    """
    scrubber = None if options is None else Scrubber(options.redact)
    if scrubber is not None:
        scrubber.learn(data)
        data = scrubber.value(data)
    options = options or ImportOptions()
    plan = _validate(data)
    fields = dict(plan.session)
    if options.slug is not None:
        fields["slug"] = options.slug
    if options.title is not None:
        fields["title"] = options.title
    if options.visibility is not None:
        fields["visibility"] = _choice(options.visibility, Session.Visibility, "visibility")
    fields["source"] = source or fields["source"] or Session.Source.IMPORTED
    session_slug = fields.pop("slug")
    source_key = fields.pop("source_key")
    for key in ("created", "published_at"):
        if not fields[key]:
            del fields[key]
    spec = SessionSpec(
        slug=session_slug,
        fields=fields,
        tags=plan.tags,
        source_key=source_key,
        replace_files=True,
    )
    items = _items(plan)
    if options.files is not None:
        # Given with the file: they join (or replace) the files the export carries.
        files = options.files.files.items()
        items = chain(items, (FileSpec.of(name, data) for name, data in files))
    written = write_session(spec, items, owner=options.owner, progress=options.progress)
    redaction = scrubber.summary() if scrubber else ""
    return ImportReport.of(written, format=FORMAT, redaction=redaction, notes=written.notes)
