"""What a replay worker spends handing an outcome over and waiting for its device, each
against the way it was done before, in the same run.

- An outcome's message (kernels/engine/messages.py): written by the worker and read by
  the web process, with orjson against the json module, for the 8x8 y = 2x replay and
  the 784x128 layer's harness and program replays (bench/replay.py's).
- A wait for the device's submitted work (device.wait_for_queue): an empty submit and a
  poll on the caller's thread, against mapping a buffer made for it through wgpu-py's
  poll thread.
- A mapping of a buffer a copy filled, as a replay reads its readback, timestamps and
  capture (device.map_now, polled on the caller's thread), against wgpu-py's map_sync
  (its poll thread), for 4 bytes and for the layer's 512,000-byte output.

    .venv/bin/python bench/worker_messages.py [--runs 200]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common import median_seconds, setup_django
from replay import DOUBLE, PROGRAM, SOURCE, double_harness, harness, make_version


def outcomes(device: Any, env: Any) -> dict[str, Any]:
    from kernels.engine.resident import DeviceBuffers
    from kernels.engine.worker import Memo, run_job
    from kernels.jobs import job_for, with_files
    from sessions.programs import KernelVersion

    cases = {
        "y = 2x at 8x8": (double_harness(8), "", DOUBLE),
        "layer, harness": (harness(1000), "", SOURCE),
        "layer, program": (harness(1000), PROGRAM, SOURCE),
    }
    made = {}
    for number, (name, (spec, program, source)) in enumerate(cases.items()):
        slug = make_version(spec, f"messages-{number}", program, source)
        version = KernelVersion.objects.get(kernel__session__slug=slug)
        job = with_files(job_for(version), on_disk=True).payload
        made[name] = run_job(device, env, job, Memo(), DeviceBuffers())
    return made


def messages(made: dict[str, Any], runs: int) -> None:
    from kernels.engine.messages import dumps, loads

    print("an outcome written and read, median ms (the json module, then orjson)")
    for name, outcome in made.items():
        text = json.dumps(outcome, allow_nan=False).encode()
        body = dumps(outcome)
        write = functools.partial(json.dumps, outcome, allow_nan=False)
        before = 1000 * median_seconds(write, runs)
        before_read = 1000 * median_seconds(functools.partial(json.loads, text), runs)
        after = 1000 * median_seconds(functools.partial(dumps, outcome), runs)
        after_read = 1000 * median_seconds(functools.partial(loads, body), runs)
        print(
            f"  {name:16} {len(body):>9,} bytes  write {before:7.3f} -> {after:6.3f}"
            f" ({before / after:5.1f}x)  read {before_read:7.3f} -> {after_read:6.3f}"
            f" ({before_read / after_read:5.1f}x)"
        )


def waits(device: Any, runs: int) -> None:
    import wgpu

    from kernels.engine.device import wait_for_queue

    def fence() -> None:
        buffer = device.create_buffer(size=4, usage=wgpu.BufferUsage.MAP_READ)
        buffer.map_sync(wgpu.MapMode.READ)
        buffer.destroy()

    ways: dict[str, Callable[[], None]] = {
        "a buffer mapped": fence,
        "wait_for_queue": functools.partial(wait_for_queue, device),
    }
    times: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(runs):
        for name, wait in ways.items():  # interleaved: a busy moment counts against both
            device.queue.submit([device.create_command_encoder().finish()])
            started = time.perf_counter()
            wait()
            times[name].append(time.perf_counter() - started)
    baseline = statistics.median(times["a buffer mapped"])
    print("a wait for the device's submitted work, median ms")
    for name, measured in times.items():
        ms = statistics.median(measured)
        print(f"  {name:16} {1000 * ms:7.3f}  ({ms / baseline:4.2f}x)")


def mappings(device: Any, runs: int) -> None:
    import wgpu

    from kernels.engine.device import map_now

    usage = wgpu.BufferUsage
    print("a mapping of a buffer a copy filled, median ms (map_sync, then map_now)")
    for size in (4, 512_000):
        source = device.create_buffer(size=size, usage=usage.COPY_SRC)
        read = device.create_buffer(size=size, usage=usage.MAP_READ | usage.COPY_DST)
        ways: dict[str, Callable[[], None]] = {
            "map_sync": functools.partial(read.map_sync, "READ_NOSYNC"),
            "map_now": functools.partial(map_now, read),
        }
        times: dict[str, list[float]] = {name: [] for name in ways}
        for _ in range(runs):
            for name, mapping in ways.items():  # interleaved, as above
                encoder = device.create_command_encoder()
                encoder.copy_buffer_to_buffer(source, 0, read, 0, size)
                device.queue.submit([encoder.finish()])
                started = time.perf_counter()
                mapping()
                times[name].append(time.perf_counter() - started)
                read.unmap()
        before, after = (statistics.median(times[name]) for name in ways)
        print(
            f"  {size:>9,} bytes  {1000 * before:7.3f} -> {1000 * after:6.3f}"
            f" ({before / after:5.1f}x)"
        )
        source.destroy()
        read.destroy()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    os.environ.setdefault("XDG_RUNTIME_DIR", tempfile.mkdtemp())
    setup_django(Path(tempfile.mkdtemp()) / "messages.sqlite3")
    from kernels.engine.device import open_device

    device, env = open_device(os.environ.get("REPLAY_WGPU_BACKEND", ""))
    print(f"on {env.label}")
    messages(outcomes(device, env), args.runs)
    waits(device, args.runs)
    mappings(device, args.runs)


if __name__ == "__main__":
    main()
