"""A session as a file: the kernelbin/1 JSON export, which re-imports losslessly
(sessions.importers.kernelbin reads it), and a Markdown export for reading."""

from __future__ import annotations

import base64
from datetime import datetime
from typing import Any

from django.urls import reverse

from sessions.importers.kernelbin import FORMAT
from sessions.markdown import fence_for
from sessions.models import Session, Turn
from sessions.programs import Blob, Kernel


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def _content(data: bytes) -> dict[str, str]:
    """A file's content: as text when it is UTF-8 (so an import can redact it), else
    as base64."""
    try:
        return {"text": data.decode("utf-8")}
    except UnicodeDecodeError:
        return {"data": base64.b64encode(data).decode()}


def _states(session: Session) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The session's program states, each file named by its content's sha256, and the
    contents, each once."""
    states = session.states.prefetch_related("files").order_by("number")
    listed = [
        {
            "number": state.number,
            "kind": state.kind,
            "entry": state.entry,
            "files": {file.path: file.blob_id for file in state.files.all()},
            "modules": state.modules,
        }
        for state in states
    ]
    shas = sorted({sha for state in listed for sha in state["files"].values()})
    blobs = Blob.objects.filter(pk__in=shas).order_by("pk").values_list("pk", "data")
    return listed, [{"sha256": sha, **_content(bytes(data))} for sha, data in blobs]


def export_session(session: Session) -> dict[str, Any]:
    turns = session.turns.select_related("kernel_version__kernel", "state").order_by("number")
    kernels = session.kernels.prefetch_related("versions__turn", "versions__state").order_by("name")
    states, contents = _states(session)
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
        "turns": [_turn(turn) for turn in turns],
        "kernels": [_kernel(kernel) for kernel in kernels],
        # The learner's project after each turn that changed it, and its files' contents.
        "states": states,
        "contents": contents,
        # What the session's host programs fetch(), whole, as base64.
        "files": [
            {
                "name": file.name,
                "content_type": file.content_type,
                "sha256": file.sha256,
                "data": base64.b64encode(bytes(file.data)).decode(),
            }
            for file in session.files.order_by("name")
        ],
        # The pictures the turns show (meta["images"] names them by sha256), as base64.
        "images": [
            {
                "sha256": image.sha256,
                "content_type": image.content_type,
                "width": image.width,
                "height": image.height,
                "data": base64.b64encode(bytes(image.data)).decode(),
            }
            for image in session.images.order_by("sha256")
        ],
    }


def _turn(turn: Turn) -> dict[str, Any]:
    return {
        "number": turn.number,
        "role": turn.role,
        "content": turn.content,
        "timestamp": _iso(turn.timestamp),
        "meta": turn.meta,
        "kernel": {"name": turn.kernel_version.kernel.name, "version": turn.kernel_version.number}
        if turn.kernel_version
        else None,
        **({"hidden": True} if turn.hidden else {}),
        **({"state": turn.state.number} if turn.state else {}),
    }


def _kernel(kernel: Kernel) -> dict[str, Any]:
    return {
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
                "host_program": version.host_program,
                "meta": version.meta,
                **({"state": version.state.number} if version.state else {}),
            }
            for version in kernel.versions.all()
        ],
    }


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
    # Hidden turns are out of the reader's way here too (the JSON export keeps them, with
    # their flag, so that it re-imports whole).
    turns = session.turns.shown().select_related("kernel_version__kernel").order_by("number")
    for turn in turns:
        heading = f"## Turn {turn.number} · {turn.get_role_display()}"
        if turn.kernel_version:
            version = turn.kernel_version
            heading += f" · kernel `{version.kernel.name}` v{version.number}"
        lines += [heading, "", turn.content.rstrip(), ""]
        for k, image in enumerate(turn.meta.get("images") or [], 1):
            url = reverse("sessions:image", args=[session.slug, image.get("name", "")])
            lines += [f"[Image {k} ({image.get('width')}×{image.get('height')})]({url})", ""]
    for kernel in session.kernels.prefetch_related("versions").order_by("name"):
        lines += [f"## Kernel `{kernel.name}`", ""]
        for version in kernel.versions.all():
            note = f": {version.note}" if version.note else ""
            fence = fence_for(version.source)
            lines += [f"### v{version.number}{note}", "", f"{fence}wgsl", version.source.rstrip()]
            lines += [fence, ""]
            if version.host_program:
                fence = fence_for(version.host_program)
                lines += ["Host program:", "", f"{fence}javascript", version.host_program.rstrip()]
                lines += [fence, ""]
    return "\n".join(lines)
