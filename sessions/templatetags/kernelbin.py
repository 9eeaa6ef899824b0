from __future__ import annotations

from functools import cache

from django import template
from django.contrib.staticfiles import finders
from django.utils.safestring import SafeString, mark_safe

register = template.Library()


@cache
def _static_text(path: str) -> str:
    found = finders.find(path)
    if not found:
        raise template.TemplateSyntaxError(f"No static file {path!r}")
    with open(found, encoding="utf-8") as handle:
        return handle.read()


@register.simple_tag
def inline_static(path: str) -> SafeString:
    """Our own CSS or JS, inlined: embeds must work without a second request to us."""
    return mark_safe(_static_text(path))  # noqa: S308 (a file from static/, not user input)


@register.filter
def role_label(role: str) -> str:
    return {"learner": "Learner", "tutor": "Tutor", "tool": "Tool", "system": "Note"}.get(role, role)
