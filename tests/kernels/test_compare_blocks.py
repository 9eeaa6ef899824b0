"""The passing path of the comparison, block by block: the same verdict, worst cell and
errors as one pass over the whole array, wherever the worst cell is."""

import numpy as np

from kernels.engine.compare import compare_output
from kernels.engine.harness import Buffer

SIDE = 1536  # 2.4M cells: 72 blocks


def output(got: np.ndarray, expected: np.ndarray) -> dict:
    buf = Buffer(name="y", usage="read_write", dtype="f32", shape=got.shape, fill="fresh")
    return compare_output(buf, got, expected, 1e-6, 1e-6)


def arrays() -> tuple[np.ndarray, np.ndarray]:
    x = np.random.default_rng(3).uniform(-1, 1, (SIDE, SIDE)).astype(np.float32)
    return 2 * x, 2 * x.astype(np.float64)


def test_a_large_passing_output_names_its_worst_cell_in_its_last_block() -> None:
    got, expected = arrays()
    expected[SIDE - 2, 7] += 5e-7  # in the last block
    verdict = output(got, expected)
    assert verdict["bad"] == 0
    assert verdict["worst_index"] == [SIDE - 2, 7]
    assert verdict["max_abs_err"] == abs(float(got[SIDE - 2, 7]) - expected[SIDE - 2, 7])
    assert verdict["max_rel_err"] >= verdict["max_abs_err"] / 2


def test_one_wrong_cell_in_a_large_output_is_found() -> None:
    got, expected = arrays()
    got[SIDE - 1, SIDE - 1] = 7.0
    got[0, 3] = np.nan
    verdict = output(got, expected)
    assert verdict["bad"] == 2 and verdict["nonfinite"] == 1
    assert [cell["index"] for cell in verdict["first_bad"]] == [[0, 3], [SIDE - 1, SIDE - 1]]
