"""Large outputs checked on the device (kernels/engine/gpu_compare.py), on llvmpipe with
the check forced on: it passes a right output without reading it back, and every output
it cannot pass gets the verdict and outcome the CPU path gives it, cell for cell."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kernels.engine.device import Environment, open_device
from kernels.engine.outcome import Outcome
from kernels.engine.references import REFERENCES
from kernels.engine.resident import DeviceBuffers
from kernels.engine.run import execute

# The output is c = d, a copy of a file we write; the reference is a + b in float64, so
# a test sets each cell's error to the bit.
COPY = """@group(0) @binding(0) var<storage, read> d: array<f32>;
@group(0) @binding(1) var<storage, read_write> c: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x + gid.y * 65535u * 64u;
    if (i < arrayLength(&c) && i != SKIPu) {
        c[i] = d[i];
    }
}
"""
ROWS, COLS = 192, 256  # 49,152 cells: three of the device's blocks
CELLS = ROWS * COLS
NOWHERE = CELLS + 1


def harness(atol: float = 1e-6, rtol: float = 1e-6) -> dict[str, Any]:
    def file(name: str) -> dict[str, Any]:
        return {"usage": "read", "dtype": "f32", "shape": [ROWS, COLS], "file": f"{name}.npy"}

    return {
        "buffers": {
            "a": file("a"),
            "b": file("b"),
            "d": file("d"),
            "c": {"usage": "read_write", "dtype": "f32", "shape": [ROWS, COLS], "output": True},
        },
        "passes": [{"kernel": "self", "bind": {"0": "d", "1": "c"}, "dispatch": [CELLS // 64]}],
        "reference": {"name": "add", "args": ["a", "b"], "outputs": ["c"]},
        "tolerance": {"atol": atol, "rtol": rtol},
    }


@pytest.fixture(scope="module")
def gpu() -> tuple[Any, Environment]:
    return open_device()


def inputs() -> tuple[np.ndarray, np.ndarray]:
    """a and b whose float64 sum is seldom a float32: the expected values have a residual."""
    rng = np.random.default_rng(7)
    a = rng.uniform(-2, 2, CELLS).astype(np.float32)
    b = (rng.uniform(-1, 1, CELLS) * 1e-9).astype(np.float32)
    return a, b


def expected() -> np.ndarray:
    a, b = inputs()
    return a.astype(np.float64) + b.astype(np.float64)


@pytest.fixture
def both(gpu: tuple[Any, Environment], tmp_path: Path):
    """The outcome of the copy kernel writing d, checked on the device first and on the
    CPU alone."""
    device, env = gpu

    def both(d: np.ndarray, skip: int = NOWHERE, **tolerance: float) -> tuple[Outcome, Outcome]:
        a, b = inputs()
        for name, array in (("a", a), ("b", b), ("d", d)):
            np.save(tmp_path / f"{name}.npy", array.reshape(ROWS, COLS))
        sources = {"self": COPY.replace("SKIP", str(skip))}
        spec = harness(**tolerance)
        outcomes = []
        for check_from in (0, None):
            outcome = execute(device, env, sources, spec, tmp_path, device_check_from=check_from)
            json.dumps(outcome, allow_nan=False)
            outcomes.append(outcome)
        return outcomes[0], outcomes[1]

    return both


def same(on_device: dict[str, Any], on_cpu: dict[str, Any]) -> None:
    for key in ("status", "message", "outputs", "analysis"):
        assert on_device[key] == on_cpu[key], key


def test_it_passes_a_right_output_on_the_device(both) -> None:
    right = expected().astype(np.float32)
    on_device, on_cpu = both(right)
    assert on_device["status"] == on_cpu["status"] == "passed"
    [checked], [compared] = on_device["outputs"], on_cpu["outputs"]
    assert checked["compared"] == "device" and "compared" not in compared
    assert checked["worst_index"] == compared["worst_index"]
    # Float32 arithmetic with the residual: the float64 errors to within the documented bound.
    assert checked["max_abs_err"] == pytest.approx(compared["max_abs_err"], rel=2**-20)
    assert checked["max_rel_err"] == pytest.approx(compared["max_rel_err"], rel=2**-19)
    rest = {k: v for k, v in checked.items() if k not in ("compared", "max_abs_err", "max_rel_err")}
    assert rest == {k: v for k, v in compared.items() if k not in ("max_abs_err", "max_rel_err")}
    assert on_device["message"].startswith(f"All {CELLS:,} cells match the reference")


def test_it_names_the_worst_cell_in_its_last_block(both) -> None:
    got = expected().astype(np.float32)
    at = CELLS - 300
    got[at] = np.nextafter(got[at], np.float32(9))  # one ulp: about 1.2e-7 or 2.4e-7 off
    on_device, on_cpu = both(got)
    assert on_device["outputs"][0]["compared"] == "device"
    assert on_device["outputs"][0]["worst_index"] == on_cpu["outputs"][0]["worst_index"]
    assert on_cpu["outputs"][0]["worst_index"] == [at // COLS, at % COLS]
    assert on_device["message"] == on_cpu["message"]


def off_by(cell: int, error: float) -> np.ndarray:
    """The right output with one cell the float32 nearest to expected + error."""
    got = expected().astype(np.float32)
    got[cell] = np.float32(expected()[cell] + error)
    return got


def test_a_cell_just_over_the_tolerance_fails_as_on_the_cpu(both) -> None:
    want = expected()
    cell = 4321
    got = off_by(cell, 2e-6)
    error = abs(float(got[cell]) - want[cell])
    # atol a hair under the cell's error: no cell but this one is near it.
    on_device, on_cpu = both(got, atol=error * (1 - 1e-12), rtol=0.0)
    assert on_cpu["status"] == "mismatch"
    assert on_cpu["outputs"][0]["bad"] == 1
    same(on_device, on_cpu)


def test_a_tolerance_that_rounds_up_in_float32_does_not_pass_a_cell(both) -> None:
    want = expected()
    cell = 17
    got = off_by(cell, 3e-6)
    error = abs(float(got[cell]) - want[cell])
    atol = float(np.nextafter(error, 0.0))
    # The tolerance as a float32 is the error or above it; in float64 it is under.
    assert float(np.float32(atol)) >= error or np.float32(atol) == np.float32(error)
    on_device, on_cpu = both(got, atol=atol, rtol=0.0)
    assert on_cpu["status"] == "mismatch"
    same(on_device, on_cpu)


def test_a_relative_tolerance_that_rounds_up_in_float32_does_not_pass_a_cell(both) -> None:
    # A cell 1% off where rtol |x| is under its error in float64, but float32's product
    # of rtol and |x| lands a step over it: without the margin the device would pass it.
    want = expected()
    for cell in range(0, CELLS, 7):
        g = np.float32(want[cell] * 1.01)
        error = abs(float(g) - want[cell])
        rtol = error / abs(want[cell]) * (1 - 1e-12)
        if np.float32(rtol) * np.float32(abs(want[cell])) > np.float32(error):
            break
    got = expected().astype(np.float32)
    got[cell] = g
    on_device, on_cpu = both(got, atol=0.0, rtol=rtol)
    assert on_cpu["status"] == "mismatch" and on_cpu["outputs"][0]["bad"] == 1
    same(on_device, on_cpu)


def test_the_residual_of_the_expected_value_counts(both) -> None:
    # g - hi is inside atol, but g - x is outside it, by the residual lo that the float32
    # of x drops: a filter that ignored lo would pass this cell.
    want = expected()
    hi = want.astype(np.float32).astype(np.float64)
    lo = want - hi
    cell = int(np.argmax(np.abs(lo) * (np.abs(want) > 1)))
    got = expected().astype(np.float32)
    step = np.float32(np.sign(-lo[cell]) * 4e-7)
    got[cell] = np.float32(hi[cell] + float(step))
    error = abs(float(got[cell]) - want[cell])
    seen_without_residual = abs(float(got[cell]) - hi[cell])
    assert seen_without_residual < error
    atol = (seen_without_residual + error) / 2
    on_device, on_cpu = both(got, atol=atol, rtol=0.0)
    assert on_cpu["status"] == "mismatch"
    same(on_device, on_cpu)


def test_a_cell_within_tolerance_in_float64_at_the_float32_boundary_passes(both) -> None:
    want = expected()
    cell = 999
    got = off_by(cell, 2e-6)
    error = abs(float(got[cell]) - want[cell])
    # Within by less than float32 can tell: the device flags it, the CPU passes it.
    on_device, on_cpu = both(got, atol=error * (1 + 1e-12), rtol=0.0)
    assert on_cpu["status"] == "passed"
    same(on_device, on_cpu)
    assert "compared" not in on_device["outputs"][0]


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_a_non_finite_cell_fails_as_on_the_cpu(both, value: float) -> None:
    got = expected().astype(np.float32)
    got[CELLS - 1] = value
    on_device, on_cpu = both(got)
    assert on_cpu["status"] in ("nonfinite", "mismatch")
    assert on_cpu["outputs"][0]["nonfinite"] == 1
    same(on_device, on_cpu)


def test_a_never_written_cell_fails_as_on_the_cpu(both) -> None:
    on_device, on_cpu = both(expected().astype(np.float32), skip=20000)
    assert on_cpu["outputs"][0]["unwritten"] == 1
    same(on_device, on_cpu)


def test_kept_expected_values_are_reused_and_bounded(gpu, tmp_path: Path) -> None:
    device, env = gpu
    a, b = inputs()
    for name, array in (("a", a), ("b", b), ("d", expected().astype(np.float32))):
        np.save(tmp_path / f"{name}.npy", array.reshape(ROWS, COLS))
    sources = {"self": COPY.replace("SKIP", str(NOWHERE))}
    kept = DeviceBuffers()
    for atol in (1e-6, 1e-6, 2e-6):
        outcome = execute(
            device, env, sources, harness(atol=atol), tmp_path, kept=kept, device_check_from=0
        )
        assert outcome["outputs"][0]["compared"] == "device"
    assert kept.references is not None
    # Two harnesses (two tolerances), one reference each; the first kept once for two runs.
    assert len(kept.references.kept) == 2
    small = DeviceBuffers(budget=CELLS * 8)
    for atol in (1e-6, 2e-6):
        execute(device, env, sources, harness(atol=atol), tmp_path, kept=small, device_check_from=0)
    assert small.references is not None and len(small.references.kept) == 1


PAIR = """@group(0) @binding(0) var<storage, read> d: array<f32>;
@group(0) @binding(1) var<storage, read> d2: array<f32>;
@group(0) @binding(2) var<storage, read_write> c: array<f32>;
@group(0) @binding(3) var<storage, read_write> e: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    if (i < arrayLength(&c)) {
        c[i] = d[i];
        if (i != 777u) {
            e[i] = d2[i];
        }
    }
}
"""


def test_an_output_the_device_passes_stands_beside_one_it_flags(
    gpu, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def add_twice(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return a + b, a + b

    monkeypatch.setitem(REFERENCES, "add_twice", add_twice)
    device, env = gpu
    a, b = inputs()
    right = expected().astype(np.float32)
    for name, array in (("a", a), ("b", b), ("d", right), ("d2", right)):
        np.save(tmp_path / f"{name}.npy", array.reshape(ROWS, COLS))
    spec = harness()
    spec["buffers"]["d2"] = {**spec["buffers"]["d"], "file": "d2.npy"}
    spec["buffers"]["e"] = spec["buffers"]["c"]
    spec["passes"][0]["bind"] = {"0": "d", "1": "d2", "2": "c", "3": "e"}
    spec["reference"] = {"name": "add_twice", "args": ["a", "b"], "outputs": ["c", "e"]}
    on_device, on_cpu = (
        execute(device, env, {"self": PAIR}, spec, tmp_path, device_check_from=check_from)
        for check_from in (0, None)
    )
    assert on_cpu["status"] == "mismatch"
    assert on_device["message"] == on_cpu["message"]
    assert on_cpu["message"].startswith(f"1 of {2 * CELLS:,} cells wrong (1 never written)")
    assert on_device["outputs"][0]["compared"] == "device"
    assert on_device["outputs"][1] == on_cpu["outputs"][1]


def test_an_output_the_report_shows_stays_on_the_cpu(gpu, tmp_path: Path) -> None:
    device, env = gpu
    a, b = inputs()
    for name, array in (("a", a), ("b", b), ("d", expected().astype(np.float32))):
        np.save(tmp_path / f"{name}.npy", array.reshape(ROWS, COLS))
    spec = {**harness(), "report": {"show": ["c"]}}
    sources = {"self": COPY.replace("SKIP", str(NOWHERE))}
    outcome = execute(device, env, sources, spec, tmp_path, device_check_from=0)
    assert outcome["status"] == "passed"
    assert "compared" not in outcome["outputs"][0]


def test_it_is_off_on_llvmpipe_unless_asked(gpu, tmp_path: Path) -> None:
    device, env = gpu
    a, b = inputs()
    for name, array in (("a", a), ("b", b), ("d", expected().astype(np.float32))):
        np.save(tmp_path / f"{name}.npy", array.reshape(ROWS, COLS))
    sources = {"self": COPY.replace("SKIP", str(NOWHERE))}
    outcome = execute(device, env, sources, harness(), tmp_path)
    assert outcome["status"] == "passed"
    assert ("compared" in outcome["outputs"][0]) == (not env.software)
