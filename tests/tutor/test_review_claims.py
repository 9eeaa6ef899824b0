"""The reviewer's value patterns are told only where every wrong cell bears them out, at
the run's own tolerance; otherwise it says plainly where the wrong cells are."""

from __future__ import annotations

import math

from kernels.engine.outcome import Outcome
from tests.base import stored_outcome
from tutor.review import offline_review

SOFTMAX_TOLERANCE = {"tolerance": {"atol": 1e-6, "rtol": 1e-4}}


def outcome(got: list, expected: list, shape: list[int]) -> Outcome:
    bad = sum(1 for g, e in zip(got, expected, strict=True) if abs(g - e) > 1e-6 + 1e-4 * abs(e))
    return stored_outcome(
        {
            "status": "mismatch",
            "message": f"{bad} of {len(got)} cells wrong",
            "outputs": [
                {
                    "name": "y",
                    "shape": shape,
                    "count": len(got),
                    "bad": bad,
                    "unwritten": 0,
                    "nonfinite": 0,
                    "got": got,
                    "expected": expected,
                }
            ],
        }
    )


def softmax_rows(rows: int, cols: int) -> list[float]:
    values: list[float] = []
    for r in range(rows):
        logits = [((r * 7 + c * 13) % 29) * 0.2 for c in range(cols)]
        top = max(logits)
        exps = [math.exp(v - top) for v in logits]
        values.extend(e / sum(exps) for e in exps)
    return values


def test_a_wrong_row_total_is_told_as_one_factor_per_row_with_the_sums() -> None:
    expected = softmax_rows(4, 16)
    factors = [1.0, 3.5, 1.0, 0.25]  # rows 1 and 3 divided by the wrong total
    got = [v * factors[i // 16] for i, v in enumerate(expected)]
    text = offline_review(outcome(got, expected, [4, 16]), "", SOFTMAX_TOLERANCE)
    assert "**one factor for that row**" in text
    assert "row 1 × 3.5 (16 cells), row 3 × 0.25 (16 cells)" in text
    assert "Those rows sum to 3.5, 0.25, where the reference's sum to 1, 1" in text
    assert "cells after" not in text


def test_tiny_values_are_not_taken_for_a_shift() -> None:
    # The case: got[0, 0] = 3.07e-6 is not "the value expected 6 cells after it"
    # because expected[0, 6] = 4.2e-12 differs from it by less than an absolute 1e-5.
    expected = [1e-12 * (i % 7 + 1) for i in range(64)]
    expected[0] = 0.5
    got = [3e-6 + 1e-7 * i for i in range(64)]
    text = offline_review(outcome(got, expected, [4, 16]), "", SOFTMAX_TOLERANCE)
    assert "cells after" not in text and "cells before" not in text
    assert "Wrong cells by row: row 0: 16 of 16, row 1: 16 of 16" in text


def test_a_real_shift_is_told_with_its_numbers() -> None:
    expected = [float(i * i % 37) + 1.0 for i in range(100)]
    got = [*expected[3:], 0.5, 0.25, 0.125]
    text = offline_review(outcome(got, expected, [100]), "", SOFTMAX_TOLERANCE)
    assert "**3 cells after** it" in text
    assert f"For example cell [0] holds {expected[3]:.4g}, the value expected at [3]." in text


def test_a_right_first_row_points_at_the_row_stride_only_when_it_is_so() -> None:
    expected = [float((i * 7919) % 23) - 11.0 for i in range(4 * 8)]
    got = expected[:8] + [v * 0.5 + 3.0 * ((i * 31) % 5) for i, v in enumerate(expected[8:])]
    text = offline_review(outcome(got, expected, [4, 8]), "", SOFTMAX_TOLERANCE)
    assert "Row 0 is right and every other row is wrong" in text
    assert "(the row stride)" in text
    got[3] += 1.0  # row 0 wrong too: nothing says stride
    text = offline_review(outcome(got, expected, [4, 8]), "", SOFTMAX_TOLERANCE)
    assert "row stride" not in text
    assert "Wrong cells by row: row 0: 1 of 8" in text
