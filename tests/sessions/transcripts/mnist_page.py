"""A learner builds a WebGPU MNIST classifier in ONE index.html, over nine states.

The shape of a real project a curator brought in: a first buffer; an add shader; matmul;
ReLU; softmax; a toy forward pass; the real weights fetched from weights/*.bin (the
showcase's MNIST weights, written by `weights_folder`); the argmax added by an Edit; then
a drawing page that asks a canvas for its context. Every shader is `fn main`, each state
replaces the page's shader at the same place, and every state ends with an indented,
un-awaited `main();`. The dialogue and code are ours.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tests.sessions.transcripts.build import CWD, Transcript, text, tool_use

MNIST = Path(__file__).resolve().parents[3] / "fixtures" / "mnist"
# A held-out test digit whose label is 7; the fixture's network gives it about 0.9995.
DIGIT = 90
PAGE = f"{CWD}/index.html"

HELPERS = """
async function gpu() {
  const adapter = await navigator.gpu.requestAdapter();
  return await adapter.requestDevice();
}

function upload(device, data, usage) {
  const buffer = device.createBuffer({ size: data.byteLength, usage: usage | GPUBufferUsage.COPY_DST });
  device.queue.writeBuffer(buffer, 0, data);
  return buffer;
}

function output(device, count) {
  return device.createBuffer({ size: count * 4, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST });
}

function pipelineFor(device, code) {
  const module = device.createShaderModule({ code });
  return device.createComputePipeline({ layout: "auto", compute: { module, entryPoint: "main" } });
}

function pass(device, encoder, pipeline, buffers, x, y = 1) {
  const bindGroup = device.createBindGroup({
    layout: pipeline.getBindGroupLayout(0),
    entries: buffers.map((buffer, binding) => ({ binding, resource: { buffer } })),
  });
  const compute = encoder.beginComputePass();
  compute.setPipeline(pipeline);
  compute.setBindGroup(0, bindGroup);
  compute.dispatchWorkgroups(x, y);
  compute.end();
}

async function read(device, buffer, count) {
  const staging = device.createBuffer({ size: count * 4, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
  const encoder = device.createCommandEncoder();
  encoder.copyBufferToBuffer(buffer, 0, staging, 0, count * 4);
  device.queue.submit([encoder.finish()]);
  await staging.mapAsync(GPUMapMode.READ);
  const values = Array.from(new Float32Array(staging.getMappedRange().slice(0)));
  staging.unmap();
  return values;
}
"""

ADD = """
@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
  let i = id.x;
  if (i >= arrayLength(&out)) { return; }
  out[i] = a[i] + b[i];
}
"""

MATMUL = """
struct Dims { m: u32, k: u32, n: u32, pad: u32 }
@group(0) @binding(0) var<uniform> dims: Dims;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> c: array<f32>;

@compute @workgroup_size(8, 8)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
  let row = id.y;
  let col = id.x;
  if (row >= dims.m || col >= dims.n) { return; }
  var sum = 0.0;
  for (var i = 0u; i < dims.k; i++) {
    sum += a[row * dims.k + i] * b[i * dims.n + col];
  }
  c[row * dims.n + col] = sum;
}
"""

MATMUL_BIAS = """
struct Dims { m: u32, k: u32, n: u32, pad: u32 }
@group(0) @binding(0) var<uniform> dims: Dims;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read_write> c: array<f32>;

@compute @workgroup_size(8, 8)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
  let row = id.y;
  let col = id.x;
  if (row >= dims.m || col >= dims.n) { return; }
  var sum = bias[col];
  for (var i = 0u; i < dims.k; i++) {
    sum += a[row * dims.k + i] * b[i * dims.n + col];
  }
  c[row * dims.n + col] = sum;
}
"""

RELU = """
@group(0) @binding(0) var<storage, read_write> x: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
  let i = id.x;
  if (i < arrayLength(&x)) {
    x[i] = max(x[i], 0.0);
  }
}
"""

SOFTMAX = """
@group(0) @binding(0) var<storage, read> logits: array<f32>;
@group(0) @binding(1) var<storage, read_write> probs: array<f32>;

@compute @workgroup_size(1)
fn main() {
  let n = arrayLength(&logits);
  var biggest = logits[0];
  for (var i = 1u; i < n; i++) { biggest = max(biggest, logits[i]); }
  var total = 0.0;
  for (var i = 0u; i < n; i++) {
    probs[i] = exp(logits[i] - biggest);
    total += probs[i];
  }
  for (var i = 0u; i < n; i++) { probs[i] = probs[i] / total; }
}
"""


def page(title: str, body: str, shaders: dict[str, str], extra_html: str = "") -> str:
    """One state of index.html: its shaders as template strings, the helpers, main()."""
    consts = "".join(f"const {name} = `{code}`;\n\n" for name, code in shaders.items())
    return (
        '<!doctype html>\n<html>\n<head>\n  <meta charset="utf-8">\n'
        f"  <title>{title}</title>\n</head>\n<body>\n<h1>{title}</h1>\n{extra_html}"
        '<pre id="out"></pre>\n<script type="module">\n'
        f"{consts}{HELPERS}\nasync function main() {{\n{body}}}\n\n"
        "if (navigator.gpu) {\n    main();\n}\n</script>\n</body>\n</html>\n"
    )


BUFFER_BODY = """  const device = await gpu();
  const data = new Float32Array([1, 2, 3, 4]);
  const buffer = upload(device, data, GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC);
  console.log(JSON.stringify(await read(device, buffer, 4)));
"""
ADD_BODY = """  const device = await gpu();
  const a = upload(device, new Float32Array([3]), GPUBufferUsage.STORAGE);
  const b = upload(device, new Float32Array([4]), GPUBufferUsage.STORAGE);
  const out = output(device, 1);
  const encoder = device.createCommandEncoder();
  pass(device, encoder, pipelineFor(device, shader), [a, b, out], 1);
  device.queue.submit([encoder.finish()]);
  console.log(JSON.stringify(await read(device, out, 1)));
"""
MATMUL_BODY = """  const device = await gpu();
  const dims = upload(device, new Uint32Array([2, 3, 2, 0]), GPUBufferUsage.UNIFORM);
  const a = upload(device, new Float32Array([1, 2, 3, 4, 5, 6]), GPUBufferUsage.STORAGE);
  const b = upload(device, new Float32Array([7, 8, 9, 10, 11, 12]), GPUBufferUsage.STORAGE);
  const c = output(device, 4);
  const encoder = device.createCommandEncoder();
  pass(device, encoder, pipelineFor(device, shader), [dims, a, b, c], 1, 1);
  device.queue.submit([encoder.finish()]);
  console.log(JSON.stringify(await read(device, c, 4)));
"""
RELU_BODY = """  const device = await gpu();
  const x = upload(device, new Float32Array([-1, 2, -3, 4, -5, 0]), GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC);
  const encoder = device.createCommandEncoder();
  pass(device, encoder, pipelineFor(device, shader), [x], 1);
  device.queue.submit([encoder.finish()]);
  console.log(JSON.stringify(await read(device, x, 6)));
"""
SOFTMAX_BODY = """  const device = await gpu();
  const logits = upload(device, new Float32Array([2, 1, 0.1]), GPUBufferUsage.STORAGE);
  const probs = output(device, 3);
  const encoder = device.createCommandEncoder();
  pass(device, encoder, pipelineFor(device, shader), [logits, probs], 1);
  device.queue.submit([encoder.finish()]);
  console.log(JSON.stringify(await read(device, probs, 3)));
"""
FORWARD = """  const device = await gpu();
  const matmul = pipelineFor(device, matmulShader);
  const relu = pipelineFor(device, reluShader);
  const softmax = pipelineFor(device, softmaxShader);
  const layer = (x, w, b, k, n) => {
    const dims = upload(device, new Uint32Array([1, k, n, 0]), GPUBufferUsage.UNIFORM);
    const out = output(device, n);
    pass(device, encoder, matmul, [dims, x, w, b], Math.ceil(n / 8), 1);
    return out;
  };
"""
TOY_BODY = (
    FORWARD.replace("[dims, x, w, b]", "[dims, x, w, b, out]")
    + """  const storage = GPUBufferUsage.STORAGE;
  const x = upload(device, new Float32Array([1, -1, 0.5, 2]), storage);
  const w1 = upload(device, new Float32Array([0.5, -0.2, 0.1, 0.3, 0.8, -0.5, -0.4, 0.2, 0.9, 0.1, -0.3, 0.6]), storage);
  const b1 = upload(device, new Float32Array([0.1, 0, -0.1]), storage);
  const w2 = upload(device, new Float32Array([1, -1, 0.5, 0.5, -0.5, 1]), storage);
  const b2 = upload(device, new Float32Array([0, 0.1]), storage);
  const encoder = device.createCommandEncoder();
  const hidden = layer(x, w1, b1, 4, 3);
  pass(device, encoder, relu, [hidden], 1);
  const logits = layer(hidden, w2, b2, 3, 2);
  const probs = output(device, 2);
  pass(device, encoder, softmax, [logits, probs], 1);
  device.queue.submit([encoder.finish()]);
  console.log(JSON.stringify(await read(device, probs, 2)));
"""
)
WEIGHTS_BODY = (
    FORWARD.replace("[dims, x, w, b]", "[dims, x, w, b, out]")
    + """  const storage = GPUBufferUsage.STORAGE;
  const w1 = upload(device, new Float32Array(await (await fetch("weights/w1.bin")).arrayBuffer()), storage);
  const b1 = upload(device, new Float32Array(await (await fetch("weights/b1.bin")).arrayBuffer()), storage);
  const w2 = upload(device, new Float32Array(await (await fetch("weights/w2.bin")).arrayBuffer()), storage);
  const b2 = upload(device, new Float32Array(await (await fetch("weights/b2.bin")).arrayBuffer()), storage);
  const x = upload(device, new Float32Array(await (await fetch("weights/digit.bin")).arrayBuffer()), storage);
  const encoder = device.createCommandEncoder();
  const hidden = layer(x, w1, b1, 784, 128);
  pass(device, encoder, relu, [hidden], 2);
  const logits = layer(hidden, w2, b2, 128, 10);
  const probs = output(device, 10);
  pass(device, encoder, softmax, [logits, probs], 1);
  device.queue.submit([encoder.finish()]);
  const p = await read(device, probs, 10);
  console.log(JSON.stringify(p));
"""
)
ARGMAX_OLD = "  console.log(JSON.stringify(p));\n"
ARGMAX_NEW = (
    '  console.log(JSON.stringify(p));\n  console.log("digit", p.indexOf(Math.max(...p)));\n'
)
DRAW_HTML = '<canvas id="pad" width="280" height="280"></canvas>\n'
DRAW_BODY = (
    """  const pad = document.getElementById("pad");
  const ink = pad.getContext("2d");
  ink.lineWidth = 20;
"""
    + WEIGHTS_BODY
)

FORWARD_SHADERS = {"matmulShader": MATMUL_BIAS, "reluShader": RELU, "softmaxShader": SOFTMAX}
STATES = [
    page("A first buffer", BUFFER_BODY, {}),
    page("Add", ADD_BODY, {"shader": ADD}),
    page("Matmul", MATMUL_BODY, {"shader": MATMUL}),
    page("ReLU", RELU_BODY, {"shader": RELU}),
    page("Softmax", SOFTMAX_BODY, {"shader": SOFTMAX}),
    page("A toy forward pass", TOY_BODY, FORWARD_SHADERS),
    page("MNIST", WEIGHTS_BODY, FORWARD_SHADERS),
]
STATES.append(STATES[-1].replace(ARGMAX_OLD, ARGMAX_NEW))
STATES.append(page("Draw a digit", DRAW_BODY, FORWARD_SHADERS, DRAW_HTML))
# What each state prints (the first line of its console), for the tests.
PROMPTS = [
    "Start an index.html that puts [1, 2, 3, 4] in a GPU buffer and reads it back.",
    "Now add two numbers on the GPU with a compute shader: 3 + 4.",
    "Replace it with a matrix multiply: [[1,2,3],[4,5,6]] times [[7,8],[9,10],[11,12]].",
    "Next, ReLU on [-1, 2, -3, 4, -5, 0].",
    "Softmax of [2, 1, 0.1], please.",
    "Chain them: a toy two-layer forward pass with a bias in the matmul.",
    "Load the real trained weights from weights/*.bin and classify the test digit.",
    "Also print which digit wins.",
    "Let me draw the digit on a canvas instead.",
]


def mnist_page(name: str = "mnist-page", session: str | None = None) -> Transcript:
    t = Transcript(name, session=session)
    previous = ""
    for number, (prompt, state) in enumerate(zip(PROMPTS, STATES, strict=True), start=1):
        t.user(prompt, parent=None if number == 1 else "last")
        call = f"toolu_M{number}"
        if state == STATES[7]:
            use = tool_use(
                call, "Edit", file_path=PAGE, old_string=ARGMAX_OLD, new_string=ARGMAX_NEW
            )
            detail = {
                "filePath": PAGE,
                "oldString": ARGMAX_OLD,
                "newString": ARGMAX_NEW,
                "originalFile": previous,
                "structuredPatch": [],
                "userModified": False,
                "replaceAll": False,
            }
            message = f"The file {PAGE} has been updated."
        else:
            use = tool_use(call, "Write", file_path=PAGE, content=state)
            detail = {
                "type": "update" if previous else "create",
                "filePath": PAGE,
                "content": state,
            }
            message = f"File {'updated' if previous else 'created'} successfully at: {PAGE}"
        t.assistant(f"msg_M{number}a", [text(f"Step {number}: here is the page."), use], "tool_use")
        t.result(call, message, detail)
        t.assistant(f"msg_M{number}b", [text("Open it and look at the console.")])
        previous = state
    return t


def weights_folder(root: Path) -> Path:
    """The project's weights/ folder: the fixture's float32 arrays as raw .bin files,
    and one held-out digit."""
    folder = root / "weights"
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("w1", "b1", "w2", "b2"):
        np.load(MNIST / f"{name}.npy").astype("<f4").tofile(folder / f"{name}.bin")
    np.load(MNIST / "test_images.npy")[DIGIT].astype("<f4").tofile(folder / "digit.bin")
    return root


def expected_probabilities() -> np.ndarray:
    """The forward pass of the fixture's network on the digit, in float64."""
    w1, b1, w2, b2 = (
        np.load(MNIST / f"{n}.npy").astype(np.float64) for n in ("w1", "b1", "w2", "b2")
    )
    x = np.load(MNIST / "test_images.npy")[DIGIT].astype(np.float64)
    z = np.maximum(x @ w1 + b1, 0) @ w2 + b2
    e = np.exp(z - z.max())
    return e / e.sum()
