"""What keeping each pass's buffers (outcome["passes"][i]["buffers"]) costs a replay: each
workload replayed by the runner a worker runs, with the capture and without it, one of
each per round in one loop, on a warm device and memo (compiled pipelines, inputs and
references kept, as a worker keeps them). A replay's time includes encoding its outcome
as JSON, as the worker does before it sends it.

  layer, harness      the 784x128 matmul layer of bench/replay.py, 64 rows: y is 32 KiB
  layer, program      the same layer as a learner's host program (QuickJS, fetch, shim)
  20 passes, program  a program whose 20 passes each add x into y (16 KiB), then read y
  y = 2x 1024x1024    a harness whose output (4 MiB) is over the capture's cap: its first
                      MAX_CELLS cells are kept

    .venv/bin/python bench/capture.py [--runs 15]

Prints each workload's median with and without the capture, their ratio, the median of
each round's ratio (with over without: the two ran back to back, in turns first), and the
bytes of buffers the outcome carries.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from replay import DOUBLE, PROGRAM, SOURCE, double_harness, harness, inputs  # noqa: E402

from kernels.engine.device import open_device  # noqa: E402
from kernels.engine.host.program import replay_program  # noqa: E402
from kernels.engine.run import execute  # noqa: E402
from kernels.engine.worker import Memo  # noqa: E402

CHAIN_WGSL = """@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x < arrayLength(&y)) {
        y[id.x] = y[id.x] + x[id.x];
    }
}
"""
CHAIN = """const adapter = await navigator.gpu.requestAdapter();
const device = await adapter.requestDevice();
const n = 4096;
const usage = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST | GPUBufferUsage.COPY_SRC;
const x = device.createBuffer({ label: "x", size: n * 4, usage });
const y = device.createBuffer({ label: "y", size: n * 4, usage });
const read = device.createBuffer({
  label: "y (read)", size: n * 4, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST,
});
device.queue.writeBuffer(x, 0, new Float32Array(n).map((_, i) => i));
const module = device.createShaderModule({ code: await (await fetch("kernel.wgsl")).text() });
const pipeline = device.createComputePipeline({
  layout: "auto", compute: { module, entryPoint: "main" },
});
const group = device.createBindGroup({
  layout: pipeline.getBindGroupLayout(0),
  entries: [x, y].map((buffer, binding) => ({ binding, resource: { buffer } })),
});
const encoder = device.createCommandEncoder();
for (let i = 0; i < 20; i++) {
  const pass = encoder.beginComputePass();
  pass.setPipeline(pipeline);
  pass.setBindGroup(0, group);
  pass.dispatchWorkgroups(n / 64);
  pass.end();
}
encoder.copyBufferToBuffer(y, 0, read, 0, n * 4);
device.queue.submit([encoder.finish()]);
await read.mapAsync(GPUMapMode.READ);
read.unmap();
"""


def workloads(device: Any, env: Any, memo: Memo) -> dict[str, Callable[[bool], dict[str, Any]]]:
    fixtures = Path(".")
    layer = harness(64)
    x, w, b = inputs(64)
    files = {
        "x.bin": x.tobytes(),
        "w.bin": w.tobytes(),
        "b.bin": b.tobytes(),
        "kernel.wgsl": SOURCE.encode(),
    }
    big = double_harness(1024)

    def layer_harness(capture: bool) -> dict[str, Any]:
        return dict(
            execute(device, env, {"self": SOURCE}, layer, fixtures, memo=memo, capture=capture)
        )

    def layer_program(capture: bool) -> dict[str, Any]:
        return dict(replay_program(device, env, PROGRAM, files, memo=memo, capture=capture))

    def chain(capture: bool) -> dict[str, Any]:
        wgsl = {"kernel.wgsl": CHAIN_WGSL.encode()}
        return dict(replay_program(device, env, CHAIN, wgsl, memo=memo, capture=capture))

    def large(capture: bool) -> dict[str, Any]:
        return dict(
            execute(device, env, {"self": DOUBLE}, big, fixtures, memo=memo, capture=capture)
        )

    return {
        "layer, harness": layer_harness,
        "layer, program": layer_program,
        "20 passes, program": chain,
        "y = 2x 1024x1024": large,
    }


def captured_bytes(outcome: dict[str, Any]) -> int:
    buffers = [b for p in outcome.get("passes", []) for b in p.get("buffers", [])]
    return len(json.dumps(buffers))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    device, env = open_device()
    memo = Memo()
    runs = workloads(device, env, memo)
    times: dict[tuple[str, bool], list[float]] = {}
    sizes: dict[str, int] = {}
    for name, run in runs.items():  # warm: compiled, inputs and references in the memo
        for capture in (False, True):
            outcome = run(capture)
            assert outcome["status"] in ("passed", "no_reference"), (name, outcome["message"])
            sizes[name] = captured_bytes(outcome) if capture else sizes.get(name, 0)
    for round_ in range(args.runs):
        for name, run in runs.items():
            # Each first half the rounds: what the machine does meanwhile weighs on both.
            for capture in (False, True) if round_ % 2 else (True, False):
                started = time.perf_counter()
                outcome = run(capture)
                json.dumps(outcome)
                times.setdefault((name, capture), []).append(time.perf_counter() - started)
    print(f"{env.adapter} ({env.backend}), {args.runs} rounds, medians")
    print(
        f"{'workload':<20}{'without':>11}{'with':>11}{'ratio':>7}{'per round':>11}"
        f"{'buffers in outcome':>20}"
    )
    for name in runs:
        offs, ons = times[(name, False)], times[(name, True)]
        off, on = 1000 * statistics.median(offs), 1000 * statistics.median(ons)
        # The median of each round's own ratio: a busy moment weighs on both of a pair.
        paired = statistics.median(b / a for a, b in zip(offs, ons, strict=True))
        print(
            f"{name:<20}{off:>8.2f} ms{on:>8.2f} ms{on / off:>7.2f}{paired:>11.2f}"
            f"{sizes[name] / 1024:>16.1f} KiB"
        )


if __name__ == "__main__":
    main()
