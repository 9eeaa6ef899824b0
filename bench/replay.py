"""Replay speed for a 784x128 matmul-with-bias kernel (y = x @ w + b), by layer:

  floor           bare wgpu-py dispatch + readback on an already warm device, with the
                  module, pipeline, buffers and bind group built once beforehand
  warm uncached   a fresh replay through the site's replay layer and worker pool
                  (database row, pool, worker: compile, buffers, dispatch, readback,
                  numpy reference, comparison), on a warm worker
  program         the same layer as a learner's WebGPU host program, replayed fresh
                  through the same pool: QuickJS runs it, fetch() loads x, w and b from
                  the session's files, the shim's calls replay on wgpu-py, and the
                  reference is computed from the inputs the program wrote
  cached          GET replay.json for a finished run, through gunicorn (and, for scale,
                  the cheapest request the same server answers: GET /healthz)
  cold start      the first replay after the server starts (worker start-up included)

    .venv/bin/python bench/replay.py [--runs 20] [--batch 1000]

The floor, the harness replay and the program replay are measured in one loop, one of
each per round, so that the machine's state weighs on all three alike. Prints medians
and the ratio to the floor. The aims: warm uncached <= 1.5x floor + 10 ms, cached <= 5 ms.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import urllib.request
from pathlib import Path

from common import gunicorn, median_ms, setup_django, timed_gets

SOURCE = """@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

const K = 784u;
const N = 128u;

@compute @workgroup_size(8, 8)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let row = id.y;
    let col = id.x;
    if (row >= arrayLength(&y) / N || col >= N) {
        return;
    }
    var acc = b[col];
    for (var k = 0u; k < K; k++) {
        acc += x[row * K + k] * w[k * N + col];
    }
    y[row * N + col] = acc;
}
"""


def harness(batch: int) -> dict:
    def buffer(shape: list[int], seed: int, scale: float) -> dict:
        return {
            "usage": "read",
            "dtype": "f32",
            "shape": shape,
            "random": {"seed": seed, "low": -scale, "high": scale},
        }

    return {
        "buffers": {
            "x": buffer([batch, 784], 1, 1.0),
            "w": buffer([784, 128], 2, 0.05),
            "b": buffer([128], 3, 0.1),
            "y": {"usage": "read_write", "dtype": "f32", "shape": [batch, 128], "output": True},
        },
        "passes": [
            {
                "kernel": "self",
                "bind": {"0": "x", "1": "w", "2": "b", "3": "y"},
                "dispatch": [16, (batch + 7) // 8, 1],
            }
        ],
        "reference": {"name": "matmul_bias", "args": ["x", "w", "b"], "outputs": ["y"]},
        "tolerance": {"atol": 1e-4, "rtol": 1e-4},
    }


# The same layer as a learner writes it in a page: weights and inputs fetched as files,
# WGSL fetched by name (the replay serves the version's WGSL as kernel.wgsl).
PROGRAM = """const adapter = await navigator.gpu.requestAdapter();
const device = await adapter.requestDevice();
const load = async (name) => new Float32Array(await (await fetch(name)).arrayBuffer());
const x = await load("x.bin");
const w = await load("w.bin");
const b = await load("b.bin");
const rows = x.length / 784;
function upload(label, data) {
  const usage = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST;
  const buffer = device.createBuffer({ label, size: data.byteLength, usage });
  device.queue.writeBuffer(buffer, 0, data);
  return buffer;
}
const inputs = [upload("x", x), upload("w", w), upload("b", b)];
const bytes = rows * 128 * 4;
const y = device.createBuffer({
  label: "y", size: bytes, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC,
});
const read = device.createBuffer({
  label: "y (read)", size: bytes, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST,
});
const module = device.createShaderModule({ code: await (await fetch("kernel.wgsl")).text() });
const pipeline = device.createComputePipeline({
  layout: "auto", compute: { module, entryPoint: "main" },
});
const bindGroup = device.createBindGroup({
  layout: pipeline.getBindGroupLayout(0),
  entries: [...inputs, y].map((buffer, binding) => ({ binding, resource: { buffer } })),
});
const encoder = device.createCommandEncoder();
const pass = encoder.beginComputePass();
pass.setPipeline(pipeline);
pass.setBindGroup(0, bindGroup);
pass.dispatchWorkgroups(128 / 8, Math.ceil(rows / 8));
pass.end();
encoder.copyBufferToBuffer(y, 0, read, 0, bytes);
device.queue.submit([encoder.finish()]);
await read.mapAsync(GPUMapMode.READ);
console.log("y[0] =", new Float32Array(read.getMappedRange())[0]);
read.unmap();
"""


def inputs(batch: int) -> list:
    import numpy as np

    rng = np.random.default_rng(0)
    arrays = [
        rng.uniform(-1, 1, (batch, 784)),
        rng.uniform(-0.05, 0.05, (784, 128)),
        rng.uniform(-0.1, 0.1, 128),
    ]
    return [a.astype(np.float32) for a in arrays]


class Floor:
    """Dispatch and readback only, on objects built once: what no replay can beat."""

    def __init__(self, spec: dict) -> None:
        from kernels.engine.device import import_wgpu, open_device

        wgpu = import_wgpu()
        self.device, self.environment = open_device(os.environ.get("REPLAY_WGPU_BACKEND", ""))
        device, batch = self.device, spec["buffers"]["x"]["shape"][0]
        self.dispatch = spec["passes"][0]["dispatch"]
        storage = wgpu.BufferUsage.STORAGE
        buffers = [device.create_buffer_with_data(data=a, usage=storage) for a in inputs(batch)]
        self.output = device.create_buffer(
            size=batch * 128 * 4, usage=storage | wgpu.BufferUsage.COPY_SRC
        )
        module = device.create_shader_module(code=SOURCE)
        self.pipeline = device.create_compute_pipeline(
            layout="auto", compute={"module": module, "entry_point": "main"}
        )
        entries = [
            {"binding": i, "resource": {"buffer": buffer}}
            for i, buffer in enumerate([*buffers, self.output])
        ]
        layout = self.pipeline.get_bind_group_layout(0)
        self.bind_group = device.create_bind_group(layout=layout, entries=entries)
        for _ in range(3):  # the first dispatches JIT-compile the shader on llvmpipe
            self.once()

    def once(self) -> float:
        started = time.perf_counter()
        encoder = self.device.create_command_encoder()
        compute = encoder.begin_compute_pass()
        compute.set_pipeline(self.pipeline)
        compute.set_bind_group(0, self.bind_group)
        compute.dispatch_workgroups(*self.dispatch)
        compute.end()
        self.device.queue.submit([encoder.finish()])
        self.device.queue.read_buffer(self.output)
        return time.perf_counter() - started


def make_version(spec: dict, comment: str, program: str = ""):
    """A session with the layer as its one version (a host program when given, with x, w
    and b as the session's files)."""
    from kernels.models import Kernel, KernelVersion, SessionFile
    from sessions.models import Session, Turn

    slug = f"bench-replay-{comment}"
    session = Session.objects.create(slug=slug, title=slug, visibility="public")
    turn = Turn.objects.create(session=session, number=1, role="learner", content="bench")
    kernel = Kernel.objects.create(session=session, name="layer", harness=spec)
    version = KernelVersion.objects.create(
        kernel=kernel,
        number=1,
        source=f"// {comment}\n{SOURCE}",
        host_program=program,
        turn=turn,
    )
    turn.kernel_version = version
    turn.save()
    if program:
        batch = spec["buffers"]["x"]["shape"][0]
        for name, array in zip(("x.bin", "w.bin", "b.bin"), inputs(batch), strict=True):
            SessionFile.objects.create(session=session, name=name, data=array.tobytes())
    return slug


def timed_replay(job) -> float:
    """Seconds for a fresh run of job through the replay layer, to its stored outcome."""
    from kernels import replay

    started = time.perf_counter()
    run = replay.wait(replay.start_run(job, fresh=True), 60)
    elapsed = time.perf_counter() - started
    assert run.status == "passed", run.outcome["message"]
    return elapsed


def main() -> None:
    # Mesa complains on stderr without one; the replay workers make their own.
    os.environ.setdefault("XDG_RUNTIME_DIR", tempfile.mkdtemp())
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--batch", type=int, default=1000, help="rows of x (digits)")
    args = parser.parse_args()
    spec = harness(args.batch)

    with tempfile.TemporaryDirectory() as scratch:
        database = Path(scratch) / "bench.sqlite3"
        os.environ["REPLAY_WORKERS"] = "1"
        setup_django(database)
        from django.conf import settings

        from kernels import replay
        from kernels.models import KernelVersion

        floor = Floor(spec)
        adapter = floor.environment.label
        make_version(spec, "warm")
        make_version(spec, "program", PROGRAM)
        harness_job = replay.job_for(
            KernelVersion.objects.get(kernel__session__slug="bench-replay-warm")
        )
        program_job = replay.job_for(
            KernelVersion.objects.get(kernel__session__slug="bench-replay-program")
        )
        for job in (harness_job, program_job):
            timed_replay(job)  # start the workers, JIT the shader
        times: dict[str, list[float]] = {"floor": [], "harness": [], "program": []}
        for _ in range(args.runs):
            times["floor"].append(floor.once())
            times["harness"].append(timed_replay(harness_job))
            times["program"].append(timed_replay(program_job))
        replay.backend().pool().close()
        floor_ms, warm_ms, program_ms = (median_ms(times[key]) for key in times)

        cold_slug = make_version(spec, "cold")
        env = {"SQLITE_PATH": str(database), "REPLAY_WORKERS": "1"}
        with gunicorn("config.wsgi:application", env, threads=4) as base:
            started = time.perf_counter()
            path = f"/s/{cold_slug}/turns/1/replay.json?wait=10"
            with urllib.request.urlopen(base + path) as response:  # noqa: S310 (our own server)
                assert response.status == 200, "the cold replay did not finish in 10 s"
            cold_ms = 1000 * (time.perf_counter() - started)
            cached, _ = timed_gets(base, "/s/bench-replay-warm/turns/1/replay.json", 200)
            # The cheapest request this server answers, for scale: one tiny query.
            floor_http, _ = timed_gets(base, "/healthz", 200)
        cached_ms = median_ms(cached)

    print(f"kernel: x[{args.batch},784] @ w[784,128] + b on {adapter}")
    print(f"deadline {settings.REPLAY_DEADLINE} s, median of {args.runs} runs")
    print(f"{'layer':34} {'ms':>9} {'x floor':>8}")
    for label, value in (
        ("floor: bare dispatch + readback", floor_ms),
        ("warm uncached replay (pool)", warm_ms),
        ("program replay (pool, QuickJS)", program_ms),
        ("cached replay.json over HTTP", cached_ms),
        ("  (for scale: GET /healthz)", median_ms(floor_http)),
        ("cold start: first replay", cold_ms),
    ):
        print(f"{label:34} {value:>9.2f} {value / floor_ms:>7.2f}x")
    print(f"program replay / harness replay: {program_ms / warm_ms:.2f}x")
    aim = 1.5 * floor_ms + 10
    verdict = "met" if warm_ms <= aim else "missed"
    print(f"aim warm <= 1.5 x floor + 10 ms = {aim:.1f} ms: {verdict}")
    print(f"aim cached <= 5 ms: {'met' if cached_ms <= 5 else 'missed'}")


if __name__ == "__main__":
    main()
