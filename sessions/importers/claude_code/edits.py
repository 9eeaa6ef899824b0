"""What Claude Code's Edit and MultiEdit calls did to a file: their edits, applied to the
text as it stood.
"""

from __future__ import annotations

from typing import Any


def edits_made(tool: str, params: dict[str, Any], result: dict[str, Any]) -> list[dict[str, Any]]:
    """The edits an Edit or MultiEdit call made, as dicts (others are dropped: they are
    counted as edits that could not be applied)."""
    if tool == "Edit":
        # The result says what was applied (the user may have changed the proposal).
        if isinstance(result.get("oldString"), str) and isinstance(result.get("newString"), str):
            return [
                {
                    "old_string": result["oldString"],
                    "new_string": result["newString"],
                    "replace_all": result.get("replaceAll", params.get("replace_all")),
                }
            ]
        return [params]
    listed = params.get("edits")
    return [e if isinstance(e, dict) else {} for e in listed] if isinstance(listed, list) else []


def apply_edits(text: str, edits: list[dict[str, Any]]) -> tuple[str, int]:
    """The text with the edits applied, and how many could not be."""
    missing = 0
    for edit in edits:
        old, new = edit.get("old_string"), edit.get("new_string")
        if not isinstance(old, str) or not isinstance(new, str):
            missing += 1
        elif old == "":
            text = text or new  # an empty old_string creates the file
        elif old in text:
            text = text.replace(old, new) if edit.get("replace_all") else text.replace(old, new, 1)
        else:
            missing += 1
    return text, missing
