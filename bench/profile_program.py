"""Where a warm replay of the 784x128 layer spends its time, as a harness and as a
learner's host program: the worker's run_job called in-process (the pool and the
database left out) on a warm memo and device buffers, its median over --runs calls, then
cProfile over as many, by own time and by cumulative time. With --double SIDE, the size
sweep's y = 2x harness over a SIDE x SIDE output instead (at 8, where a replay's fixed
cost shows), and the bare dispatch and readback it is compared with (bench/replay.py's
floor) in the same loop. Then the calls into wgpu-native that one run makes, by function,
and the floor's: what a replay does on the device beyond the bare dispatch; and the run
again without what the replay adds to it (the speed section's timestamps and repeats, the
capture of each pass's buffers), each median against the floor, round by round.

    .venv/bin/python bench/profile_program.py [--runs 20] [--batch 1000] [--top 30]
                                              [--double 8]
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import os
import pstats
import statistics
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from common import setup_django
from replay import DOUBLE, PROGRAM, SOURCE, Floor, double_harness, harness, make_version


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--batch", type=int, default=1000, help="rows of x")
    parser.add_argument("--top", type=int, default=30, help="functions listed")
    parser.add_argument("--double", type=int, default=0, help="y = 2x's side instead")
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
    layer = harness(args.batch)
    cases: list[tuple[str, dict[str, Any], str, str, Floor | None]] = [
        ("harness", layer, "", SOURCE, None),
        ("program", layer, PROGRAM, SOURCE, None),
    ]
    if args.double:
        side = args.double
        spec = double_harness(side)
        x = [np.ones(side * side, np.float32)]
        bare = Floor(device, DOUBLE, x, side * side * 4, spec["passes"][0]["dispatch"])
        cases = [(f"y = 2x at {side}x{side}", spec, "", DOUBLE, bare)]
    for number, (kind, spec, program, source, floor) in enumerate(cases):
        slug = make_version(spec, f"profile-{number}", program, source)
        version = KernelVersion.objects.get(kernel__session__slug=slug)
        job = with_files(job_for(version), on_disk=True).payload
        memo, kept = Memo(), DeviceBuffers()
        for _ in range(3):
            run_job(device, env, job, memo, kept)
        times, floors = [], []
        for _ in range(args.runs):
            started = time.perf_counter()
            run_job(device, env, job, memo, kept)
            times.append(1000 * (time.perf_counter() - started))
            if floor is not None:
                floors.append(1000 * floor.once())
        print(f"== {kind}: run_job median {statistics.median(times):.2f} ms")
        if floors:
            print(f"   the floor (bare dispatch and readback) {statistics.median(floors):.2f} ms")
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(args.runs):
            run_job(device, env, job, memo, kept)
        profile.disable()
        stats = pstats.Stats(profile)
        stats.sort_stats("tottime").print_stats(args.top)
        stats.sort_stats("cumulative").print_stats(args.top)
        runs: dict[str, Callable[[], Any]] = {
            "run_job": functools.partial(run_job, device, env, job, memo, kept)
        }
        if floor is not None:
            runs["the floor"] = floor.once
        for name, once in runs.items():
            counts = native_calls(once)
            listed = ", ".join(f"{n} {f.removeprefix('wgpu')}" for f, n in counts.most_common())
            print(f"   calls into wgpu-native, one {name}: {sum(counts.values())}: {listed}")
        if floor is not None:
            without(spec, floor, args.runs)


def without(spec: dict[str, Any], floor: Floor, runs: int) -> None:
    """The harness run (execute) with and without timestamps and the capture, each
    variant's median over the same rounds as the floor's, and its calls into wgpu-native."""
    from kernels.engine.device import open_device
    from kernels.engine.resident import DeviceBuffers
    from kernels.engine.run import execute
    from kernels.engine.worker import Memo

    backend = os.environ.get("REPLAY_WGPU_BACKEND", "")
    devices = {timed: open_device(backend, timestamps=timed) for timed in (True, False)}
    variants: dict[str, Callable[[], Any]] = {}
    for timed, capture, name in (
        (True, True, "as replayed"),
        (True, False, "no capture"),
        (False, True, "no timestamps, so no repeats"),
        (False, False, "neither"),
    ):
        device, env = devices[timed]
        run = functools.partial(execute, device, env, {"self": DOUBLE}, spec, Path("."))
        variants[name] = functools.partial(run, memo=Memo(), kept=DeviceBuffers(), capture=capture)
    variants["the floor"] = floor.once
    for once in variants.values():
        for _ in range(3):
            once()
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(runs):
        for name, once in variants.items():
            started = time.perf_counter()
            once()
            times[name].append(1000 * (time.perf_counter() - started))
    print("   the run without what a replay adds, median ms (calls into wgpu-native)")
    for name, once in variants.items():
        calls = sum(native_calls(once).values())
        print(f"     {name:30} {statistics.median(times[name]):6.2f}  ({calls})")


def native_calls(once: Callable[[], Any]) -> Counter[str]:
    """The wgpu-native functions once() calls through wgpu-py on this thread, with how many
    times each (not wgpu-py's poll thread's: it polls in a loop while a mapping waits).
    Only the calls wgpu-py looks up as it makes them: not set_bind_group's, which it binds
    as it loads, nor the releases Python's collector makes later."""
    from wgpu.backends.wgpu_native import _api

    counts: Counter[str] = Counter()
    caller = threading.get_ident()
    names = [name for name in dir(_api.libf) if name.startswith("wgpu")]
    originals = {name: getattr(_api.libf, name) for name in names}

    def counted(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any) -> Any:
            if threading.get_ident() == caller:
                counts[name] += 1
            return function(*args)

        return call

    for name, function in originals.items():
        setattr(_api.libf, name, counted(name, function))
    try:
        once()
    finally:
        for name, function in originals.items():
            setattr(_api.libf, name, function)
    return counts


if __name__ == "__main__":
    main()
