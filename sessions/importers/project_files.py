"""A project's other files (trained weights, test data) brought in with a transcript, or
added to a session later: from a folder, a zip or tar archive, or an upload of many files.

Each file is named by its path in the project (the folder or archive is the project's
root: `weights/w1.bin` is fetched as `weights/w1.bin`). Names a program could not fetch,
links, hidden folders (`.git`), and files over SESSION_FILE_MAX_BYTES are left out and
said so; the whole set is capped (PROJECT_FILES_MAX_BYTES, PROJECT_FILES_MAX_COUNT), read
no further than the cap whatever an archive's headers claim.

`fetched_paths` lists what a program fetch()es by a literal path, for the import report.
"""

from __future__ import annotations

import hashlib
import mimetypes
import re
import tarfile
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, BinaryIO, cast

from django.conf import settings
from django.db import transaction

from sessions.importers.claude_code.scripts import read_program
from sessions.importers.specs import ImportProblem
from sessions.models import Session
from sessions.programs import SessionFile, check_file_name


@dataclass
class ProjectFiles:
    """The files found, by path, and what was left out (path, why)."""

    files: dict[str, bytes] = field(default_factory=dict)
    left_out: list[tuple[str, str]] = field(default_factory=list)

    @property
    def size(self) -> int:
        return sum(len(data) for data in self.files.values())

    def add(self, path: str, read: IO[bytes] | bytes, declared: int | None = None) -> None:
        """Add one file, unless its name, its size or the caps say no."""
        name = _project_name(path)
        if name is None:
            return
        try:
            check_file_name(name)
        except ValueError:
            self.left_out.append((name, "not a name a program can fetch"))
            return
        per_file = settings.SESSION_FILE_MAX_BYTES
        if declared is not None and declared > per_file:
            self.left_out.append((name, f"larger than {per_file:,} bytes"))
            return
        if len(self.files) >= settings.PROJECT_FILES_MAX_COUNT:
            raise ImportProblem(
                f"More than {settings.PROJECT_FILES_MAX_COUNT:,} files: add the ones the "
                "programs need."
            )
        data = read if isinstance(read, bytes) else read.read(per_file + 1)
        if len(data) > per_file:
            self.left_out.append((name, f"larger than {per_file:,} bytes"))
            return
        if self.size + len(data) > settings.PROJECT_FILES_MAX_BYTES:
            raise ImportProblem(
                f"The files come to more than {settings.PROJECT_FILES_MAX_BYTES:,} bytes: "
                "add the ones the programs need."
            )
        self.files[name] = data

    def notes(self) -> list[str]:
        lines = []
        if self.files:
            lines.append(f"Attached {len(self.files)} project file(s) ({self.size:,} bytes).")
        for name, why in self.left_out[:10]:
            lines.append(f"Left out {name}: {why}.")
        if len(self.left_out) > 10:
            lines.append(f"… and {len(self.left_out) - 10} more left out.")
        return lines


def _project_name(path: str) -> str | None:
    """The path in the project, or None for what is not a project file (hidden folders
    and files, macOS archive litter)."""
    parts = [part for part in re.split(r"[\\/]+", path) if part and part != "."]
    if not parts or any(part.startswith(".") or part == "__MACOSX" for part in parts):
        return None
    return "/".join(parts)


def read_folder(root: Path) -> ProjectFiles:
    """Every file under root, named by its path from root; links are left out."""
    if not root.is_dir():
        raise ImportProblem(f"{root} is not a folder.")
    found = ProjectFiles()
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root).as_posix()
        if path.is_symlink():
            found.left_out.append((relative, "a link"))
        elif path.is_file() and _project_name(relative):
            with path.open("rb") as handle:
                found.add(relative, handle, path.stat().st_size)
    return found


def read_archive(stream: BinaryIO, name: str = "") -> ProjectFiles:
    """The files of a zip or tar (optionally gzip-compressed) archive, named by their
    paths in it. An archive whose files all sit in one folder named as the archive is
    (project.zip holding project/…) is read from inside that folder."""
    head = stream.read(4)
    stream.seek(0)
    found = ProjectFiles()
    try:
        if head.startswith(b"PK\x03\x04"):
            archive = zipfile.ZipFile(stream)
            infos = [i for i in archive.infolist() if not i.is_dir()]
            top = _own_top([i.filename for i in infos], name)
            for info in infos:
                with archive.open(info) as handle:
                    found.add(_strip(info.filename, top), handle, info.file_size)
            return found
        with tarfile.open(fileobj=stream, mode="r:*") as tar:
            regular = [m for m in tar.getmembers() if m.isfile()]
            found.left_out += [(m.name, "a link") for m in tar.getmembers() if m.issym()]
            top = _own_top([m.name for m in regular], name)
            for member in regular:
                extracted = tar.extractfile(member)
                if extracted is not None:
                    found.add(_strip(member.name, top), extracted, member.size)
            return found
    except (zipfile.BadZipFile, tarfile.TarError, EOFError, OSError) as error:
        raise ImportProblem(
            f"{name or 'The archive'} is not a zip or tar archive that can be read ({error})."
        ) from None


def read_uploads(uploads: Iterable[tuple[str, IO[bytes], int]], folder: str = "") -> ProjectFiles:
    """Files uploaded together: (name, stream, size), put in the project's folder; one
    archive alone is read as an archive (the project's root)."""
    listed = list(uploads)
    if len(listed) == 1 and listed[0][0].lower().endswith(ARCHIVE_SUFFIXES):
        return read_archive(cast(BinaryIO, listed[0][1]), listed[0][0])
    found = ProjectFiles()
    prefix = "/".join(part for part in folder.replace("\\", "/").split("/") if part)
    for name, handle, size in listed:
        found.add(f"{prefix}/{name}" if prefix else name, handle, size)
    return found


ARCHIVE_SUFFIXES = (".zip", ".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz")


def _common_top(paths: list[str]) -> str:
    """The one folder every path is in ("" when there is none, or only one file)."""
    tops = {PurePosixPath(path.replace("\\", "/")).parts[0] for path in paths if path}
    if len(tops) != 1 or any("/" not in path.replace("\\", "/") for path in paths):
        return ""
    return tops.pop()


def _own_top(paths: list[str], archive: str) -> str:
    """The archive's one top folder, when it is named as the archive is."""
    top = _common_top(paths)
    stem = PurePosixPath(archive.replace("\\", "/")).name
    for suffix in sorted(ARCHIVE_SUFFIXES, key=len, reverse=True):
        if stem.lower().endswith(suffix):
            stem = stem[: -len(suffix)]
            break
    return top if top and top == stem else ""


def _strip(path: str, top: str) -> str:
    path = path.replace("\\", "/")
    return path[len(top) + 1 :] if top and path.startswith(top + "/") else path


# fetch("path") or fetch('path') or fetch(`path`) with no ${...}: what a program reads by
# a literal path. [^...]{1,200} bounds each try, so the scan is linear.
_FETCH = re.compile(r"""\bfetch\s*\(\s*(["'`])([^"'`\n$]{1,200})\1""")
_FETCH_BUILT = re.compile(r"""\bfetch\s*\(\s*(?![\s"'`])|\bfetch\s*\(\s*`[^`\n]{0,200}\$\{""")


def fetched_paths(code: str, entry: str = "") -> tuple[list[str], int]:
    """The project paths a program fetch()es by a literal path (resolved against its
    entry's folder, as a browser resolves them against the page), and how many of its
    fetch() calls build their path at run time (not checked)."""
    folder = PurePosixPath(entry).parent
    found = []
    for match in _FETCH.finditer(code):
        raw = match[2].strip()
        if re.match(r"[a-z][a-z0-9+.-]*:", raw, re.I) or raw.startswith("//"):
            continue  # another site's file: not the project's
        path = raw.split("?", 1)[0].split("#", 1)[0]
        joined = path.lstrip("/") if path.startswith("/") else str(folder / path)
        parts: list[str] = []
        for part in joined.split("/"):
            if part in ("", "."):
                continue
            if part == "..":
                if parts:
                    parts.pop()
                continue
            parts.append(part)
        if parts and (name := "/".join(parts)) not in found:
            found.append(name)
    return found, len(_FETCH_BUILT.findall(code))


def fetch_report(session: Session) -> list[str]:
    """Every file the session's programs fetch() by a literal path, and which of them
    neither the program's state nor the session's files hold, for the import report."""
    session_files = set(SessionFile.objects.filter(session=session).values_list("name", flat=True))
    fetched: dict[str, list[int]] = {}  # path → the states missing it
    built = 0
    for state in session.states.exclude(entry="").prefetch_related("files__blob"):
        files = {f.path: f for f in state.files.all()}
        entry = files.get(state.entry)
        if entry is None:
            continue
        host = read_program(state.entry, bytes(entry.blob.data).decode("utf-8", "replace")).host
        paths, dynamic = fetched_paths(host, state.entry)
        built += dynamic
        for path in paths:
            missing = fetched.setdefault(path, [])
            if path not in files and path not in session_files:
                missing.append(state.number)
    if not fetched and not built:
        return []
    lines = []
    if fetched:
        lines.append(f"The programs fetch {len(fetched)} file(s): {', '.join(fetched)}.")
        if absent := {path: numbers for path, numbers in fetched.items() if numbers}:
            for path, numbers in absent.items():
                lines.append(
                    f"Missing: {path} (fetched in program state(s) "
                    f"{', '.join(str(n) for n in numbers[:10])}): add it to the session's files."
                )
        else:
            lines.append("Every file they fetch is there.")
    if built:
        lines.append(f"{built} fetch() call(s) build their path at run time: not checked.")
    return lines


def add_files(session: Session, found: ProjectFiles) -> list[str]:
    """Put the files in the session's files (replacing those of the same name) in one
    transaction; the notes to show: what was added and what the programs still lack."""
    with transaction.atomic():
        SessionFile.objects.filter(session=session, name__in=list(found.files)).delete()
        SessionFile.objects.bulk_create(
            SessionFile(
                session=session,
                name=name,
                data=data,
                size=len(data),
                sha256=hashlib.sha256(data).hexdigest(),
                content_type=mimetypes.guess_type(name)[0] or "",
            )
            for name, data in found.files.items()
        )
        session.touch()
    return found.notes() + fetch_report(session)
