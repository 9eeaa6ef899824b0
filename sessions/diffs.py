"""Unified diffs as HTML, with the words that changed inside a changed line marked.

Used for every ```diff block (edits in imported sessions, kernel versions on replay
pages). Line classes are Pygments' (gd, gi, gu, gh), so the theme's colours apply; a
run of removed lines followed by as many added lines is compared word by word, as the
best transcript viewers and code review tools do.
"""

from __future__ import annotations

import difflib
import html
import re

# Words, runs of spaces, and single other characters: disjoint, so the scan is linear.
_TOKEN = re.compile(r"\w+|\s+|[^\w\s]")
# Lines longer than this (in tokens) are not compared word by word: the comparison is
# quadratic in the worst case, and marks in such lines help nobody.
MAX_TOKENS = 400
# Inputs longer than this (in lines) are diffed without context search (difflib).
MAX_LINES = 5000


def unified(old: str, new: str, context: int = 3) -> str:
    """The unified diff of two texts, without file headers ("" when they are equal)."""
    a, b = old.splitlines(), new.splitlines()
    if len(a) + len(b) > MAX_LINES:
        return "\n".join([*(f"-{x}" for x in a), *(f"+{x}" for x in b)])
    lines = difflib.unified_diff(a, b, n=context, lineterm="")
    return "\n".join(line for k, line in enumerate(lines) if k >= 2)


def _line_class(line: str) -> str:
    if line.startswith("+"):
        return "gi"
    if line.startswith("-"):
        return "gd"
    if line.startswith("@"):
        return "gu"
    if line.startswith(("Index", "index", "=")):
        return "gh"
    return ""


def _plain(line: str) -> str:
    css = _line_class(line)
    text = html.escape(line)
    return f'<span class="{css}">{text}</span>' if css else text


def _marked(line: str, changed: list[tuple[int, int]], tokens: list[str]) -> str:
    """A removed or added line with the given token ranges marked."""
    out = [html.escape(line[0])]
    k = 0
    for start, end in changed:
        out.append(html.escape("".join(tokens[k:start])))
        out.append(f'<span class="changed">{html.escape("".join(tokens[start:end]))}</span>')
        k = end
    out.append(html.escape("".join(tokens[k:])))
    return f'<span class="{_line_class(line)}">{"".join(out)}</span>'


def _pair(removed: str, added: str) -> tuple[str, str]:
    a, b = _TOKEN.findall(removed[1:]), _TOKEN.findall(added[1:])
    if len(a) > MAX_TOKENS or len(b) > MAX_TOKENS:
        return _plain(removed), _plain(added)
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    opcodes = matcher.get_opcodes()
    if not any(tag == "equal" and "".join(a[i1:i2]).strip() for tag, i1, i2, _, _ in opcodes):
        return _plain(removed), _plain(added)  # nothing in common: the whole line changed
    gone = [(i1, i2) for tag, i1, i2, _, _ in opcodes if tag in ("replace", "delete")]
    new = [(j1, j2) for tag, _, _, j1, j2 in opcodes if tag in ("replace", "insert")]
    return _marked(removed, gone, a), _marked(added, new, b)


def to_html(diff: str) -> str:
    """A <pre> block of the diff, changed words marked in paired lines."""
    lines = diff.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    out: list[str] = []
    i = 0
    while i < len(lines):
        if not lines[i].startswith("-"):
            out.append(_plain(lines[i]))
            i += 1
            continue
        j = i
        while j < len(lines) and lines[j].startswith("-"):
            j += 1
        k = j
        while k < len(lines) and lines[k].startswith("+"):
            k += 1
        removed, added = lines[i:j], lines[j:k]
        if len(removed) == len(added):
            pairs = [_pair(r, a) for r, a in zip(removed, added, strict=True)]
            out += [r for r, _ in pairs] + [a for _, a in pairs]
        else:
            out += [_plain(line) for line in removed + added]
        i = k
    body = "\n".join(out)
    return f'<pre class="highlight lang-diff"><code>{body}\n</code></pre>\n'
