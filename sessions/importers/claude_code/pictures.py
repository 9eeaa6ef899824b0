"""Images in a transcript (pasted into a prompt, returned by a tool) kept for the page:
re-encoded by sessions.images, stored once each, named in the turn's meta."""

from __future__ import annotations

from typing import Any

from sessions.images import ImageRefused, from_base64
from sessions.importers.claude_code.index import Stats
from sessions.importers.specs import ImageSpec


def keep(
    blocks: list[dict[str, Any]], stats: Stats
) -> tuple[list[ImageSpec], list[dict[str, Any]], list[str]]:
    """The image blocks cleaned: what to store, the refs for the turn's meta["images"],
    and a note for each image that could not be kept (in the turn, where it was)."""
    specs: list[ImageSpec] = []
    refs: list[dict[str, Any]] = []
    notes: list[str] = []
    for block in blocks:
        source = block.get("source")
        data = source.get("data") if isinstance(source, dict) else None
        if not isinstance(source, dict) or source.get("type") != "base64" or not data:
            why = "its data is not in the transcript"
        else:
            try:
                image = from_base64(str(data))
            except ImageRefused as refused:
                why = str(refused)
            else:
                stats.images_kept += 1
                specs.append(
                    ImageSpec(
                        sha256=image.sha256,
                        content_type=image.content_type,
                        data=image.data,
                        width=image.width,
                        height=image.height,
                    )
                )
                refs.append(image.ref)
                continue
        stats.images_refused[why] += 1
        notes.append(f"*[An image was not kept: {why}.]*")
    return specs, refs, notes
