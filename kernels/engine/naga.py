"""naga's and wgpu's error texts as a reader wants them.

wgpu-py 0.32 hands over errors only as text; the formats parsed here are pinned by
tests/kernels/test_runner.py (wgpu's minor version is pinned in pyproject.toml).
"""

from __future__ import annotations

import re

from kernels.engine.outcome import CompileError

# The text quotes the learner's source: each pattern reads a bounded stretch from where it
# starts, so a line of "Shader '" or "┌─ " repeated cannot make a search quadratic.
HEADLINE = re.compile(r"Shader (?:'[^\n]{0,200}?' )?(?:parsing|validation) error: (.*)")
# The file name is "wgsl" for parse errors and empty for validation errors.
SPAN = re.compile(r"┌─ [^\n:]{0,200}:(\d+):(\d+)")
NOTE = re.compile(r"^\s*= (.*)$")
CARETS = re.compile(r"[\^\-]+")
# A label that only names a naga IR handle ("naga::ir::Expression [5]") tells a learner
# nothing; the notes say what is wrong.
IR_HANDLE = re.compile(r"naga::(?:ir::)?\w+ \[\d+\]")
BINDING_COUNT = re.compile(
    r"Number of bindings in bind group descriptor \((\d+)\) does not match the number of "
    r"bindings defined in the bind group layout \((\d+)\)"
)
MISSING_DECLARATION = re.compile(
    r"Unable to find a corresponding declaration for the given binding (\d+)"
)
WGPU_NOISE = ("Validation Error", "Caused by:")


def _naga_text(text: str) -> str:
    lines = text.splitlines()
    while lines and (
        not lines[0].strip()
        or lines[0].strip() in WGPU_NOISE
        or lines[0].strip().startswith("In wgpu")
    ):
        lines.pop(0)
    return "\n".join(lines).rstrip()


def parse_compile_error(kernel: str, text: str) -> CompileError:
    """naga's error text as fields: where (1-based line and column), what, and the label.

    Parse errors carry "┌─ wgsl:LINE:COL", validation errors "┌─ :LINE:COL", and some
    errors carry no span at all (then line and column are None).
    """
    naga = _naga_text(text)
    lines = naga.splitlines()
    headline = HEADLINE.search(naga)
    message = headline.group(1).strip() if headline else (lines[0].strip() if lines else "")
    span = SPAN.search(naga)
    line = column = None
    label = ""
    notes: list[str] = []
    if span is not None:
        line, column = int(span.group(1)), int(span.group(2))
        start = naga[: span.start()].count("\n") + 1
        block = []
        for row in lines[start:]:
            note = NOTE.match(row)
            if note:
                notes.append(note.group(1).strip())
            elif "│" in row:
                block.append(row)
            elif row.strip():
                break
        label = _caret_label(block, column)
    return {
        "kernel": kernel,
        "line": line,
        "column": column,
        "message": message,
        "label": "" if IR_HANDLE.fullmatch(label) else label,
        "notes": notes,
        "text": naga,
    }


def _caret_label(block: list[str], column: int) -> str:
    """The label codespan drew for the caret run that starts at column.

    codespan draws "N │ source", then a caret row; the label of the rightmost run follows
    it on the same row, the others hang below at their run's column behind "│" pipes.
    """
    rows = []
    for row in block:
        gutter, _, content = row.partition("│")
        rows.append((gutter.strip(), content[1:] if content.startswith(" ") else content))
    source = next((i for i, (gutter, _) in enumerate(rows) if gutter.isdigit()), None)
    if source is None or source + 1 >= len(rows):
        return ""
    index = column - 1
    carets = rows[source + 1][1]
    runs = list(CARETS.finditer(carets))
    if runs and runs[-1].start() == index and carets[runs[-1].end() :].strip():
        return carets[runs[-1].end() :].strip()
    for _, content in rows[source + 2 :]:
        if len(content) > index and content[index] not in " │":
            return content[index:].strip()
    return ""


def compile_message(info: CompileError) -> str:
    who = "The kernel" if info["kernel"] == "self" else f"Kernel {info['kernel']}"
    where = f" (line {info['line']}, column {info['column']})" if info["line"] else ""
    detail = f" ({info['notes'][-1]})" if info["notes"] else ""
    return f"{who} does not compile{where}: {info['message']}{detail}"


def clean_wgpu_error(text: str) -> str:
    """wgpu's error text without its wrapper lines, with labels written as names."""
    kept = [
        row.strip()
        for row in text.splitlines()
        if row.strip()
        and row.strip() not in WGPU_NOISE
        and not row.strip().startswith(("In wgpu", "In a dispatch command"))
    ]
    cleaned = " ".join(kept)
    cleaned = cleaned.replace(" with '' label", "")
    return re.sub(r" with '([^']*)' label", r" '\1'", cleaned)
