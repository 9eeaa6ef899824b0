"""The automatic reviewer's evidence: which cells, what pattern, which builtin.

Everything here reads the outcome alone: the output's cell values as the comparison
stored them (`got`, None for a cell never written) and what the worker read from the
source (outcome["analysis"]: builtins, workgroup size, the index of each store). Each
finding ends in a question that leads the learner to the cause, never in the fix; where
the run does not show the cause, the finding says so.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from kernels.engine.outcome import EntryPointFacts, RunWarning, WarningCode, output_list
from tutor.quoting import quote

LOCAL_BUILTINS = ("local_invocation_id", "local_invocation_index")
# Beyond this many cells the scans below would cost the web process too much.
MAX_CELLS = 4096

# An output's cells as output_list gives them: numbers, None for a cell never written.
Cells = list[Any]
# Whether a value got is close enough to the one expected, under the harness's tolerance.
Close = Callable[[Any, Any], bool]


def runs(flags: list[bool]) -> list[tuple[int, int]]:
    """The ranges (first, last) of consecutive True flags."""
    found: list[tuple[int, int]] = []
    start = None
    for i, flag in enumerate(flags):
        if flag and start is None:
            start = i
        elif not flag and start is not None:
            found.append((start, i - 1))
            start = None
    if start is not None:
        found.append((start, len(flags) - 1))
    return found


def describe(ranges: list[tuple[int, int]]) -> str:
    """cells 64–999, or the first three ranges and how many more."""
    words = [f"{a}" if a == b else f"{a}–{b}" for a, b in ranges[:3]]
    more = f" and {len(ranges) - 3} more ranges" if len(ranges) > 3 else ""
    return (
        "cell"
        + ("s" if len(ranges) > 1 or ranges[0][0] != ranges[0][1] else "")
        + " "
        + (", ".join(words) + more)
    )


def _block_stride(ranges: list[tuple[int, int]]) -> tuple[int, int] | None:
    """(block length, stride) when the ranges are equal blocks at equal steps."""
    if len(ranges) < 2:
        return None
    lengths = {b - a + 1 for a, b in ranges}
    steps = {ranges[i + 1][0] - ranges[i][0] for i in range(len(ranges) - 1)}
    if len(lengths) == 1 and len(steps) == 1:
        return lengths.pop(), steps.pop()
    return None


def builtin_names(entry: EntryPointFacts | None) -> dict[str, str]:
    """The entry point's parameters (or struct members) by the builtin they carry."""
    if entry is None:
        return {}
    return {builtin: name for name, builtin in entry["builtins"].items()}


def _local_index(entry: EntryPointFacts | None, name: str) -> str:
    """The builtin that numbers invocations within one workgroup, when the kernel takes
    its index from it and never asks for its place in the whole dispatch."""
    builtins = builtin_names(entry)
    if "global_invocation_id" in builtins or "workgroup_id" in builtins:
        return ""
    return next((b for b in LOCAL_BUILTINS if b in builtins), "")


def one_cell_each(entry: EntryPointFacts | None, name: str) -> bool:
    """Whether each invocation stores at most one cell of this output: one store into
    it and no loop in the entry point. Claims of "one invocation per cell" need this."""
    if entry is None:
        return False
    stores = [w for w in entry["writes"] if w["buffer"] == name]
    return len(stores) == 1 and not entry["loops"]


def race(entry: EntryPointFacts | None) -> str:
    """A race on workgroup memory seen in the kernel itself: a var<workgroup> slot read
    at an index no store of this invocation wrote (so another invocation's), with no
    workgroup barrier between the store before it and the read; "" otherwise. Only told
    where every barrier is in the entry point's own body (one in a helper function could
    run anywhere), and never for an older runner's analysis, which did not record them."""
    shared = (entry.get("shared") if entry else None) or {}
    accesses = shared.get("accesses") or []
    barriers = shared.get("barriers") or []
    if not accesses or shared.get("barriers_elsewhere", 1):
        return ""
    writes = [a for a in accesses if a["kind"] == "write"]
    written = {(a["variable"], a["index"]) for a in writes}
    for read in accesses:
        if read["kind"] != "read" or (read["variable"], read["index"]) in written:
            continue
        before = [
            w for w in writes if w["variable"] == read["variable"] and w["line"] < read["line"]
        ]
        if not before:
            continue
        write = before[-1]
        if any(write["line"] <= line <= read["line"] for line in barriers):
            continue
        name = read["variable"]
        stored = quote(f"{name}[{write['index']}]" if write["index"] else name)
        loaded = quote(f"{name}[{read['index']}]" if read["index"] else name)
        if not stored or not loaded:
            continue
        nowhere = "Nothing in the kernel calls" if not barriers else "Between them, nothing calls"
        return (
            f"**A race on workgroup memory.** Your kernel stores into {stored} (line "
            f"{write['line']}) and then reads {loaded} (line {read['line']}): a slot that "
            f"another invocation of the workgroup writes. {nowhere} `workgroupBarrier()`, "
            "and the invocations of a workgroup do not run in step, so nothing makes that "
            "store happen before that read: an invocation can read the slot before its "
            "writer has written it, or after it has been overwritten. Where must every "
            f"invocation have finished writing `{name}` before any of them reads it?"
        )
    return ""


def overrun(
    warnings: list[RunWarning], threads: tuple[int, int, int] | None, outputs: list[dict[str, Any]]
) -> str:
    """The run's dropped-writes warning in the review's words: a store with no bounds check
    before it whose dispatch can reach past its buffer, which llvmpipe drops, so a run
    passes here that a GPU may not. With the counts where the first pass's invocations
    outnumber the output's cells; "" without such a warning (a GPU run has none)."""
    for warning in warnings:
        data = warning.get("data") or {}
        if warning.get("code") != WarningCode.DROPPED_WRITES or not data.get("buffer"):
            continue
        name = str(data["buffer"])
        store = quote(f"{name}[{data.get('index', '')}]") or f"`{name}`"
        output = next((o for o in outputs if o.get("name") == name), None)
        count = (output or {}).get("count") or 0
        if threads and count and threads[2] > count:
            groups, size, total = threads
            spare = total - count
            said = (
                f"**{spare} invocations past the end store into `{name}`.** {total} "
                f"invocations ran ({groups} workgroups × {size}) for {count} cells, and "
                f"nothing in your kernel before the store into {store} (line {data.get('line')}) "
                f"stops the last {spare}."
            )
        else:
            said = (
                f"**Nothing in your kernel checks the index before the store into {store}** "
                f"(line {data.get('line')}), and the dispatch can reach past the end of `{name}`."
            )
        return (
            f"{said} This server's CPU backend (llvmpipe) drops writes past the end of a "
            "buffer, so the run passes here; on a GPU they may land in other memory. What "
            "should an invocation with no cell of its own do, and how would it know?"
        )
    return ""


def unwritten_cells(
    output: dict[str, Any], entry: EntryPointFacts | None, threads: tuple[int, int, int] | None
) -> tuple[str, str]:
    """Where the never-written cells are, what that pattern points at, and a question:
    (kind, text), kind one of "local" (a per-workgroup builtin indexes the whole array),
    "lines" (whole rows or columns of a matrix), "tail", "blocks", "unknown", or ""
    when the run holds no cell values to read."""
    got = output_list(output, "got")
    count = output.get("count") or 0
    name = output.get("name", "out")
    if not got or len(got) != count or count > MAX_CELLS:
        return "", ""
    unwritten = [value is None for value in got]
    written = runs([not flag for flag in unwritten])
    holes = runs(unwritten)
    if not written:
        return "", ""
    where = f"Written: {describe(written)}; never written: {describe(holes)}."
    local = _local_index(entry, name)
    if local and threads:
        groups, size, _ = threads
        param = builtin_names(entry)[local]
        if written[-1][1] < size < count:
            return "local", (
                f"{where} That is at most one workgroup's worth ({size} cells), although "
                f"{groups} workgroups ran. Your kernel takes its position from "
                f"`{local}` (`{param}`), and from no other builtin. Which number does "
                f"`{local}` give the first invocation of the *second* workgroup, and which "
                f"cell of `{name}` does that invocation write?"
            )
    if lines := _whole_lines(unwritten, output.get("shape") or []):
        question = (
            "Which component of the invocation id gives your row, which gives your column, "
            "and how many invocations does the dispatch run along each?"
        )
        if threads and threads[2] >= count:
            # Enough ran: the dispatch is not the first suspect, what stops them is.
            question = (
                f"{threads[2]} invocations ran for {count} cells. Which of them should have "
                "written those cells, and what in your kernel stops them or sends their "
                "stores elsewhere?"
            )
        return "lines", f"{lines} {question}"
    if not one_cell_each(entry, name):
        return "unknown", (
            f"{where} Your kernel may store more than one cell of `{name}` per invocation "
            "(in a loop, or in more than one place): which cells does one invocation write, "
            "and which invocation should have written the first cell never written?"
        )
    if threads and written[-1][1] < count - 1 and len(holes) == 1 and holes[0][1] == count - 1:
        groups, size, total = threads
        first = holes[0][0]
        if total >= count:
            return "tail", (
                f"{where} {total} invocations ran, enough for every cell, so the invocations "
                f"for cells {first} and on returned before writing, or wrote elsewhere. "
                f"Where does {first} come from: is there a bounds check in your kernel, and "
                f"what does it compare the index with?"
            )
    pattern = _block_stride(written)
    if pattern:
        length, stride = pattern
        return "blocks", (
            f"{where} The written cells come in blocks of {length}, one every {stride} "
            "cells: each group of invocations writes a block, and the blocks do not meet. "
            f"Which cell does the first invocation of the second block write, and which "
            "should it write?"
        )
    return "unknown", f"{where} The run does not show which invocations skipped those cells."


def _whole_lines(unwritten: list[bool], shape: list[int]) -> str:
    """For a matrix whose never-written cells are whole rows or whole columns: which."""
    if len(shape) != 2 or not all(shape):
        return ""
    rows, cols = shape
    empty_rows = [r for r in range(rows) if all(unwritten[r * cols : (r + 1) * cols])]
    empty_cols = [c for c in range(cols) if all(unwritten[c::cols])]
    total = sum(unwritten)
    for name, empty, length, count in (
        ("row", empty_rows, cols, rows),
        ("column", empty_cols, rows, cols),
    ):
        if empty and len(empty) * length == total and len(empty) < count:
            flags = [False] * count
            for index in empty:
                flags[index] = True
            ranges = runs(flags)
            words = ", ".join(f"{a}" if a == b else f"{a}–{b}" for a, b in ranges[:3])
            return (
                f"Whole {name}s of the {rows}×{cols} result were never written: "
                f"{name}{'s' if len(empty) > 1 else ''} {words}, every other cell was."
            )
    return ""


def best_shift(got: Cells, expected: Cells, close: Close) -> int:
    """The constant offset k (|k| ≤ 64) for which the wrong cells hold expected[i + k];
    0 when no offset explains at least 95% of them (a pattern is only told when the
    run's data bears it out)."""
    cells = min(len(got), len(expected), 1024)
    wrong = [
        i
        for i in range(cells)
        if got[i] is not None and expected[i] is not None and not close(got[i], expected[i])
    ]
    if len(wrong) < 2:
        return 0
    best, best_hits = 0, 0
    for shift in [k for k in range(-64, 65) if k]:
        hits = sum(
            1
            for i in wrong
            if 0 <= i + shift < cells
            and expected[i + shift] is not None
            and close(got[i], expected[i + shift])
        )
        if hits > best_hits:
            best, best_hits = shift, hits
    return best if best_hits >= 0.95 * len(wrong) else 0


def cell_name(flat: int, shape: list[int]) -> str:
    """[r, c] for a flat index into an output of this shape."""
    place = []
    for size in reversed(shape or [flat + 1]):
        place.append(flat % size if size else flat)
        flat = flat // size if size else 0
    return "[" + ", ".join(str(i) for i in reversed(place)) + "]"


def shift_example(got: Cells, expected: Cells, shift: int, shape: list[int], close: Close) -> str:
    """The first wrong cell the shift explains, with its numbers."""
    for i, value in enumerate(got[: min(len(got), len(expected), 1024)]):
        j = i + shift
        if value is None or expected[i] is None or close(value, expected[i]):
            continue
        if 0 <= j < len(expected) and expected[j] is not None and close(value, expected[j]):
            return (
                f" For example cell {cell_name(i, shape)} holds {value:.4g}, the value "
                f"expected at {cell_name(j, shape)}."
            )
    return ""


def shift_explanation(shift: int, index: str, example: str = "") -> str:
    way = "after" if shift > 0 else "before"
    writes = f"{example} Your kernel stores at {index}." if index else example
    if abs(shift) == 1:
        return (
            f"Each wrong cell holds the value expected at its **neighbour** (the cell {way} "
            f"it): an off-by-one between the cell read and the cell written.{writes} Which "
            "cell does invocation 0 read, and which does it write?"
        )
    return (
        f"Each wrong cell holds the value expected **{abs(shift)} cells {way}** it: a "
        f"constant offset of {abs(shift)} between the cell read and the cell written."
        f"{writes} Where in your index expressions does {abs(shift)} come from?"
    )


def _finite(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def row_factors(got: Cells, expected: Cells, shape: list[int], close: Close) -> str:
    """For a matrix whose wrong cells are, row by row, the expected value times one factor
    per row (the factors not all equal: that is a scaled result): which rows, by which
    factor, and the rows' sums. "" unless every wrong row bears that out."""
    if len(shape) != 2 or not all(shape) or len(got) != shape[0] * shape[1] or len(got) > MAX_CELLS:
        return ""
    rows, cols = shape
    factors: list[tuple[int, float, int]] = []
    for r in range(rows):
        pairs = [
            (g, e)
            for g, e in zip(
                got[r * cols : (r + 1) * cols], expected[r * cols : (r + 1) * cols], strict=True
            )
            if _finite(g) is not None and _finite(e) is not None and not close(g, e)
        ]
        if not pairs:
            continue
        if len(pairs) < 2 or any(e == 0 for _, e in pairs):
            return ""
        ratios = [g / e for g, e in pairs]
        low, high = min(ratios), max(ratios)
        if high - low > 1e-3 * max(abs(low), abs(high), 1e-30):
            return ""
        factors.append((r, ratios[0], len(pairs)))
    if len(factors) < 2 or len({f"{f:.3g}" for _, f, _ in factors}) < 2:
        return ""
    listed = ", ".join(f"row {r} × {f:.3g} ({n} cells)" for r, f, n in factors[:8])
    more = f" and {len(factors) - 8} more rows" if len(factors) > 8 else ""

    def total(values: Cells) -> str:
        finite = [number for v in values if (number := _finite(v)) is not None]
        if len(finite) < len(values):
            return "not finite"
        return f"{sum(finite):.4g}"

    sums = ", ".join(total(got[r * cols : (r + 1) * cols]) for r, _, _ in factors[:8])
    wanted = ", ".join(total(expected[r * cols : (r + 1) * cols]) for r, _, _ in factors[:8])
    return (
        f"In each wrong row, every wrong cell is the expected value times **one factor for "
        f"that row**: {listed}{more}. Within a row the values are right relative to each "
        f"other; one number used for the whole row is wrong. Those rows sum to {sums}, where "
        f"the reference's sum to {wanted}. Which value does your kernel compute once per "
        "row and use for every cell of it, and how is it computed?"
    )


def wrong_by_row(got: Cells, expected: Cells, shape: list[int], close: Close) -> str:
    """Plainly, where the wrong cells are: per row of a matrix, or as ranges of cells."""
    count = min(len(got), len(expected), MAX_CELLS)
    flags = [
        not (got[i] is not None and expected[i] is not None and close(got[i], expected[i]))
        for i in range(count)
    ]
    if len(shape) == 2 and all(shape) and shape[0] * shape[1] == count:
        rows, cols = shape
        counts = [(r, sum(flags[r * cols : (r + 1) * cols])) for r in range(rows)]
        wrong = [(r, n) for r, n in counts if n]
        if not wrong:
            return ""
        listed = ", ".join(f"row {r}: {n} of {cols}" for r, n in wrong[:8])
        more = f", and {len(wrong) - 8} more rows" if len(wrong) > 8 else ""
        right = rows - len(wrong)
        return (
            f"Wrong cells by row: {listed}{more}"
            + (f"; {right} row{'s are' if right != 1 else ' is'} entirely right" if right else "")
            + "."
        )
    ranges = runs(flags)
    return f"The wrong cells are {describe(ranges)}." if ranges else ""


def only_first_row_right(got: Cells, expected: Cells, shape: list[int], close: Close) -> bool:
    """Whether row 0 of a matrix is entirely right and every other row has a wrong cell."""
    if len(shape) != 2 or shape[0] < 2 or len(got) > MAX_CELLS:
        return False
    if len(got) != shape[0] * shape[1] or len(expected) != len(got):
        return False
    rows, cols = shape

    def right(r: int) -> bool:
        return all(
            got[i] is not None and expected[i] is not None and close(got[i], expected[i])
            for i in range(r * cols, (r + 1) * cols)
        )

    return right(0) and not any(right(r) for r in range(1, rows))
