"""Staff uploads imported off the request.

The request that brings a transcript (with its project's files) or a session's files
spools them to a folder of their own, records an Upload and answers with the upload's
page at once. A thread of the same web process then imports them through the same
importers as the command (sessions/importers), telling the Upload how many turns are
written after each batch, and records the report or the error; the spooled files are
deleted either way. The page reloads itself until the upload is done. An upload whose
process ended under it (a restart) is said to be lost when its page is next opened.
"""

from __future__ import annotations

import logging
import shutil
import threading
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.files.uploadedfile import UploadedFile
from django.db import close_old_connections, transaction
from django.utils import timezone

from config import processes
from sessions.importers.files import import_file
from sessions.importers.options import ImportOptions
from sessions.importers.project_files import ProjectFiles, add_files, read_uploads
from sessions.importers.specs import ImportProblem
from sessions.models import Session, Upload

logger = logging.getLogger(__name__)

CHUNK = 1024 * 1024
LOST = (
    "This upload stopped: the server process importing it ended (a restart) before it "
    "was done. Upload it again."
)


def queue(
    kind: str,
    owner: Any,
    options: dict[str, Any],
    files: list[UploadedFile],
    main: UploadedFile | None = None,
    session: Session | None = None,
) -> Upload:
    """Spool the uploaded files, record the upload and start importing it."""
    folder = Path(settings.UPLOAD_SPOOL_DIR) / uuid.uuid4().hex
    folder.mkdir(parents=True)
    if main is not None:
        _spool(main, folder / "main")
        options = {**options, "name": main.name, "size": main.size}
    for index, file in enumerate(files):
        _spool(file, folder / f"file-{index}")
    listed = [[file.name, file.size] for file in files]
    upload = Upload.objects.create(
        kind=kind,
        owner=owner,
        session=session,
        options={**options, "files": listed},
        spool=str(folder),
        worker=processes.this_process(),
    )
    if settings.UPLOADS_IN_BACKGROUND:
        thread = threading.Thread(target=_in_thread, args=(upload.pk,), daemon=True)
        transaction.on_commit(thread.start)
    else:
        run(upload.pk)
    return upload


def _spool(upload: UploadedFile, path: Path) -> None:
    with path.open("wb") as out:
        for chunk in upload.chunks(CHUNK):
            out.write(chunk)


def _in_thread(upload_id: uuid.UUID) -> None:
    try:
        run(upload_id)
    finally:
        close_old_connections()


def run(upload_id: uuid.UUID) -> None:
    """Import a queued upload and record how it ended."""
    if not Upload.objects.filter(pk=upload_id, state=Upload.State.QUEUED).update(
        state=Upload.State.RUNNING
    ):
        return
    upload = Upload.objects.select_related("owner", "session").get(pk=upload_id)
    folder = Path(upload.spool)
    importing = upload.kind == Upload.Kind.IMPORT
    nothing = "Nothing was imported." if importing else "Nothing was added."
    try:
        done = _import(upload, folder) if importing else _add(upload, folder)
        values: dict[str, Any] = {"state": Upload.State.DONE, **done}
    except ImportProblem as problem:
        values = {"state": Upload.State.FAILED, "error": f"{problem} {nothing}"}
    except Exception as error:  # a thread of its own: whatever happens is said on its page
        logger.exception("Upload %s failed", upload_id)
        values = {
            "state": Upload.State.FAILED,
            "error": f"The upload failed on an unexpected problem ({type(error).__name__}). "
            f"{nothing}",
        }
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    Upload.objects.filter(pk=upload_id).update(**values, finished=timezone.now())


def _project_files(
    upload: Upload, folder: Path, opened: ExitStack[bool | None]
) -> ProjectFiles | None:
    listed = [
        (name, opened.enter_context((folder / f"file-{index}").open("rb")), size)
        for index, (name, size) in enumerate(upload.options["files"])
    ]
    return read_uploads(listed, upload.options.get("folder", "")) if listed else None


def _import(upload: Upload, folder: Path) -> dict[str, Any]:
    chosen = upload.options

    def progress(turns: int) -> None:
        Upload.objects.filter(pk=upload.pk).update(progress=f"{turns:,} turns written")

    with ExitStack() as opened:
        options = ImportOptions(
            title=chosen.get("title") or None,
            slug=chosen.get("slug") or None,
            visibility=chosen.get("visibility") or None,
            redact=bool(chosen.get("redact")),
            owner=upload.owner,
            files=_project_files(upload, folder, opened),
            progress=progress,
        )
        stream = opened.enter_context((folder / "main").open("rb"))
        report = import_file(stream, options=options, size=chosen["size"], name=chosen["name"])
    summary = {"summary": report.summary(), "details": report.details()}
    return {"session": report.session, "report": summary}


def _add(upload: Upload, folder: Path) -> dict[str, Any]:
    if upload.session is None:
        raise ImportProblem("The session these files were for is gone.")
    with ExitStack() as opened:
        found = _project_files(upload, folder, opened)
        notes = add_files(upload.session, found) if found else []
    return {"report": {"summary": "", "details": notes}}


def unless_lost(upload: Upload) -> Upload:
    """The upload, recorded as failed (its spooled files deleted) if the process
    importing it has ended."""
    if not upload.is_finished and processes.is_gone(upload.worker):
        Upload.objects.filter(pk=upload.pk, state=upload.state).update(
            state=Upload.State.FAILED, error=LOST, finished=timezone.now()
        )
        if upload.spool:
            shutil.rmtree(upload.spool, ignore_errors=True)
        upload.refresh_from_db()
    return upload
