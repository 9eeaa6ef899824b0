"""Server-rendered pictures of a replay outcome: heatmaps, status maps and bars, as SVG.

Only numbers from the outcome and our own labels go into the markup, and every label
is escaped, so the result is safe to put in a page as is.
"""

from __future__ import annotations

import math
from html import escape

from django.utils.safestring import SafeString, mark_safe

CELL = 14  # px per cell when a matrix is small enough to draw whole
MAX_DRAWN = 64  # rows or columns drawn cell by cell
STATUS_COLOURS = {
    ".": ("#8fd19e", "written and within tolerance"),
    "x": ("#e5484d", "wrong"),
    "u": ("#6b6b70", "never written"),
    "n": ("#b54fd8", "NaN or infinity"),
    "?": ("#9ab8e8", "written (no reference)"),
}


def _number(value) -> float | None:
    """Outcome numbers are floats, or the strings NaN / Infinity / -Infinity."""
    if isinstance(value, int | float):
        return float(value)
    return {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}.get(value)


def _diverging(value: float | None, scale: float) -> str:
    if value is None or math.isnan(value):
        return "#6b6b70"
    if math.isinf(value):
        return "#b54fd8"
    t = max(-1.0, min(1.0, value / scale)) if scale else 0.0
    # white at zero, red for positive, blue for negative
    if t >= 0:
        return f"rgb(255,{int(255 - 175 * t)},{int(255 - 200 * t)})"
    t = -t
    return f"rgb({int(255 - 200 * t)},{int(255 - 140 * t)},255)"


def _sequential(value: float, scale: float) -> str:
    t = max(0.0, min(1.0, value / scale)) if scale else 0.0
    return f"rgb(255,{int(250 - 200 * t)},{int(235 - 215 * t)})"


def _svg(width: int, height: int, body: list[str], label: str) -> SafeString:
    markup = (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" role="img" aria-label="{escape(label)}">'
        + "".join(body)
        + "</svg>"
    )
    return mark_safe(markup)  # noqa: S308 (numbers and escaped labels only)


def _matrix_view(output: dict) -> tuple[int, int]:
    shape = output["shape"]
    cols = shape[-1]
    rows = math.prod(shape[:-1]) if len(shape) > 1 else 1
    return rows, cols


def _heatmap(values: list, rows: int, cols: int, colour, marks: str, label: str) -> SafeString:
    body = []
    for r in range(rows):
        for c in range(cols):
            i = r * cols + c
            fill = colour(values[i])
            body.append(
                f'<rect x="{c * CELL}" y="{r * CELL}" width="{CELL}" height="{CELL}" fill="{fill}"/>'
            )
            mark = marks[i] if marks else "."
            if mark in "xn":
                body.append(
                    f'<rect x="{c * CELL + 1}" y="{r * CELL + 1}" width="{CELL - 2}" '
                    f'height="{CELL - 2}" fill="none" stroke="#111" stroke-width="2"/>'
                )
            elif mark == "u":
                body.append(
                    f'<path d="M{c * CELL} {(r + 1) * CELL}l{CELL} -{CELL}" stroke="#ddd" stroke-width="1.5"/>'
                )
    return _svg(cols * CELL, rows * CELL, body, label)


def status_map(output: dict) -> SafeString:
    grid = output["grid"]
    rows, cols, cells = grid["rows"], grid["cols"], grid["cells"]
    size = max(4, min(CELL, 640 // max(cols, 1)))
    body = []
    for r in range(rows):
        for c in range(cols):
            fill = STATUS_COLOURS.get(cells[r * cols + c], STATUS_COLOURS["."])[0]
            body.append(
                f'<rect x="{c * size}" y="{r * size}" width="{size}" height="{size}" fill="{fill}"/>'
            )
    return _svg(cols * size, rows * size, body, f"Status of each cell of {output['name']}")


def bars(output: dict, expected: list, got: list) -> SafeString:
    count = len(got)
    values = [_number(v) for v in expected + got]
    finite = [abs(v) for v in values if v is not None and math.isfinite(v)]
    scale = max(finite, default=1.0) or 1.0
    width, height, pad = max(240, count * 26), 150, 20
    mid = (
        height - pad
        if min((v for v in values if v is not None and math.isfinite(v)), default=0) >= 0
        else height / 2
    )
    span = mid - 6
    body = [f'<line x1="0" y1="{mid}" x2="{width}" y2="{mid}" stroke="#999" stroke-width="1"/>']
    step = width / count
    for i in range(count):
        for k, (value, fill) in enumerate(((values[i], "#9ab8e8"), (values[count + i], "#7a3ee0"))):
            x = i * step + 3 + k * (step - 6) / 2
            w = (step - 6) / 2 - 1
            if value is None or not math.isfinite(value):
                body.append(
                    f'<text x="{x + w / 2}" y="{mid - 4}" font-size="10" text-anchor="middle" fill="#b54fd8">!</text>'
                )
                continue
            h = span * abs(value) / scale
            y = mid - h if value >= 0 else mid
            body.append(
                f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" fill="{fill}"/>'
            )
        body.append(
            f'<text x="{i * step + step / 2:.1f}" y="{height - 4}" font-size="10" text-anchor="middle" fill="currentColor">{i}</text>'
        )
    return _svg(
        width, height, body, f"Expected (light) and computed (dark) values of {output['name']}"
    )


def figures(outcome: dict) -> list[dict]:
    """The pictures for each output: what the page shows under the outcome."""
    result = []
    for output in outcome.get("outputs", []):
        name = output["name"]
        expected, got = output.get("expected"), output.get("got")
        rows, cols = _matrix_view(output)
        if got is not None and expected is not None and rows == 1 and cols <= 64:
            result.append({"title": f"{name}: expected vs got", "svg": bars(output, expected, got)})
        elif got is not None and expected is not None and rows <= MAX_DRAWN and cols <= MAX_DRAWN:
            e = [_number(v) for v in expected]
            g = [_number(v) for v in got]
            finite = [abs(v) for v in e + g if v is not None and math.isfinite(v)]
            scale = max(finite, default=1.0) or 1.0
            marks = output["grid"]["cells"] if output["grid"]["block"] == [1, 1] else ""
            errors = [
                abs(a - b) if a is not None and b is not None and math.isfinite(a - b) else math.inf
                for a, b in zip(e, g, strict=True)
            ]
            worst = max((v for v in errors if math.isfinite(v)), default=0.0) or 1.0

            def err_colour(v, worst=worst):
                return _sequential(v, worst) if math.isfinite(v) else "#b54fd8"

            result.append(
                {
                    "title": f"{name}: expected · got · |error|",
                    "panels": [
                        (
                            "expected",
                            _heatmap(
                                e,
                                rows,
                                cols,
                                lambda v: _diverging(v, scale),
                                "",
                                f"expected {name}",
                            ),
                        ),
                        (
                            "got",
                            _heatmap(
                                g,
                                rows,
                                cols,
                                lambda v: _diverging(v, scale),
                                marks,
                                f"computed {name}",
                            ),
                        ),
                        (
                            "|error|",
                            _heatmap(errors, rows, cols, err_colour, marks, f"error of {name}"),
                        ),
                    ],
                }
            )
        else:
            result.append({"title": f"{name}: status of every cell", "svg": status_map(output)})
    return result
