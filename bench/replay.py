"""Replay speed, by layer, against the floor of the same work measured in the same loop:

  floor           bare wgpu-py dispatch + readback on an already warm device, with the
                  module, pipeline, buffers and bind group built once beforehand
  warm uncached   a fresh replay through the site's replay layer and worker pool
                  (database row, pool, worker: compile, buffers, dispatch, readback,
                  numpy reference, comparison), on a warm worker, until a reader waiting
                  on it is answered; its store, which follows the answer, is timed apart
  program         the same layer as a learner's WebGPU host program, replayed fresh
                  through the same pool: QuickJS runs it, fetch() loads x, w and b from
                  the session's files (held ready in the worker's spare context after
                  the first run, js.make_spare), the shim's calls replay on wgpu-py, and
                  the reference is computed from the inputs the program wrote
  cached          GET replay.json for a finished run, through gunicorn, as a reader
                  without cookies asks (the answer kept in the cache), and for scale the
                  cheapest request the same server answers: GET /healthz
  cold start      the first replay after the server starts: asked as soon as its port
                  opens (worker start-up and warm-up included), and asked once its
                  workers have warmed up (/healthz names their adapter), which they do in
                  the background while the server answers
  boundary        bytes a fetch() hands to a program and a writeBuffer hands to Python,
                  and a program that fetches, writes and reads back 4 MB
                  (bench/host_data.py's rows), against numpy copying the same bytes

The layer is a 784x128 matmul with bias (y = x @ w + b). The size sweep replays y = 2x
over square outputs from 8x8 to 4096x4096, each against its own floor in the same loop,
with sizes either side of the outcome's thresholds: 8x8 is the last whose cells travel as
JSON lists, 9x9 the first packed as bytes (LIST_UP_TO), 64x64 the last that carries its
cells at all and 65x65 the first that does not (SHOW_VALUES_UP_TO).

    .venv/bin/python bench/replay.py [--runs 20] [--batch 1000] [--sizes 64,65,256,...]
                                     [--replays-only] [--starts 1]
    .venv/bin/python bench/replay.py --crossover [--runs 20] [--sizes 256,1024,...]

--crossover times only the runner, with large outputs checked on the device and read
back for the CPU, to place gpu_compare.CHECK_FROM.

Every floor and replay of a round runs in one loop, one of each per round, so that the
machine's state weighs on all alike. Prints medians, ratios to the floor, and where a
warm replay's time goes: the runner (compile, then dispatch, readback, reference and
comparison), the hand-off between pool and worker (the pool's wall time less the
runner's), the rest (the run's row, the backend's queue, the outcome made ready to
store), and the store after the answer.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from statistics import median
from typing import TYPE_CHECKING, Any

from common import ROOT, gunicorn, median_ms, setup_django, timed_gets
from host_data import crossings, numpy_copy, round_trip

if TYPE_CHECKING:
    import numpy as np
    import wgpu

    from kernels.engine.device import Environment
    from kernels.jobs import Job

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


def harness(batch: int) -> dict[str, Any]:
    def buffer(shape: list[int], seed: int, scale: float) -> dict[str, Any]:
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


def inputs(batch: int) -> list[np.ndarray]:
    import numpy as np

    rng = np.random.default_rng(0)
    arrays = [
        rng.uniform(-1, 1, (batch, 784)),
        rng.uniform(-0.05, 0.05, (784, 128)),
        rng.uniform(-0.1, 0.1, 128),
    ]
    return [a.astype(np.float32) for a in arrays]


DOUBLE = """@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.y * 65535u * 256u + id.x;
    if (i < arrayLength(&y)) {
        y[i] = 2.0 * x[i];
    }
}
"""


def double_harness(side: int) -> dict[str, Any]:
    """y = 2x over a side x side output (the sweep's kernel)."""
    groups = -(-side * side // 256)
    shape = [side, side]
    return {
        "buffers": {
            "x": {
                "usage": "read",
                "dtype": "f32",
                "shape": shape,
                "random": {"seed": 1, "low": -1.0, "high": 1.0},
            },
            "y": {"usage": "read_write", "dtype": "f32", "shape": shape, "output": True},
        },
        "passes": [
            {
                "kernel": "self",
                "bind": {"0": "x", "1": "y"},
                "dispatch": [min(groups, 65535), -(-groups // 65535), 1],
            }
        ],
        "reference": {"name": "double", "args": ["x"], "outputs": ["y"]},
        "tolerance": {"atol": 1e-6, "rtol": 1e-6},
    }


class Floor:
    """Dispatch and readback only, on objects built once: what no replay can beat."""

    def __init__(
        self,
        device: wgpu.GPUDevice,
        source: str,
        arrays: list[np.ndarray],
        output_bytes: int,
        dispatch: list[int],
    ) -> None:
        from kernels.engine.device import import_wgpu

        wgpu = import_wgpu()
        self.device, self.dispatch = device, dispatch
        storage = wgpu.BufferUsage.STORAGE
        buffers = [device.create_buffer_with_data(data=a, usage=storage) for a in arrays]
        self.output = device.create_buffer(
            size=output_bytes, usage=storage | wgpu.BufferUsage.COPY_SRC
        )
        module = device.create_shader_module(code=source)
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


def make_version(
    spec: dict[str, Any], comment: str, program: str = "", source: str = SOURCE
) -> str:
    """A session with the layer as its one version (a host program when given, with x, w
    and b as the session's files)."""
    from sessions.models import Session, Turn
    from sessions.programs import Kernel, KernelVersion, SessionFile

    slug = f"bench-replay-{comment}"
    session = Session.objects.create(slug=slug, title=slug, visibility="public")
    turn = Turn.objects.create(session=session, number=1, role="learner", content="bench")
    kernel = Kernel.objects.create(session=session, name="layer", harness=spec)
    version = KernelVersion.objects.create(
        kernel=kernel,
        number=1,
        source=f"// {comment}\n{source}",
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


def timed_replay(job: Job) -> tuple[float, dict[str, Any]]:
    """Seconds for a fresh run of job through the replay layer until a reader waiting on
    it would be answered (its outcome ready), and the timings the layers recorded on it,
    with the milliseconds its store took after that answer (stored_ms)."""
    from kernels import replay

    started = time.perf_counter()
    run = replay.wait(replay.start_run(job, fresh=True), 60, answer_first=True)
    elapsed = time.perf_counter() - started
    replay.store_answered()  # as a request's end does, once its answer has gone
    stored_ms = (time.perf_counter() - started - elapsed) * 1000
    assert run.status == "passed", run.outcome["message"]
    return elapsed, {**run.outcome["timings"], "stored_ms": stored_ms}


def hops(elapsed: list[float], timings: list[dict[str, Any]]) -> dict[str, float]:
    """Median milliseconds per hop of a warm replay, from the timings each layer records:
    the runner's compile and run, the pool's wall time around the worker, the total the
    caller saw, and the store that follows the answer."""
    total = median_ms(elapsed)
    wall = median(t["wall_ms"] or 0.0 for t in timings)
    compile_ms = median(t["compile_ms"] or 0.0 for t in timings)
    run_ms = median(t["run_ms"] or 0.0 for t in timings)
    return {
        "runner: compile (memoised)": compile_ms,
        "runner: device, reference, comparison": run_ms,
        "pool <-> worker hand-off and encoding": max(wall - compile_ms - run_ms, 0.0),
        "run row, queue, outcome made ready": max(total - wall, 0.0),
        "storing it, after the answer": median(t["stored_ms"] for t in timings),
    }


def sweep(
    device: wgpu.GPUDevice, sides: list[int], runs: int
) -> list[tuple[int, float, float, dict[str, float]]]:
    """Each output size's floor and warm replay, interleaved; fewer rounds for the
    largest sizes, whose single replay takes seconds on a CPU adapter."""
    import numpy as np

    from kernels.jobs import job_for
    from sessions.programs import KernelVersion

    rows = []
    for side in sides:
        spec = double_harness(side)
        slug = make_version(spec, f"sweep-{side}", source=DOUBLE)
        job = job_for(KernelVersion.objects.get(kernel__session__slug=slug))
        x = np.random.default_rng(1).uniform(-1, 1, (side, side)).astype(np.float32)
        floor = Floor(device, DOUBLE, [x], x.nbytes, spec["passes"][0]["dispatch"])
        timed_replay(job)
        rounds = max(3, min(runs, (runs * 512 * 512) // (side * side)))
        floors: list[float] = []
        elapsed: list[float] = []
        timings: list[dict[str, Any]] = []
        for _ in range(rounds):
            floors.append(floor.once())
            seconds, recorded = timed_replay(job)
            elapsed.append(seconds)
            timings.append(recorded)
        rows.append((side, median_ms(floors), median_ms(elapsed), hops(elapsed, timings)))
    return rows


def print_sweep(rows: list[tuple[int, float, float, dict[str, float]]]) -> None:
    print()
    print("size sweep, y = 2x (floor and warm uncached replay interleaved)")
    print(f"{'output':>11} {'cells':>10} {'floor ms':>9} {'replay ms':>10} {'ratio':>7} {'+ms':>8}")
    for side, floor_ms, replay_ms, _ in rows:
        print(
            f"{f'{side}x{side}':>11} {side * side:>10,} {floor_ms:>9.2f} {replay_ms:>10.2f}"
            f" {replay_ms / floor_ms:>6.2f}x {replay_ms - floor_ms:>8.2f}"
        )
    print()
    print("where a warm replay's time goes (median ms)")
    names = list(rows[0][3])
    print(f"{'output':>11} " + " ".join(f"{name[:24]:>24}" for name in names))
    for side, _, _, breakdown in rows:
        values = " ".join(f"{breakdown[name]:>24.2f}" for name in names)
        print(f"{f'{side}x{side}':>11} {values}")


def layer(device: wgpu.GPUDevice, spec: dict[str, Any], runs: int) -> dict[str, list[Any]]:
    """The layer's floor, harness replay and program replay, one of each per round."""
    from kernels.jobs import job_for
    from sessions.programs import KernelVersion

    batch = spec["buffers"]["x"]["shape"][0]
    dispatch = spec["passes"][0]["dispatch"]
    floor = Floor(device, SOURCE, inputs(batch), batch * 128 * 4, dispatch)
    jobs = {}
    for name, program in (("harness", ""), ("program", PROGRAM)):
        slug = make_version(spec, name, program)
        jobs[name] = job_for(KernelVersion.objects.get(kernel__session__slug=slug))
        timed_replay(jobs[name])  # start the workers, JIT the shader
    times: dict[str, list[Any]] = {"floor": [], "harness": [], "program": []}
    for _ in range(runs):
        times["floor"].append(floor.once())
        for name, job in jobs.items():
            seconds, recorded = timed_replay(job)
            times[name].append(seconds)
            times.setdefault(f"{name} timings", []).append(recorded)
    return times


def crossover(sides: list[int], runs: int) -> None:
    """The runner alone (execute() with a worker's memo and kept buffers, warm) on y = 2x,
    with the check on the device forced on and off, interleaved: where checking outputs on
    the device (kernels/engine/gpu_compare.py, CHECK_FROM) starts to pay."""
    sys.path.insert(0, str(ROOT))
    from kernels.engine.device import open_device
    from kernels.engine.resident import DeviceBuffers
    from kernels.engine.run import execute
    from kernels.engine.worker import Memo

    device, env = open_device(os.environ.get("REPLAY_WGPU_BACKEND", ""))
    print(f"runner on {env.label}: outputs checked on the device against read back (median ms)")
    print(f"{'output':>11} {'cells':>10} {'on device':>10} {'read back':>10} {'ratio':>7}")
    with tempfile.TemporaryDirectory() as fixtures:
        for side in sides:
            spec, memo, kept = double_harness(side), Memo(), DeviceBuffers()
            times: dict[int | None, list[float]] = {0: [], None: []}
            rounds = max(3, min(runs, (runs * 512 * 512) // (side * side)))
            for round in range(rounds + 1):
                for check_from, elapsed in times.items():
                    started = time.perf_counter()
                    outcome = execute(
                        device, env, {"self": DOUBLE}, spec, Path(fixtures),
                        memo=memo, kept=kept, device_check_from=check_from,
                    )  # fmt: skip
                    assert outcome["status"] == "passed", outcome["message"]
                    if round:  # the first round warms the memo, the kept buffers, the JIT
                        elapsed.append(time.perf_counter() - started)
            on, off = median_ms(times[0]), median_ms(times[None])
            size = f"{side}x{side}"
            print(f"{size:>11} {side * side:>10,} {on:>10.2f} {off:>10.2f} {on / off:>6.2f}x")


def boundary(
    device: wgpu.GPUDevice, environment: Environment, runs: int
) -> dict[str, tuple[float, float]]:
    """bench/host_data.py's rows at 1 and 4 MB: (median ms, x numpy's copy)."""
    import numpy as np

    rows = {}
    for mb in (1, 4):
        data = np.random.default_rng(0).integers(0, 256, mb << 20, dtype=np.uint8).tobytes()
        times: dict[str, list[float]] = {"in": [], "out": [], "numpy": [], "program": []}
        for _ in range(max(3, runs // 4)):
            handed_in, _, taken_out = crossings(data)
            times["in"].append(handed_in)
            times["out"].append(taken_out)
            times["numpy"].append(numpy_copy(data))
            if mb == 4:
                times["program"].append(round_trip((device, environment), data))
        floor = median_ms(times.pop("numpy"))
        for name, took in times.items():
            if took:
                rows[f"{name} {mb} MB"] = (median_ms(took), median_ms(took) / floor)
    return rows


def served(database: Path, spec: dict[str, Any], start: int = 0) -> dict[str, float]:
    """Cold starts, cached replay.json and /healthz through gunicorn, in ms (start: which
    of several, each on versions of its own)."""
    token = "bench-replay"  # noqa: S105 (a scratch server's monitor token)
    env = {"SQLITE_PATH": str(database), "REPLAY_WORKERS": "1", "HEALTHZ_TOKEN": token}
    figures = {}
    for when in ("at once", "warm"):
        slug = make_version(spec, f"cold-{when.replace(' ', '-')}-{start}")
        opened = time.perf_counter()
        with gunicorn("config.wsgi:application", env, threads=4) as base:
            if when == "warm":
                first, seconds, steps = wait_warm(base, token)
                figures["site's first answer after the port opens"] = 1000 * first
                figures["workers warm after the port opens"] = 1000 * seconds
                # The worker's own start, by step (kernels/engine/pool.py, status()).
                for step, step_s in steps.items():
                    figures[f"  worker start: {step}"] = 1000 * step_s
            started = time.perf_counter()
            path = f"/s/{slug}/turns/1/replay.json?wait=10"
            with urllib.request.urlopen(base + path) as response:  # noqa: S310 (our server)
                assert response.status == 200, "the cold replay did not finish in 10 s"
            figures[f"first replay, {when}"] = 1000 * (time.perf_counter() - started)
            if when == "at once":
                figures["port open to first replay"] = 1000 * (time.perf_counter() - opened)
                continue
            cached, _ = timed_gets(base, "/s/bench-replay-harness/turns/1/replay.json", 200)
            # The cheapest request this server answers, for scale: one tiny query.
            floor_http, _ = timed_gets(base, "/healthz", 200)
            figures["cached"], figures["healthz"] = median_ms(cached), median_ms(floor_http)
    return figures


def wait_warm(base: str, token: str) -> tuple[float, float, dict[str, float]]:
    """Seconds until /healthz first answers (the site has loaded) and until it names the
    workers' adapter (a worker says hello once it has opened its device and run its
    warm-up jobs, kernels/engine/worker.py); and where that worker's start went (in all,
    and by step)."""
    import json

    started = time.perf_counter()
    first = None
    headers = {"Authorization": f"Bearer {token}"}
    request = urllib.request.Request(base + "/healthz", headers=headers)  # noqa: S310
    while time.perf_counter() - started < 60:
        with urllib.request.urlopen(request) as response:  # noqa: S310 (our own server)
            replay = json.load(response)["replay"]
        first = first or time.perf_counter() - started
        if replay.get("environment"):
            return first, time.perf_counter() - started, replay.get("started_s") or {}
        time.sleep(0.05)
    raise RuntimeError("the replay workers did not warm up in 60 s")


def main() -> None:
    # Mesa complains on stderr without one; the replay workers make their own.
    os.environ.setdefault("XDG_RUNTIME_DIR", tempfile.mkdtemp())
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--batch", type=int, default=1000, help="rows of x (digits)")
    parser.add_argument("--sizes", default="8,9,64,65,256,1024,2048,4096", help="output sides")
    parser.add_argument(
        "--crossover", action="store_true", help="only the runner on --sizes, checked on the "
        "device and read back (where gpu_compare.CHECK_FROM should be)",
    )  # fmt: skip
    parser.add_argument(
        "--replays-only", action="store_true", help="skip the served rows (cached "
        "replay.json, /healthz, cold start), which start gunicorn",
    )  # fmt: skip
    parser.add_argument(
        "--starts", type=int, default=1, help="server starts the served rows are measured "
        "over (their medians, and each start's first replay)",
    )  # fmt: skip
    args = parser.parse_args()
    if args.crossover:
        crossover([int(side) for side in args.sizes.split(",") if side], args.runs)
        return
    spec = harness(args.batch)

    with tempfile.TemporaryDirectory() as scratch:
        database = Path(scratch) / "bench.sqlite3"
        os.environ["REPLAY_WORKERS"] = "1"
        setup_django(database)
        from django.conf import settings

        from kernels import replay
        from kernels.backends import LocalBackend
        from kernels.engine.device import open_device

        device, environment = open_device(os.environ.get("REPLAY_WGPU_BACKEND", ""))
        times = layer(device, spec, args.runs)
        rows = sweep(device, [int(side) for side in args.sizes.split(",") if side], args.runs)
        data_rows = boundary(device, environment, args.runs)
        if isinstance(pool_of := replay.backend(), LocalBackend):
            pool_of.pool().close()
        count = 0 if args.replays_only else args.starts
        starts = [served(database, spec, number) for number in range(count)]
        figures = (
            {key: median([start[key] for start in starts]) for key in starts[0]} if starts else {}
        )
    floor_ms, warm_ms, program_ms = (
        median_ms(times[key]) for key in ("floor", "harness", "program")
    )

    print(f"kernel: x[{args.batch},784] @ w[784,128] + b on {environment.label}")
    print(f"deadline {settings.REPLAY_DEADLINE} s, median of {args.runs} runs")
    print(f"{'layer':42} {'ms':>9} {'x floor':>8} {'x harness':>10}")
    for label, value in (
        ("floor: bare dispatch + readback", floor_ms),
        ("warm uncached replay (pool)", warm_ms),
        ("program replay (pool, QuickJS)", program_ms),
        ("cached replay.json over HTTP", figures.get("cached")),
        ("  (for scale: GET /healthz)", figures.get("healthz")),
        ("cold start: first replay as the port opens", figures.get("first replay, at once")),
        ("  port open to that replay's answer", figures.get("port open to first replay")),
        (
            "  site's first answer after the port opens",
            figures.get("site's first answer after the port opens"),
        ),
        ("  workers warm after the port opens", figures.get("workers warm after the port opens")),
        *((label, value) for label, value in figures.items() if label.startswith("  worker start")),
        ("first replay once the workers are warm", figures.get("first replay, warm")),
    ):
        if value is not None:
            print(f"{label:42} {value:>9.2f} {value / floor_ms:>7.2f}x {value / warm_ms:>9.2f}x")
    if len(starts) > 1:
        each = ", ".join(f"{start['first replay, at once'] / 1000:.2f}" for start in starts)
        print(f"cold start, medians of {len(starts)} starts; each one's first replay (s): {each}")
    print(f"program replay / harness replay: {program_ms / warm_ms:.2f}x")
    if figures:
        print(f"cached replay.json / GET /healthz: {figures['cached'] / figures['healthz']:.2f}x")
    for name in ("harness", "program"):
        breakdown = hops(times[name], times[f"{name} timings"])
        print(
            f"{name} replay by hop (ms): " + ", ".join(f"{k} {v:.2f}" for k, v in breakdown.items())
        )
    print()
    print("bytes across the JavaScript boundary (bench/host_data.py's rows)")
    print(f"{'row':42} {'ms':>9} {'x numpy':>8} {'GB/s':>7}")
    for name, (ms, ratio) in data_rows.items():
        size = int(name.split()[1]) << 20
        rate = f"{size / ms / 1e6:>7.2f}" if not name.startswith("program") else ""
        print(f"{name:42} {ms:>9.2f} {ratio:>7.1f}x {rate:>7}")
    if rows:
        print_sweep(rows)


if __name__ == "__main__":
    main()
