"""A program's inputs kept on the device between runs (host/kept_inputs.py): what it uploads
whole of a fetched file is bound from the kept buffer on the next run, and nothing a run
could have written into is kept, or left kept for a later run to find.

Real programs through QuickJS and wgpu-py (llvmpipe), each run with the worker's own
DeviceBuffers, as a worker runs one job after another.
"""

from __future__ import annotations

import base64
import hashlib

import numpy as np
import pytest

from kernels.engine.device import open_device
from kernels.engine.host.kept_inputs import may_write
from kernels.engine.host.program import run_program
from kernels.engine.resident import DeviceBuffers

X = np.arange(64, dtype="<f4") - 20.0
FILES = {"x.bin": X.tobytes()}
FETCHED = {hashlib.sha256(X.tobytes()).hexdigest(): X.tobytes()}

# y = 2x, or (IN_PLACE) x = 2x in the input buffer itself, then y = x: a kernel that writes
# into what it was given, which a kept buffer must never carry to the next run.
DOUBLE = """
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@compute @workgroup_size(64) fn main(@builtin(global_invocation_id) id: vec3u) {
  y[id.x] = 2.0 * x[id.x];
}
"""
IN_PLACE = """
@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@compute @workgroup_size(64) fn main(@builtin(global_invocation_id) id: vec3u) {
  x[id.x] = 2.0 * x[id.x];
  y[id.x] = x[id.x];
}
"""


def program(wgsl: str, before_dispatch: str = "") -> str:
    """Fetch x.bin, upload it whole into "x", run wgsl once, read y back."""
    return f"""const device = await (await navigator.gpu.requestAdapter()).requestDevice();
const x = new Float32Array(await (await fetch("x.bin")).arrayBuffer());
const usage = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST | GPUBufferUsage.COPY_SRC;
const input = device.createBuffer({{ label: "x", size: x.byteLength, usage }});
const output = device.createBuffer({{ label: "y", size: x.byteLength, usage }});
const read = device.createBuffer({{
  size: x.byteLength, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST,
}});
device.queue.writeBuffer(input, 0, x);
const module = device.createShaderModule({{ code: `{wgsl}` }});
const pipeline = device.createComputePipeline({{
  layout: "auto", compute: {{ module, entryPoint: "main" }},
}});
const bindGroup = device.createBindGroup({{
  layout: pipeline.getBindGroupLayout(0),
  entries: [input, output].map((buffer, binding) => ({{ binding, resource: {{ buffer }} }})),
}});
const encoder = device.createCommandEncoder();
{before_dispatch}
const pass = encoder.beginComputePass();
pass.setPipeline(pipeline);
pass.setBindGroup(0, bindGroup);
pass.dispatchWorkgroups(1);
pass.end();
encoder.copyBufferToBuffer(output, 0, read, 0, x.byteLength);
device.queue.submit([encoder.finish()]);
await read.mapAsync(GPUMapMode.READ);
console.log(Array.from(new Float32Array(read.getMappedRange()).slice(0, 3)).join(" "));
"""


@pytest.fixture(scope="module")
def gpu():
    return open_device()


def run(gpu, source: str, kept: DeviceBuffers) -> np.ndarray:
    device, env = gpu
    result = run_program(device, env, source, FILES, kept=kept, fetched=FETCHED, capture=True)
    assert result.error is None, result.error
    # A buffer kept after the run holds the fetched file, as the reference's key says.
    assert set(result.as_fetched.values()) == {k[1] for k in kept.kept}
    return np.frombuffer(result.readbacks[0].data, "<f4")


def test_an_input_uploaded_whole_is_kept_and_bound_again_on_the_next_run(gpu, monkeypatch):
    kept = DeviceBuffers()
    queue = type(gpu[0].queue)
    uploads: list[int] = []
    upload = queue.write_buffer

    def counted(self, buffer, offset, data, *args):
        uploads.append(memoryview(data).nbytes)
        return upload(self, buffer, offset, data, *args)

    monkeypatch.setattr(queue, "write_buffer", counted)

    first = run(gpu, program(DOUBLE), kept)
    (key,) = kept.kept
    buffer = kept.kept[key]
    uploaded_first, uploads[:] = list(uploads), []
    second = run(gpu, program(DOUBLE), kept)

    np.testing.assert_array_equal(first, 2 * X)
    np.testing.assert_array_equal(second, 2 * X)
    assert key[:3] == ("program input", next(iter(FETCHED)), X.nbytes)
    assert kept.kept == {key: buffer}
    assert X.nbytes in uploaded_first
    assert X.nbytes not in uploads  # the second run bound the kept x: no upload of it


def test_a_kernel_that_writes_into_its_input_leaves_nothing_kept(gpu):
    kept = DeviceBuffers()

    for _ in range(3):
        np.testing.assert_array_equal(run(gpu, program(IN_PLACE), kept), 2 * X)

    assert not kept.kept


def test_a_run_that_writes_into_a_kept_input_drops_it_and_the_next_run_is_right(gpu):
    kept = DeviceBuffers()
    run(gpu, program(DOUBLE), kept)
    assert kept.kept

    # Another version of the program, same file, same buffer, but a kernel that doubles
    # its input in place: it starts from the kept x, and leaves x doubled behind it.
    np.testing.assert_array_equal(run(gpu, program(IN_PLACE), kept), 2 * X)

    assert not kept.kept
    np.testing.assert_array_equal(run(gpu, program(DOUBLE), kept), 2 * X)


@pytest.mark.parametrize(
    ("change", "first_four"),
    [
        ("encoder.clearBuffer(input, 0, 16);", 0.0),
        ("encoder.copyBufferToBuffer(output, 0, input, 0, 16);", 0.0),  # y is zeros still
        ("device.queue.writeBuffer(input, 0, new Float32Array([7, 7, 7, 7]));", 14.0),
    ],
)
def test_an_input_changed_by_a_clear_a_copy_or_a_second_write_is_not_kept(gpu, change, first_four):
    kept = DeviceBuffers()
    run(gpu, program(DOUBLE), kept)

    # Made on the kept x: the change happens to it, as it would to a fresh upload.
    changed = run(gpu, program(DOUBLE, change), kept)

    assert changed[:4].tolist() == [first_four] * 4
    assert changed[4:].tolist() == (2 * X[4:]).tolist()
    assert not kept.kept
    np.testing.assert_array_equal(run(gpu, program(DOUBLE), kept), 2 * X)


def test_an_input_written_from_other_bytes_or_in_part_is_not_kept(gpu):
    kept = DeviceBuffers()
    halves = program(DOUBLE).replace(
        "device.queue.writeBuffer(input, 0, x);",
        "device.queue.writeBuffer(input, 0, x.subarray(0, 32));\n"
        "device.queue.writeBuffer(input, 128, x.subarray(32));",
    )
    other = program(DOUBLE).replace(
        "device.queue.writeBuffer(input, 0, x);",
        "device.queue.writeBuffer(input, 0, x.map((v) => v + 1));",
    )

    np.testing.assert_array_equal(run(gpu, halves, kept), 2 * X)
    np.testing.assert_array_equal(run(gpu, other, kept), 2 * (X + 1))
    assert not kept.kept


def test_a_program_that_destroys_a_kept_input_does_not_destroy_it_under_the_worker(gpu):
    kept = DeviceBuffers()
    run(gpu, program(DOUBLE), kept)
    destroying = program(DOUBLE) + "input.destroy();\n"

    np.testing.assert_array_equal(run(gpu, destroying, kept), 2 * X)

    assert not kept.kept
    np.testing.assert_array_equal(run(gpu, program(DOUBLE), kept), 2 * X)


def test_a_writable_variable_whose_binding_cannot_be_read_may_write_anything():
    unplaced = DOUBLE.replace("@binding(1)", "@binding(ONE + TWO())")

    assert may_write(DOUBLE, "main") == {(0, 1)}
    assert may_write(unplaced, "main") is None


def test_files_sent_in_the_job_are_decoded_once_and_kept_as_inputs_too(gpu, monkeypatch):
    """A task queue's job carries its files in base64 with their sha256 (jobs.with_files):
    a worker decodes each once, binds the kept input on the next run, and refuses a file
    that is not the one its sha256 says."""
    from kernels.engine.host import program as programs
    from kernels.engine.worker import Memo

    device, env = gpu
    sha = next(iter(FETCHED))
    job = {
        "kind": "program",
        "source": program(DOUBLE),
        "files": {"x.bin": base64.b64encode(X.tobytes()).decode()},
        "file_shas": {"x.bin": sha},
        "expected": [(2 * X).tolist()],
    }
    memo, kept = Memo(), DeviceBuffers()
    decoded: list[str] = []
    decode = programs._decoded

    def counted(text: str, sha: str) -> bytes:
        decoded.append(sha)
        return decode(text, sha)

    monkeypatch.setattr(programs, "_decoded", counted)

    first = programs.run_program_job(device, env, job, memo, kept)
    second = programs.run_program_job(device, env, job, memo, kept)

    assert first["status"] == second["status"] == "passed", second["message"]
    assert decoded == [sha]
    assert [key[:2] for key in kept.kept] == [("program input", sha)]
    assert second["check"] == first["check"]
    forged = {**job, "file_shas": {"x.bin": hashlib.sha256(b"other").hexdigest()}}
    with pytest.raises(ValueError, match="is not the file of that sha256"):
        programs.run_program_job(device, env, forged, Memo(), DeviceBuffers())


TWO_INPUTS = """
@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read_write> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@compute @workgroup_size(64) fn main(@builtin(global_invocation_id) id: vec3u) {
  b[id.x] = 2.0 * b[id.x];
  y[id.x] = a[id.x] + b[id.x];
}
"""


def test_two_buffers_of_one_label_written_from_one_file_never_share_a_kept_buffer(gpu):
    """Both get the same key (label, file, size, usage): only the first may be kept, or
    the next run binds one kept buffer as both, and doubling b doubles a too."""
    source = (
        program(TWO_INPUTS)
        .replace(
            'const input = device.createBuffer({ label: "x", size: x.byteLength, usage });',
            'const input = device.createBuffer({ label: "x", size: x.byteLength, usage });\n'
            'const other = device.createBuffer({ label: "x", size: x.byteLength, usage });',
        )
        .replace(
            "device.queue.writeBuffer(input, 0, x);",
            "device.queue.writeBuffer(input, 0, x);\ndevice.queue.writeBuffer(other, 0, x);",
        )
        .replace("[input, output]", "[input, other, output]")
    )
    kept = DeviceBuffers()

    for _ in range(3):
        np.testing.assert_array_equal(run(gpu, source, kept), 3 * X)
