"""A program of two shader modules: each dispatch is measured against the buffer its own
module writes, and its warnings are its modules'. Real QuickJS and wgpu (llvmpipe here)."""

from __future__ import annotations

import pytest

from kernels.engine.device import Environment, open_device
from kernels.engine.host.program import program_outcome, run_program
from kernels.engine.host.trace import module_sources
from kernels.engine.run_warnings import warnings_of
from kernels.trace_pictures import host_picture
from pages.host_context import host_of
from sessions.programs import KernelVersion

# The first module writes at binding 0; the second reads a uniform there (dims1, four
# u32) and writes y at binding 1, three invocations for its three cells.
PROGRAM = """const adapter = await navigator.gpu.requestAdapter();
const device = await adapter.requestDevice();
const usage = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST;
const data = device.createBuffer({ size: 64, usage });
const dims1 = device.createBuffer({ size: 16, usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST });
device.queue.writeBuffer(dims1, 0, new Uint32Array([3, 0, 0, 0]));
const y = device.createBuffer({ size: 12, usage });
const read = device.createBuffer({ size: 12, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
const fill = device.createShaderModule({ code: `
@group(0) @binding(0) var<storage, read_write> data: array<f32>;
@compute @workgroup_size(1) fn main(@builtin(global_invocation_id) g: vec3<u32>) {
  data[g.x] = f32(g.x);
}` });
const relu = device.createShaderModule({ code: `
@group(0) @binding(0) var<uniform> dims1: vec4<u32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@compute @workgroup_size(1) fn main(@builtin(global_invocation_id) g: vec3<u32>) {
  var s = 0.0;
  for (var k = 0u; k < dims1.x; k++) { s += 1.0; }
  y[g.x] = s;
}` });
const first = device.createComputePipeline({ layout: "auto", compute: { module: fill, entryPoint: "main" } });
const second = device.createComputePipeline({ layout: "auto", compute: { module: relu, entryPoint: "main" } });
const encoder = device.createCommandEncoder();
const pass = encoder.beginComputePass();
pass.setPipeline(first);
pass.setBindGroup(0, device.createBindGroup({ layout: first.getBindGroupLayout(0), entries: [{ binding: 0, resource: { buffer: data } }] }));
pass.dispatchWorkgroups(16);
pass.setPipeline(second);
pass.setBindGroup(0, device.createBindGroup({ layout: second.getBindGroupLayout(0), entries: [
  { binding: 0, resource: { buffer: dims1 } }, { binding: 1, resource: { buffer: y } }] }));
pass.dispatchWorkgroups(3);
pass.end();
encoder.copyBufferToBuffer(y, 0, read, 0, 12);
device.queue.submit([encoder.finish()]);
await read.mapAsync(GPUMapMode.READ);
console.log(Array.from(new Float32Array(read.getMappedRange())).join(","));
"""


@pytest.fixture(scope="module")
def gpu() -> tuple[object, Environment]:
    return open_device()


def test_each_dispatch_is_measured_against_the_buffer_its_own_module_writes(gpu):
    result = run_program(gpu[0], gpu[1], PROGRAM)
    assert result.error is None, result.error
    assert result.console[0]["text"] == "3,3,3"

    # As the replay page reads it: the version's WGSL is the first module's.
    fill = PROGRAM.split("code: `")[1].split("`")[0]
    version = KernelVersion(source=fill, host_program=PROGRAM)
    host = host_of(version, program_outcome(result, gpu[1]))
    assert host.module_sources == module_sources(result.trace)
    picture = host_picture(host.trace, host.module_sources)

    [shown] = picture["passes"]
    elements = [d["elements"] for d in shown["dispatches"]]
    assert [(e["buffer"], e["count"]) for e in elements] == [("data", 16), ("y", 3)]
    # Read against the first module, the second pass wrote dims1: "3 invocations for the
    # 4 elements of dims1" was its finding.
    assert picture["findings"] == []


def loop_caps(program: str, gpu: tuple[object, Environment]) -> list[tuple[str, str, int]]:
    outcome = program_outcome(run_program(gpu[0], gpu[1], program), gpu[1])
    return [(w["code"], w["data"]["kernel"], w["data"]["line"]) for w in warnings_of(outcome)]


def test_a_programs_warnings_are_read_from_the_modules_it_dispatched(gpu):
    if not gpu[1].software:
        pytest.skip("only llvmpipe caps loops and drops writes")

    # relu's loop runs dims1.x times: 3, as the program wrote dims1, far from the cap;
    # each store's dispatch covers no more cells than its buffer has (16 of 16, 3 of 3).
    assert loop_caps(PROGRAM, gpu) == []

    # Written 100,000, or 3 and then 100,000: it can reach the cap.
    many = "new Uint32Array([100000, 0, 0, 0])"
    for written in (many, f"new Uint32Array([3, 0, 0, 0]));\nwriteAgain({many}"):
        program = PROGRAM.replace("new Uint32Array([3, 0, 0, 0])", written).replace(
            "writeAgain(", "device.queue.writeBuffer(dims1, 0, "
        )
        assert loop_caps(program, gpu) == [("llvmpipe_loop_cap", "module 2", 6)], written
