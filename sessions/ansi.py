"""Terminal output with ANSI escape sequences (colours, bold) as HTML, in one pass.

Hook and command output recorded by Claude Code keeps the terminal's escape codes
("\\x1b[1mStop\\x1b[22m"); shown raw they read as "▯[1m". Select Graphic Rendition codes
become spans with classes (the sanitiser allows only those); every other sequence
(cursor moves, OSC titles and links) is dropped. One regex, tried only at ESC characters,
with possessive runs: linear in the input.
"""

from __future__ import annotations

import html
import re

_SEQUENCE = re.compile(
    r"\x1b(?:\[([0-9;:?]*+)[ -/]*+([@-~])|\][^\x07\x1b]*+(?:\x07|\x1b\\)?|.)", re.S
)
_ATTRIBUTES = {1: "bold", 2: "dim", 3: "italic", 4: "underline"}
_RESETS = {22: ("bold", "dim"), 23: ("italic",), 24: ("underline",)}
CLASSES = (
    {f"ansi-{name}" for name in _ATTRIBUTES.values()}
    | {f"ansi-fg-{n}" for n in range(16)}
    | {f"ansi-bg-{n}" for n in range(16)}
)


def has_escapes(text: str) -> bool:
    return "\x1b" in text


def strip(text: str) -> str:
    """The text without any escape sequence."""
    return _SEQUENCE.sub("", text) if "\x1b" in text else text


class _Style:
    def __init__(self) -> None:
        self.flags: set[str] = set()
        self.fg: int | None = None
        self.bg: int | None = None

    def classes(self) -> list[str]:
        found = [f"ansi-{flag}" for flag in sorted(self.flags)]
        if self.fg is not None:
            found.append(f"ansi-fg-{self.fg}")
        if self.bg is not None:
            found.append(f"ansi-bg-{self.bg}")
        return found

    def apply(self, params: str) -> None:
        codes = [int(p) if p.isdigit() else 0 for p in params.replace(":", ";").split(";")]
        k = 0
        while k < len(codes):
            code = codes[k]
            k += 1
            if code == 0:
                self.flags.clear()
                self.fg = self.bg = None
            elif code in _ATTRIBUTES:
                self.flags.add(_ATTRIBUTES[code])
            elif code in _RESETS:
                self.flags.difference_update(_RESETS[code])
            elif 30 <= code <= 37 or 90 <= code <= 97:
                self.fg = code - 30 if code < 90 else code - 90 + 8
            elif 40 <= code <= 47 or 100 <= code <= 107:
                self.bg = code - 40 if code < 100 else code - 100 + 8
            elif code == 39:
                self.fg = None
            elif code == 49:
                self.bg = None
            elif code in (38, 48):
                # 256 colours (5;n): the 16 basic ones kept; others and RGB (2;r;g;b) dropped.
                mode = codes[k] if k < len(codes) else 0
                if mode == 5 and k + 1 < len(codes) and codes[k + 1] < 16:
                    setattr(self, "fg" if code == 38 else "bg", codes[k + 1])
                k += 2 if mode == 5 else 4 if mode == 2 else 0


def to_html(text: str) -> str:
    """A <pre> block of the text, coloured as the terminal showed it."""
    style = _Style()
    out: list[str] = []
    done = 0
    opened = False
    for match in _SEQUENCE.finditer(text):
        out.append(html.escape(text[done : match.start()]))
        done = match.end()
        if match[2] != "m":
            continue
        style.apply(match[1] or "0")
        if opened:
            out.append("</span>")
            opened = False
        if classes := style.classes():
            out.append(f'<span class="{" ".join(classes)}">')
            opened = True
    out.append(html.escape(text[done:]))
    if opened:
        out.append("</span>")
    return f'<pre class="ansi"><code>{"".join(out)}</code></pre>\n'
