"""The picture a link shows when it is shared (og:image, Twitter's large card): a PNG
drawn on the server with Pillow from a stored outcome: the kernel's name and version,
its status, and its first output as the replay page draws it (bars for a short vector,
else each cell or block by its state, a block filled in proportion to its values, as
kernels/pictures.py does). A session's card shows each version's status instead.
"""

from __future__ import annotations

import functools
import io
import math
from dataclasses import dataclass
from typing import Any

from PIL import Image, ImageDraw, ImageFont

from kernels.engine.outcome import Outcome, output_list
from kernels.pictures import MAX_SIDE, STATUS

WIDTH, HEIGHT = 1200, 630
MARGIN = 56
BACKGROUND, TEXT, MUTED, ACCENT = "#ffffff", "#1d1d1f", "#6b6b70", "#5b3bd6"
# The status pill's colours, as the pages' (static/css/theme.css, light).
GOOD, BAD, WARN = ("#17692f", "#e6f4ea"), ("#c0262d", "#fdeaea"), ("#8a5a00", "#fff4d6")
PASSED, INFRA = "passed", "infra_error"
FONT = "DejaVuSans.ttf"
# The picture's box, right of the text.
BOX = (640, 150, WIDTH - MARGIN, HEIGHT - 90)


@dataclass(frozen=True)
class Chip:
    """One kernel version on a session's card."""

    label: str
    status: str | None


@functools.cache
def _font(size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    """DejaVu Sans where the system has it (its glyphs cover arrows and ⟨⟩, which the
    font Pillow carries does not), else Pillow's own."""
    try:
        return ImageFont.truetype(FONT, size)
    except OSError:
        return ImageFont.load_default(size=size)


def _colours(status: str | None) -> tuple[str, str]:
    if status is None:
        return MUTED, "#f0f0f2"
    if status == PASSED:
        return GOOD
    return WARN if status in (INFRA, "no_reference") else BAD


def _wrapped(draw: ImageDraw.ImageDraw, text: str, size: int, width: int, lines: int) -> list[str]:
    """The text in at most `lines` lines of at most `width` pixels, the last cut with …"""
    font, words, out, line = _font(size), text.split(), [], ""
    for word in words:
        trial = f"{line} {word}".strip()
        if draw.textlength(trial, font=font) <= width:
            line = trial
            continue
        out.append(line)
        line = word
        if len(out) == lines:
            break
    else:
        out.append(line)
    out = [piece for piece in out if piece][:lines]
    if len(out) == lines and " ".join(out) != " ".join(words):
        last = out[-1]
        while last and draw.textlength(last + " …", font=font) > width:
            last = last[:-1]
        out[-1] = last.rstrip() + " …"
    return out


def _pill(draw: ImageDraw.ImageDraw, x: int, y: int, text: str, status: str | None) -> int:
    """A status pill at (x, y); returns its right edge."""
    font = _font(30)
    ink, fill = _colours(status)
    width = int(draw.textlength(text, font=font)) + 36
    draw.rounded_rectangle((x, y, x + width, y + 50), radius=25, fill=fill)
    draw.text((x + 18, y + 8), text, font=font, fill=ink)
    return x + width


def _bands(rows: int, cols: int) -> tuple[int, float]:
    """How many bands a map of rows x cols squares is folded into, its columns split
    among them and the bands stacked a square apart, so that its squares are as large as
    BOX allows (a wide map in one band is a strip along the box's top); and their side."""
    left, top, right, bottom = BOX
    best = (1, 0.0)
    for bands in range(1, cols + 1):
        across, down = math.ceil(cols / bands), rows * bands + bands - 1
        if (bottom - top) / down <= best[1]:  # only shorter squares from here on
            break
        size = min((right - left) / across, (bottom - top) / down)
        if size > best[1]:
            best = (bands, size)
    return best


def _status_grid(draw: ImageDraw.ImageDraw, output: dict[str, Any]) -> int:
    """Each cell or block by its state, blocks filled bottom up in proportion to their
    wrong, NaN and never-written values (the replay page's status map), in square cells
    centred in BOX; a wide map is folded into bands. Returns how many."""
    grid = output.get("grid") or {}
    rows, cols, cells = grid.get("rows", 0), grid.get("cols", 0), grid.get("cells", "")
    if not rows or not cols or len(cells) != rows * cols:
        return 0
    if rows == 1 and cols > 16:  # a long vector wraps into a square-ish block of rows
        rows, cols = math.ceil(cols / 16), 16
    bands, size = _bands(rows, cols) if rows > 1 else (1, 0.0)
    left, top, right, bottom = BOX
    across = math.ceil(cols / bands)
    if bands == 1:
        size = min((right - left) / cols, (bottom - top) / rows)
    left += ((right - left) - across * size) / 2
    top += ((bottom - top) - (rows * bands + bands - 1) * size) / 2
    counts = grid.get("counts") or {}
    block = grid.get("block", [1, 1])
    per_block = block[0] * block[1]
    for index, cell in enumerate(cells):
        row, col = divmod(index, cols)
        band, col = divmod(col, across)
        x = left + col * size
        y = top + (band * (rows + 1) + row) * size
        # Whole pixels, both ends included as Pillow draws them, a pixel apart when large:
        # a share's rows are then its share of the square's.
        gap = 1 if size > 6 else 0
        box = (round(x), round(y), round(x + size) - 1 - gap, round(y + size) - 1 - gap)
        if not counts or cell == ".":
            draw.rectangle(box, fill=STATUS.get(cell, STATUS["."])[0])
            continue
        draw.rectangle(box, fill=STATUS["."][0])
        tall, edge = box[3] - box[1] + 1, box[3]
        for kind in "nux":
            if kind in counts and (count := counts[kind][index]):
                height = round(tall * min(1.0, count / per_block))
                if height:
                    draw.rectangle((box[0], edge - height + 1, box[2], edge), fill=STATUS[kind][0])
                edge -= height
    return bands


def _bars(
    draw: ImageDraw.ImageDraw, got: list[float | None], expected: list[float | None] | None
) -> None:
    left, top, right, bottom = BOX
    values = [v for v in got + (expected or []) if v is not None and math.isfinite(v)]
    scale = max((abs(v) for v in values), default=1.0) or 1.0
    negative = min(values, default=0.0) < 0
    base = (top + bottom) / 2 if negative else bottom
    reach = base - top
    step = (right - left) / max(len(got), 1)
    series = [(got, ACCENT)] if expected is None else [(expected, "#9ab8e8"), (got, ACCENT)]
    width = max(1.0, (step - 4) / len(series))
    draw.line((left, base, right, base), fill="#999999", width=2)
    for i in range(len(got)):
        for k, (data, colour) in enumerate(series):
            value, x = data[i], left + i * step + 2 + k * width
            if value is None or not math.isfinite(value):
                fill = STATUS["u" if value is None else "n"][0]
                draw.rectangle((x, base - reach, x + width - 1, base), fill=fill)
                continue
            height = reach * abs(value) / scale
            y0, y1 = (base - height, base) if value >= 0 else (base, base + height)
            draw.rectangle((x, y0, x + width - 1, max(y1, y0 + 1)), fill=colour)


def _picture(draw: ImageDraw.ImageDraw, outcome: Outcome) -> str | None:
    """The first output's picture in BOX; its caption, or None when there is none."""
    outputs = outcome.get("outputs") or []
    if not outputs:
        return None
    output = outputs[0]
    shape = output.get("shape") or [0]
    got = output_list(output, "got")
    if got is not None and math.prod(shape[:-1]) <= 1 and shape[-1] <= MAX_SIDE:
        _bars(draw, got, output_list(output, "expected"))
        return f"{output['name']}: expected and got"
    bands = _status_grid(draw, output)
    block = (output.get("grid") or {}).get("block", [1, 1])
    each = block[0] * block[1]
    per = f", a square per {each:,} values" if each > 1 else ""
    folded = f", its columns in {bands} bands" if bands > 1 else ""
    return f"{output['name']}: {output.get('count', 0):,} values by state{per}{folded}"


def _canvas() -> tuple[Image.Image, ImageDraw.ImageDraw]:
    image = Image.new("RGB", (WIDTH, HEIGHT), BACKGROUND)
    draw = ImageDraw.Draw(image)
    draw.rectangle((0, 0, WIDTH, 10), fill=ACCENT)
    draw.text((MARGIN, HEIGHT - 64), "⟨k⟩ Kernelbin", font=_font(28), fill=ACCENT)
    return image, draw


def _png(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", optimize=True)
    return buffer.getvalue()


def version_card(
    heading: str, session_title: str, status: str | None, outcome: Outcome | None
) -> bytes:
    """A kernel version's card: its name and version (the heading), its status, what it
    computed."""
    image, draw = _canvas()
    for line in _wrapped(draw, heading, 60, BOX[0] - MARGIN - 30, 1):
        draw.text((MARGIN, 60), line, font=_font(60), fill=TEXT)
    label = status.replace("_", " ") if status else "not run yet"
    _pill(draw, MARGIN, 160, label, status)
    y = 240
    message = (outcome.get("message") if outcome else None) or ""
    for line in _wrapped(draw, message, 28, BOX[0] - MARGIN - 30, 4):
        draw.text((MARGIN, y), line, font=_font(28), fill=TEXT)
        y += 38
    for line in _wrapped(draw, f"from “{session_title}”", 26, BOX[0] - MARGIN - 30, 2):
        draw.text((MARGIN, max(y + 16, 420)), line, font=_font(26), fill=MUTED)
        y += 34
    caption = _picture(draw, outcome) if outcome else None
    for number, line in enumerate(_wrapped(draw, caption or "", 22, BOX[2] - BOX[0], 2)):
        draw.text((BOX[0], BOX[3] + 8 + 27 * number), line, font=_font(22), fill=MUTED)
    return _png(image)


def session_card(title: str, summary: str, turns: int, chips: list[Chip]) -> bytes:
    """A session's card: its title, what it is, and each kernel version's status."""
    image, draw = _canvas()
    y = 60
    for line in _wrapped(draw, title, 60, WIDTH - 2 * MARGIN, 2):
        draw.text((MARGIN, y), line, font=_font(60), fill=TEXT)
        y += 72
    for line in _wrapped(draw, summary, 28, WIDTH - 2 * MARGIN, 3):
        draw.text((MARGIN, y + 10), line, font=_font(28), fill=MUTED)
        y += 38
    x, y = MARGIN, max(y + 40, 330)
    draw.text(
        (MARGIN, y), f"{turns:,} turns · {len(chips)} kernel versions", font=_font(26), fill=TEXT
    )
    y += 50
    font = _font(22)
    for chip in chips:
        ink, fill = _colours(chip.status)
        width = int(draw.textlength(chip.label, font=font)) + 24
        if x + width > WIDTH - MARGIN:
            x, y = MARGIN, y + 44
            if y > HEIGHT - 120:
                break
        draw.rounded_rectangle((x, y, x + width, y + 34), radius=17, fill=fill)
        draw.text((x + 12, y + 5), chip.label, font=font, fill=ink)
        x += width + 10
    return _png(image)
