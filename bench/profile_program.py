"""Where a warm replay of the 784x128 layer spends its time, as a harness and as a
learner's host program: the worker's run_job called in-process (the pool and the
database left out) on a warm memo and device buffers, its median over --runs calls, then
cProfile over as many, by own time and by cumulative time.

    .venv/bin/python bench/profile_program.py [--runs 20] [--batch 1000] [--top 30]
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import tempfile
import time
from pathlib import Path

from common import setup_django
from replay import PROGRAM, harness, make_version


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--batch", type=int, default=1000, help="rows of x")
    parser.add_argument("--top", type=int, default=30, help="functions listed")
    args = parser.parse_args()
    os.environ.setdefault("XDG_RUNTIME_DIR", tempfile.mkdtemp())
    setup_django(Path(tempfile.mkdtemp()) / "profile.sqlite3")
    from kernels.engine.device import open_device
    from kernels.engine.resident import DeviceBuffers
    from kernels.engine.worker import Memo, run_job
    from kernels.jobs import job_for, with_files
    from sessions.programs import KernelVersion

    device, env = open_device(os.environ.get("REPLAY_WGPU_BACKEND", ""))
    print(f"on {env.label}")
    for kind, program in (("harness", ""), ("program", PROGRAM)):
        slug = make_version(harness(args.batch), f"profile-{kind}", program)
        version = KernelVersion.objects.get(kernel__session__slug=slug)
        job = with_files(job_for(version), on_disk=True).payload
        memo, kept = Memo(), DeviceBuffers()
        for _ in range(3):
            run_job(device, env, job, memo, kept)
        times = []
        for _ in range(args.runs):
            started = time.perf_counter()
            run_job(device, env, job, memo, kept)
            times.append(1000 * (time.perf_counter() - started))
        print(f"== {kind}: run_job median {statistics.median(times):.2f} ms")
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(args.runs):
            run_job(device, env, job, memo, kept)
        profile.disable()
        stats = pstats.Stats(profile)
        stats.sort_stats("tottime").print_stats(args.top)
        stats.sort_stats("cumulative").print_stats(args.top)


if __name__ == "__main__":
    main()
