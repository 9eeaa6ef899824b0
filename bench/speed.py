"""How fast the showcase's kernels run on this machine's device, and what timing them costs.

Prints the device's measured peaks; for the showcase's matmul and forward-pass versions
(and the naive matmul at 1024 x 1024 x 1024, big enough for a GPU to show its speed) each
pass's GPU time, bytes, fraction of peak bandwidth and arithmetic, and the numpy reference's
time as a speed-up (and PyTorch's on the same GPU, where there are PyTorch and CUDA);
then a replay with timestamps against one on a device opened without them, interleaved
in one run, as a ratio; and lesson 6's point measured: the showcase's
MNIST forward pass as a host program chained on the GPU (mnist v2's program) against the
same passes each read back to JavaScript and written into the next (programs/
forward_readback.js), interleaved, as a ratio; and the showcase's own lesson 6 versions
(forward v3 reading back, v4 chained) as their replays run them, with the words the
kernel's timeline shows.

    python bench/speed.py [--runs 10]
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import statistics
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kernels.engine import gpu_reference  # noqa: E402
from kernels.engine.device import open_device  # noqa: E402
from kernels.engine.host.program import run_program_job  # noqa: E402
from kernels.engine.peaks import measure_peaks  # noqa: E402
from kernels.engine.run import execute  # noqa: E402
from kernels.engine.speed import fractions  # noqa: E402
from kernels.speed_figures import version_change  # noqa: E402

FIXTURES = ROOT / "fixtures"
SHOWCASE = json.loads(
    (FIXTURES / "showcase" / "gpu-inference-from-scratch.json").read_text(encoding="utf-8")
)
KERNELS = {kernel["name"]: kernel for kernel in SHOWCASE["kernels"]}
SHOWN = [("matmul", 3), ("matmul", 4), ("forward", 1), ("forward", 2), ("mnist", 3)]


def job(name: str, number: int) -> tuple[dict[str, str], dict[str, Any]]:
    """A version's sources and harness as the site runs them: another kernel a pass
    names runs as its latest version at or before this version's turn."""
    kernel = KERNELS[name]
    version = next(v for v in kernel["versions"] if v["number"] == number)
    harness = version["harness_override"] or kernel["harness"]
    sources = {"self": version["source"]}
    for other in sorted({p.get("kernel", "self") for p in harness["passes"]} - {"self"}):
        versions = sorted(KERNELS[other]["versions"], key=lambda v: -v["number"])
        earlier = [v for v in versions if v["turn"] is not None and v["turn"] <= version["turn"]]
        sources[other] = (earlier or versions)[0]["source"]
    return sources, harness


def big_matmul(size: int) -> tuple[dict[str, str], dict[str, Any]]:
    """matmul v4 (one invocation a cell) under its harness scaled to size^3."""
    sources, harness = job("matmul", 4)
    harness = copy.deepcopy(harness)
    buffers = harness["buffers"]
    buffers["dims"]["data"] = [size, size, size, 0]
    for name in ("a", "b", "c"):
        buffers[name]["shape"] = [size, size]
    harness["passes"][0]["dispatch"] = [size // 8, size // 8]
    harness["tolerance"] = {"atol": 1e-3, "rtol": 1e-3}
    harness["description"] = f"matmul {size}^3"
    return sources, harness


def forward_programs(device: Any, env: Any, runs: int) -> None:
    """The forward pass chained on the GPU against read back after every kernel."""
    mnist = KERNELS["mnist"]
    chained = next(v for v in mnist["versions"] if v["number"] == 2)
    programs = {
        "chained": chained["host_program"],
        "read back each step": (ROOT / "bench" / "programs" / "forward_readback.js").read_text(),
    }
    files = {file["name"]: file["data"] for file in SHOWCASE["files"]}
    figures: dict[str, list[dict[str, Any]]] = {name: [] for name in programs}
    for run in range(runs + 1):
        for name, source in programs.items():
            job = {"source": source, "files": files, "wgsl": {"mnist.wgsl": chained["source"]}}
            outcome = run_program_job(device, env, job)
            if run == 0:
                console = [line["text"] for line in outcome["program"]["console"]]
                print(f"{name}: {outcome['status']}, {len(outcome['passes'])} passes, {console}")
            else:
                figures[name].append({**outcome["speed"], "run_ms": outcome["timings"]["run_ms"]})
    medians = {}
    for name, samples in figures.items():
        medians[name] = {
            key: statistics.median(s[key] for s in samples)
            for key in ("run_ms", "gpu_ms", "readback_ms", "upload_ms")
        }
        shown = ", ".join(f"{key} {value:.3f}" for key, value in medians[name].items())
        print(f"forward pass {name}, median of {runs}: {shown}")
    slow, fast = medians["read back each step"], medians["chained"]
    print(
        f"read back each step / chained: program {slow['run_ms'] / fast['run_ms']:.2f}x,"
        f" GPU passes {slow['gpu_ms'] / fast['gpu_ms']:.2f}x,"
        f" readbacks {slow['readback_ms'] / fast['readback_ms']:.2f}x"
    )


def lesson_six(device: Any, env: Any, runs: int) -> None:
    """The showcase's forward v3 (read back after every kernel) and v4 (chained), as their
    replays run them (checked against the harness's reference), interleaved; the words the
    kernel's timeline shows for v4."""
    kernel = KERNELS["forward"]
    outcomes: dict[int, list[dict[str, Any]]] = {3: [], 4: []}
    for run in range(runs + 1):
        for number in (3, 4):
            version = next(v for v in kernel["versions"] if v["number"] == number)
            job = {
                "source": version["host_program"],
                "files": {},
                "wgsl": {"kernel.wgsl": version["source"], "forward.wgsl": version["source"]},
                "harness": kernel["harness"],
            }
            outcome = run_program_job(device, env, job)
            if run:
                outcomes[number].append(dict(outcome))
    medians = {}
    for number, samples in outcomes.items():
        speeds = [o["speed"] for o in samples]
        medians[number] = {
            key: statistics.median(s[key] for s in speeds)
            for key in ("program_ms", "gpu_ms", "readback_ms")
        }
        shown = ", ".join(f"{key} {value:.3f}" for key, value in medians[number].items())
        print(f"showcase forward v{number} ({samples[0]['status']}), median of {runs}: {shown}")
    typical = {
        n: {**outcomes[n][0], "speed": {**outcomes[n][0]["speed"], **medians[n]}} for n in (3, 4)
    }
    change = version_change(typical[4], typical[3], 3)
    print(f"the timeline's words for forward v4: {change['text'] if change else 'not compared'}")


def show(label: str, outcome: Mapping[str, Any]) -> None:
    speed = outcome.get("speed") or {}
    against = [
        f"{r['name']} {r['ms']} ms on {r.get('where') or 'the CPU'}, speed-up {r['speedup']}x"
        for key in ("gpu_reference", "reference")
        if (r := speed.get(key))
    ]
    print(
        f"{label}: {outcome['status']}, GPU {speed.get('gpu_ms')} ms over {speed.get('repeats')}"
        f" run(s) (median), upload {speed.get('upload_ms')} ms, readback"
        f" {speed.get('readback_ms')} ms; {'; '.join(against) or 'no reference'}"
    )
    for record in outcome.get("passes", []):
        share = fractions(record, speed.get("peaks"))
        bandwidth = f"{100 * share['bandwidth']:.3f}%" if "bandwidth" in share else "-"
        arithmetic = f"{100 * share['arithmetic']:.3f}%" if "arithmetic" in share else "-"
        print(
            f"    {record['name']}: {record.get('gpu_ms')} ms, {record.get('bytes', 0):,} bytes,"
            f" {record.get('flops', '-')} flops; {bandwidth} of peak bandwidth,"
            f" {arithmetic} of peak multiply-adds"
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--size", type=int, default=1024)
    args = parser.parse_args()

    # PyTorch's time on this machine's GPU beside numpy's, where it has both (as a worker);
    # waited for here, where a replay would go without it while it loads.
    reference = gpu_reference.start()
    if reference is not None:
        reference.settle()
    gpu_reference.use(reference)
    device, env = open_device()
    started = time.perf_counter()
    env = dataclasses.replace(env, peaks=measure_peaks(device, env))
    print(f"{env.label} ({'CPU emulation' if env.software else 'GPU'}); {env.description}")
    print(f"peaks: {env.peaks} (measured in {1000 * (time.perf_counter() - started):.0f} ms)")
    for name, number in SHOWN:
        sources, harness = job(name, number)
        execute(device, env, sources, harness, FIXTURES)  # warm: compiled, inputs kept
        show(f"{name} v{number}", execute(device, env, sources, harness, FIXTURES))
    sources, harness = big_matmul(args.size)
    execute(device, env, sources, harness, FIXTURES)
    show(f"matmul v4 at {args.size}^3", execute(device, env, sources, harness, FIXTURES))

    forward_programs(device, env, args.runs)
    lesson_six(device, env, args.runs)

    # What timing costs: the same replays on a device with and without timestamp queries,
    # interleaved so that both see the same machine.
    untimed_device, untimed_env = open_device(timestamps=False)
    for name, number in (("forward", 2), ("mnist", 3)):
        sources, harness = job(name, number)
        walls: dict[str, list[float]] = {"timed": [], "untimed": []}
        for run in range(args.runs + 1):
            for which, (dev, en) in (
                ("timed", (device, env)),
                ("untimed", (untimed_device, untimed_env)),
            ):
                t = time.perf_counter()
                execute(dev, en, sources, harness, FIXTURES)
                if run:  # the first round compiles
                    walls[which].append(1000 * (time.perf_counter() - t))
        timed, untimed = statistics.median(walls["timed"]), statistics.median(walls["untimed"])
        print(
            f"replay of {name} v{number}, median of {args.runs}: timed {timed:.2f} ms,"
            f" untimed {untimed:.2f} ms, ratio {timed / untimed:.2f}x"
        )


if __name__ == "__main__":
    main()
