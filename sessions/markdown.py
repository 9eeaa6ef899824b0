"""The one function that turns untrusted Markdown into HTML we store and serve.

Turns come from learners, from Claude and from imported files, so everything goes
through markdown-it-py with raw HTML disabled, then Pygments for code, then nh3 with
an allowlist, last. markdown-it-py replaces Python-Markdown here because the latter is
super-linear on inputs such as "[](" * 10_000 (12 s measured); markdown-it-py is linear
(50,000 "[" in 0.4 s). Text over the size cap is never parsed: it is shown escaped.
"""

from __future__ import annotations

import html
import re

import nh3
from django.conf import settings
from django.utils.safestring import SafeString, mark_safe
from markdown_it import MarkdownIt
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import get_lexer_by_name
from pygments.token import STANDARD_TYPES
from pygments.util import ClassNotFound

# Fence labels we highlight, by the name Pygments knows them under.
LANGUAGES = {
    "wgsl": "wgsl",
    "python": "python",
    "py": "python",
    "js": "javascript",
    "javascript": "javascript",
    "ts": "typescript",
    "typescript": "typescript",
    "diff": "diff",
    "json": "json",
    "bash": "bash",
    "sh": "bash",
    "console": "console",
    "c": "c",
    "cpp": "cpp",
    "cuda": "cuda",
    "rust": "rust",
}

ALLOWED_TAGS = {
    "p", "br", "hr", "blockquote", "ul", "ol", "li",
    "h1", "h2", "h3", "h4", "h5", "h6",
    "strong", "em", "del", "s", "code", "pre", "span", "a",
    "table", "thead", "tbody", "tr", "th", "td",
}  # fmt: skip
ALLOWED_ATTRIBUTES = {
    "a": {"href", "title"},
    "ol": {"start"},
}
PYGMENTS_CLASSES = {name for name in STANDARD_TYPES.values() if name}
ALLOWED_CLASSES = {
    "span": PYGMENTS_CLASSES | {"linenos", "hll"},
    "pre": {"highlight", "plain", "source"} | {f"lang-{name}" for name in set(LANGUAGES.values())},
    "p": {"render-note"},
}

_cleaner = nh3.Cleaner(
    tags=ALLOWED_TAGS,
    attributes=ALLOWED_ATTRIBUTES,
    allowed_classes=ALLOWED_CLASSES,
    url_schemes={"http", "https", "mailto"},
    link_rel="nofollow noopener noreferrer",
    strip_comments=True,
)
_formatter = HtmlFormatter(nowrap=True)


def _highlight(code: str, lang: str, _attrs: str) -> str:
    name = LANGUAGES.get(lang.strip().lower())
    if name is None:
        return ""  # markdown-it then writes an escaped <pre><code>
    try:
        lexer = get_lexer_by_name(name)
    except ClassNotFound:
        return ""
    body = highlight(code, lexer, _formatter)
    return f'<pre class="highlight lang-{name}"><code>{body}</code></pre>\n'


def _render_image_as_link(self, tokens, idx, options, env) -> str:
    # Remote images would let any transcript make readers' browsers fetch a tracker.
    token = tokens[idx]
    alt = self.renderInlineAsText(token.children or [], options, env) or "image"
    src = html.escape(token.attrGet("src") or "", quote=True)
    return f'<a href="{src}">image: {html.escape(alt)}</a>'


_md = MarkdownIt("commonmark", {"html": False, "highlight": _highlight}).enable(
    ["table", "strikethrough"]
)
_md.add_render_rule("image", _render_image_as_link)


def plain_html(text: str, note: str = "") -> str:
    """Escaped preformatted text: the fallback for anything too big or odd to format."""
    prefix = f'<p class="render-note">{html.escape(note)}</p>\n' if note else ""
    return f'{prefix}<pre class="plain">{html.escape(text)}</pre>\n'


_BACKTICKS = re.compile(r"`{3,}")


def fence_for(text: str) -> str:
    """A backtick fence longer than any run of backticks inside the text."""
    longest = max((len(run) for run in _BACKTICKS.findall(text)), default=0)
    return "`" * max(3, longest + 1)


def render_markdown(text: str) -> str:
    """Markdown to sanitised HTML. Never raises and never hangs on hostile input."""
    limit = settings.MARKDOWN_MAX_CHARS
    if len(text) > limit:
        return plain_html(text, f"Shown as plain text: longer than {limit:,} characters.")
    try:
        rendered = _md.render(text)
    except RecursionError:
        return plain_html(text, "Shown as plain text: nested too deeply to format.")
    return _cleaner.clean(rendered)


def render_code(code: str, lang: str) -> SafeString:
    """A highlighted code block outside any Markdown (diffs), ready for a template."""
    highlighted = _highlight(code, lang, "")
    # Sanitised here, like everything this module returns.
    return mark_safe(_cleaner.clean(highlighted) if highlighted else plain_html(code))  # noqa: S308


def render_source(
    code: str, lang: str, marked_lines: list[int] | tuple[int, ...] = ()
) -> SafeString:
    """A kernel source with line numbers, the given (1-based) lines marked."""
    # stripnl=False keeps leading blank lines, so numbers match naga's line numbers.
    lexer = get_lexer_by_name(LANGUAGES.get(lang, "text"), stripnl=False)
    # Pygments closes its spans at each line end, so the output splits into lines cleanly.
    lines = highlight(code, lexer, _formatter).split("\n")
    if lines and not lines[-1]:
        lines.pop()
    width = len(str(len(lines)))
    rows = []
    for number, line in enumerate(lines, start=1):
        row = f'<span class="linenos">{number:>{width}}</span>{line}'
        rows.append(f'<span class="hll">{row}</span>' if number in marked_lines else row)
    body = "\n".join(rows)
    cleaned = _cleaner.clean(f'<pre class="highlight source"><code>{body}\n</code></pre>')
    return mark_safe(cleaned)  # noqa: S308 (sanitised on the line above)
