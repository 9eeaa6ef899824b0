"""The one function that turns untrusted Markdown into HTML we store and serve.

Turns come from learners, from Claude and from imported files, so everything goes
through markdown-it-py with raw HTML disabled, then Pygments for code, then nh3 with
an allowlist, last. markdown-it-py replaces Python-Markdown here because the latter is
super-linear on inputs such as "[](" * 10_000 (12 s measured); markdown-it-py is linear
(50,000 "[" in 0.4 s). Text over the size cap is never parsed: it is shown escaped.
"""

from __future__ import annotations

import hashlib
import html
import re
from collections.abc import Callable, Sequence

import nh3
from django.conf import settings
from django.core.cache import cache
from django.utils.safestring import SafeString, mark_safe
from markdown_it import MarkdownIt
from markdown_it.renderer import RendererHTML
from markdown_it.token import Token
from markdown_it.utils import EnvType, OptionsDict
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexer import Lexer, inherit
from pygments.lexers import get_lexer_by_name
from pygments.lexers.wgsl import WgslLexer
from pygments.token import STANDARD_TYPES, Number
from pygments.util import ClassNotFound

from sessions import ansi, diffs

# Fence labels we highlight, by the name Pygments knows them under.
LANGUAGES = {
    "wgsl": "wgsl",
    "python": "python",
    "py": "python",
    "js": "javascript",
    "javascript": "javascript",
    # Pygments' TypeScript lexer takes about 1 ms a character on a run of dots (30 s for
    # 32,000); its JavaScript lexer, which reads TypeScript well enough, is linear.
    "ts": "javascript",
    "typescript": "javascript",
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
    "span": PYGMENTS_CLASSES | {"linenos", "hll", "changed"} | ansi.CLASSES,
    "pre": {"highlight", "plain", "source", "ansi"}
    | {f"lang-{name}" for name in set(LANGUAGES.values())},
    "p": {"render-note", "typed"},
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


class LinearWgslLexer(WgslLexer):  # type: ignore[misc]  # Pygments ships no types
    """Pygments' WGSL lexer, with a run of zeros read at once: its number rules read such a
    run one digit at a time, each time scanning the rest of it (32,000 zeros took 36 s)."""

    tokens = {"root": [(r"0+(?=0)", Number.Integer), inherit]}


def _lexer(name: str, **options: object) -> Lexer:
    if name == "wgsl":
        return LinearWgslLexer(**options)
    return get_lexer_by_name(name, **options)


def _highlight(code: str, lang: str, attrs: str) -> str:
    if lang.strip().lower() == "ansi":
        return ansi.to_html(code)
    if lang.strip().lower() == "diff":
        return diffs.to_html(code)
    start = _start_line(attrs)
    name = LANGUAGES.get(lang.strip().lower())
    lexer = None
    if name is not None:
        try:
            lexer = _lexer(name)
        except ClassNotFound:
            name = None
    if lexer is None and start is None:
        return ""  # markdown-it then writes an escaped <pre><code>
    body = highlight(code, lexer, _formatter) if lexer else html.escape(code)
    if start is not None:
        body = _numbered(body, start)
    css = f"highlight lang-{name}" if lexer else "plain"
    return f'<pre class="{css}"><code>{body}</code></pre>\n'


# A fence's "startline=N" (a file read from line N): its lines are numbered.
_START_LINE = re.compile(r"(?:^|\s)startline=([0-9]{1,7})(?:\s|$)")


def _start_line(attrs: str) -> int | None:
    found = _START_LINE.search(attrs or "")
    return int(found[1]) if found else None


def _numbered(body: str, start: int) -> str:
    """Highlighted lines, each after its number (not selected when the code is copied)."""
    lines = body.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    width = len(str(start + len(lines) - 1))
    return "".join(
        f'<span class="linenos">{n:>{width}}</span> {line}\n' for n, line in enumerate(lines, start)
    )


def _render_image_as_link(
    self: RendererHTML, tokens: Sequence[Token], idx: int, options: OptionsDict, env: EnvType
) -> str:
    # Remote images would let any transcript make readers' browsers fetch a tracker.
    token = tokens[idx]
    alt = self.renderInlineAsText(token.children or [], options, env) or "image"
    src = html.escape(str(token.attrGet("src") or ""), quote=True)
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
    """A highlighted code block outside any Markdown (diffs), ready for a template; its
    first whole lines within SOURCE_PAGE_MAX_CHARS, with a note when that is not all."""
    limit, note = settings.SOURCE_PAGE_MAX_CHARS, ""
    if len(code) > limit:
        code = code[: code.rfind("\n", 0, limit) + 1]
        note = '<p class="render-note">Cut here: the rest is too long for a page.</p>\n'
    highlighted = _highlight(code, lang, "")
    # Sanitised here, like everything this module returns.
    shown = _cleaner.clean(highlighted) if highlighted else plain_html(code)
    return mark_safe(shown + note)  # noqa: S308


def render_source(
    code: str,
    lang: str,
    marked_lines: list[int] | tuple[int, ...] = (),
    number: Callable[[int], int] | None = None,
) -> SafeString:
    """A program's source with line numbers, the given (1-based) lines marked; number
    gives the number shown in the margin for each line (a page's script: its line in the
    page), when they are not 1, 2, 3….

    Highlighted once per text and kept (Pygments took 10 s a view on a 2 MB script); a
    text longer than SOURCE_PAGE_MAX_CHARS shows its first whole lines within that and
    says so, so that the page stays small (that script made a 27 MB page)."""
    lines, total = _source_lines(code, lang)
    marked = set(marked_lines)
    shown = [number(n) if number else n for n in range(1, len(lines) + 1)]
    width = len(str(max(shown, default=0)))
    rows = []
    for n, line in enumerate(lines, start=1):
        row = f'<span class="linenos">{shown[n - 1]:>{width}}</span>{line}'
        rows.append(f'<span class="hll">{row}</span>' if n in marked else row)
    body = "\n".join(rows)
    note = ""
    if len(lines) < total:
        note = (
            f'<p class="render-note">Lines 1 to {len(lines):,} of {total:,}: the rest is too '
            "long for a page. The session's JSON export holds all of it.</p>\n"
        )
    # The lines were sanitised when highlighted; the rest is our own markup.
    return mark_safe(f'{note}<pre class="highlight source"><code>{body}\n</code></pre>')  # noqa: S308


def _source_lines(code: str, lang: str) -> tuple[list[str], int]:
    """The shown part of a source as sanitised, highlighted lines, and how many lines the
    whole has; from the cache when this text was highlighted before."""
    limit = settings.SOURCE_PAGE_MAX_CHARS
    digest = hashlib.sha256(code.encode(errors="surrogatepass")).hexdigest()
    key = f"source-lines:{lang}:{limit}:{digest}"
    kept: tuple[list[str], int] | None = cache.get(key)
    if kept is not None:
        return kept
    total = code.count("\n") + (not code.endswith("\n"))
    shown = code if len(code) <= limit else code[: code.rfind("\n", 0, limit) + 1]
    # stripnl=False keeps leading blank lines, so numbers match naga's line numbers.
    lexer = _lexer(LANGUAGES.get(lang, "text"), stripnl=False)
    # Pygments closes its spans at each line end, so the output splits into lines cleanly.
    lines = _cleaner.clean(highlight(shown, lexer, _formatter)).split("\n")
    if lines and not lines[-1]:
        lines.pop()
    kept = (lines, max(total, len(lines)))
    cache.set(key, kept, timeout=settings.PAGE_CACHE_SECONDS)
    return kept


# Text a person typed in a terminal (a learner's prompt): shown as typed, line breaks and
# indentation kept, `#` lines not headings, pasted logs not reflowed. Markdown only where
# it is clearly meant: fenced code blocks, `code` spans, *emphasis*, and links. Every
# step is a linear scan: no pattern here can backtrack over its input more than once.
_FENCE_LINE = re.compile(r" {0,3}(`{3,}+|~{3,}+)([^`\n]*)")
_URL = re.compile(r"https?://[^\s<>\"'`]+")
_URL_TRAILING = ".,;:!?)]}'\""
_EMPHASIS = re.compile(r"(?<![\w*])(\*\*|\*)(?=[^\s*])([^*\n]+?)(?<=\S)\1(?![\w*])")
_BACKTICK_RUN = re.compile(r"`+")


def render_content(text: str, typed: bool = False) -> str:
    """A turn's HTML: its Markdown, or (typed) the text as its author typed it."""
    return render_typed(text) if typed else render_markdown(text)


def render_typed(text: str) -> str:
    """Typed text to sanitised HTML, line breaks and indentation kept. Never raises."""
    limit = settings.MARKDOWN_MAX_CHARS
    if len(text) > limit:
        return plain_html(text, f"Shown as plain text: longer than {limit:,} characters.")
    parts: list[str] = []
    prose: list[str] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        opening = _FENCE_LINE.fullmatch(lines[i])
        if opening is None:
            prose.append(lines[i])
            i += 1
            continue
        end = i + 1
        while end < len(lines) and not _closes(lines[end], opening[1]):
            end += 1
        parts.append(_typed_prose(prose))
        prose = []
        code, lang = "\n".join(lines[i + 1 : end]) + "\n", opening[2].strip()
        parts.append(_highlight(code, lang, "") or f"<pre><code>{html.escape(code)}</code></pre>\n")
        i = end + 1
    parts.append(_typed_prose(prose))
    return _cleaner.clean("".join(parts))


def _closes(line: str, fence: str) -> bool:
    stripped = line.strip()
    indent = len(line) - len(line.lstrip(" "))
    return indent <= 3 and stripped.startswith(fence) and stripped.strip(fence[0]) == ""


def _typed_prose(lines: list[str]) -> str:
    text = "\n".join(lines).strip("\n")
    if not text.strip():
        return ""
    return f'<p class="typed">{_typed_inline(text)}</p>\n'


def _typed_inline(text: str) -> str:
    """Code spans (a backtick run closed by the next run of the same length), then links
    and emphasis in what is left, everything else escaped."""
    runs = [(m.start(), m.end()) for m in _BACKTICK_RUN.finditer(text)]
    # The next run of each length, found from the end: pairing stays linear.
    following: list[int] = [-1] * len(runs)
    last_of_length: dict[int, int] = {}
    for k in range(len(runs) - 1, -1, -1):
        length = runs[k][1] - runs[k][0]
        following[k] = last_of_length.get(length, -1)
        last_of_length[length] = k
    out, done, k = [], 0, 0
    while k < len(runs):
        close = following[k]
        if close < 0:
            k += 1
            continue
        start, end = runs[k]
        out.append(_typed_words(text[done:start]))
        out.append(f"<code>{html.escape(text[end : runs[close][0]])}</code>")
        done = runs[close][1]
        k = close + 1
    out.append(_typed_words(text[done:]))
    return "".join(out)


def _typed_words(text: str) -> str:
    out, done = [], 0
    for match in _URL.finditer(text):
        url = match[0].rstrip(_URL_TRAILING)
        out.append(_EMPHASIS.sub(_emphasis, html.escape(text[done : match.start()])))
        out.append(f'<a href="{html.escape(url)}">{html.escape(url)}</a>')
        done = match.start() + len(url)
    out.append(_EMPHASIS.sub(_emphasis, html.escape(text[done:])))
    return "".join(out)


def _emphasis(match: re.Match[str]) -> str:
    tag = "strong" if match[1] == "**" else "em"
    return f"<{tag}>{match[2]}</{tag}>"
