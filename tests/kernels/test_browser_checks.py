"""Kernels a browser's WebGPU refuses are refused here, in the browser's words.

The device has WebGPU's default limits, not the adapter's; what wgpu-native still lets
through (workgroup storage over the limit, barriers in non-uniform control flow) is
checked as Chrome checks it. Real wgpu on llvmpipe; no database.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kernels.engine.device import Environment, open_device
from kernels.engine.host.program import program_outcome, run_program
from kernels.engine.outcome import Outcome
from kernels.engine.run import execute
from kernels.engine.uniformity import uniformity_error

OUT = "@group(0) @binding(0) var<storage, read_write> out: array<f32>;\n"
HARNESS = {
    "buffers": {"out": {"dtype": "f32", "shape": [64], "usage": "read_write"}},
    "passes": [{"entry_point": "main", "bind": {"0": "out"}, "dispatch": [1]}],
}
HUGE_WORKGROUP_ARRAY = (
    OUT
    + """var<workgroup> tile: array<f32, 16777216>;  // 64 MiB

@compute @workgroup_size(64)
fn main(@builtin(local_invocation_id) lid: vec3<u32>) {
  tile[lid.x] = f32(lid.x);
  workgroupBarrier();
  out[lid.x] = tile[63u - lid.x];
}
"""
)
BARRIER_IN_A_BRANCH = (
    OUT
    + """var<workgroup> tile: array<f32, 64>;

@compute @workgroup_size(64)
fn main(@builtin(local_invocation_id) lid: vec3<u32>) {
  tile[lid.x] = f32(lid.x);
  if (lid.x < 32u) {
    workgroupBarrier();
  }
  out[lid.x] = tile[63u - lid.x];
}
"""
)
UNIFORM_BARRIERS = (
    OUT
    + """const TILE = 16u;
@group(0) @binding(1) var<uniform> n: u32;
var<workgroup> tile: array<f32, 64>;

@compute @workgroup_size(64)
fn main(@builtin(local_invocation_id) lid: vec3<u32>,
        @builtin(workgroup_id) wid: vec3<u32>) {
  var acc = 0.0;
  for (var t = 0u; t < n / TILE; t++) {
    tile[lid.x] = f32(t);
    workgroupBarrier();
    acc += tile[(lid.x + 1u) % 64u];
    workgroupBarrier();
  }
  if (wid.x == 0u) { storageBarrier(); }
  let first = workgroupUniformLoad(&tile[0]);
  if (first > 0.0) { workgroupBarrier(); }
  if (lid.x < n) { acc += 1.0; }
  out[lid.x] = acc;
}
"""
)


@pytest.fixture(scope="module")
def gpu() -> tuple[object, Environment]:
    return open_device()


def run(gpu: tuple[object, Environment], source: str, harness: dict | None = HARNESS) -> Outcome:
    device, env = gpu
    return execute(device, env, {"self": source}, harness, Path(__file__).parent)


def test_the_device_has_webgpus_default_limits_not_the_adapters(gpu) -> None:
    device, _ = gpu
    limits = device.limits
    assert limits["max-compute-workgroup-storage-size"] == 16384
    assert limits["max-storage-buffer-binding-size"] == 128 * 1024 * 1024
    assert limits["max-compute-invocations-per-workgroup"] == 256
    assert limits["max-compute-workgroup-size-x"] == 256
    assert limits["max-compute-workgroup-size-y"] == 256
    assert limits["max-compute-workgroup-size-z"] == 64
    assert limits["max-compute-workgroups-per-dimension"] == 65535


def test_a_64_mib_workgroup_array_is_a_pipeline_error_naming_the_limit(gpu) -> None:
    outcome = run(gpu, HUGE_WORKGROUP_ARRAY)

    assert outcome["status"] == "pipeline_error"
    assert (
        "The total use of workgroup storage (67108864 bytes) is larger than the maximum "
        "allowed (16384 bytes)" in outcome["message"]
    )
    assert "maxComputeWorkgroupStorageSize" in outcome["message"]


def test_a_workgroup_of_1024_invocations_is_refused_by_the_default_limit(gpu) -> None:
    outcome = run(gpu, OUT + "@compute @workgroup_size(1024) fn main() { out[0] = 1.0; }")

    assert outcome["status"] == "pipeline_error"
    assert "256" in outcome["message"]


def test_a_barrier_in_non_uniform_control_flow_is_a_compile_error_in_tints_words(gpu) -> None:
    outcome = run(gpu, BARRIER_IN_A_BRANCH)

    assert outcome["status"] == "compile_error"
    info = outcome["compile"]
    assert (info["line"], info["column"]) == (8, 5)
    assert info["message"] == "'workgroupBarrier' must only be called from uniform control flow"
    assert info["notes"] == [
        "line 7, column 3: control flow depends on possibly non-uniform value",
        "line 7, column 7: builtin 'lid' of 'main' may be non-uniform",
    ]
    assert info["text"].startswith(
        ":8:5 error: 'workgroupBarrier' must only be called from uniform control flow\n"
        "    workgroupBarrier();\n"
        "    ^^^^^^^^^^^^^^^^\n"
    )
    assert "The kernel does not compile (line 8, column 5)" in outcome["message"]
    # Only compiling (no harness) refuses it too: Chrome refuses the module itself.
    assert run(gpu, BARRIER_IN_A_BRANCH, harness=None)["status"] == "compile_error"


def test_barriers_in_uniform_control_flow_pass(gpu) -> None:
    harness = {
        "buffers": {
            "out": {"dtype": "f32", "shape": [64], "usage": "read_write"},
            "n": {"dtype": "u32", "shape": [1], "usage": "uniform", "data": [32]},
        },
        "passes": [{"entry_point": "main", "bind": {"0": "out", "1": "n"}, "dispatch": [1]}],
    }
    outcome = run(gpu, UNIFORM_BARRIERS, harness)

    assert outcome["status"] == "no_reference", outcome["message"]


@pytest.mark.parametrize(
    ("body", "line", "note"),
    [
        (
            "if (gid.x >= 100u) { return; }\n  workgroupBarrier();",
            2,
            "builtin 'gid' of 'main' may be non-uniform",
        ),
        (
            "let i = gid.x * 2u;\n  var k = i;\n  while (k > 3u) { k--; storageBarrier(); }",
            3,
            "builtin 'gid' of 'main' may be non-uniform",
        ),
        (
            "for (var i = 0u; i < 8u; i++) {\n    workgroupBarrier();\n"
            "    if (gid.x == i) { break; }\n  }",
            2,
            "builtin 'gid' of 'main' may be non-uniform",
        ),
        (
            "if (flag == 0u) { workgroupBarrier(); }",
            1,
            "reading from workgroup storage variable 'flag' may result in a non-uniform value",
        ),
        (
            "if (atomicLoad(&count) > 0u) { workgroupBarrier(); }",
            1,
            "return value of 'atomicLoad' may be non-uniform",
        ),
        (
            "switch (gid.x) { case 0u: { sync(); } default: { } }",
            1,
            "builtin 'gid' of 'main' may be non-uniform",
        ),
    ],
)
def test_the_common_non_uniform_cases_are_found(body: str, line: int, note: str) -> None:
    source = (
        "var<workgroup> flag: u32;\nvar<workgroup> count: atomic<u32>;\n"
        "fn sync() { workgroupBarrier(); }\n"
        "@compute @workgroup_size(64)\n"
        f"fn main(@builtin(global_invocation_id) gid: vec3<u32>) {{\n  {body}\n}}\n"
    )
    info = uniformity_error("self", source)

    assert info is not None
    assert info["message"].endswith("must only be called from uniform control flow")
    assert info["notes"][-1].endswith(note)
    assert info["line"] == 5 + line  # the line of the body that makes the call


def test_a_host_program_gets_the_same_refusals(gpu) -> None:
    device, env = gpu
    program = (
        "const adapter = await navigator.gpu.requestAdapter();\n"
        "const device = await adapter.requestDevice();\n"
        "const module = device.createShaderModule({ code: `%s` });\n"
        'device.createComputePipeline({ layout: "auto", compute: { module, entryPoint: "main" } });\n'
    )

    barrier = program_outcome(run_program(device, env, program % BARRIER_IN_A_BRANCH), env)
    storage = program_outcome(run_program(device, env, program % HUGE_WORKGROUP_ARRAY), env)

    assert barrier["status"] == "compile_error"
    assert barrier["compile"]["message"].startswith("'workgroupBarrier' must only be called")
    assert "workgroup storage (67108864 bytes)" in storage["message"]
