// Lesson 7's network, each kernel's result read back and written into the next kernel's
// input: what lesson 6 says not to do, kept to measure what it costs.
const N = 100; // digits, as BATCH in the shader
const adapter = await navigator.gpu.requestAdapter();
const device = await adapter.requestDevice();

// numpy wrote each array with tofile(): raw float32, row-major.
async function floats(url) {
  const response = await fetch(url);
  return new Float32Array(await response.arrayBuffer());
}
const x = await floats("mnist/test_images.bin"); // N x 784 pixels in [0, 1]
const w1 = await floats("mnist/w1.bin"); // 784 x 128
const b1 = await floats("mnist/b1.bin"); // 128
const w2 = await floats("mnist/w2.bin"); // 128 x 10
const b2 = await floats("mnist/b2.bin"); // 10
// The labels stay here: they only score the answers.
const labels = new Uint32Array(await (await fetch("mnist/test_labels.bin")).arrayBuffer());

function input(label, data) {
  const buffer = device.createBuffer({
    label,
    size: data.byteLength,
    usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST,
  });
  device.queue.writeBuffer(buffer, 0, data);
  return buffer;
}

// Written by one pass, read by the next: they never leave the GPU.
function onGpu(label, floatCount) {
  return device.createBuffer({
    label,
    size: floatCount * 4,
    usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC,
  });
}

const xBuffer = input("x", x);
const w1Buffer = input("w1", w1);
const b1Buffer = input("b1", b1);
const w2Buffer = input("w2", w2);
const b2Buffer = input("b2", b2);

const code = await (await fetch("mnist.wgsl")).text();
const module = device.createShaderModule({ code });
function pipelineFor(entryPoint) {
  return device.createComputePipeline({ layout: "auto", compute: { module, entryPoint } });
}
function bindGroupFor(pipeline, buffers) {
  const entries = [];
  for (const [binding, buffer] of Object.entries(buffers)) {
    entries.push({ binding: Number(binding), resource: { buffer } });
  }
  return device.createBindGroup({ layout: pipeline.getBindGroupLayout(0), entries });
}

// The first idea of lesson 6: each kernel's result comes back to JavaScript and is
// written into the next kernel's input, a submit and a wait per kernel.
async function step(entryPoint, inputs, output, floatCount, workgroups) {
  const pipeline = pipelineFor(entryPoint);
  const out = device.createBuffer({
    label: entryPoint + " out",
    size: floatCount * 4,
    usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC,
  });
  const read = device.createBuffer({
    label: entryPoint + " read",
    size: floatCount * 4,
    usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST,
  });
  const encoder = device.createCommandEncoder();
  const pass = encoder.beginComputePass({ label: entryPoint });
  pass.setPipeline(pipeline);
  pass.setBindGroup(0, bindGroupFor(pipeline, { ...inputs, [output]: out }));
  pass.dispatchWorkgroups(...workgroups);
  pass.end();
  encoder.copyBufferToBuffer(out, 0, read, 0, floatCount * 4);
  device.queue.submit([encoder.finish()]);
  await read.mapAsync(GPUMapMode.READ);
  const values = new Float32Array(read.getMappedRange().slice(0));
  read.unmap();
  return values;
}

const h = await step("layer1", { 0: xBuffer, 1: w1Buffer, 2: b1Buffer }, 5, N * 128, [128 / 8, Math.ceil(N / 8)]);
const hidden = input("hidden", h);
const l = await step("layer2", { 3: w2Buffer, 4: b2Buffer, 5: hidden }, 6, N * 10, [Math.ceil(10 / 8), Math.ceil(N / 8)]);
const logits = input("logits", l);
const p = await step("softmax", { 6: logits }, 7, N * 10, [Math.ceil(N / 64)]);

// The answer is the digit with the highest probability.
let right = 0;
const answers = new Array(10).fill(0);
for (let i = 0; i < N; i++) {
  const row = p.subarray(i * 10, i * 10 + 10);
  const digit = row.indexOf(Math.max(...row));
  answers[digit] += 1;
  if (digit === labels[i]) right += 1;
}
console.log(`right: ${right} of ${N}`);
console.log("answers for 0 to 9:", answers.join(" "));
