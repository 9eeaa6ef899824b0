"""An output's cells in an outcome: packed as little-endian bytes beyond a few dozen cells,
read back by one accessor whichever form (and whichever age) the outcome has."""

import json
import math

import numpy as np

from kernels import pictures
from kernels.engine.compare import compare_output
from kernels.engine.harness import Buffer
from kernels.engine.outcome import (
    LIST_UP_TO,
    SENTINEL_BITS,
    output_list,
    output_values,
    pack_values,
)
from tests.base import BaseTestCase, add_kernel, make_session, store_run, stored_outcome

SIDE = 10  # 100 cells: past LIST_UP_TO, so the runner packs them


def cells() -> tuple[np.ndarray, np.ndarray]:
    """A 10x10 output with one never-written cell, one NaN and one infinity, and what
    the reference expects of it."""
    got = np.arange(SIDE * SIDE, dtype=np.float32).reshape(SIDE, SIDE) / 4
    bits = got.view(np.uint32)
    bits[3, 4] = SENTINEL_BITS["f32"]
    got[5, 5], got[6, 6] = np.nan, np.inf
    expected = np.arange(SIDE * SIDE, dtype=np.float64).reshape(SIDE, SIDE) / 4
    return got, expected


def buffer(dtype: str = "f32", shape: tuple[int, ...] = (SIDE, SIDE)) -> Buffer:
    return Buffer(name="out", usage="read_write", dtype=dtype, shape=shape, fill="fresh")


def as_stored(outcome: dict) -> dict:
    """The outcome as the pipe and the database give it back: through JSON."""
    return json.loads(json.dumps(outcome, allow_nan=False))


def old_form(output: dict) -> dict:
    """The same output as runs stored it before cells were packed: JSON lists at any
    size, None where never written, NaN and infinities as strings."""
    old = dict(output)
    for key in ("got", "expected"):
        listed = output_list(output, key)
        old[key] = [
            v if v is None or math.isfinite(v) else ("NaN" if math.isnan(v) else "Infinity")
            for v in listed
        ]
    return old


def test_it_packs_an_output_past_the_list_size_and_reads_it_back() -> None:
    got, expected = cells()
    output = as_stored(compare_output(buffer(), got, expected, 1e-6, 1e-6))
    assert output["got"]["dtype"] == "f32" and output["got"]["shape"] == [SIDE, SIDE]
    assert output["expected"]["dtype"] == "f64"
    values = output_values(output, "got")
    assert values.shape == (SIDE, SIDE) and values.dtype == np.float32
    assert np.ma.getmaskarray(values)[3, 4] and values.mask.sum() == 1
    assert math.isnan(values[5, 5]) and values[6, 6] == math.inf
    assert values[9, 9] == got[9, 9]
    np.testing.assert_array_equal(output_values(output, "expected"), expected)
    listed = output_list(output, "got")
    assert len(listed) == SIDE * SIDE and listed[34] is None and listed[1] == 0.25


def test_a_small_output_stays_a_readable_list() -> None:
    got = np.array([1.5, np.nan, 3.0], dtype=np.float32)
    got.view(np.uint32)[2] = SENTINEL_BITS["f32"]
    output = compare_output(buffer(shape=(3,)), got, None, 1e-6, 1e-6)
    assert output["got"] == [1.5, "NaN", None]
    assert LIST_UP_TO >= 3
    values = output_values(output, "got")
    assert values[0] == 1.5 and math.isnan(values[1]) and values.mask.tolist() == [0, 0, 1]


def test_integer_outputs_keep_their_values_and_their_never_written_cells() -> None:
    got = np.arange(100, dtype=np.uint32)
    got[7] = SENTINEL_BITS["u32"]
    output = as_stored({"dtype": "u32", "shape": [100], "got": pack_values(got, "u32")})
    values = output_values(output, "got")
    assert values.dtype == np.uint32 and np.ma.getmaskarray(values)[7] and int(values[99]) == 99
    assert output_list(output, "got")[:8] == [0, 1, 2, 3, 4, 5, 6, None]


def test_an_outcome_stored_as_lists_reads_as_the_packed_one_does() -> None:
    got, expected = cells()
    packed = as_stored(compare_output(buffer(), got, expected, 1e-6, 1e-6))
    old = as_stored(old_form(packed))
    assert isinstance(old["got"], list) and len(old["got"]) == SIDE * SIDE
    for key in ("got", "expected"):
        new_values, old_values = output_values(packed, key), output_values(old, key)
        assert old_values.shape == new_values.shape
        assert old_values.mask.tolist() == new_values.mask.tolist()
        np.testing.assert_array_equal(old_values.filled(0), new_values.filled(0))
    outcome = stored_outcome({"status": "mismatch", "outputs": [packed]})
    assert pictures.figures(outcome) == pictures.figures({**outcome, "outputs": [old]})


class StoredOutcomeTestCase(BaseTestCase):
    def test_a_run_stored_before_packing_still_shows_its_heatmaps(self) -> None:
        got, expected = cells()
        output = old_form(as_stored(compare_output(buffer(), got, expected, 1e-6, 1e-6)))
        session = make_session("demo", turns=2)
        version = add_kernel(session, turn=2)
        store_run(version, "mismatch", "3 of 100 cells wrong.", outputs=[output])
        r = self.client.get("/s/demo/turns/2/replay/")
        self.assertContains(r, "3 of 100 cells wrong.")
        self.assertContains(r, "[3, 4] expected 8.5, got never written")
        self.assertContains(r, "[9, 9] expected 24.75, got 24.75")
        served = self.client.get("/s/demo/turns/2/replay.json").json()
        self.assertEqual(served["outcome"]["outputs"][0]["got"][34], None)


def test_the_replay_command_prints_packed_cells_as_lists() -> None:
    from kernels.management.commands.replay import readable

    got, expected = cells()
    output = as_stored(compare_output(buffer(), got, expected, 1e-6, 1e-6))
    case = {"name": "one", "status": "mismatch", "message": "", "outputs": [output]}
    shown = readable(stored_outcome({"status": "mismatch", "outputs": [output], "cases": [case]}))
    for printed in (shown["outputs"][0], shown["cases"][0]["outputs"][0]):
        assert printed["got"][34] is None and printed["got"][55] == "NaN"
        assert printed["got"][66] == "Infinity" and printed["got"][1] == 0.25
        assert printed["expected"][99] == 24.75
    json.dumps(shown, allow_nan=False)
