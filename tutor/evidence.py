"""The automatic reviewer's evidence: which cells, what pattern, which builtin.

Everything here reads the outcome alone: the output's cell values as the comparison
stored them (`got`, None for a cell never written) and what the worker read from the
source (outcome["analysis"]: builtins, workgroup size, the index of each store). Each
finding ends in a question that leads the learner to the cause, never in the fix; where
the run does not show the cause, the finding says so.
"""

from __future__ import annotations

from kernels.engine.outcome import EntryPointFacts, output_list

LOCAL_BUILTINS = ("local_invocation_id", "local_invocation_index")
# Beyond this many cells the scans below would cost the web process too much.
MAX_CELLS = 4096


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
    return {builtin: name for name, builtin in (entry or {}).get("builtins", {}).items()}


def _local_index(entry: EntryPointFacts | None, name: str) -> str:
    """The builtin that numbers invocations within one workgroup, when the kernel takes
    its index from it and never asks for its place in the whole dispatch."""
    builtins = builtin_names(entry)
    if "global_invocation_id" in builtins or "workgroup_id" in builtins:
        return ""
    return next((b for b in LOCAL_BUILTINS if b in builtins), "")


def unwritten_cells(
    output: dict, entry: EntryPointFacts | None, threads: tuple[int, int, int] | None
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
        return "lines", f"{lines} {question}"
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


def best_shift(got: list, expected: list, close) -> int:
    """The constant offset k (|k| ≤ 64) for which most wrong cells hold expected[i + k];
    0 when no offset explains at least 80% of them."""
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
    return best if best_hits >= 0.8 * len(wrong) else 0


def shift_explanation(shift: int, index: str) -> str:
    way = "after" if shift > 0 else "before"
    writes = f" Your kernel stores at {index}." if index else ""
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
