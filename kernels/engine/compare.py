"""What came back against what the reference expects: per-output verdicts and pictures.

Cells a kernel never wrote are told apart from wrong and non-finite ones by the
sentinel a diagnostic run fills new buffers with (mark_unwritten).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from kernels.engine.harness import Buffer
from kernels.engine.outcome import SENTINEL_BITS, Status, pack_values

# Re-exported: the host program's trace writes its values with it.
from kernels.engine.outcome import json_number as json_number

SHOW_VALUES_UP_TO = 4096
FIRST_BAD = 10
GRID_SIZE = 64
# Cells compared at a time on the passing path: a few float64 temporaries of this size
# stay in a core's cache.
BLOCK = 32768
# Grid cell codes, in rising order of severity: a block shows its worst cell.
OK, WRONG, NONFINITE, UNWRITTEN = 0, 1, 2, 3
GRID_CHARS = np.array([".", "x", "n", "u"])


def compare_output(
    buf: Buffer, values: np.ndarray, expected: np.ndarray | None, atol: float, rtol: float
) -> dict[str, Any]:
    """Cell-by-cell verdict on one output: counts, first bad cells, values and a grid."""
    flat = np.ascontiguousarray(values).reshape(-1)
    entry: dict[str, Any] = {
        "name": buf.name,
        "dtype": buf.dtype,
        "shape": list(buf.shape),
        "count": int(flat.size),
    }
    # The usual passing run is checked block by block, with no whole-array copies; the
    # per-cell masks below are built only when a cell is off or there is no reference.
    fast = None if expected is None else _all_close(flat, expected.reshape(-1), atol, rtol)
    if fast is not None:
        codes = None  # every cell is fine
        max_err, worst, max_rel = fast
        entry.update(
            bad=0,
            unwritten=0,
            nonfinite=0,
            max_abs_err=json_number(max_err),
            max_rel_err=json_number(max_rel),
            worst_index=_index(worst, buf.shape),
            first_bad=[],
        )
    else:
        codes = _codes(entry, buf, flat, expected, atol, rtol)
    if flat.size <= SHOW_VALUES_UP_TO:
        entry["got"] = pack_values(flat.reshape(buf.shape), buf.dtype)
        if expected is not None:
            want = expected.reshape(buf.shape).astype(np.float64)
            entry["expected"] = pack_values(want, "f64")
    entry["grid"] = status_grid(codes, buf.shape)
    return entry


def _codes(
    entry: dict[str, Any],
    buf: Buffer,
    flat: np.ndarray,
    expected: np.ndarray | None,
    atol: float,
    rtol: float,
) -> np.ndarray:
    """Per-cell codes of an output with a cell off (or no reference); fills in entry's
    counts, errors and first bad cells."""
    unwritten = flat.view(np.uint32) == SENTINEL_BITS[buf.dtype]
    got = flat.astype(np.float64)
    got_finite = np.isfinite(got)
    codes = np.zeros(flat.size, dtype=np.int8)
    if expected is None:
        codes[~got_finite] = NONFINITE
        codes[unwritten] = UNWRITTEN
        entry.update(
            bad=None,
            unwritten=int(unwritten.sum()),
            nonfinite=int((~got_finite & ~unwritten).sum()),
            max_abs_err=None,
            max_rel_err=None,
            worst_index=None,
            first_bad=[],
        )
    else:
        exp = expected.reshape(-1)
        close = np.isclose(got, exp, rtol=rtol, atol=atol, equal_nan=True)
        nonfinite = ~unwritten & ~got_finite & np.isfinite(exp)
        wrong = ~unwritten & ~nonfinite & ~close
        codes[wrong] = WRONG
        codes[nonfinite] = NONFINITE
        codes[unwritten] = UNWRITTEN
        comparable = ~unwritten & got_finite & np.isfinite(exp)
        err = np.where(comparable, np.abs(got - exp), 0.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            rel = np.where(comparable & (exp != 0), err / np.abs(exp), 0.0)
        worst_at = int(np.argmax(err)) if comparable.any() else None
        bad_cells = np.flatnonzero(codes)
        entry.update(
            bad=int(bad_cells.size),
            unwritten=int(unwritten.sum()),
            nonfinite=int(nonfinite.sum()),
            max_abs_err=json_number(float(err.max())) if comparable.any() else None,
            max_rel_err=json_number(float(rel.max())) if comparable.any() else None,
            worst_index=_index(worst_at, buf.shape) if worst_at is not None else None,
            first_bad=[
                {
                    "index": _index(int(i), buf.shape),
                    "expected": json_number(float(exp[i])),
                    "got": None if unwritten[i] else _value(flat[i]),
                    "kind": ("wrong", "nonfinite", "unwritten")[codes[i] - 1],
                }
                for i in bad_cells[:FIRST_BAD]
            ],
        )
    return codes


def mark_unwritten(
    values: np.ndarray,
    expected: np.ndarray,
    diagnostic: np.ndarray,
    sentinel: int,
    atol: float,
    rtol: float,
) -> np.ndarray:
    """values with the never-written sentinel in the cells that are wrong here and still
    hold `sentinel` (a 32-bit word) in the diagnostic run: the same work again, with new
    buffers filled with the sentinel instead of zeros. A cell that is right stays as it
    is, so a kernel that adds into a zeroed buffer is not called unwritten."""
    flat = np.ascontiguousarray(values).reshape(-1)
    bits = np.ascontiguousarray(diagnostic).reshape(-1).view(np.uint32)
    if bits.size != flat.size or flat.dtype.itemsize != 4:
        return values
    wrong = ~np.isclose(flat.astype(np.float64), expected.reshape(-1), rtol=rtol, atol=atol)
    never = wrong & (bits == sentinel)
    if not never.any():
        return values
    marked = flat.copy().view(np.uint32)
    marked[never] = SENTINEL_BITS[{"f": "f32", "u": "u32", "i": "i32"}[flat.dtype.kind]]
    return marked.view(flat.dtype).reshape(np.shape(values))


def _all_close(
    got: np.ndarray, exp: np.ndarray, atol: float, rtol: float
) -> tuple[float, int, float] | None:
    """The largest absolute error, where it is and the largest relative error, if every
    cell is within tolerance; else None.

    Compared in blocks of BLOCK cells, so the float64 temporaries stay in cache instead
    of doubling the output's size in memory; it stops at the first block with a cell
    off. NaN (written or the unwritten sentinel) never compares as close.
    """
    # Scratch arrays reused for every block: no allocation per block.
    err, scale, limit, rel = (np.empty(min(BLOCK, got.size)) for _ in range(4))
    close = np.empty(err.size, dtype=bool)
    max_err, worst, max_rel = -1.0, 0, 0.0
    for start in range(0, got.size, BLOCK):
        g, x = got[start : start + BLOCK], exp[start : start + BLOCK]
        e, s, lim, r, ok = (a[: g.size] for a in (err, scale, limit, rel, close))
        with np.errstate(invalid="ignore"):  # infinity less infinity is NaN: not close
            np.subtract(g, x, out=e, dtype=np.float64)
            np.abs(e, out=e)
            np.abs(x, out=s, dtype=np.float64)
            np.multiply(s, rtol, out=lim)
            lim += atol
            np.less_equal(e, lim, out=ok)
        if not ok.all():
            return None
        at = int(np.argmax(e))
        if e[at] > max_err:
            max_err, worst = float(e[at]), start + at
        r.fill(0.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            np.divide(e, s, out=r, where=s != 0)
        max_rel = max(max_rel, float(r.max()))
    return max(max_err, 0.0), worst, max_rel


def _index(flat_index: int, shape: Sequence[int]) -> list[int]:
    return [int(i) for i in np.unravel_index(flat_index, tuple(shape))]


def _value(v: np.generic) -> int | float | str:
    if v.dtype.kind == "f":
        return json_number(float(v))
    return int(v)


def status_grid(codes: np.ndarray | None, shape: Sequence[int]) -> dict[str, Any]:
    """A map of at most 64 by 64 blocks, each showing the worst cell in it (codes None:
    every cell is fine), and where a block holds several cells, how many of each kind
    that is not right ("counts": {"x" | "n" | "u": a count per block}).

    The output is viewed as 2-D: 1-D as one row, more than 2-D with the leading
    dimensions flattened into rows.
    """
    cols = shape[-1]
    rows = math.prod(shape) // cols
    block_rows = math.ceil(rows / GRID_SIZE)
    block_cols = math.ceil(cols / GRID_SIZE)
    grid_rows = math.ceil(rows / block_rows)
    grid_cols = math.ceil(cols / block_cols)
    grid = {"rows": grid_rows, "cols": grid_cols, "block": [block_rows, block_cols]}
    if codes is None or not codes.any():  # a passing output: every block is fine
        return {**grid, "cells": GRID_CHARS[OK] * (grid_rows * grid_cols)}
    padded = np.zeros((grid_rows * block_rows, grid_cols * block_cols), dtype=np.int8)
    padded[:rows, :cols] = codes.reshape(rows, cols)
    blocked = padded.reshape(grid_rows, block_rows, grid_cols, block_cols)
    grid["cells"] = "".join(GRID_CHARS[blocked.max(axis=(1, 3))].ravel())
    if block_rows * block_cols > 1:
        # How many cells of each kind every block holds, so that a picture shows each
        # block's share of them: a block of four with one NaN is not all NaN.
        grid["counts"] = {
            str(GRID_CHARS[code]): counts.ravel().tolist()
            for code in (WRONG, NONFINITE, UNWRITTEN)
            if (counts := (blocked == code).sum(axis=(1, 3))).any()
        }
    return grid


def classification_report(probabilities: np.ndarray, labels: np.ndarray) -> dict[str, Any]:
    """Accuracy and confusion of argmax predictions; computed whatever the status."""
    probs = probabilities.astype(np.float64)
    classes = probs.shape[1]
    truth = labels.reshape(-1).astype(np.int64)
    # A row with NaN (or a never-written cell) predicts nothing rather than class 0.
    valid = np.isfinite(probs).all(axis=1)
    predictions = np.where(valid, np.argmax(np.nan_to_num(probs, nan=-np.inf), axis=1), -1)
    confusion = np.zeros((classes, classes), dtype=np.int64)
    known = (truth >= 0) & (truth < classes) & (predictions >= 0)
    np.add.at(confusion, (truth[known], predictions[known]), 1)
    in_range = truth[(truth >= 0) & (truth < classes)]
    return {
        "kind": "classification",
        "count": int(truth.size),
        "accuracy": float((predictions == truth).mean()) if truth.size else 0.0,
        "predictions": [int(p) for p in predictions],
        "confusion": confusion.tolist(),
        "labels_count": np.bincount(in_range, minlength=classes).tolist(),
    }


def verdict(outputs: list[dict[str, Any]]) -> tuple[Status, str]:
    count = sum(o["count"] for o in outputs)
    bad = sum(o["bad"] for o in outputs)
    unwritten = sum(o["unwritten"] for o in outputs)
    nonfinite = sum(o["nonfinite"] for o in outputs)
    worst = _worst(outputs)
    if bad == 0:
        within = f" (worst error {_fmt(worst[0])})" if worst else ""
        return Status.PASSED, f"All {count:,} cells match the reference{within}."
    details = []
    if unwritten:
        details.append(f"{unwritten:,} never written")
    if nonfinite:
        details.append(f"{nonfinite:,} NaN or infinite where the reference is finite")
    message = f"{bad:,} of {count:,} cells wrong"
    if details:
        message += f" ({', '.join(details)})"
    # Unwritten and non-finite cells have no error size; say the worst of the rest.
    if worst and bad > unwritten + nonfinite:
        error, name, index = worst
        where = f" in {name}" if len(outputs) > 1 else ""
        message += f"; worst error {_fmt(error)}{where} at {index}"
    # NaN or infinity is its own diagnosis (overflow, division by zero) when it
    # explains most of the bad cells.
    status = Status.NONFINITE if nonfinite > bad - nonfinite else Status.MISMATCH
    return status, message


def _worst(outputs: list[dict[str, Any]]) -> tuple[float, str, list[int]] | None:
    # An error too large for a float (stored as "Infinity") cannot be ranked; skip it.
    candidates = [
        (o["max_abs_err"], o["name"], o["worst_index"])
        for o in outputs
        if isinstance(o["max_abs_err"], float)
    ]
    return max(candidates, key=lambda c: c[0]) if candidates else None


def no_reference_message(outputs: list[dict[str, Any]]) -> str:
    count = sum(o["count"] for o in outputs)
    unwritten = sum(o["unwritten"] for o in outputs)
    message = "Ran; there is no reference to compare with"
    if not outputs:
        return message + "."
    message += f" ({count:,} cells shown"
    if unwritten:
        message += f", {unwritten:,} never written"
    return message + ")."


def _fmt(x: float) -> str:
    return f"{x:.3g}"
