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
from collections.abc import Callable, Sequence
from html import escape

import numpy as np
from django.utils.safestring import SafeString, mark_safe
from PIL import Image

from kernels.engine.outcome import Outcome

CELL = 14  # px per cell of a heatmap
MAX_SIDE = 64  # rows or columns drawn cell by cell
STATUS = {
    ".": ("#8fd19e", "right"),
    "x": ("#e5484d", "wrong"),
    "u": ("#6b6b70", "never written"),
    "n": ("#b54fd8", "NaN or infinity"),
}
UNWRITTEN, NONFINITE = "#6b6b70", "#b54fd8"


def _value(raw) -> float | None:
    """Outcome values: numbers, "NaN" / "Infinity" / "-Infinity", or None (never written)."""
    if isinstance(raw, int | float):
        return float(raw)
    return {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}.get(raw)


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def _svg(width: float, height: float, body: list[str], label: str) -> SafeString:
    markup = (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width:.0f} {height:.0f}" '
        f'width="{width:.0f}" height="{height:.0f}" role="img" aria-label="{escape(label)}">'
        + "".join(body)
        + "</svg>"
    )
    return mark_safe(markup)  # noqa: S308 (numbers and escaped labels only)


def _rect(x: float, y: float, w: float, h: float, fill: str, extra: str = "") -> str:
    return f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" fill="{fill}"{extra}/>'


def _text(x: float, y: float, text: object, anchor: str = "middle") -> str:
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" font-size="11" text-anchor="{anchor}" '
        f'fill="currentColor">{escape(str(text))}</text>'
    )


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
    values: list[float | None], rows: int, cols: int, colour: Callable, marks: str, label: str
) -> SafeString:
    """One cell per value; wrong and non-finite cells outlined, unwritten ones struck.
    Cells shrink so that three panels fit side by side."""
    cell = max(4, min(CELL, 280 // cols))
    body = []
    for index, value in enumerate(values):
        x, y = (index % cols) * cell, (index // cols) * cell
        body.append(_rect(x, y, cell, cell, colour(value)))
        mark = marks[index] if marks else "."
        if mark in "xn" and cell >= 8:
            outline = ' stroke="#111" stroke-width="1.5"'
            body.append(_rect(x + 1, y + 1, cell - 2, cell - 2, "none", outline))
        elif mark == "u":
            body.append(f'<path d="M{x} {y + cell}l{cell} -{cell}" stroke="#ddd"/>')
    return _svg(cols * cell, rows * cell, body, label)


def status_map(output: dict) -> SafeString:
    """Every cell (or block of cells) coloured by its status; long vectors wrap into rows."""
    grid = output["grid"]
    rows, cols, cells = grid["rows"], grid["cols"], grid["cells"]
    if rows == 1 and cols > MAX_SIDE:
        rows, cols = math.ceil(cols / MAX_SIDE), MAX_SIDE
    elif rows > 2 * cols:
        # Tall and narrow (e.g. 1,000 digits x 10 classes): lay rows across instead.
        cells = "".join(cells[r * cols + c] for c in range(cols) for r in range(rows))
        rows, cols = cols, rows
    size = max(4, min(CELL, 640 // cols))
    body = [
        _rect((i % cols) * size, (i // cols) * size, size, size, STATUS.get(cell, STATUS["."])[0])
        for i, cell in enumerate(cells)
    ]
    return _svg(cols * size, rows * size, body, f"status of each cell of {output['name']}")


def bars(name: str, expected: list[float | None] | None, got: list[float | None]) -> SafeString:
    """Side by side bars per index: expected (light) and got (dark)."""
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
        for k, (data, fill) in enumerate(series):
            x, value = i * step + 3 + k * bar, data[i]
            if not _finite(value):
                colour = UNWRITTEN if value is None else NONFINITE
                body.append(_rect(x, baseline - reach, bar - 1, reach, colour, ' opacity="0.5"'))
                continue
            h = reach * abs(value) / scale
            body.append(_rect(x, baseline - h if value >= 0 else baseline, bar - 1, h, fill))
        body.append(_text(i * step + step / 2, height - 3, i))
    return _svg(width, height, body, f"expected and computed values of {name}")


def confusion_matrix(report: dict) -> SafeString:
    """Rows: true label; columns: predicted. Diagonal green, mistakes red, by count."""
    matrix = report["confusion"]
    size, pad = 34, 22
    classes = len(matrix)
    worst_miss = max(
        (matrix[r][c] for r in range(classes) for c in range(classes) if r != c), default=0
    )
    best_hit = max((matrix[r][r] for r in range(classes)), default=0)
    body = []
    for r in range(classes):
        body.append(_text(pad - 6, pad + r * size + 21, r, anchor="end"))
        body.append(_text(pad + r * size + 17, pad - 7, r))
        for c in range(classes):
            count = matrix[r][c]
            if r == c:
                fill = f"rgba(26,127,55,{0.15 + 0.85 * count / (best_hit or 1):.2f})"
            elif count:
                fill = f"rgba(229,72,77,{0.25 + 0.75 * count / (worst_miss or 1):.2f})"
            else:
                fill = "transparent"
            x, y = pad + c * size, pad + r * size
            body.append(_rect(x, y, size - 2, size - 2, fill, ' stroke="#8884"'))
            if count:
                body.append(_text(x + 16, y + 21, count))
    side = pad + classes * size
    return _svg(side, side, body, "confusion matrix: rows are true digits, columns predicted")


def png_data_uri(pixels: np.ndarray) -> str:
    """A grayscale image (values in [0, 1]) as a PNG data: URI."""
    image = Image.fromarray((np.clip(pixels, 0, 1) * 255).astype(np.uint8), mode="L")
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", optimize=True)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def digit_grid(
    images: np.ndarray, labels: Sequence[int], predictions: Sequence[int], shown: Sequence[int]
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


def _matrix_shape(output: dict) -> tuple[int, int]:
    shape = output["shape"]
    return (math.prod(shape[:-1]) if len(shape) > 1 else 1), shape[-1]


def figures(outcome: Outcome) -> list[dict]:
    """The pictures of an outcome, each {"title", "svg"} or {"title", "panels": [(label, svg)]}."""
    result = []
    for output in outcome.get("outputs", []):
        name, rows, cols = output["name"], *_matrix_shape(output)
        got = [_value(v) for v in output["got"]] if output.get("got") is not None else None
        expected = (
            [_value(v) for v in output["expected"]] if output.get("expected") is not None else None
        )
        if got is not None and rows == 1 and cols <= MAX_SIDE:
            title = f"{name}: expected (light) and got (dark)" if expected else f"{name}: values"
            result.append({"title": title, "svg": bars(name, expected, got)})
        elif got is not None and expected is not None and rows <= MAX_SIDE and cols <= MAX_SIDE:
            scale = max((abs(v) for v in expected + got if _finite(v)), default=1.0) or 1.0
            errors = [
                None if g is None else abs(g - e) if _finite(g) and _finite(e) else math.inf
                for e, g in zip(expected, got, strict=True)
            ]
            marks = output["grid"]["cells"]
            worst = (
                max(
                    (v for v, m in zip(errors, marks, strict=True) if _finite(v) and m != "."),
                    default=0.0,
                )
                or 1.0
            )

            def values_colour(v, scale=scale):
                return diverging(v, scale)

            def error_colour(v, worst=worst):
                return sequential(v, worst)

            # Rounding noise within tolerance is not an error worth colouring.
            errors = [0.0 if m == "." else e for e, m in zip(errors, marks, strict=True)]

            panels = [
                ("expected", heatmap(expected, rows, cols, values_colour, "", f"expected {name}")),
                ("got", heatmap(got, rows, cols, values_colour, marks, f"computed {name}")),
                ("|error|", heatmap(errors, rows, cols, error_colour, marks, f"error of {name}")),
            ]
            result.append({"title": f"{name}: expected, got and |error|", "panels": panels})
        else:
            result.append({"title": f"{name}: status of every cell", "svg": status_map(output)})
    if (report := outcome.get("report")) and report.get("kind") == "classification":
        accuracy = report["accuracy"]
        title = f"Confusion matrix: {accuracy:.1%} of {report['count']:,} digits right"
        result.append({"title": title, "svg": confusion_matrix(report), "kind": "confusion"})
    return result


def headline(outcome: Outcome) -> dict | None:
    """The one picture that says most about an outcome, for embeds: a classifier's
    confusion matrix, else the first output's picture."""
    shown = figures(outcome)
    return next((f for f in shown if f.get("kind") == "confusion"), shown[0] if shown else None)
