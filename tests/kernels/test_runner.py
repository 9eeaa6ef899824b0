"""kernels.engine.run on a real wgpu device (llvmpipe here). No database."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kernels.engine.compare import status_grid
from kernels.engine.device import Environment, open_device
from kernels.engine.harness import parse_harness
from kernels.engine.host.harness_program import harness_host
from kernels.engine.limits import Limits
from kernels.engine.outcome import Outcome, output_list
from kernels.engine.run import execute

ADD = """@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> c: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    if (i < arrayLength(&c)) {
        c[i] = a[i] + b[i];
    }
}
"""

MATMUL = """struct Dims { m: u32, n: u32, k: u32, pad: u32 }
@group(0) @binding(0) var<uniform> dims: Dims;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> c: array<f32>;

@compute @workgroup_size(8, 8)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let row = gid.y;
    let col = gid.x;
    if (row >= dims.m || col >= dims.n) {
        return;
    }
    var acc = 0.0;
    for (var i = 0u; i < dims.k; i++) {
        acc += a[row * dims.k + i] * b[i * dims.n + col];
    }
    c[row * dims.n + col] = acc;
}
"""

MATMUL_BIAS = MATMUL.replace(
    "@group(0) @binding(3) var<storage, read_write> c: array<f32>;",
    "@group(0) @binding(3) var<storage, read_write> c: array<f32>;\n"
    "@group(0) @binding(4) var<storage, read> bias: array<f32>;",
).replace("c[row * dims.n + col] = acc;", "c[row * dims.n + col] = acc + bias[col];")

RELU = """@group(0) @binding(0) var<storage, read_write> h: array<f32>;

@compute @workgroup_size(64)
fn apply(@builtin(global_invocation_id) gid: vec3<u32>) {
    if (gid.x < arrayLength(&h)) {
        h[gid.x] = max(h[gid.x], 0.0);
    }
}
"""

NAIVE_SOFTMAX = """@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
const COLS: u32 = 16u;

@compute @workgroup_size(1)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let row = gid.x;
    var total = 0.0;
    for (var j = 0u; j < COLS; j++) {
        total += exp(x[row * COLS + j]);
    }
    for (var j = 0u; j < COLS; j++) {
        y[row * COLS + j] = exp(x[row * COLS + j]) / total;
    }
}
"""

COPY = """@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    if (gid.x < arrayLength(&y)) {
        y[gid.x] = x[gid.x];
    }
}
"""


@pytest.fixture(scope="module")
def gpu() -> tuple[object, Environment]:
    return open_device()


@pytest.fixture
def run(gpu: tuple[object, Environment], tmp_path: Path):
    device, env = gpu

    def run(sources: str | dict, harness: dict | None, **kwargs: Any) -> Outcome:
        if isinstance(sources, str):
            sources = {"self": sources}
        outcome = execute(device, env, sources, harness, kwargs.pop("fixtures", tmp_path), **kwargs)
        # Every outcome must survive strict JSON: no NaN or infinities anywhere.
        json.dumps(outcome, allow_nan=False)
        return outcome

    return run


def rand(shape: list[int], seed: int, low: float = -1.0, high: float = 1.0) -> dict:
    return {
        "usage": "read",
        "dtype": "f32",
        "shape": shape,
        "random": {"seed": seed, "low": low, "high": high},
    }


def add_harness(n: int = 1000, dispatch: int = 16) -> dict:
    return {
        "buffers": {
            "a": rand([n], 1),
            "b": rand([n], 2),
            "c": {"usage": "read_write", "dtype": "f32", "shape": [n], "output": True},
        },
        "passes": [{"bind": {"0": "a", "1": "b", "2": "c"}, "dispatch": [dispatch]}],
        "reference": {"name": "add", "args": ["a", "b"]},
    }


def matmul_harness(m: int, n: int, k: int) -> dict:
    return {
        "buffers": {
            "dims": {"usage": "uniform", "dtype": "u32", "shape": [4], "data": [m, n, k, 0]},
            "a": rand([m, k], 1),
            "b": rand([k, n], 2),
            "c": {"usage": "read_write", "dtype": "f32", "shape": [m, n], "output": True},
        },
        "passes": [
            {
                "bind": {"0": "dims", "1": "a", "2": "b", "3": "c"},
                "dispatch": [(n + 7) // 8, (m + 7) // 8],
            }
        ],
        "reference": {"name": "matmul", "args": ["a", "b"]},
        "tolerance": {"atol": 1e-4, "rtol": 1e-4},
    }


def test_it_passes_a_correct_add(run) -> None:
    outcome = run(ADD, add_harness())

    assert outcome["status"] == "passed", outcome["message"]
    assert outcome["message"].startswith("All 1,000 cells match the reference")
    (out,) = outcome["outputs"]
    assert out["bad"] == 0 and out["unwritten"] == 0 and out["count"] == 1000
    assert out["max_abs_err"] < 1e-6
    assert set(out["grid"]["cells"]) == {"."}
    assert len(output_list(out, "got")) == len(output_list(out, "expected")) == 1000
    assert outcome["timings"]["compile_ms"] > 0 and outcome["timings"]["run_ms"] > 0


def test_it_passes_a_correct_matmul(run) -> None:
    outcome = run(MATMUL, matmul_harness(33, 29, 17))

    assert outcome["status"] == "passed", outcome["message"]
    assert outcome["outputs"][0]["shape"] == [33, 29]


def test_it_reports_the_environment(run, gpu) -> None:
    outcome = run(ADD, add_harness())

    env = outcome["environment"]
    assert "via Vulkan" in env["label"]
    assert env["backend"] == "Vulkan" and env["wgpu"].startswith("0.32")
    assert env["id"] == gpu[1].id and len(env["id"]) == 64
    # ADD checks its index against arrayLength and has no loop: nothing to warn of.
    assert outcome["warnings"] == []


def codes(outcome: dict) -> list[tuple[str, int]]:
    return [(w["code"], w["data"].get("line")) for w in outcome["warnings"]]


def test_a_loop_bounded_by_a_uniform_is_warned_of_only_where_the_run_can_reach_the_cap(
    run, gpu
) -> None:
    if not gpu[1].software:
        pytest.skip("only llvmpipe caps loops")

    # The loop runs dims.k times: 8 as this harness writes it, far from 65,535.
    assert codes(run(MATMUL, matmul_harness(8, 8, 8))) == []

    outcome = run(MATMUL, matmul_harness(1, 1, 100_000))

    assert codes(outcome) == [("llvmpipe_loop_cap", 15)]
    [warning] = outcome["warnings"]
    assert warning["data"]["condition"] == "i < dims.k"
    assert warning["data"]["iterations"] == 100_000
    assert "65,535 iterations" in warning["text"] and "line 15" in warning["text"]
    assert "can run 100,000 times as this run set it up" in warning["text"]


def test_a_loop_bounded_by_what_a_kernel_reads_from_storage_is_warned_of(run, gpu) -> None:
    if not gpu[1].software:
        pytest.skip("only llvmpipe caps loops")
    loops = (
        "    var s = 0.0;\n"
        "    for (var k = 0u; k < u32(a[0]); k++) { s += 1.0; }\n"
        "    for (var k = i; k < arrayLength(&b); k += 64u) { s += 0.0; }\n"
    )
    source = ADD.replace("    let i = gid.x;\n", "    let i = gid.x;\n" + loops)

    # What a[0] holds is known only as the kernel runs; b's length is the buffer's size.
    [warning] = run(source, add_harness())["warnings"]
    assert (warning["code"], warning["data"]["line"]) == ("llvmpipe_loop_cap", 9)
    assert "iterations" not in warning["data"] and "known only as it runs" in warning["text"]


def test_a_loop_of_twenty_and_a_store_that_cannot_overrun_are_not_warned_of(run) -> None:
    source = ADD.replace(
        "    if (i < arrayLength(&c)) {\n        c[i] = a[i] + b[i];\n    }",
        (
            "    var s = 0.0;\n    for (var k = 0u; k < 20u; k++) { s += 1.0; }\n"
            "    c[gid.x] = a[i] + b[i] + s - 20.0;"
        ),
    )

    outcome = run(source, add_harness(1024, 16))

    assert outcome["status"] == "passed", outcome["message"]
    assert outcome["warnings"] == []


def test_a_store_past_the_end_is_warned_of_only_where_the_dispatch_reaches_past_it(
    run, gpu
) -> None:
    if not gpu[1].software:
        pytest.skip("only llvmpipe drops writes")
    source = ADD.replace(
        "    if (i < arrayLength(&c)) {\n        c[i] = a[i] + b[i];\n    }",
        "    c[i * 1u] = a[i] + b[i];",
    )

    outcome = run(source, add_harness(1024, 16))

    assert codes(outcome) == [("llvmpipe_dropped_writes", 8)]
    assert outcome["warnings"][0]["data"]["buffer"] == "c"


def test_it_reports_a_type_error_with_line_and_column(run) -> None:
    source = ADD.replace("let i = gid.x;", "let i = gid.x;\n    let x: f32 = gid.y;")

    outcome = run(source, add_harness())

    assert outcome["status"] == "compile_error"
    info = outcome["compile"]
    assert (info["kernel"], info["line"], info["column"]) == ("self", 8, 9)
    assert info["message"] == "the type of `x` is expected to be `f32`, but got `u32`"
    assert info["label"] == "definition of `x`"
    assert "wgsl:8:9" in info["text"] and "Validation Error" not in info["text"]
    assert "line 8, column 9" in outcome["message"]
    assert outcome["error"] == info["text"]


def test_it_reports_a_parse_error(run) -> None:
    source = ADD.replace("c[i] = a[i] + b[i];", "c[i] = a[i] + b[i]\n        let z = 1;")

    outcome = run(source, add_harness())

    info = outcome["compile"]
    assert outcome["status"] == "compile_error"
    assert (info["line"], info["column"]) == (10, 9)
    assert info["message"] == 'expected `;`, found "let"'
    assert info["label"] == "expected `;`"


def test_it_reports_a_validation_error(run) -> None:
    source = ADD.replace("c[i] = a[i] + b[i];", "a[i] = b[i];")

    outcome = run(source, add_harness())

    info = outcome["compile"]
    assert outcome["status"] == "compile_error"
    assert (info["line"], info["column"]) == (9, 9)
    assert info["label"] == "writing to this location is not permitted"
    assert info["notes"] and "valid destination for a store" in info["notes"][0]


def test_it_reports_a_uniform_smaller_than_its_struct(run) -> None:
    source = """struct Params { n: u32, scale: f32, offset: f32, pad: f32 }
@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(1)
fn main() {
    y[0] = params.scale;
}
"""
    harness = {
        "buffers": {
            "params": {"usage": "uniform", "dtype": "u32", "shape": [3], "data": [1, 2, 3]},
            "y": {"usage": "read_write", "dtype": "f32", "shape": [1], "output": True},
        },
        "passes": [{"bind": {"0": "params", "1": "y"}, "dispatch": [1]}],
    }

    outcome = run(source, harness)

    assert outcome["status"] == "pipeline_error"
    assert "Binding size 12 of Buffer 'params' is less than minimum 16" in outcome["message"]
    assert "Caused by" not in outcome["error"]


def test_it_reports_a_binding_the_harness_does_not_provide(run) -> None:
    harness = add_harness()
    harness["passes"][0]["bind"] = {"0": "a", "1": "b"}
    harness["buffers"]["c"].pop("output")
    del harness["reference"]

    outcome = run(ADD, harness)

    assert outcome["status"] == "pipeline_error"
    assert "the kernel uses 3 bindings but the harness binds 2" in outcome["message"]
    assert "@binding(2) c" in outcome["message"]


def test_it_drops_a_binding_the_kernel_does_not_use(run) -> None:
    harness = add_harness()
    harness["buffers"]["extra"] = rand([4], 3)
    harness["passes"][0]["bind"]["5"] = "extra"

    outcome = run(ADD, harness)

    assert outcome["status"] == "passed", outcome["message"]
    [warning] = outcome["warnings"]
    assert warning["code"] == "unused_binding"
    assert (warning["data"]["binding"], warning["data"]["buffer"]) == (5, "extra")
    assert "@binding(5)" in warning["text"] and "does not use" in warning["text"]
    data = warning["data"]
    assert (data["pass"], data["group"], data["binding"]) == (1, 0, 5)
    # The host code the page shows for the harness is the code that ran: the run's trace
    # binds what its lines bind, and both leave the binding out.
    written = harness_host(parse_harness(harness), {"self": ADD}, "add")
    assert "binding: 5" not in written.code
    assert "@binding(5) extra: the kernel does not use it" in written.code
    [group] = outcome["trace"]["bind_groups"]
    assert [e["buffer"] for e in group["entries"]] == ["a", "b", "c"]
    assert written.code.splitlines()[group["line"] - 1].startswith("const bindGroup = ")


def test_it_reports_a_pipeline_error_for_a_missing_entry_point(run) -> None:
    harness = add_harness()
    harness["entry_point"] = "nope"

    outcome = run(ADD, harness)

    assert outcome["status"] == "pipeline_error"
    assert "Unable to find entry point 'nope'" in outcome["message"]


def test_it_shows_where_a_swapped_matmul_goes_wrong(run) -> None:
    source = MATMUL.replace("c[row * dims.n + col] = acc;", "c[col * dims.n + row] = acc;")
    harness = matmul_harness(16, 16, 8)

    outcome = run(source, harness)

    assert outcome["status"] == "mismatch"
    (out,) = outcome["outputs"]
    assert out["unwritten"] == 0 and out["nonfinite"] == 0
    assert out["bad"] == 16 * 16 - 16  # only the diagonal survives a transpose
    first = out["first_bad"][0]
    assert first["index"] == [0, 1] and first["kind"] == "wrong"
    a = np.array(output_list(out, "got")).reshape(16, 16)
    assert first["got"] == pytest.approx(a[0, 1])
    assert first["expected"] == pytest.approx(output_list(out, "expected")[1])
    assert len(out["first_bad"]) == 10
    assert "x" in out["grid"]["cells"] and out["grid"]["rows"] == 16
    assert outcome["message"].startswith("240 of 256 cells wrong; worst error")


def test_it_counts_cells_never_written(run) -> None:
    outcome = run(ADD, add_harness(n=1000, dispatch=8))

    assert outcome["status"] == "mismatch"
    (out,) = outcome["outputs"]
    assert out["unwritten"] == 1000 - 8 * 64
    assert out["bad"] == out["unwritten"]
    assert out["first_bad"][0] == {
        "index": [512],
        "expected": output_list(out, "expected")[512],
        "got": None,
        "kind": "unwritten",
    }
    assert output_list(out, "got")[511] is not None and output_list(out, "got")[512] is None
    grid = out["grid"]
    assert (grid["rows"], grid["cols"], grid["block"]) == (1, 63, [1, 16])
    assert grid["cells"] == "." * 32 + "u" * 31
    assert "(488 never written)" in outcome["message"]


def test_it_calls_overflowing_softmax_nonfinite(run) -> None:
    harness = {
        "buffers": {
            "x": rand([4, 16], 7, low=100.0, high=1000.0),
            "y": {"usage": "read_write", "dtype": "f32", "shape": [4, 16], "output": True},
        },
        "passes": [{"bind": {"0": "x", "1": "y"}, "dispatch": [4]}],
        "reference": {"name": "softmax", "args": ["x"]},
    }

    outcome = run(NAIVE_SOFTMAX, harness)

    assert outcome["status"] == "nonfinite", outcome["message"]
    (out,) = outcome["outputs"]
    assert out["nonfinite"] == out["bad"] == 64
    assert set(out["grid"]["cells"]) == {"n"}
    assert out["first_bad"][0]["got"] == "NaN"
    assert "NaN or infinite" in outcome["message"]


def test_it_runs_passes_in_order_on_shared_buffers(run) -> None:
    m, n, k = 8, 12, 16
    harness = {
        "buffers": {
            "dims": {"usage": "uniform", "dtype": "u32", "shape": [4], "data": [m, n, k, 0]},
            "x": rand([m, k], 1),
            "w": rand([k, n], 2),
            "b": rand([n], 3),
            "h": {"usage": "read_write", "dtype": "f32", "shape": [m, n], "output": True},
        },
        "passes": [
            {"bind": {"0": "dims", "1": "x", "2": "w", "3": "h", "4": "b"}, "dispatch": [2, 1]},
            {"kernel": "relu", "entry_point": "apply", "bind": {"0": "h"}, "dispatch": [2]},
        ],
        "reference": {"name": "mlp_hidden", "args": ["x", "w", "b"]},
        "tolerance": {"atol": 1e-4, "rtol": 1e-4},
    }

    outcome = run({"self": MATMUL_BIAS, "relu": RELU}, harness)

    assert outcome["status"] == "passed", outcome["message"]
    assert min(output_list(outcome["outputs"][0], "got")) == 0.0


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"dispatch": [65535, 65535, 65535]}, "the number of invocations"),
        ({"dispatch": [70000]}, "pass 1's dispatch in x is 70,000"),
        ({"shape": [1073741824]}, "buffer c is 4,294,967,296 bytes (4 GiB)"),
    ],
)
def test_it_rejects_runs_over_the_limits(run, change: dict, fragment: str) -> None:
    harness = add_harness()
    if "dispatch" in change:
        harness["passes"][0]["dispatch"] = change["dispatch"]
    else:
        harness["buffers"]["c"]["shape"] = change["shape"]

    outcome = run(ADD, harness)

    assert outcome["status"] == "rejected"
    assert fragment in outcome["message"] and "over the limit of" in outcome["message"]
    assert outcome["timings"]["compile_ms"] is None


def test_it_leaves_the_device_limit_to_the_device(run) -> None:
    harness = add_harness()
    harness["passes"][0]["dispatch"] = [70000]

    outcome = run(ADD, harness, limits=Limits(max_workgroups_per_dim=100_000))

    assert outcome["status"] == "pipeline_error"
    assert "must be less or equal to 65535" in outcome["message"]


def test_it_rejects_an_invalid_harness(run) -> None:
    harness = add_harness()
    harness["buffers"]["a"]["dtype"] = "f64"

    outcome = run(ADD, harness)

    assert outcome["status"] == "rejected"
    assert outcome["error"].startswith("buffers.a.dtype: must be one of")


def test_it_loads_fixture_files(run, tmp_path: Path) -> None:
    np.save(tmp_path / "a.npy", np.arange(100, dtype=np.float64))
    harness = add_harness(n=100, dispatch=2)
    harness["buffers"]["a"] = {"usage": "read", "dtype": "f32", "shape": [100], "file": "a.npy"}

    assert run(ADD, harness)["status"] == "passed"

    harness["buffers"]["a"]["shape"] = [10, 10]
    outcome = run(ADD, harness)
    assert outcome["status"] == "rejected" and "holds shape [100]" in outcome["message"]


def test_it_rejects_fixture_files_outside_the_folder(run, tmp_path: Path) -> None:
    fixtures = tmp_path / "fixtures"
    fixtures.mkdir()
    np.save(tmp_path / "secret.npy", np.zeros(100))
    os.symlink(tmp_path / "secret.npy", fixtures / "link.npy")
    harness = add_harness(n=100, dispatch=2)
    harness["buffers"]["a"] = {"usage": "read", "dtype": "f32", "shape": [100], "file": "link.npy"}

    outcome = run(ADD, harness, fixtures=fixtures)

    assert outcome["status"] == "rejected"
    assert "buffers.a.file: resolves outside the fixtures folder" in outcome["error"]

    harness["buffers"]["a"]["file"] = "missing.npy"
    outcome = run(ADD, harness, fixtures=fixtures)
    assert outcome["status"] == "rejected" and "does not exist" in outcome["message"]


def test_it_shows_outputs_without_a_reference_as_a_browser_would(run) -> None:
    harness = add_harness(n=100, dispatch=1)
    del harness["reference"]

    outcome = run(ADD, harness)

    # Without a verdict there is nothing to diagnose, so no second run with the sentinel:
    # the 36 cells past the 64 invocations read as WebGPU leaves them, zero.
    assert outcome["status"] == "no_reference"
    (out,) = outcome["outputs"]
    assert out["unwritten"] == 0 and out["bad"] is None and "expected" not in out
    assert output_list(out, "got")[63] != 0 and output_list(out, "got")[64:] == [0.0] * 36
    assert "never written" not in outcome["message"]


def test_it_only_compiles_without_a_harness(run) -> None:
    assert run(ADD, None)["status"] == "no_reference"
    assert run(ADD.replace("let i", "let i i"), None)["status"] == "compile_error"


def test_it_reports_a_classification(run) -> None:
    logits = [[0.1, 2.0, 0.3], [3.0, 0.0, 0.0], [0.0, 0.0, 5.0], [1.0, 2.0, 0.0]]
    harness = {
        "buffers": {
            "x": {"usage": "read", "dtype": "f32", "shape": [4, 3], "data": logits},
            "probs": {"usage": "read_write", "dtype": "f32", "shape": [4, 3], "output": True},
            "labels": {"usage": "read", "dtype": "u32", "shape": [4], "data": [1, 0, 1, 1]},
        },
        "passes": [{"bind": {"0": "x", "1": "probs"}, "dispatch": [1]}],
        # The kernel copies logits instead of taking their softmax: wrong, but the
        # argmax (and so the report) is the same.
        "reference": {"name": "softmax", "args": ["x"]},
        "report": {"kind": "classification", "probabilities": "probs", "labels": "labels"},
    }

    outcome = run(COPY, harness)

    assert outcome["status"] == "mismatch"
    assert outcome["report"] == {
        "kind": "classification",
        "count": 4,
        "accuracy": 0.75,
        "predictions": [1, 0, 2, 1],
        "confusion": [[1, 0, 0], [0, 2, 1], [0, 0, 0]],
        "labels_count": [1, 3, 0],
    }


def test_it_downsamples_the_grid_to_64_blocks() -> None:
    codes = np.zeros(200 * 130, dtype=np.int8)
    codes[-1] = 1
    codes[0] = 3

    grid = status_grid(codes, (2, 100, 130))

    assert (grid["rows"], grid["cols"], grid["block"]) == (50, 44, [4, 3])
    assert len(grid["cells"]) == 50 * 44
    assert grid["cells"][0] == "u" and grid["cells"][-1] == "x"
    assert set(grid["cells"][1:-1]) == {"."}
    # Each block counts its cells of each kind that is not right.
    assert set(grid["counts"]) == {"u", "x"}
    assert grid["counts"]["u"][0] == 1 and sum(grid["counts"]["u"]) == 1
    assert grid["counts"]["x"][-1] == 1 and sum(grid["counts"]["x"]) == 1
    codes[:4] = 2  # four NaN in the first row: the first block (3 columns) holds three
    counts = status_grid(codes, (2, 100, 130))["counts"]
    assert counts["n"][:2] == [3, 1] and sum(counts["n"]) == 4


def test_a_worker_computes_inputs_and_compiles_each_source_once(run, gpu) -> None:
    from kernels.engine.worker import Memo

    computed = []
    memo = Memo()

    def counting(key: tuple, compute):
        def counted():
            computed.append(key[0])
            return compute()

        return memo(key, counted)

    # Each source is compiled (a module, whether a browser refuses it, a pipeline) and its
    # harness program written once; on llvmpipe it is also read once for its warnings
    # ("facts"); and 16 workgroups of 64 cover 1,024 invocations for 1,000 cells, so each
    # source's stores are counted once ("stores counted"): instrumented ("store counts"),
    # and that copy written as a program and compiled once. The reviewer's facts about a
    # source are read once ("source facts"), and numpy's time for the reference once per
    # inputs ("reference time"). The harness is parsed once.
    facts = ["facts"] if gpu[1].software else []
    compiled = ["harness program", "module", "refusal", "pipeline"]
    counts = ["stores counted", "store counts", *compiled]
    first = run(ADD, add_harness(), memo=counting)
    expected = ["harness", "device answer", "inputs", *compiled, *counts, *facts]
    expected += ["source facts", "reference time"]
    assert sorted(computed) == sorted(expected)
    # The same source again: nothing is computed or compiled twice...
    done = len(computed)
    again = run(ADD, add_harness(), memo=counting)
    assert len(computed) == done
    # ...another version under the same harness shares it and its inputs only...
    other = run(ADD.replace("a[i] + b[i]", "b[i] + a[i]"), add_harness(), memo=counting)
    assert sorted(computed[done:]) == sorted([*compiled, *counts, *facts, "source facts"])
    assert first["status"] == again["status"] == other["status"] == "passed"
    # ...and a different harness is parsed and gets its own inputs.
    done = len(computed)
    run(ADD, add_harness(n=512, dispatch=8), memo=counting)
    # (whether a pass needs its stores counted is decided once per harness: here not)
    assert computed[done:] == [
        "harness",
        "inputs",
        "harness program",
        "stores counted",
        "store counts",
        "reference time",
    ]
    host, expected = next(v for k, v in memo.values.items() if k[0] == "inputs")
    assert not host["a"].flags.writeable and not expected["c"].flags.writeable


def test_the_worker_memo_stays_under_its_size() -> None:
    import numpy as np

    from kernels.engine.worker import Memo

    memo = Memo(max_bytes=10_000, max_entries=3)
    for i in range(5):
        memo(("array", i), lambda: np.zeros(1000, dtype=np.float32))  # 4,000 bytes each
    assert list(memo.values) == [("array", 3), ("array", 4)]
    for i in range(5):
        memo(("pipeline", i), object)  # no bytes, but counted
    assert list(memo.values) == [("pipeline", 2), ("pipeline", 3), ("pipeline", 4)]


# -- the completed harness: structs, files, cases, zeroed buffers, intermediates ------------

SCALE = """struct Params {
    n: u32,
    scale: f32,
    shift: i32,
    bias: vec3<f32>,
}
@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    if (i < params.n) {
        y[i] = params.scale * x[i] + f32(params.shift) + params.bias.z;
    }
}
"""


def scale_harness(fields: dict) -> dict:
    return {
        "buffers": {
            "params": {"usage": "uniform", "fields": fields},
            "x": rand([256], 3),
            "y": {"usage": "read_write", "dtype": "f32", "shape": [256], "output": True},
        },
        "passes": [{"bind": {"0": "params", "1": "x", "2": "y"}, "dispatch": [4]}],
        "reference": {"name": "double", "args": ["x"]},
    }


def test_it_fills_a_struct_uniform_by_field_name_as_wgsl_lays_it_out(run) -> None:
    # shift and bias.z cancel only if each lands where the kernel reads it: bias is a
    # vec3<f32>, 16-byte aligned, so it starts at byte 16, not 12.
    fields = {"n": 256, "scale": 2.0, "shift": -3, "bias": [0, 0, 3]}

    outcome = run(SCALE, scale_harness(fields))

    assert outcome["status"] == "passed", outcome["message"]
    (layout,) = outcome["layout"]
    assert (layout["buffer"], layout["struct"], layout["size"]) == ("params", "Params", 32)
    assert [(f["name"], f["offset"], f["values"]) for f in layout["fields"]] == [
        ("n", 0, [256]),
        ("scale", 4, [2.0]),
        ("shift", 8, [-3]),
        ("bias", 16, [0.0, 0.0, 3.0]),
    ]
    assert layout["padding"] == [{"offset": 12, "size": 4}, {"offset": 28, "size": 4}]


def test_it_names_a_struct_field_that_does_not_fit(run) -> None:
    outcome = run(SCALE, scale_harness({"n": 256, "scale": 2.0, "shift": -3, "bias": [0, 3]}))

    assert outcome["status"] == "rejected"
    assert "buffers.params.fields.bias: vec3<f32> takes 3 numbers" in outcome["error"]


def test_it_reads_raw_bin_and_npy_slices(run, tmp_path: Path) -> None:
    # An MNIST-style file: a 16-byte header, then one byte per pixel.
    pixels = np.arange(200, dtype=np.uint8)
    (tmp_path / "images.bin").write_bytes(bytes(16) + pixels.tobytes())
    np.save(tmp_path / "values.npy", np.arange(100, dtype=np.float32).reshape(10, 10))
    harness: dict[str, Any] = {
        "buffers": {
            "x": {
                "usage": "read",
                "dtype": "f32",
                "shape": [64],
                "file": {"path": "images.bin", "dtype": "u8", "offset": 16 + 64, "count": 64},
            },
            "y": {"usage": "read_write", "dtype": "f32", "shape": [64], "output": True},
        },
        "passes": [{"bind": {"0": "x", "1": "y"}, "dispatch": [1]}],
    }

    from_bin = run(COPY, harness)
    harness["buffers"]["x"]["file"] = {"path": "values.npy", "offset": 4 * 90, "count": 10}
    from_npy = run(COPY, harness)

    assert from_bin["status"] == "no_reference", from_bin["message"]
    assert output_list(from_bin["outputs"][0], "got") == [float(v) for v in range(64, 128)]
    # Ten values from the tenth row on; the rest of the buffer stays zero.
    assert (
        output_list(from_npy["outputs"][0], "got")
        == [float(v) for v in range(90, 100)] + [0.0] * 54
    )


@pytest.mark.parametrize(
    ("file", "fragment"),
    [
        ({"path": "images.bin", "dtype": "u32", "offset": 2}, "not a multiple of the value size"),
        ({"path": "images.bin", "dtype": "u8", "offset": 8, "count": 64}, "holds 40 values"),
        ({"path": "images.bin", "dtype": "f32"}, "holds 12 values after byte 0, not 64"),
    ],
)
def test_it_rejects_a_slice_the_file_cannot_give(
    run, tmp_path: Path, file: dict, fragment: str
) -> None:
    (tmp_path / "images.bin").write_bytes(bytes(48))
    harness = {
        "buffers": {
            "x": {"usage": "read", "dtype": "f32", "shape": [64], "file": file},
            "y": {"usage": "read_write", "dtype": "f32", "shape": [64], "output": True},
        },
        "passes": [{"bind": {"0": "x", "1": "y"}, "dispatch": [1]}],
    }

    outcome = run(COPY, harness)

    assert outcome["status"] == "rejected"
    assert fragment in outcome["message"] and "buffers.x.file" in outcome["error"]


CLAMPED_ADD = ADD.replace("c[i] = a[i] + b[i];", "c[i] = min(a[i] + b[i], 10.0);")


def test_it_runs_each_case_and_takes_the_worst(run) -> None:
    harness = add_harness(n=64, dispatch=1)
    harness["cases"] = {
        "small": {"buffers": {"a": {"data": [1.0] * 64}, "b": {"zeros": True}}},
        "large": {
            "description": "sums past the clamp",
            "buffers": {"a": {"data": [9.0] * 64}, "b": {"data": [2.0] * 64}},
        },
        "random": {"buffers": {"a": {"random": {"seed": 5, "low": 0, "high": 1}}}},
    }

    outcome = run(CLAMPED_ADD, harness)

    assert outcome["status"] == "mismatch"
    assert outcome["message"].startswith("2 of 3 cases pass; case large: 64 of 64 cells wrong")
    # In the order of their names.
    assert [(c["name"], c["status"]) for c in outcome["cases"]] == [
        ("large", "mismatch"),
        ("random", "passed"),
        ("small", "passed"),
    ]
    large = outcome["cases"][0]
    assert large["description"] == "sums past the clamp"
    # The top level shows the worst case, whose cells alone come with their values.
    assert (
        outcome["outputs"] == large["outputs"]
        and output_list(large["outputs"][0], "got")[0] == 10.0
    )
    assert "got" not in outcome["cases"][2]["outputs"][0]


def test_all_cases_passing_say_so(run) -> None:
    harness = add_harness(n=64, dispatch=1)
    harness["cases"] = {
        f"digit-{i}": {"buffers": {"a": {"data": [float(i)] * 64}}} for i in range(10)
    }

    outcome = run(ADD, harness)

    assert outcome["status"] == "passed"
    assert outcome["message"] == "All 10 cases match the reference."
    assert len(outcome["cases"]) == 10


ACCUMULATE = ADD.replace("c[i] = a[i] + b[i];", "c[i] += a[i];\n        c[i] += b[i];")


def test_an_accumulating_kernel_passes_on_a_fresh_buffer(run) -> None:
    # WebGPU zeroes a new buffer, so `c[i] += ...` is right in a browser, and here.
    outcome = run(ACCUMULATE, add_harness())

    assert outcome["status"] == "passed", outcome["message"]


def test_it_runs_again_with_the_sentinel_only_to_diagnose_a_mismatch(
    run, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kernels.engine import run as runner

    dispatches: list[bool] = []
    replay = runner._Run.replay

    def counting(self, program, *args, **kwargs):
        # The run that counts each invocation's stores (1,024 invocations for 1,000
        # cells) is not a diagnosis.
        if not program.counting:
            dispatches.append(bool(kwargs.get("sentinel")))
        return replay(self, program, *args, **kwargs)

    monkeypatch.setattr(runner._Run, "replay", counting)

    passed = run(ADD, add_harness())
    assert passed["status"] == "passed" and dispatches == [False]

    short = run(ACCUMULATE, add_harness(n=1000, dispatch=8))
    assert dispatches[1:] == [False, True]
    (out,) = short["outputs"]
    # Cells past the 512 invocations are wrong (zero) and stay the sentinel in the second
    # run: never written. The accumulated cells are right, so none of them is called so.
    assert short["status"] == "mismatch"
    assert out["unwritten"] == out["bad"] == 1000 - 512
    assert output_list(out, "got")[511] is not None and output_list(out, "got")[512] is None


RELU_OUT = """@group(0) @binding(0) var<storage, read> h: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    if (gid.x < arrayLength(&y)) {
        y[gid.x] = max(h[gid.x], 0.0);
    }
}
"""


def test_it_shows_an_intermediate_buffer_the_report_asks_for(run) -> None:
    harness = {
        "buffers": {
            "x": rand([64], 4),
            "hidden": {"usage": "read_write", "dtype": "f32", "shape": [64]},
            "y": {"usage": "read_write", "dtype": "f32", "shape": [64], "output": True},
        },
        "passes": [
            {"kernel": "copy", "bind": {"0": "x", "1": "hidden"}, "dispatch": [1]},
            {"bind": {"0": "hidden", "1": "y"}, "dispatch": [1]},
        ],
        "reference": {"name": "relu", "args": ["x"]},
        "report": {"show": ["hidden"]},
    }

    outcome = run({"self": RELU_OUT, "copy": COPY}, harness)

    assert outcome["status"] == "passed", outcome["message"]
    y, hidden = outcome["outputs"]
    assert y["name"] == "y" and y["bad"] == 0 and "intermediate" not in y
    assert hidden["name"] == "hidden" and hidden["intermediate"] is True
    assert hidden["bad"] is None and "expected" not in hidden
    assert min(output_list(hidden, "got")) < 0  # before the ReLU


def test_a_harness_run_lists_its_passes_at_the_lines_of_its_written_out_code(run) -> None:
    harness = add_harness()
    harness["passes"].append(dict(harness["passes"][0]))

    outcome = run(ADD, harness)

    code = harness_host(parse_harness(harness), {"self": ADD}, "add").code.splitlines()
    assert [(p["number"], p["name"], p["dispatches"]) for p in outcome["passes"]] == [
        (1, "pass 1", 1),
        (2, "pass 2", 1),
    ]
    assert [code[p["line"] - 1] for p in outcome["passes"]] == [
        "const pass1 = encoder.beginComputePass();",
        "const pass2 = encoder.beginComputePass();",
    ]
