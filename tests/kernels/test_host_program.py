"""Host programs: a learner's WebGPU JavaScript, run in QuickJS against the shim, on a real
wgpu device (llvmpipe here). No database."""

from __future__ import annotations

import base64
import hashlib
import json
import time

import numpy as np
import pytest

from kernels.engine.host.program import (
    expected_from,
    program_outcome,
    replay_program,
    run_program,
    run_program_job,
)
from kernels.engine.host.trace import MAX_ENTRIES

ADD_WGSL = """
@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3u) {
  if (id.x < arrayLength(&out)) {
    out[id.x] = a[id.x] + b[id.x];
  }
}
"""

VECTOR_ADD = (
    """const n = 1000;
const adapter = await navigator.gpu.requestAdapter();
const device = await adapter.requestDevice();
const a = new Float32Array(n).map((_, i) => i);
const b = new Float32Array(n).map((_, i) => 2 * i);
const usage = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST;
const bufA = device.createBuffer({ label: "a", size: a.byteLength, usage });
const bufB = device.createBuffer({ label: "b", size: b.byteLength, usage });
const out = device.createBuffer({ label: "out", size: a.byteLength, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC });
const read = device.createBuffer({ label: "read", size: a.byteLength, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
device.queue.writeBuffer(bufA, 0, a);
device.queue.writeBuffer(bufB, 0, b);
const module = device.createShaderModule({ code: `"""
    + ADD_WGSL
    + """` });
const pipeline = device.createComputePipeline({ layout: "auto", compute: { module, entryPoint: "main" } });
const bindGroup = device.createBindGroup({
  layout: pipeline.getBindGroupLayout(0),
  entries: [
    { binding: 0, resource: { buffer: bufA } },
    { binding: 1, resource: { buffer: bufB } },
    { binding: 2, resource: { buffer: out } },
  ],
});
const encoder = device.createCommandEncoder();
const pass = encoder.beginComputePass();
pass.setPipeline(pipeline);
pass.setBindGroup(0, bindGroup);
pass.dispatchWorkgroups(Math.ceil(n / 64));
pass.end();
encoder.copyBufferToBuffer(out, 0, read, 0, a.byteLength);
device.queue.submit([encoder.finish()]);
await read.mapAsync(GPUMapMode.READ);
const result = new Float32Array(read.getMappedRange());
console.log("out[999] =", result[999]);
read.unmap();
"""
)

# In the style of a learner's index.html: WGSL in a template string, host code by hand, a
# uniform struct mixing u32 and f32 fields laid out through one ArrayBuffer, explicit layouts.
INDEX_HTML_MATMUL = """async function main() {
  const M = 24, N = 20, K = 16;
  const shader = `
    struct Params { m: u32, n: u32, k: u32, alpha: f32 }
    @group(0) @binding(0) var<uniform> params: Params;
    @group(0) @binding(1) var<storage, read> lhs: array<f32>;
    @group(0) @binding(2) var<storage, read> rhs: array<f32>;
    @group(0) @binding(3) var<storage, read_write> product: array<f32>;

    @compute @workgroup_size(8, 8)
    fn matmul(@builtin(global_invocation_id) gid: vec3u) {
      let row = gid.y;
      let col = gid.x;
      if (row >= params.m || col >= params.n) { return; }
      var acc = 0.0;
      for (var i = 0u; i < params.k; i++) {
        acc += lhs[row * params.k + i] * rhs[i * params.n + col];
      }
      product[row * params.n + col] = params.alpha * acc;
    }
  `;

  const adapter = await navigator.gpu.requestAdapter();
  if (!adapter) throw new Error("WebGPU is not supported");
  const device = await adapter.requestDevice();

  const lhs = new Float32Array(M * K);
  const rhs = new Float32Array(K * N);
  for (let i = 0; i < lhs.length; i++) lhs[i] = (i % 7) - 3;
  for (let i = 0; i < rhs.length; i++) rhs[i] = (i % 5) * 0.5;

  // 16 bytes: three u32 and one f32, as WGSL lays out struct Params.
  const params = new ArrayBuffer(16);
  new Uint32Array(params, 0, 3).set([M, N, K]);
  new Float32Array(params, 12, 1)[0] = 0.5;

  const paramsBuffer = device.createBuffer({ label: "params", size: 16, usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST });
  const lhsBuffer = device.createBuffer({ label: "lhs", size: lhs.byteLength, usage: GPUBufferUsage.STORAGE, mappedAtCreation: true });
  new Float32Array(lhsBuffer.getMappedRange()).set(lhs);
  lhsBuffer.unmap();
  const rhsBuffer = device.createBuffer({ label: "rhs", size: rhs.byteLength, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST });
  const productBuffer = device.createBuffer({ label: "product", size: M * N * 4, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC });
  const readBuffer = device.createBuffer({ label: "readback", size: M * N * 4, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
  device.queue.writeBuffer(paramsBuffer, 0, params);
  device.queue.writeBuffer(rhsBuffer, 0, rhs);

  const layout = device.createBindGroupLayout({
    entries: [
      { binding: 0, visibility: GPUShaderStage.COMPUTE, buffer: { type: "uniform" } },
      { binding: 1, visibility: GPUShaderStage.COMPUTE, buffer: { type: "read-only-storage" } },
      { binding: 2, visibility: GPUShaderStage.COMPUTE, buffer: { type: "read-only-storage" } },
      { binding: 3, visibility: GPUShaderStage.COMPUTE, buffer: { type: "storage" } },
    ],
  });
  const module = device.createShaderModule({ label: "matmul", code: shader });
  const info = await module.getCompilationInfo();
  console.log("compilation messages:", info.messages.length);
  const pipeline = device.createComputePipeline({
    layout: device.createPipelineLayout({ bindGroupLayouts: [layout] }),
    compute: { module, entryPoint: "matmul" },
  });
  const bindGroup = device.createBindGroup({
    layout,
    entries: [paramsBuffer, lhsBuffer, rhsBuffer, productBuffer].map((buffer, binding) => ({ binding, resource: { buffer } })),
  });

  const encoder = device.createCommandEncoder();
  const pass = encoder.beginComputePass({ label: "matmul pass" });
  pass.setPipeline(pipeline);
  pass.setBindGroup(0, bindGroup);
  pass.dispatchWorkgroups(Math.ceil(N / 8), Math.ceil(M / 8));
  pass.end();
  encoder.copyBufferToBuffer(productBuffer, 0, readBuffer, 0, M * N * 4);
  device.queue.submit([encoder.finish()]);
  await device.queue.onSubmittedWorkDone();

  await readBuffer.mapAsync(GPUMapMode.READ);
  const product = new Float32Array(readBuffer.getMappedRange().slice(0));
  readBuffer.unmap();
  console.log("product[0][0] =", product[0]);
}

main();
"""


def line_of(source: str, text: str) -> int:
    """The 1-based line of the first line of source that holds text."""
    return next(n for n, line in enumerate(source.splitlines(), start=1) if text in line)


def vector_add_expected() -> list[np.ndarray]:
    return [np.arange(1000) * 3.0]


def test_it_runs_a_vector_add_and_reads_back_the_sum(run, gpu):
    result = run(VECTOR_ADD)

    assert result.error is None
    [readback] = result.readbacks
    assert (readback.buffer, readback.source, readback.dtype) == ("read", "out", "f32")
    values = np.frombuffer(readback.data, dtype=np.float32)
    np.testing.assert_array_equal(values, np.arange(1000) * 3)
    outcome = program_outcome(result, gpu[1], vector_add_expected())
    assert outcome["status"] == "passed"
    assert outcome["outputs"][0]["name"] == "out"


def test_it_traces_buffers_writes_bind_groups_passes_copies_and_readbacks(run):
    trace = run(VECTOR_ADD).trace

    assert [(b["name"], b["size"]) for b in trace["buffers"]] == [
        ("a", 4000),
        ("b", 4000),
        ("out", 4000),
        ("read", 4000),
    ]
    assert trace["buffers"][3]["usage"] == ["MAP_READ", "COPY_DST"]
    assert trace["buffers"][0]["line"] == line_of(VECTOR_ADD, 'label: "a"')
    assert trace["writes"][1]["buffer"] == "b"
    assert trace["writes"][1]["dtype"] == "f32"
    assert trace["writes"][1]["values"][:3] == [0.0, 2.0, 4.0]
    assert [e["buffer"] for e in trace["bind_groups"][0]["entries"]] == ["a", "b", "out"]
    [compute_pass] = trace["passes"]
    [dispatch] = compute_pass["dispatches"]
    assert dispatch["workgroups"] == [16, 1, 1]
    assert dispatch["bind_groups"] == {"0": "bind group 1"}
    assert dispatch["line"] == line_of(VECTOR_ADD, "dispatchWorkgroups")
    assert trace["copies"][0]["source"] == "out"
    assert trace["readbacks"][0]["values"][:3] == [0.0, 3.0, 6.0]
    assert trace["submits"] == 1


def test_it_captures_console_output_with_lines(run):
    result = run(VECTOR_ADD)

    assert result.console == [
        {"level": "log", "text": "out[999] = 2997", "line": line_of(VECTOR_ADD, "console.log")}
    ]


def test_math_floor_in_the_dispatch_leaves_cells_the_sentinel_run_finds(gpu):
    device, env = gpu
    floor = VECTOR_ADD.replace("Math.ceil(n / 64)", "Math.floor(n / 64)")

    outcome = replay_program(device, env, floor, expected=vector_add_expected())

    assert outcome["status"] == "mismatch"
    [output] = outcome["outputs"]
    # 15 workgroups of 64 write 960 cells; the last 40 keep their start value.
    assert output["bad"] == 40
    assert output["unwritten"] == 40
    assert "40 never written" in outcome["message"]
    assert outcome["program"]["trace"]["passes"][0]["dispatches"][0]["workgroups"] == [15, 1, 1]
    json.dumps(outcome, allow_nan=False)


def test_the_first_run_keeps_webgpu_zeroed_buffers(run):
    floor = VECTOR_ADD.replace("Math.ceil(n / 64)", "Math.floor(n / 64)")

    values = np.frombuffer(run(floor).readbacks[0].data, dtype=np.float32)

    assert (values[960:] == 0).all()


def test_a_correct_program_needs_no_second_run(gpu, monkeypatch):
    device, env = gpu
    runs = []

    def counted(*args, **kwargs):
        runs.append(kwargs)
        return run_program(*args, **kwargs)

    monkeypatch.setattr("kernels.engine.host.program.run_program", counted)

    outcome = replay_program(device, env, VECTOR_ADD, expected=vector_add_expected())

    assert outcome["status"] == "passed"
    assert len(runs) == 1


def test_a_realistic_index_html_matmul_with_a_mixed_uniform_struct_passes(run, gpu):
    result = run(INDEX_HTML_MATMUL)

    assert result.error is None, result.error
    m, n, k = 24, 20, 16
    lhs = ((np.arange(m * k) % 7) - 3).reshape(m, k).astype(np.float64)
    rhs = ((np.arange(k * n) % 5) * 0.5).reshape(k, n)
    expected = 0.5 * (lhs @ rhs)
    outcome = program_outcome(result, gpu[1], [expected.reshape(-1)], atol=1e-4, rtol=1e-4)
    assert outcome["status"] == "passed", outcome["message"]
    assert [line["text"] for line in result.console] == [
        "compilation messages: 0",
        f"product[0][0] = {expected[0, 0]:g}",
    ]
    trace = result.trace
    params = next(w for w in trace["writes"] if w["buffer"] == "params")
    # The uniform's bytes as written: 24, 20, 16 as u32, then 0.5 as f32 (0x3f000000).
    assert params["size"] == 16
    assert params["values"] == [24, 0, 0, 0, 20, 0, 0, 0, 16, 0, 0, 0, 0, 0, 0, 63]
    assert trace["pipelines"][0]["layout"] == "pipeline layout 1"
    assert trace["passes"][0]["name"] == "matmul pass"
    assert trace["passes"][0]["dispatches"][0]["workgroups"] == [3, 3, 1]
    lhs_write = next(w for w in trace["writes"] if w["buffer"] == "lhs")
    assert lhs_write["dtype"] == "f32"
    assert lhs_write["line"] == line_of(INDEX_HTML_MATMUL, "lhsBuffer.unmap()")


def test_an_earlier_version_is_compared_with_the_final_one(run, gpu):
    final = run(VECTOR_ADD)
    earlier = run(
        VECTOR_ADD.replace("out[id.x] = a[id.x] + b[id.x]", "out[id.x] = a[id.x] - b[id.x]")
    )

    outcome = program_outcome(earlier, gpu[1], expected_from(final))

    assert outcome["status"] == "mismatch"
    assert outcome["outputs"][0]["bad"] == 999


def test_a_uniform_smaller_than_the_wgsl_struct_fails_as_webgpu_does_naming_the_line(run, gpu):
    short = (
        INDEX_HTML_MATMUL.replace('label: "params", size: 16', 'label: "params", size: 12')
        .replace("const params = new ArrayBuffer(16);", "const params = new ArrayBuffer(12);")
        .replace("new Float32Array(params, 12, 1)[0] = 0.5;", "")
    )

    result = run(short)

    error = result.error
    assert error is not None
    assert error["kind"] == "webgpu"
    assert error["call"] == "pass.dispatchWorkgroups"
    assert error["line"] == line_of(short, "pass.dispatchWorkgroups")
    assert "bound with size 12 where the shader expects 16" in error["message"]
    outcome = program_outcome(result, gpu[1])
    assert outcome["status"] == "pipeline_error"
    assert outcome["message"].startswith(f"Line {error['line']} (pass.dispatchWorkgroups): ")


def test_an_auto_layout_rejects_a_short_uniform_at_create_bind_group(run):
    source = (
        INDEX_HTML_MATMUL.replace(
            "const pipeline = device.createComputePipeline({\n    layout: device.createPipelineLayout({ bindGroupLayouts: [layout] }),",
            'const pipeline = device.createComputePipeline({\n    layout: "auto",',
        )
        .replace(
            "    layout,\n    entries: [paramsBuffer",
            "    layout: pipeline.getBindGroupLayout(0),\n    entries: [paramsBuffer",
        )
        .replace('label: "params", size: 16', 'label: "params", size: 12')
        .replace("const params = new ArrayBuffer(16);", "const params = new ArrayBuffer(12);")
        .replace("new Float32Array(params, 12, 1)[0] = 0.5;", "")
    )

    error = run(source).error

    assert error is not None
    assert error["call"] == "device.createBindGroup"
    assert error["line"] == line_of(source, "const bindGroup = device.createBindGroup")
    assert error["message"].endswith("Binding size 12 of Buffer 'params' is less than minimum 16")


def test_a_missing_binding_is_named(run):
    source = VECTOR_ADD.replace("    { binding: 1, resource: { buffer: bufB } },\n", "")

    error = run(source).error

    assert error is not None
    assert error["line"] == line_of(source, "const bindGroup = device.createBindGroup")
    assert "Number of bindings in bind group descriptor (2)" in error["message"]


def test_mapping_a_buffer_without_map_read_fails_naming_the_line(run):
    source = VECTOR_ADD.replace("await read.mapAsync", "await out.mapAsync")

    error = run(source).error

    assert error is not None
    assert error["kind"] == "webgpu"
    assert error["call"] == "buffer.mapAsync"
    assert error["line"] == line_of(source, "await out.mapAsync")
    assert "do not contain required usage flags BufferUsages(MAP_READ)" in error["message"]


def test_a_copy_from_a_buffer_without_copy_src_names_the_copy(run):
    source = VECTOR_ADD.replace(
        "usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC", "usage: GPUBufferUsage.STORAGE"
    )

    error = run(source).error

    assert error is not None
    assert error["call"] == "encoder.copyBufferToBuffer"
    assert error["line"] == line_of(source, "encoder.copyBufferToBuffer")
    assert "BufferUsages(COPY_SRC)" in error["message"]


def test_a_dispatch_over_the_limit_is_rejected_naming_the_line(run, gpu):
    source = VECTOR_ADD.replace("Math.ceil(n / 64)", "70000")

    result = run(source)

    assert result.error is not None
    assert result.error["kind"] == "limit"
    assert result.error["line"] == line_of(source, "dispatchWorkgroups")
    assert "65,535" in result.error["message"]
    assert program_outcome(result, gpu[1])["status"] == "rejected"


def test_an_infinite_loop_ends_as_a_timeout_naming_the_line(run, gpu):
    source = "const adapter = await navigator.gpu.requestAdapter();\nlet sum = 0;\nfor (let i = 0; i >= 0; i++) {\n  sum += Math.sqrt(i);\n}\n"

    result = run(source, deadline=time.monotonic() + 1.0)

    assert result.error is not None
    assert result.error["kind"] == "timeout"
    # QuickJS knows the line of the loop, or of the call inside it.
    line = result.error["line"]
    assert line in (3, 4)
    assert (
        result.error["message"] == f"The program was still running at line {line} at its deadline."
    )
    assert program_outcome(result, gpu[1])["status"] == "timeout"


def test_a_4_gb_buffer_is_rejected_before_it_is_made(run, gpu):
    source = (
        "const device = await (await navigator.gpu.requestAdapter()).requestDevice();\n"
        "const huge = device.createBuffer({ size: 4 * 1024 ** 3, usage: GPUBufferUsage.STORAGE });\n"
    )

    result = run(source)

    assert result.error is not None
    assert result.error["kind"] == "limit"
    assert result.error["line"] == 2
    assert "4,294,967,296 bytes" in result.error["message"]
    assert program_outcome(result, gpu[1])["status"] == "rejected"


def test_a_program_that_fills_the_javascript_heap_is_stopped(run, gpu):
    source = "const chunks = [];\nwhile (true) chunks.push(new Float64Array(1 << 20));\n"

    result = run(source, heap_bytes=64 * 1024 * 1024)

    assert result.error is not None
    assert result.error["kind"] == "memory"
    assert result.error["message"] == "The program ran out of JavaScript memory at line 2."
    assert program_outcome(result, gpu[1])["status"] == "rejected"


def test_a_gigabyte_typed_array_is_refused_naming_the_line(run, gpu):
    source = (
        "async function main() {\n"
        "  const adapter = await navigator.gpu.requestAdapter();\n"
        "  const data = new Float32Array(512 * 1024 * 1024);\n"
        "}\n"
        "main();\n"
    )

    result = run(source)

    assert result.error is not None
    assert (result.error["kind"], result.error["line"]) == ("memory", 3)
    assert result.error["message"].startswith(
        "Line 3: RangeError: invalid array buffer length: an array of 2 GiB or more"
    )
    assert program_outcome(result, gpu[1])["status"] == "rejected"


def test_buffers_over_the_limit_in_all_are_refused_naming_the_line(run, gpu):
    source = (
        "const device = await (await navigator.gpu.requestAdapter()).requestDevice();\n"
        "const buffers = [];\n"
        "for (let i = 0; i < 64; i++) {\n"
        "  buffers.push(device.createBuffer({ size: 64 * 1024 * 1024, usage: GPUBufferUsage.STORAGE }));\n"
        "}\n"
    )

    result = run(source)

    assert result.error is not None
    assert (result.error["kind"], result.error["line"]) == ("limit", 4)
    assert "over the limit of 536,870,912 bytes (512 MiB)" in result.error["message"]
    assert program_outcome(result, gpu[1])["status"] == "rejected"


def test_a_thrown_error_names_its_line(run, gpu):
    source = "const adapter = await navigator.gpu.requestAdapter();\n\nthrow new Error('no GPU for you');\n"

    result = run(source)

    assert result.error is not None
    assert result.error["kind"] == "javascript"
    assert result.error["line"] == 3
    assert result.error["message"] == "Line 3: Error: no GPU for you"
    assert program_outcome(result, gpu[1])["status"] == "threw"


def test_an_error_thrown_inside_main_names_its_line(run):
    source = "async function main() {\n  await navigator.gpu.requestAdapter();\n  null.buffer;\n}\nawait main();\n"

    error = run(source).error

    assert error is not None
    assert error["line"] == 3
    assert "TypeError" in error["message"]


def test_a_syntax_error_names_its_line(run):
    error = run("const a = 1;\nconst b = ;\n").error

    assert error is not None
    assert error["kind"] == "syntax"
    assert error["line"] == 2


def test_fetch_loads_an_attached_file_and_nothing_else(run):
    weights = np.arange(6, dtype=np.float32) / 4
    source = """const response = await fetch("./weights.bin");
const weights = new Float32Array(await response.arrayBuffer());
console.log(weights.length, weights[5]);
const config = await (await fetch("data/config.json")).json();
console.log(config.layers);
try {
  await fetch("https://example.com/weights.bin");
} catch (e) {
  console.log(e.name + ": " + e.message);
}
await fetch("missing.bin");
"""

    result = run(
        source,
        files={"weights.bin": weights.tobytes(), "data/config.json": b'{"layers": [784, 10]}'},
    )

    assert [line["text"] for line in result.console] == [
        "6 1.25",
        "[784, 10]",
        "TypeError: Failed to fetch https://example.com/weights.bin: a replay reaches no "
        "network, only the files attached to its session",
    ]
    assert result.error is not None
    assert result.error["message"] == (
        "Line 11: TypeError: Failed to fetch missing.bin: no file of that name is attached "
        "to the session"
    )


def test_a_program_that_never_reads_back_says_so(run, gpu):
    source = VECTOR_ADD.split("await read.mapAsync")[0]

    outcome = program_outcome(run(source), gpu[1], vector_add_expected())

    assert outcome["status"] == "no_reference"
    assert "dispatched work but never read a buffer back" in outcome["message"]


def test_a_program_that_never_dispatches_says_so(run, gpu):
    source = "const device = await (await navigator.gpu.requestAdapter()).requestDevice();\nconsole.log(device.limits.maxComputeWorkgroupsPerDimension);\n"

    result = run(source)
    outcome = program_outcome(result, gpu[1])

    assert result.console[0]["text"] == "65535"
    assert outcome["status"] == "no_reference"
    assert "never dispatched" in outcome["message"]


def test_an_api_the_shim_lacks_names_the_line(run, gpu):
    source = "const device = await (await navigator.gpu.requestAdapter()).requestDevice();\nconst texture = device.createTexture({ size: [4, 4], format: 'rgba8unorm', usage: 4 });\n"

    result = run(source)

    assert result.error is not None
    assert result.error["kind"] == "unsupported"
    assert result.error["line"] == 2
    assert "device.createTexture is not available" in result.error["message"]
    assert program_outcome(result, gpu[1])["status"] == "rejected"


def test_a_wgsl_compile_error_goes_through_naga_parsing(run, gpu):
    source = VECTOR_ADD.replace("out[id.x] = a[id.x] + b[id.x];", "out[id.x] = a[id.x] + ;")

    result = run(source)
    outcome = program_outcome(result, gpu[1])

    assert outcome["status"] == "compile_error"
    assert outcome["compile"]["line"] == line_of(ADD_WGSL, "out[id.x] = a[id.x]")
    assert result.error is not None
    assert result.error["line"] == line_of(source, "device.createShaderModule")


def test_the_trace_is_bounded(run):
    source = (
        "const device = await (await navigator.gpu.requestAdapter()).requestDevice();\n"
        "const buffer = device.createBuffer({ size: 4, usage: GPUBufferUsage.COPY_DST });\n"
        f"for (let i = 0; i < {MAX_ENTRIES + 50}; i++) device.queue.writeBuffer(buffer, 0, new Uint32Array([i]));\n"
    )

    trace = run(source).trace

    assert len(trace["writes"]) == MAX_ENTRIES
    assert trace["dropped"] == {"writes": 50}


def test_a_worker_job_of_kind_program_round_trips_through_json(gpu):
    device, env = gpu
    job = json.loads(
        json.dumps(
            {
                "kind": "program",
                "source": 'const w = new Float32Array(await (await fetch("w.bin")).arrayBuffer());\n'
                + VECTOR_ADD.replace("(_, i) => i)", "(_, i) => i * w[0])"),
                "files": {
                    "w.bin": base64.b64encode(np.array([1], dtype=np.float32).tobytes()).decode()
                },
                "expected": [list(range(0, 3000, 3))],
                "tolerance": {"atol": 1e-5, "rtol": 1e-5},
                "limits": {"max_total_bytes": 1 << 20},
                "deadline_s": 5,
            }
        )
    )

    outcome = run_program_job(device, env, job)

    assert outcome["status"] == "passed", outcome["message"]
    json.dumps(outcome, allow_nan=False)


def test_a_job_may_name_its_files_by_sha256_in_a_folder_read_once_and_checked(gpu, tmp_path):
    from kernels.engine.worker import Memo

    device, env = gpu
    data = np.array([1], dtype=np.float32).tobytes()
    sha = hashlib.sha256(data).hexdigest()
    (tmp_path / sha).write_bytes(data)
    job = {
        "kind": "program",
        "source": 'const w = new Float32Array(await (await fetch("w.bin")).arrayBuffer());\n'
        + VECTOR_ADD.replace("(_, i) => i)", "(_, i) => i * w[0])"),
        "file_refs": {"w.bin": sha},
        "files_dir": str(tmp_path),
        "expected": [list(range(0, 3000, 3))],
    }
    memo = Memo()

    assert run_program_job(device, env, job, memo)["status"] == "passed"
    (tmp_path / sha).unlink()  # the worker kept what it read
    assert run_program_job(device, env, job, memo)["status"] == "passed"
    # A file that is not the one its name says is refused, as is a name that is no sha256.
    (tmp_path / sha).write_bytes(np.array([2], dtype=np.float32).tobytes())
    with pytest.raises(ValueError, match="is not the file of that sha256"):
        run_program_job(device, env, job)
    with pytest.raises(ValueError, match="not a sha256"):
        run_program_job(device, env, {**job, "file_refs": {"w.bin": "../../etc/passwd"}})


def test_an_error_in_an_async_main_called_without_await_names_its_line(run):
    source = "async function main() {\n  await navigator.gpu.requestAdapter();\n  throw new RangeError('late');\n}\n\nmain();\n"

    error = run(source).error

    assert error is not None
    assert error["message"] == "Line 3: Uncaught (in promise) RangeError: late"


def test_a_function_declared_just_before_the_bare_call_still_runs(run):
    source = (
        "async function main() {\n"
        "  const adapter = await navigator.gpu.requestAdapter();\n"
        "  helper();\n"
        "  function helper() { console.log('ran'); }\n"
        "}\n"
        "function unrelated() {}\n"
        "main();\n"
    )

    result = run(source)

    assert result.error is None, result.error
    assert [line["text"] for line in result.console] == ["ran"]


def test_an_indented_call_inside_a_plain_function_is_left_alone(run):
    source = (
        "async function main() { console.log('main'); }\n"
        "function start() {\n"
        "  main();\n"
        "}\n"
        "start();\n"
    )

    result = run(source)

    assert result.error is None, result.error
    assert [line["text"] for line in result.console] == ["main"]


def test_unmapping_a_buffer_that_is_not_mapped_does_nothing(run):
    source = (
        "const adapter = await navigator.gpu.requestAdapter();\n"
        "const device = await adapter.requestDevice();\n"
        "const buffer = device.createBuffer({size: 16, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST});\n"
        "buffer.unmap();\n"
        "console.log('after');\n"
    )

    result = run(source)

    assert result.error is None, result.error
    assert [line["text"] for line in result.console] == ["after"]


def test_an_unlabelled_buffer_goes_by_the_variable_it_is_assigned_to(run):
    source = """const device = await (await navigator.gpu.requestAdapter()).requestDevice();
const dims = device.createBuffer({ size: 16, usage: GPUBufferUsage.UNIFORM });
const made = { out: device.createBuffer({ size: 4, usage: GPUBufferUsage.STORAGE }) };
for (let i = 0; i < 2; i++) {
  const chunk = device.createBuffer({ size: 4, usage: GPUBufferUsage.STORAGE });
}
device.createBuffer({ size: 4, usage: GPUBufferUsage.STORAGE });
const weights = device.createBuffer({ label: "w1", size: 4, usage: GPUBufferUsage.STORAGE });
const upload = (data) => {
  const buffer = device.createBuffer({ size: data.byteLength, usage: GPUBufferUsage.STORAGE });
  return buffer;
};
const xBuffer = upload(new Float32Array(4));
const yBuffer = upload(new Float32Array(4));
"""

    trace = run(source).trace

    names = [buffer["name"] for buffer in trace["buffers"]]
    # A second buffer assigned to the same variable, and one assigned to none, get numbers;
    # one a helper made goes by what the helper's result is assigned to.
    assert names == ["dims", "out", "chunk", "buffer 4", "buffer 5", "w1", "xBuffer", "yBuffer"]


def test_a_program_run_again_reuses_its_compiled_module_and_pipeline(gpu):
    made: list[str] = []
    kept: dict[tuple, object] = {}

    def memo(key: tuple, compute):  # what the worker's Memo does, counted
        if key not in kept:
            made.append(key[0])
            kept[key] = compute()
        return kept[key]

    runs = [run_program(gpu[0], gpu[1], VECTOR_ADD, memo=memo) for _ in range(2)]

    assert [r.error for r in runs] == [None, None]
    # Once each: the device's answer to requestDevice, the module and whether a browser
    # would refuse it, the pipeline.
    assert made == ["device answer", "module", "refusal", "pipeline"]
    assert runs[0].readbacks[0].data == runs[1].readbacks[0].data


def test_a_program_replayed_again_reads_its_kernel_for_warnings_once(gpu):
    made: list[str] = []
    kept: dict[tuple, object] = {}

    def memo(key: tuple, compute):
        if key not in kept:
            made.append(key[0])
            kept[key] = compute()
        return kept[key]

    for _ in range(2):
        outcome = replay_program(
            gpu[0], gpu[1], VECTOR_ADD, expected=vector_add_expected(), memo=memo
        )
        assert outcome["status"] == "passed"
    # What llvmpipe could hide is read of each source once (a GPU looks for none).
    assert made.count("facts") == (1 if gpu[1].software else 0)


def test_every_compute_pass_is_recorded_in_order_beyond_the_traces_cap(run, gpu):
    # The vector add's pass, encoded 300 times: the trace keeps its first MAX_ENTRIES, the
    # run's list of passes keeps each, numbered in the order the GPU ran them.
    repeated = VECTOR_ADD.replace(
        "const pass = encoder.beginComputePass();",
        "for (let i = 0; i < 300; i++) {\nconst pass = encoder.beginComputePass();",
    ).replace("pass.end();", "pass.end();\n}")
    result = run(repeated)

    assert result.error is None, result.error
    assert [p["number"] for p in result.passes] == list(range(1, 301))
    assert {p["dispatches"] for p in result.passes} == {1}
    assert result.passes[0]["name"] == "pass 1"
    assert result.passes[0]["line"] == line_of(repeated, "beginComputePass")
    assert len(result.trace["passes"]) < 300
    outcome = program_outcome(result, gpu[1], vector_add_expected())
    assert len(outcome["passes"]) == 300
