"""Driving the code editor (static/src/editor.js) as a person does: click, select, type."""

from __future__ import annotations


def replace_code(page, container: str, text: str) -> None:
    """Select everything in the editor inside container and type text over it."""
    page.click(f"{container} .cm-content")
    page.keyboard.press("Control+A")
    page.keyboard.insert_text(text)


def code(page, container: str) -> str:
    """What the editor inside container shows, line by line."""
    lines = page.locator(f"{container} .cm-content .cm-line").all_inner_texts()
    return "\n".join(lines)
