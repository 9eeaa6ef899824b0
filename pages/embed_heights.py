"""How tall an embed page is at a given width, estimated from its HTML, for the plain
iframe code (on a session page's embed panel, in oEmbed's answer), which has no script
to measure itself: too short, and most of the turns sit behind an inner scrollbar.

The page is laid out the way its CSS does (turns.css, outcome.css, embed.css) in
outline: text blocks wrapped word by word with DejaVu Sans's own widths (the sans font
our pages fall back to; other fonts are within a few percent of it), code blocks by
their lines, pictures by their size scaled to fit, plus each block's margins and each
turn's frame. tests/browser/test_embed_heights.py checks it against Chromium's layout
of the showcase's ranges at phone and desktop widths (within 15%).
"""

from __future__ import annotations

import functools
import math
import re
from html.parser import HTMLParser

from PIL import ImageFont

# The embed's root font size (embed.css) and a rem, in px.
REM = 15.0
LINE = 1.55
CODE_LINE = 1.45
MONO_EM = 0.602  # DejaVu Sans Mono's advance, in ems
# Horizontal room a turn's text loses: the body's padding, a turn's borders and padding.
PAGE_PAD, TURN_PAD_X = 0.6 * REM, 1.0 * REM + 1 + 4
# Chromium's classic scrollbar, under a code block wider than its box.
SCROLLBAR = 15.0
LIST_INDENT = 40.0
COMPACT_PICTURE = 11 * REM
# Block-level elements whose text is wrapped as one block, by tag or class: font size in
# rem, and the margins around them (px, top and bottom, collapsing with neighbours).
TEXT_BLOCKS = {
    "p": (1.0, 0.55 * REM),
    "li": (1.0, 0.0),
    "h1": (1.6, 0.6 * REM),
    "h2": (1.35, 0.6 * REM),
    "h3": (1.15, 0.55 * REM),
    "h4": (1.0, 0.55 * REM),
    "h5": (1.0, 0.55 * REM),
    "h6": (1.0, 0.55 * REM),
    "summary": (0.9, 0.0),
    "figcaption": (0.8, 0.0),
    "td": (1.0, 0.0),
    "th": (1.0, 0.0),
}
# An outcome's parts (outcome.css): font size in rem, margins, and padding (px) around.
CLASS_SIZES = {
    "outcome-message": 1.05,
    "outcome-foot": 0.85,
    "warning": 0.85,
    "figure-summary": 0.95,
}
CLASS_MARGINS = {
    "outcome-message": 0.4 * REM,
    "outcome-foot": 0.8 * REM,
    "warning": 0.5 * REM,
    "figure-summary": 0.6 * REM,
    "legend": 0.55 * REM,
}
OUTCOME_PAD_X, OUTCOME_PAD_Y = 2 * REM + 6, 1.6 * REM + 2
PILL = 0.85 * REM * LINE + 3
# A table's cells (outcome.css, table.speed-passes): font size in rem, padding in px.
TABLE_CELL = 0.85
CELL_PAD_X, CELL_PAD_Y = 0.8 * REM, 0.4 * REM
# Rows of items that wrap as wholes (flex-wrap), by class: the gap between items, in rem.
FLEX_ROWS = {"outcome-foot": 1.0, "legend": 0.8}
ITEM = "\x00"
SPACE = re.compile(r"\s+")


@functools.cache
def _font(size: float, mono: bool) -> ImageFont.FreeTypeFont | None:
    try:
        return ImageFont.truetype("DejaVuSansMono.ttf" if mono else "DejaVuSans.ttf", size)
    except OSError:
        return None


# Words come from transcripts: the cache is bounded so the web process's memory is too.
@functools.lru_cache(maxsize=16_384)
def _word_width(word: str, size: float, mono: bool, bold: bool) -> float:
    if mono:
        return len(word) * MONO_EM * size
    font = _font(round(size * 4) / 4, False)
    width = font.getlength(word) if font is not None else len(word) * 0.55 * size
    return width * (1.06 if bold else 1.0)


def _lines(runs: list[tuple[str, bool, bool]], size: float, width: float) -> int:
    """How many lines these runs of text (text, monospace, bold) take when wrapped word
    by word at this width (a word wider than the line breaks anywhere)."""
    lines, used = 1, 0.0
    space = _word_width(" ", size, False, False)
    for text, mono, bold in runs:
        letter = size * (0.9 if mono else 1.0)
        for word in text.split(" "):
            if not word:
                continue
            need = _word_width(word, letter, mono, bold)
            if used and used + space + need > width:
                lines, used = lines + 1, 0.0
            if need > width:
                whole, used = divmod(need, width)
                lines += int(whole)
                continue
            used += (space if used else 0.0) + need
    return lines


class _Layout(HTMLParser):
    """Walks an embed page and adds up its height at one width."""

    def __init__(self, width: float) -> None:
        super().__init__(convert_charrefs=True)
        self.full = width - 2 * PAGE_PAD
        self.height = 2 * PAGE_PAD
        self.stack: list[tuple[str, str]] = []
        self.text: list[tuple[str, bool, bool]] | None = None
        self.text_tag = ""
        self.pre: list[str] | None = None
        self.margin = 0.0  # the pending bottom margin, collapsed with the next top one
        self.indent = 0.0
        self.in_turn = False
        self.compact = False
        self.panels: list[float] | None = None
        self.panel_width = 0.0
        self.turns = 0
        self.closed = 0  # how deep in closed <details> we are
        self.summary = 0
        # The cells of a table row as they close: laid out side by side, not stacked.
        self.row: list[tuple[list[tuple[str, bool, bool]], float, float]] | None = None

    # -- where we are
    def _classes(self) -> str:
        return " ".join(classes for _, classes in self.stack)

    def _width(self) -> float:
        return self.full - (2 * TURN_PAD_X if self.in_turn else 0) - self.indent

    def _block(self, height: float, margin: float) -> None:
        self.height += max(self.margin, margin) + height
        self.margin = margin

    def _font_size(self) -> float:
        classes = self._classes()
        if "turn-head" in classes or "turn-outcome" in classes or "embed-foot" in classes:
            return 0.85 * REM
        if "panel" in classes or "legend" in classes:
            return 0.8 * REM
        if self.text_tag == "figcaption" and not self.compact:
            return 0.9 * REM
        for name, size in CLASS_SIZES.items():
            if name in classes:
                return size * REM
        return TEXT_BLOCKS.get(self.text_tag, (1.0, 0))[0] * REM

    # -- parsing
    def _hidden(self) -> bool:
        """Inside a closed <details>, below its summary: not shown."""
        return self.closed > 0 and self.summary == 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        classes = values.get("class") or ""
        if tag == "details" and (self.closed or "open" not in values):
            self.closed += 1
        elif tag == "summary" and self.closed:
            self.summary += 1
        if self._hidden() and tag not in ("details", "summary"):
            return
        if self.text is not None and tag == "span" and self.stack[-1][1] in FLEX_ROWS:
            self.text.append((ITEM, False, False))
        if tag in ("br", "img", "input", "meta", "link", "hr"):
            if tag == "br" and self.text is not None:
                self.text.append(("\n", False, False))
            return
        self.stack.append((tag, classes))
        if tag == "article" and "turn" in classes.split():
            self.turns += 1
            self.in_turn = True
            self.height += (0.9 * REM if self.turns > 1 else 0) + 0.7 * REM + 0.8 * REM + 2
            self.margin = 0.0
        elif tag == "div" and "turn-body" in classes:
            self.height += 0.35 * REM
            self.margin = 0.2 * REM
        elif tag == "figure":
            self.compact = "compact" in classes
            self._block(0, 0.4 * REM if self.compact else 0.8 * REM)
            self.margin = 0
        elif tag == "section" and "outcome" in classes.split():
            self._block(OUTCOME_PAD_Y, 0)
            self.margin = 0.0
            self.indent += OUTCOME_PAD_X
        elif tag == "header" and classes == "outcome-head":
            self._block(PILL, 0)
        elif tag == "div" and classes == "panels":
            self.panels = []
        elif tag in ("ul", "ol"):
            if self.text is None:
                self._block(0, 0.55 * REM)
                self.margin = 0
            self.indent += LIST_INDENT
        elif tag == "blockquote":
            self.indent += 0.8 * REM + 3
        elif tag == "pre":
            self.pre = []
        elif tag == "tr":
            self.row = []
        elif tag == "svg":
            self._picture(values)
        elif (
            self.text is None
            and self.pre is None
            and (
                tag in TEXT_BLOCKS
                or (tag == "header" and classes in ("turn-head", "embed-head"))
                or (tag == "footer" and ("embed-foot" in classes or "outcome-foot" in classes))
            )
        ):
            self.text, self.text_tag = [], tag

    def handle_endtag(self, tag: str) -> None:
        if tag == "details" and self.closed:
            self.closed -= 1
        elif tag == "summary" and self.summary:
            self.summary -= 1
        elif self._hidden():
            return
        while self.stack:
            open_tag, classes = self.stack.pop()
            self._close(open_tag, classes)
            if open_tag == tag:
                break

    def _close(self, tag: str, classes: str) -> None:
        if tag == "article" and "turn" in classes.split():
            self.in_turn = False
            self.margin = 0.0
        elif tag == "section" and "outcome" in classes.split():
            self.indent -= OUTCOME_PAD_X
            self.margin = 0.0
        elif tag in ("ul", "ol"):
            self.indent -= LIST_INDENT
            if self.text is None:
                self.margin = max(self.margin, 0.55 * REM)
        elif tag == "blockquote":
            self.indent -= 0.8 * REM + 3
        elif tag == "pre" and self.pre is not None:
            code = "".join(self.pre).rstrip("\n").split("\n")
            size = 0.9 * REM
            room = self._width() - 1.8 * REM - 2
            if "plain" in classes.split():  # wrapped, not scrolled sideways
                per_line = max(1, int(room / (MONO_EM * size)))
                rows = sum(max(1, math.ceil(len(line) / per_line)) for line in code)
                cap = 14 * REM if "error-text" in classes else 30 * REM
                height = min(rows * size * CODE_LINE + 1.4 * REM, cap) + 2
            else:
                height = len(code) * size * CODE_LINE + 1.4 * REM + 2
                if max(len(line) for line in code) * MONO_EM * size > room:
                    height += SCROLLBAR
            self.pre = None
            self._block(height, 0.55 * REM)
        elif tag == "div" and classes == "panels" and self.panels is not None:
            self._place_panels()
        elif tag == "tr" and self.row is not None:
            self._place_row()
        elif tag == "figure":
            self.compact = False
            self.margin = 0.4 * REM if "compact" in classes else 0.8 * REM
        elif self.text is not None and tag == self.text_tag:
            self._close_text(tag, classes)

    def _close_text(self, tag: str, classes: str) -> None:
        runs, self.text = self.text or [], None
        size = self._font_size()
        line = size * (1.25 if tag.startswith("h") and len(tag) == 2 else LINE)
        if classes == "turn-title":
            size, line = 1.3 * REM, 1.3 * REM * 1.25
        width = self._width()
        if tag in ("header", "footer") and classes in ("embed-head", "embed-foot"):
            width = self.full
        if classes in FLEX_ROWS:
            lines = _flex_rows(runs, size, width, FLEX_ROWS[classes] * REM)
        else:
            lines = sum(_lines(part, size, width) for part in _split_lines(runs)) if runs else 1
        margin = TEXT_BLOCKS.get(tag, (1.0, 0.0))[1]
        if (tag == "header" and "embed-head" in classes) or tag == "footer":
            margin = 0.6 * REM
        elif "turn-outcome" in classes:
            margin = 0.35 * REM
        elif classes == "turn-title":
            margin = 0.4 * REM
        for name, value in CLASS_MARGINS.items():
            if name in classes.split():
                margin = value
        padding = 0.0
        if tag == "figcaption" and not self.compact:
            padding = 0.3 * REM
        if "warning" in classes.split():
            width -= 1.2 * REM
            padding = 0.6 * REM
        if self.panels is not None:
            self.panel_width = 0.0
            return
        if self.row is not None and tag in ("td", "th"):
            self.row.append((runs, TABLE_CELL * REM, TABLE_CELL * REM * LINE))
            return
        self._block(lines * line + padding, margin)

    def _place_row(self) -> None:
        """A table row: its cells side by side, as tall as its tallest (each cell given an
        equal share of the width, as an auto table with short cells comes out)."""
        cells, self.row = self.row or [], None
        if not cells:
            return
        share = self._width() / len(cells) - CELL_PAD_X
        tallest = max(
            (sum(_lines(part, size, share) for part in _split_lines(runs)) if runs else 1) * line
            for runs, size, line in cells
        )
        self._block(tallest + CELL_PAD_Y + 1, 0)

    def _picture(self, values: dict[str, str | None]) -> None:
        try:
            width, height = float(values.get("width") or 0), float(values.get("height") or 0)
        except ValueError:
            return
        if not width or not height:
            return
        room = self._width()
        scale = min(1.0, room / width)
        if self.compact:
            scale = min(scale, COMPACT_PICTURE / height)
        if self.panels is not None:
            self.panels.append(width * scale)
            self.panels.append(height * scale + 0.8 * REM * LINE + 0.2 * REM)
            return
        self._block(height * scale + 4, 0)

    def _place_panels(self) -> None:
        """Panels side by side while they fit, wrapping into rows (flex-wrap)."""
        sizes, self.panels = self.panels or [], None
        room, gap = self._width(), (0.5 if self.compact else 1.0) * REM
        total, row_width, row_height = 0.0, 0.0, 0.0
        for width, height in zip(sizes[::2], sizes[1::2], strict=True):
            if row_width and row_width + gap + width > room:
                total += row_height + gap
                row_width, row_height = 0.0, 0.0
            row_width += (gap if row_width else 0.0) + width
            row_height = max(row_height, height)
        self._block(total + row_height, 0)

    def handle_data(self, data: str) -> None:
        if self._hidden():
            return
        if self.pre is not None:
            self.pre.append(data)
        elif self.text is not None:
            tags = {tag for tag, _ in self.stack}
            mono = "code" in tags or "kbd" in tags
            bold = "strong" in tags or "b" in tags
            self.text.append((SPACE.sub(" ", data), mono, bold))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "svg" and not self._hidden():
            self._picture(dict(attrs))


def _flex_rows(runs: list[tuple[str, bool, bool]], size: float, width: float, gap: float) -> int:
    """Lines taken by items (split at ITEM) placed side by side while they fit."""
    items: list[list[tuple[str, bool, bool]]] = [[]]
    for run in runs:
        if run[0] == ITEM:
            items.append([])
        else:
            items[-1].append(run)
    lines, used = 0, width
    for item in items:
        text = [run for run in item if run[0].strip()]
        if not text:
            continue
        need = sum(
            _word_width(run[0].strip(), size * (0.9 if run[1] else 1.0), run[1], run[2])
            for run in text
        )
        if need > width:
            lines, used = lines + _lines(text, size, width), width
        elif used + gap + need > width:
            lines, used = lines + 1, need
        else:
            used += gap + need
    return max(lines, 1)


def _split_lines(runs: list[tuple[str, bool, bool]]) -> list[list[tuple[str, bool, bool]]]:
    """Runs split at hard line breaks (<br>)."""
    parts: list[list[tuple[str, bool, bool]]] = [[]]
    for run in runs:
        if run[0] == "\n":
            parts.append([])
        else:
            parts[-1].append(run)
    return [part for part in parts if part] or [[]]


def estimate(html: str, width: int) -> int:
    """The height in px of this embed page in a frame this wide."""
    layout = _Layout(float(width))
    body = html.split("<body", 1)[-1]
    layout.feed(body)
    layout.close()
    return math.ceil(layout.height + layout.margin)
