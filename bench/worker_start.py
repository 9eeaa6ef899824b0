"""Where a replay worker's start goes, step by step, each round in a fresh process:
importing wgpu-py (cffi parsing wgpu.h), opening the device, and the warm-up jobs
(kernels/engine/worker.py), with wgpu-py's C types parsed ahead in one go
(kernels/engine/wgpu_types.py) against each parsed on its first use; the two ways
alternate, round by round, so that the machine's state weighs on both alike.

    .venv/bin/python bench/worker_start.py [--rounds 3] [--backend vulkan]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from statistics import median

from common import ROOT

# One worker's start as main() makes it, but step by step and in one thread.
CHILD = """
import json, sys, time
marks = [("start", time.monotonic())]
import wgpu.backends.wgpu_native
marks.append(("import wgpu-py", time.monotonic()))
import kernels.engine.wgpu_types as wgpu_types
from kernels.engine.device import open_device
from kernels.engine.resident import DeviceBuffers
from kernels.engine.worker import WARM_JOBS, Memo, import_job_modules, run_job
import_job_modules()
marks.append(("import the runner", time.monotonic()))
if sys.argv[1] == "first use":
    wgpu_types.parse_ahead = lambda ffi: 0
opened, env = open_device(sys.argv[2])
marks.append(("open the device", time.monotonic()))
for job in WARM_JOBS:
    assert run_job(opened, env, job, Memo(), DeviceBuffers())["status"] == "passed"
marks.append(("warm-up jobs", time.monotonic()))
print(json.dumps({name: end - marks[i][1] for i, (name, end) in enumerate(marks[1:])}))
"""
WAYS = ("parsed ahead", "first use")


def one_start(way: str, backend: str) -> dict[str, float]:
    env = {
        **os.environ,
        "OPENBLAS_NUM_THREADS": "1",
        "XDG_RUNTIME_DIR": os.environ.get("XDG_RUNTIME_DIR") or tempfile.mkdtemp(),
    }
    done = subprocess.run(
        [sys.executable, "-c", CHILD, way, backend],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    steps: dict[str, float] = json.loads(done.stdout.splitlines()[-1])
    return steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--backend", default="", help="vulkan or opengl: load only that one")
    args = parser.parse_args()
    times: dict[str, list[dict[str, float]]] = {way: [] for way in WAYS}
    for _ in range(args.rounds):
        for way in WAYS:
            times[way].append(one_start(way, args.backend))
    steps = list(times[WAYS[0]][0])
    print(f"a worker's start, median of {args.rounds} fresh processes each (ms)")
    print(f"{'step':20} " + " ".join(f"{way:>14}" for way in WAYS))
    totals = {way: 0.0 for way in WAYS}
    for step in steps:
        row = {way: 1000 * median(start[step] for start in times[way]) for way in WAYS}
        for way in WAYS:
            totals[way] += row[way]
        print(f"{step:20} " + " ".join(f"{row[way]:>14.1f}" for way in WAYS))
    print(f"{'in all':20} " + " ".join(f"{totals[way]:>14.1f}" for way in WAYS))
    print(f"first use / parsed ahead: {totals['first use'] / totals['parsed ahead']:.2f}x")


if __name__ == "__main__":
    main()
