"""Server-rendered pictures of a replay outcome, as SVG: bars for short vectors,
expected / got / error heatmaps for small matrices, a status map for anything larger,
and a confusion matrix for classifiers.

Only numbers from the outcome and escaped labels go into the markup, so the result is
safe to put in a page as is.
"""

from __future__ import annotations

import base64
import io
import math
from collections.abc import Callable, Mapping, Sequence
from html import escape
from typing import TYPE_CHECKING, Any

import numpy as np
from django.utils.safestring import SafeString, mark_safe
from PIL import Image

from kernels.engine.outcome import Outcome, output_list, output_values

if TYPE_CHECKING:
    from typing_extensions import TypeIs

CELL = 14  # px per cell of a heatmap
MAX_SIDE = 64  # rows or columns drawn cell by cell
# Room for row numbers on the left of a heatmap and column numbers above it.
AXIS_LEFT, AXIS_TOP = 26, 16
# Up to this many cells a heatmap's every cell tells its values on hover; past it, only
# the wrong ones (a <title> per cell costs bytes on every page view).
HOVER_CELLS = 1024
STATUS = {
    ".": ("#8fd19e", "right"),
    "x": ("#e5484d", "wrong"),
    "u": ("#6b6b70", "never written"),
    "n": ("#b54fd8", "NaN or infinity"),
}
UNWRITTEN, NONFINITE = "#6b6b70", "#b54fd8"


def _finite(value: float | None) -> TypeIs[float]:
    return value is not None and math.isfinite(value)


def _number(value: float | None) -> str:
    """A value as a reader wants it on hover: six significant digits."""
    if value is None:
        return "never written"
    return format(value, ".6g") if math.isfinite(value) else str(value)


def _svg(width: float, height: float, body: list[str], label: str) -> SafeString:
    markup = (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width:.0f} {height:.0f}" '
        f'width="{width:.0f}" height="{height:.0f}" role="img" aria-label="{escape(label)}">'
        + "".join(body)
        + "</svg>"
    )
    return mark_safe(markup)  # noqa: S308 (numbers and escaped labels only)


def _rect(
    x: float, y: float, w: float, h: float, fill: str, extra: str = "", title: str | None = None
) -> str:
    shape = f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" fill="{fill}"{extra}'
    if title is None:
        return shape + "/>"
    return f"{shape}><title>{escape(title)}</title></rect>"


def svg_text(
    x: float, y: float, text: object, anchor: str = "middle", size: int = 11, extra: str = ""
) -> str:
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" '
        f'fill="currentColor"{extra}>{escape(str(text))}</text>'
    )


def _tick_step(count: int, cell: float) -> int:
    """Every how many rows or columns a number fits beside the last one."""
    return next((n for n in (1, 2, 4, 5, 8, 10, 16, 20, 25, 32, 50) if n * cell >= 14), 64)


def _axes(rows: int, cols: int, cell: float) -> list[str]:
    """Row numbers down the left, column numbers along the top, 0-based like the index."""
    marks = []
    step = _tick_step(rows, cell)
    for r in range(0, rows, step):
        y = AXIS_TOP + r * cell + min(cell, 12) * 0.8
        marks.append(svg_text(AXIS_LEFT - 4, y, r, anchor="end", size=9))
    step = _tick_step(cols, cell)
    for c in range(0, cols, step):
        marks.append(svg_text(AXIS_LEFT + c * cell + cell / 2, AXIS_TOP - 5, c, size=9))
    return marks


def diverging(value: float | None, scale: float) -> str:
    """White at zero, red for positive, blue for negative; grey unwritten, purple NaN/inf."""
    if value is None:
        return UNWRITTEN
    if not math.isfinite(value):
        return NONFINITE
    t = max(-1.0, min(1.0, value / scale))
    if t >= 0:
        return f"rgb(255,{255 - int(175 * t)},{255 - int(200 * t)})"
    return f"rgb({255 + int(200 * t)},{255 + int(140 * t)},255)"


def sequential(value: float | None, scale: float) -> str:
    if value is None:
        return UNWRITTEN
    if not math.isfinite(value):
        return NONFINITE
    t = max(0.0, min(1.0, value / scale))
    return f"rgb(255,{250 - int(200 * t)},{235 - int(215 * t)})"


def heatmap(
    values: list[float | None],
    rows: int,
    cols: int,
    colour: Callable[[float | None], str],
    marks: str,
    label: str,
    describe: Callable[[int], str],
) -> SafeString:
    """One cell per value, numbered rows and columns, each cell's values on hover; wrong
    and non-finite cells outlined, unwritten ones struck. Cells shrink so that three
    panels fit side by side."""
    cell = max(4, min(CELL, 280 // cols))
    every = rows * cols <= HOVER_CELLS
    body = _axes(rows, cols, cell)
    for index, value in enumerate(values):
        x, y = AXIS_LEFT + (index % cols) * cell, AXIS_TOP + (index // cols) * cell
        mark = marks[index] if marks else "."
        title = describe(index) if every or mark != "." else None
        body.append(_rect(x, y, cell, cell, colour(value), title=title))
        if mark in "xn" and cell >= 8:
            outline = ' stroke="#111" stroke-width="1.5" pointer-events="none"'
            body.append(_rect(x + 1, y + 1, cell - 2, cell - 2, "none", outline))
        elif mark == "u":
            body.append(
                f'<path d="M{x} {y + cell}l{cell} -{cell}" stroke="#ddd" pointer-events="none"/>'
            )
    return _svg(AXIS_LEFT + cols * cell, AXIS_TOP + rows * cell, body, label)


def colour_scale(
    colour: Callable[[float | None], str], low: float, high: float, label: str
) -> SafeString:
    """The colours of a heatmap against the values they stand for."""
    width, height, steps = 200, 30, 40
    body = [
        _rect(i * width / steps, 0, width / steps + 0.5, 12, colour(low + (high - low) * i / steps))
        for i in range(steps + 1)
    ]
    body.append(_rect(0, 0, width, 12, "none", ' stroke="#8888"'))
    body += [svg_text(0, 26, _number(low), anchor="start", size=10)]
    if low < 0 < high:
        body.append(svg_text(width / 2, 26, 0, size=10))
    body.append(svg_text(width, 26, _number(high), anchor="end", size=10))
    return _svg(width + 2, height, body, label)


def _block_sizes(grid: dict[str, Any], shape: list[int]) -> list[int]:
    """How many values each block of a status grid stands for (those on the far edges
    can hold fewer)."""
    cols = shape[-1]
    rows = math.prod(shape) // cols if cols else 0
    block_rows, block_cols = grid.get("block", [1, 1])
    return [
        min(block_rows, rows - r * block_rows) * min(block_cols, cols - c * block_cols)
        for r in range(grid["rows"])
        for c in range(grid["cols"])
    ]


def status_map(output: dict[str, Any]) -> SafeString:
    """Every cell (or block of cells) coloured by its status; long vectors wrap into rows.
    A block of several values is filled in proportion to them (a block of four with one
    NaN is a quarter purple), from the bottom up, where the run counted them; a square
    that is not right says on hover which values it stands for and how many of each."""
    grid = output["grid"]
    rows, cols, cells = grid["rows"], grid["cols"], grid["cells"]
    block_rows, block_cols = grid.get("block", [1, 1])
    shape = output["shape"]
    counts = grid.get("counts") or {}
    sizes = _block_sizes(grid, shape) if counts else []

    def describe(index: int) -> str:
        r, c = divmod(index, grid["cols"])
        row_span = f"{r * block_rows}" + (f"–{(r + 1) * block_rows - 1}" if block_rows > 1 else "")
        col_span = f"{c * block_cols}" + (f"–{(c + 1) * block_cols - 1}" if block_cols > 1 else "")
        where = f"[{col_span}]" if len(shape) == 1 else f"rows {row_span}, columns {col_span}"
        if not counts:
            return f"{where}: {STATUS.get(cells[index], STATUS['.'])[1]}"
        held = [(counts[kind][index], STATUS[kind][1]) for kind in "nux" if kind in counts]
        right = sizes[index] - sum(count for count, _ in held)
        parts = [f"{count:,} {label}" for count, label in held if count]
        return f"{where}: " + ", ".join([*parts, f"{right:,} right"])

    order = list(range(len(cells)))
    if rows == 1 and cols > MAX_SIDE:
        rows, cols = math.ceil(cols / MAX_SIDE), MAX_SIDE
    elif rows > 2 * cols:
        # Tall and narrow (e.g. 1,000 digits x 10 classes): lay rows across instead.
        order = [r * cols + c for c in range(cols) for r in range(rows)]
        rows, cols = cols, rows
    size = max(4, min(CELL, 640 // cols))
    body = []
    for slot, index in enumerate(order):
        cell = cells[index]
        x, y = (slot % cols) * size, (slot // cols) * size
        title = describe(index) if cell != "." else None
        if not counts or cell == ".":
            body.append(_rect(x, y, size, size, STATUS.get(cell, STATUS["."])[0], title=title))
            continue
        body.append(_rect(x, y, size, size, STATUS["."][0], title=title))
        bottom = y + size
        for kind in "nux":
            if kind in counts and (count := counts[kind][index]):
                height = size * count / sizes[index]
                bottom -= height
                extra = ' pointer-events="none"'
                body.append(_rect(x, bottom, size, height, STATUS[kind][0], extra))
    return _svg(cols * size, rows * size, body, f"status of each cell of {output['name']}")


def bars(
    name: str,
    expected: list[float | None] | None,
    got: list[float | None],
    changed: Sequence[bool] = (),
) -> SafeString:
    """Side by side bars per index: expected (light) and got (dark), each with its value
    on hover; the indices changed (a buffer's cells a pass changed) outlined."""
    values = [v for v in (expected or []) + got if _finite(v)]
    scale = max((abs(v) for v in values), default=1.0) or 1.0
    count, height, label_space = len(got), 160, 16
    step = max(22.0, 560 / count)
    width = count * step
    baseline = height - label_space if min(values, default=0.0) >= 0 else (height - label_space) / 2
    reach = baseline - 4
    series = [(got, "#7a3ee0")] if expected is None else [(expected, "#9ab8e8"), (got, "#7a3ee0")]
    bar = (step - 6) / len(series)
    body = [f'<line x1="0" y1="{baseline}" x2="{width}" y2="{baseline}" stroke="#999"/>']
    for i in range(count):
        title = f"[{i}] got {_number(got[i])}"
        if expected is not None:
            title += f", expected {_number(expected[i])}"
        if changed and changed[i]:
            title += " (changed by this pass)"
            outline = ' stroke="currentColor" stroke-width="1.5" pointer-events="none"'
            body.append(_rect(i * step + 1.5, 1.5, step - 3, height - label_space, "none", outline))
        for k, (data, fill) in enumerate(series):
            x, value = i * step + 3 + k * bar, data[i]
            if not _finite(value):
                colour = UNWRITTEN if value is None else NONFINITE
                body.append(
                    _rect(x, baseline - reach, bar - 1, reach, colour, ' opacity="0.5"', title)
                )
                continue
            h = reach * abs(value) / scale
            y = baseline - h if value >= 0 else baseline
            body.append(_rect(x, y, bar - 1, max(h, 1), fill, title=title))
        body.append(svg_text(i * step + step / 2, height - 3, i))
    return _svg(width, height, body, f"expected and computed values of {name}")


def confusion_matrix(report: dict[str, Any]) -> SafeString:
    """Rows: the true digit; columns: the one predicted. Diagonal green, mistakes red,
    shaded by count; both axes say which they are."""
    matrix = report["confusion"]
    size, left, top = 34, 42, 40
    classes = len(matrix)
    worst_miss = max(
        (matrix[r][c] for r in range(classes) for c in range(classes) if r != c), default=0
    )
    best_hit = max((matrix[r][r] for r in range(classes)), default=0)
    middle_x, middle_y = left + classes * size / 2, top + classes * size / 2
    body = [
        svg_text(middle_x, 12, "predicted digit →", size=12, extra=' font-weight="600"'),
        svg_text(
            12,
            middle_y,
            "true digit →",
            size=12,
            extra=f' font-weight="600" transform="rotate(90 12 {middle_y:.1f})"',
        ),
    ]
    for r in range(classes):
        body.append(svg_text(left - 6, top + r * size + 21, r, anchor="end"))
        body.append(svg_text(left + r * size + 17, top - 7, r))
        for c in range(classes):
            count = matrix[r][c]
            if r == c:
                fill = f"rgba(26,127,55,{0.15 + 0.85 * count / (best_hit or 1):.2f})"
            elif count:
                fill = f"rgba(229,72,77,{0.25 + 0.75 * count / (worst_miss or 1):.2f})"
            else:
                fill = "transparent"
            x, y = left + c * size, top + r * size
            verdict = "right" if r == c else f"{r} taken for {c}"
            title = f"{count:,} × {verdict}"
            body.append(_rect(x, y, size - 2, size - 2, fill, ' stroke="#8884"', title))
            if count:
                body.append(svg_text(x + 16, y + 21, count, extra=' pointer-events="none"'))
    side_x, side_y = left + classes * size, top + classes * size
    return _svg(side_x, side_y, body, "confusion matrix: rows are true digits, columns predicted")


def png_data_uri(pixels: np.ndarray) -> str:
    """A grayscale image (values in [0, 1]) as a PNG data: URI."""
    image = Image.fromarray((np.clip(pixels, 0, 1) * 255).astype(np.uint8), mode="L")
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", optimize=True)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def digit_grid(
    images: np.ndarray,
    labels: Sequence[int] | np.ndarray,
    predictions: Sequence[int],
    shown: Sequence[int],
) -> SafeString:
    """The digits at the given indices with what the network said; mistakes in red."""
    per_row, size, caption = 10, 56, 18
    body = []
    for slot, index in enumerate(shown):
        x, y = (slot % per_row) * (size + 8), (slot // per_row) * (size + caption + 6)
        uri = png_data_uri(np.asarray(images[index]).reshape(28, 28))
        body.append(f'<image x="{x}" y="{y}" width="{size}" height="{size}" href="{uri}"/>')
        right = predictions[index] == labels[index]
        if not right:
            body.append(_rect(x, y, size, size, "none", ' stroke="#e5484d" stroke-width="3"'))
        said = predictions[index] if predictions[index] >= 0 else "?"
        text = f"{said}" if right else f"{said}, not {labels[index]}"
        colour = "currentColor" if right else "#e5484d"
        body.append(
            f'<text x="{x + size / 2}" y="{y + size + 14}" font-size="12" text-anchor="middle" '
            f'fill="{colour}">{escape(text)}</text>'
        )
    rows = math.ceil(len(shown) / per_row)
    return _svg(per_row * (size + 8), rows * (size + caption + 6), body, "digits and predictions")


def _matrix_shape(output: dict[str, Any]) -> tuple[int, int]:
    shape = output["shape"]
    return (math.prod(shape[:-1]) if len(shape) > 1 else 1), shape[-1]


def _heatmaps(
    output: dict[str, Any],
    expected: list[float | None],
    got: list[float | None],
    rows: int,
    cols: int,
) -> dict[str, Any]:
    """Expected, got and |error| side by side, on two colour scales."""
    name, marks = output["name"], output["grid"]["cells"]
    scale = max((abs(v) for v in expected + got if _finite(v)), default=1.0) or 1.0
    errors = [
        None if g is None else abs(g - e) if _finite(g) and _finite(e) else math.inf
        for e, g in zip(expected, got, strict=True)
    ]
    wrong = (v for v, m in zip(errors, marks, strict=True) if _finite(v) and m != ".")
    worst = max(wrong, default=0.0) or 1.0
    # Rounding noise within tolerance is not an error worth colouring.
    errors = [0.0 if m == "." else e for e, m in zip(errors, marks, strict=True)]

    def values_colour(v: float | None, scale: float = scale) -> str:
        return diverging(v, scale)

    def error_colour(v: float | None, worst: float = worst) -> str:
        return sequential(v, worst)

    def describe(i: int) -> str:
        where = f"[{i // cols}, {i % cols}]" if rows > 1 else f"[{i}]"
        return f"{where} expected {_number(expected[i])}, got {_number(got[i])}"

    panels = [
        (
            "expected",
            heatmap(expected, rows, cols, values_colour, "", f"expected {name}", describe),
        ),
        ("got", heatmap(got, rows, cols, values_colour, marks, f"computed {name}", describe)),
        ("|error|", heatmap(errors, rows, cols, error_colour, marks, f"error of {name}", describe)),
    ]
    scales = [
        colour_scale(values_colour, -scale, scale, f"colour scale of {name}'s values"),
        colour_scale(error_colour, 0.0, worst, f"colour scale of {name}'s errors"),
    ]
    title = f"{name}: expected, got and |error| (rows down, columns across; hover for values)"
    return {"title": title, "panels": panels, "scales": scales, "marks": True}


def _status(output: dict[str, Any], classified: bool) -> dict[str, Any]:
    """A large output: where it went wrong, or one line when nothing did. A classifier's
    scores are one line too: its confusion matrix says where it went wrong."""
    name, count = output["name"], output["count"]
    wrong = output.get("bad", 0) or output.get("unwritten", 0) or output.get("nonfinite", 0)
    if not wrong and output.get("bad") is None:  # nothing to compare with: not "right"
        title = f"{name}: {count:,} values, not checked (nothing to compare them with)"
        return {"title": title, "summary": True, "unchecked": True}
    if not wrong:
        return {"title": f"{name}: all {count:,} values right", "summary": True}
    if classified:
        title = f"{name}: {wrong:,} of {count:,} values wrong; the confusion matrix shows where"
        return {"title": title, "summary": True, "wrong": True}
    block_rows, block_cols = output["grid"].get("block", [1, 1])
    each = ""
    if block_rows * block_cols > 1:
        each = f"; each square stands for {block_rows * block_cols:,} values" + (
            ", filled in proportion to those wrong, NaN or never written"
            if output["grid"].get("counts")
            else ", coloured by the worst of them"
        )
    title = f"{name}: where the {output.get('bad', 0):,} wrong of {count:,} values are{each}"
    return {"title": title, "svg": status_map(output), "marks": True}


def figures(outcome: Outcome) -> list[dict[str, Any]]:
    """The pictures of an outcome, each {"title", "svg"}, {"title", "panels": [(label,
    svg)], "scales": [svg]} or, for a large output that is all right, {"title", "summary"}."""
    result = []
    report = outcome.get("report") or {}
    classified = report.get("kind") == "classification"
    for output in outcome.get("outputs", []):
        name, rows, cols = output["name"], *_matrix_shape(output)
        got, expected = output_list(output, "got"), output_list(output, "expected")
        if got is not None and rows == 1 and cols <= MAX_SIDE:
            title = f"{name}: expected (light) and got (dark)" if expected else f"{name}: values"
            if output.get("intermediate"):
                title = f"{name}: values (an intermediate buffer: shown, not checked)"
            result.append({"title": title, "svg": bars(name, expected, got)})
        elif got is not None and expected is not None and rows <= MAX_SIDE and cols <= MAX_SIDE:
            result.append(_heatmaps(output, expected, got, rows, cols))
        else:
            result.append(_status(output, classified))
    if classified:
        accuracy = report["accuracy"]
        title = f"Confusion matrix: {accuracy:.1%} of {report['count']:,} digits right"
        result.append({"title": title, "svg": confusion_matrix(report), "kind": "confusion"})
    return result


def headline(outcome: Outcome) -> dict[str, Any] | None:
    """The one picture that says most about an outcome, for embeds: a classifier's
    confusion matrix, else the first output's picture."""
    shown = [figure for figure in figures(outcome) if not figure.get("summary")]
    return next((f for f in shown if f.get("kind") == "confusion"), shown[0] if shown else None)


def buffer_figure(buffer: Mapping[str, Any], before: Mapping[str, Any] | None) -> dict[str, Any]:
    """A storage buffer after a pass (outcome["passes"][i]["buffers"]), drawn as outputs
    are: bars for a short vector, else a heatmap of its first MAX_SIDE rows and columns
    (a long vector in rows of MAX_SIDE), never-written cells struck; the cells this pass
    changed (from before: the same buffer after an earlier pass) outlined."""
    name, count, shape = buffer["name"], buffer["count"], buffer["shape"]
    values = output_values(buffer, "values")
    if values is None:
        note = buffer.get("note", "not kept")
        return {"title": f"{name}: {count:,} cells, {note}", "summary": True}
    flat = values.ravel()
    if len(shape) > 1 and math.prod(shape[:-1]) > 1:
        width = shape[-1]
        rows, cols = min(flat.size // width, MAX_SIDE), min(width, MAX_SIDE)
        where = [r * width + c for r in range(rows) for c in range(cols)]
    else:
        where = list(range(min(flat.size, MAX_SIDE * MAX_SIDE)))
        cols = min(flat.size, MAX_SIDE) or 1
        rows = math.ceil(len(where) / cols)
    never = np.ma.getmaskarray(flat)
    data = np.ma.getdata(flat).astype(np.float64)
    cells: list[float | None] = [None if never[i] else float(data[i]) for i in where]
    changed = [bool(c) for c in _changed(buffer, before)[where]] if where else []
    cells += [None] * (rows * cols - len(where))  # a long vector's last row
    changed += [False] * (rows * cols - len(changed))
    marks = "".join(
        "u" if v is None else "x" if c else "." for v, c in zip(cells, changed, strict=True)
    )
    parts = [f"{sum(changed):,} of the cells drawn changed by this pass"] if before else []
    if len(where) < count:
        parts.append(f"the first {len(where):,} of {count:,} cells drawn")
    if never.any():
        parts.append(f"{int(never.sum()):,} never written")
    title = "; ".join([f"{name}: {'×'.join(str(s) for s in shape)} {buffer['dtype']}", *parts])
    if rows == 1:
        svg = bars(name, None, cells, changed)
        return {"title": title, "svg": svg, "marks": before is not None or bool(never.any())}
    scale = max((abs(v) for v in cells if _finite(v)), default=1.0) or 1.0

    def colour(v: float | None, scale: float = scale) -> str:
        return diverging(v, scale)

    def describe(i: int) -> str:
        return f"[{i // cols}, {i % cols}] {_number(cells[i])}" + (
            " (changed by this pass)" if changed[i] else ""
        )

    svg = heatmap(cells, rows, cols, colour, marks, f"{name} after the pass", describe)
    scales = [colour_scale(colour, -scale, scale, f"colour scale of {name}'s values")]
    return {"title": title, "svg": svg, "scales": scales, "marks": True}


def block_means(values: np.ndarray, shape: Sequence[int]) -> tuple[np.ndarray, list[int]]:
    """A buffer too large to draw cell by cell, as at most MAX_SIDE x MAX_SIDE blocks (a
    vector: MAX_SIDE² runs of cells), each the mean of its cells (NaN or infinite where
    one of them is): the means, and the cells a block spans on each axis."""
    flat = values.reshape(-1)
    if len(shape) < 2 or math.prod(shape) != flat.size:
        step = max(1, math.ceil(flat.size / (MAX_SIDE * MAX_SIDE)))
        begins = np.arange(0, flat.size, step)
        sums = np.add.reduceat(flat, begins, dtype=np.float64)
        return sums / np.diff(np.append(begins, flat.size)), [step]
    grid = flat.reshape(math.prod(shape[:-1]), shape[-1])
    steps = [max(1, math.ceil(side / MAX_SIDE)) for side in grid.shape]
    starts = [np.arange(0, side, step) for side, step in zip(grid.shape, steps, strict=True)]
    sums = np.add.reduceat(grid, starts[0], axis=0, dtype=np.float64)
    sums = np.add.reduceat(sums, starts[1], axis=1)
    rows, cols = (np.diff(np.append(s, side)) for s, side in zip(starts, grid.shape, strict=True))
    return sums / np.outer(rows, cols), steps


def _changed(buffer: Mapping[str, Any], before: Mapping[str, Any] | None) -> np.ndarray:
    """For each cell kept, whether it differs from the same buffer after an earlier pass
    (none differ without one; all where the two cannot be compared)."""
    now = output_values(buffer, "values")
    then = output_values(before, "values") if before is not None else None
    size = now.size if now is not None else 0
    if before is None:
        return np.zeros(size, dtype=bool)
    if now is None or then is None or then.size != size:
        return np.ones(size, dtype=bool)
    a, b = np.ma.getdata(now).ravel(), np.ma.getdata(then).ravel()
    same = (a == b) | (np.isnan(a.astype(np.float64)) & np.isnan(b.astype(np.float64)))
    masks = np.ma.getmaskarray(now).ravel() != np.ma.getmaskarray(then).ravel()
    return np.asarray(~same | masks)
