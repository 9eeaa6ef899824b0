"""Bytes crossing between Python and a host program's JavaScript, both ways, unchanged."""

from __future__ import annotations

import numpy as np
import pytest

from kernels.engine.device import Environment, open_device
from kernels.engine.host.program import run_program

ROUND_TRIP = """const device = await (await navigator.gpu.requestAdapter()).requestDevice();
const data = new Uint8Array(await (await fetch("data.bin")).arrayBuffer());
console.log(data.length);
const size = data.length - (data.length % 4);
const usage = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST | GPUBufferUsage.COPY_SRC;
const buffer = device.createBuffer({ size, usage });
const read = device.createBuffer({ size, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
device.queue.writeBuffer(buffer, 0, data, 0, size);
const encoder = device.createCommandEncoder();
encoder.copyBufferToBuffer(buffer, 0, read, 0, size);
device.queue.submit([encoder.finish()]);
await read.mapAsync(GPUMapMode.READ);
const back = new Uint8Array(read.getMappedRange());
let same = back.length === size;
for (let i = 0; i < size; i++) same = same && back[i] === data[i];
console.log(same);
"""


@pytest.fixture(scope="module")
def gpu() -> tuple[object, Environment]:
    return open_device()


def edge_bytes() -> bytes:
    """Every byte value (NUL and '%' among them), words at the edges of the number
    encoding (0, 10**9 - 1, 10**9, 2**32 - 1), random bytes, and a ragged end."""
    edges = np.array([0, 10**9 - 1, 10**9, 10**9 + 1, 2**31, 2**32 - 1], dtype="<u4")
    rng = np.random.default_rng(7)
    return (
        bytes(range(256))
        + edges.tobytes()
        + rng.integers(0, 256, 4096, dtype=np.uint8).tobytes()
        + b"\0%\xff"
    )


def test_fetched_bytes_reach_the_program_and_come_back_unchanged(gpu):
    device, env = gpu
    data = edge_bytes()

    result = run_program(device, env, ROUND_TRIP, {"data.bin": data})

    assert result.error is None
    assert [line["text"] for line in result.console] == [str(len(data)), "true"]
    size = len(data) - len(data) % 4
    # Out of JavaScript (writeBuffer), through the GPU, and back in (mapAsync).
    assert result.written["buffer"] == data[:size]
    assert result.readbacks[0].data == data[:size]


def test_an_empty_file_is_an_empty_array_buffer(gpu):
    device, env = gpu
    source = (
        'const r = await fetch("empty.bin");\nconsole.log((await r.arrayBuffer()).byteLength);\n'
    )

    result = run_program(device, env, source, {"empty.bin": b""})

    assert result.error is None
    assert result.console[0]["text"] == "0"


def test_fetched_bytes_count_against_the_heap_cap_and_name_the_fetch_line(gpu):
    source = 'const adapter = await navigator.gpu.requestAdapter();\nawait fetch("big.bin");\n'
    device, env = gpu
    big = bytes(4 << 20)
    result = run_program(device, env, source, {"big.bin": big}, heap_bytes=2 << 20)
    assert result.error is not None
    assert (result.error["kind"], result.error["line"]) == ("memory", 2), result.error
    fits = run_program(device, env, source, {"big.bin": big}, heap_bytes=16 << 20)
    assert fits.error is None


ADD_FETCHED = """const device = await (await navigator.gpu.requestAdapter()).requestDevice();
const a = new Float32Array(await (await fetch("a.bin")).arrayBuffer());
const b = new Float32Array(await (await fetch("b.bin")).arrayBuffer());
SCALE
const usage = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST;
const bufA = device.createBuffer({ size: a.byteLength, usage });
const bufB = device.createBuffer({ size: b.byteLength, usage });
const out = device.createBuffer({ size: a.byteLength, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC });
const read = device.createBuffer({ size: a.byteLength, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
device.queue.writeBuffer(bufA, 0, a);
device.queue.writeBuffer(bufB, 0, b);
const module = device.createShaderModule({ code: await (await fetch("kernel.wgsl")).text() });
const pipeline = device.createComputePipeline({ layout: "auto", compute: { module, entryPoint: "main" } });
const bindGroup = device.createBindGroup({
  layout: pipeline.getBindGroupLayout(0),
  entries: [bufA, bufB, out].map((buffer, binding) => ({ binding, resource: { buffer } })),
});
const encoder = device.createCommandEncoder();
const pass = encoder.beginComputePass();
pass.setPipeline(pipeline);
pass.setBindGroup(0, bindGroup);
pass.dispatchWorkgroups(Math.ceil(a.length / 64));
pass.end();
encoder.copyBufferToBuffer(out, 0, read, 0, a.byteLength);
device.queue.submit([encoder.finish()]);
await read.mapAsync(GPUMapMode.READ);
"""


@pytest.mark.parametrize("keeps_inputs", [False, True])
def test_inputs_written_as_fetched_are_keyed_by_their_files_sha256(gpu, tmp_path, keeps_inputs):
    # A program's reference is kept by the bytes it wrote: bytes written as a fetched file
    # are matched to it (byte for byte, or, where the worker keeps its inputs on the
    # device, as host/kept_inputs.py found them written) instead of hashed; bytes changed
    # before they are written are hashed, and get a reference of their own.
    import hashlib

    from kernels.engine.host.program import run_program_job
    from kernels.engine.resident import DeviceBuffers
    from kernels.engine.worker import Memo
    from tests.kernels.test_host_program import ADD_WGSL

    rng = np.random.default_rng(3)
    refs = {}
    for name in ("a.bin", "b.bin"):
        data = rng.uniform(-1, 1, 1000).astype("<f4").tobytes()
        refs[name] = hashlib.sha256(data).hexdigest()
        (tmp_path / refs[name]).write_bytes(data)
    buffer = {"usage": "read", "dtype": "f32", "shape": [1000], "zeros": True}
    job = {
        "kind": "program",
        "source": ADD_FETCHED.replace("SCALE", ""),
        "files": None,
        "file_refs": refs,
        "files_dir": str(tmp_path),
        "wgsl": {"kernel.wgsl": ADD_WGSL},
        "harness": {
            "buffers": {
                "a": buffer,
                "b": buffer,
                "out": {**buffer, "usage": "read_write", "output": True},
            },
            "passes": [{"bind": {"0": "a", "1": "b", "2": "out"}, "dispatch": [16]}],
            "reference": {"name": "add", "args": ["a", "b"]},
        },
    }
    memo = Memo()
    device, env = gpu
    kept = DeviceBuffers() if keeps_inputs else None

    first = run_program_job(device, env, job, memo, kept)
    again = run_program_job(device, env, job, memo, kept)
    scaled = run_program_job(
        device, env, {**job, "source": ADD_FETCHED.replace("SCALE", "a[0] = 1000;")}, memo, kept
    )

    # Written whole as fetched, then patched by a second write: the reference reads both.
    patch = "device.queue.writeBuffer(bufA, 0, new Float32Array([1000]));"
    patched_source = ADD_FETCHED.replace("SCALE", "").replace(
        "device.queue.writeBuffer(bufB, 0, b);", f"device.queue.writeBuffer(bufB, 0, b);\n{patch}"
    )
    assert patch in patched_source
    patched = run_program_job(device, env, {**job, "source": patched_source}, memo, kept)

    assert first["status"] == again["status"] == "passed", first["message"]
    assert scaled["status"] == "passed", scaled["message"]
    assert patched["status"] == "passed", patched["message"]
    keys = [key for key in memo.values if key[0] == "program reference"]
    assert len(keys) == 2  # the scaled and the patched inputs are the same bytes
    as_fetched, changed = keys
    assert [argument[3] for argument in as_fetched[2:]] == [
        f"sha256:{refs['a.bin']}",
        f"sha256:{refs['b.bin']}",
    ]
    assert not changed[2][3].startswith("sha256:") and changed[3][3] == f"sha256:{refs['b.bin']}"


def test_a_body_is_read_once_as_in_a_browser(gpu):
    device, env = gpu
    source = """const r = await fetch("data.bin");
console.log(r.bodyUsed, (await r.text()).length, r.bodyUsed);
try {
  await r.arrayBuffer();
} catch (error) {
  console.log(error.name, error.message);
}
const again = await fetch("data.bin");
const bytes = new Uint8Array(await again.arrayBuffer());
console.log(bytes.length, bytes[2]);
"""
    result = run_program(device, env, source, {"data.bin": b"abc"})

    assert result.error is None, result.error
    assert [line["text"] for line in result.console] == [
        "false 3 true",
        "TypeError Failed to execute 'arrayBuffer' on 'Response': body stream already read",
        "3 99",
    ]


STAGED = """const adapter = await navigator.gpu.requestAdapter();
const device = await adapter.requestDevice();
const buffer = device.createBuffer({ size: 4096, usage: GPUBufferUsage.COPY_DST });
const data = new Uint8Array(4096).map((_, i) => i % 251);
device.queue.writeBuffer(buffer, 0, data);
data.fill(7);
"""


def test_a_written_blob_is_read_in_place_and_outlives_the_shims_hold_on_it():
    """Script.blob is a view of QuickJS's memory, not a copy: the bytes as they were at
    the writeBuffer, which the view's ArrayBuffer keeps after the shim drops the blob and
    the context collects its garbage."""
    import math

    from kernels.engine.host.js import Script

    script = Script(STAGED, math.inf, 1 << 26)
    script.start()
    while True:
        script.run_jobs()
        record = script.take().record
        if record[-1]["op"] == "writeBuffer":
            break
        script.answer(record[-1]["request"], {"features": [], "limits": {}, "info": {}})
    view = script.blob(record[-1]["blob"])
    expected = bytes(i % 251 for i in range(4096))

    assert isinstance(view, memoryview) and bytes(view) == expected
    script.drop_blobs()
    script.context.gc()
    # Memory the context frees is soon another ArrayBuffer's: these would take it.
    script.context.eval("globalThis.kept = [];")
    for _ in range(8):
        script.context.eval("kept.push(new Uint8Array(4096).fill(9));")
    assert bytes(view) == expected
