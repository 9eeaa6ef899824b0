from __future__ import annotations

import base64
import hashlib
import re
from functools import cache

from django import template
from django.contrib.staticfiles import finders
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from kernels.speed_figures import speed_summary
from pages.folding import duration

register = template.Library()


@cache
def _static_text(path: str) -> str:
    found = finders.find(path)
    if not found:
        raise template.TemplateSyntaxError(f"No static file {path!r}")
    with open(found, encoding="utf-8") as handle:
        return handle.read()


@cache
def _joined(paths: tuple[str, ...]) -> str:
    return "".join(_static_text(path) for path in paths)


@register.simple_tag
def inline_static(*paths: str) -> SafeString:
    """Our own CSS or JS, inlined: embeds must work without a second request to us."""
    return mark_safe(_joined(paths))  # noqa: S308 (files from static/, not user input)


def inline_hash(*paths: str) -> str:
    """The CSP source allowing exactly what inline_static(*paths) puts in the page."""
    digest = hashlib.sha256(_joined(paths).encode()).digest()
    return f"'sha256-{base64.b64encode(digest).decode()}'"


@register.filter
def role_label(role: str) -> str:
    return {"learner": "Learner", "tutor": "Tutor", "tool": "Tool", "system": "Note"}.get(
        role, role
    )


@register.filter
def cell(value: object) -> str:
    """A value from a replay outcome, as a reader wants it: six significant digits."""
    if value is None:
        return "never written"
    if isinstance(value, float):
        return format(value, ".6g")
    return str(value)


CODE_SPAN = re.compile(r"`([^`\n]+)`")


@register.filter
def code_spans(text: object) -> SafeString:
    """Plain text (an outcome's message, naga's words) with its `quoted code` as <code>."""
    html = CODE_SPAN.sub(r"<code>\1</code>", escape(str(text)))
    return mark_safe(html)  # noqa: S308 (escaped above; only our own tags added)


NAGA_HEADLINE = re.compile(r"\AShader (?:'[^\n]{0,200}?' )?(?:parsing|validation) error: [^\n]*\n")


@register.filter
def naga_text(text: object) -> str:
    """naga's error text without its first line ("Shader '' parsing error: …"): the
    outcome's message says that already, and the frame around the code is what is left."""
    return NAGA_HEADLINE.sub("", str(text)).strip("\n")


@register.filter
def usage_label(meta: object) -> str:
    """A turn's cost as the transcript recorded it: the tokens of the response (read,
    of which from the cache, and written) and how long it took."""
    if not isinstance(meta, dict):
        return ""
    parts = []
    usage = meta.get("usage")
    if isinstance(usage, dict):
        numbers = {k: v for k, v in usage.items() if isinstance(v, int) and not isinstance(v, bool)}
        read = sum(
            numbers.get(k, 0)
            for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
        )
        if read or "output_tokens" in numbers:
            cached = numbers.get("cache_read_input_tokens", 0)
            parts.append(
                f"{read:,} tokens in"
                + (f" ({cached:,} cached)" if cached else "")
                + f" · {numbers.get('output_tokens', 0):,} out"
            )
    if isinstance(meta.get("duration_ms"), int):
        parts.append(duration(meta["duration_ms"]))
    return " · ".join(parts)


@register.filter
def speed_headline(outcome: object) -> str:
    """A stored run's time (and speed-up, on a GPU) in a few words, or "" if untimed."""
    summary = speed_summary(outcome if isinstance(outcome, dict) else None)
    return summary["headline"] if summary and summary["total"] is not None else ""
