"""What keeping a buffer whole on request costs (kernels/whole_buffers.py), and why its
bytes leave the worker as a raw frame after the outcome's rather than in its JSON.

  transport   the outcome of a run that kept N bytes whole, from the worker's encoding to
              the bytes in the receiving process: as the worker sends it (the JSON frame,
              then a raw frame: worker.result_frames), against the same bytes as base64 in
              the JSON (pack_values' form for outputs); through a pipe that one thread
              writes and the pool's reading (process.read_exactly) reads; and the raw
              frame read as the pool read frames before, in chunks of up to 1 MiB joined
  run         a program filling one buffer of N bytes, replayed through a warm pool of one
              worker (kernels/engine/pool.py) as a replay (its first cells captured)
              and as the run keeping that buffer whole: the time a reader waits for each

    .venv/bin/python bench/whole_buffer.py [--runs 5] [--mib 16 64]

Prints medians, and each one's ratio to the baseline measured in the same run (raw
frames; the plain replay).
"""

from __future__ import annotations

import argparse
import base64
import functools
import itertools
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kernels.engine.messages import HEADER, encode_frame, loads  # noqa: E402
from kernels.engine.pool import Pool  # noqa: E402
from kernels.engine.process import read_exactly  # noqa: E402
from kernels.engine.worker import result_frames  # noqa: E402

WGSL = """@group(0) @binding(0) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(256)
fn fill(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x + id.y * 65535u * 256u;
    if (i < arrayLength(&y)) { y[i] = f32(i % 1000u); }
}
"""
PROGRAM = """const adapter = await navigator.gpu.requestAdapter();
const device = await adapter.requestDevice();
const module = device.createShaderModule({ code: await (await fetch("kernel.wgsl")).text() });
const y = device.createBuffer({ label: "y", size: SIZE, usage: GPUBufferUsage.STORAGE });
const pipeline = device.createComputePipeline({
  layout: "auto", compute: { module, entryPoint: "fill" },
});
const group = device.createBindGroup({
  layout: pipeline.getBindGroupLayout(0), entries: [{ binding: 0, resource: { buffer: y } }],
});
const encoder = device.createCommandEncoder();
const pass = encoder.beginComputePass({ label: "fill" });
pass.setPipeline(pipeline);
pass.setBindGroup(0, group);
pass.dispatchWorkgroups(Math.min(GROUPS, 65535), Math.ceil(GROUPS / 65535));
pass.end();
device.queue.submit([encoder.finish()]);
"""


def timed(work: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        work()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def in_chunks(fd: int, size: int, deadline: None) -> bytes:
    """How the pool read a frame before read_exactly: in reads of up to 1 MiB, joined."""
    chunks = []
    while size:
        chunk = os.read(fd, min(size, 1 << 20))
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def received(parts: list[bytes], frames: int, read: Callable[..., Any] = read_exactly) -> list[Any]:
    """The frames as the pool reads them from a worker (process.read_exactly), through a
    pipe that a thread writes them into."""
    reader, writer = os.pipe()

    def send() -> None:
        with os.fdopen(writer, "wb") as out:
            out.writelines(parts)

    sender = threading.Thread(target=send)
    sender.start()
    bodies = []
    for _ in range(frames):
        (length,) = HEADER.unpack(read(reader, HEADER.size, None))
        bodies.append(read(reader, length, None))
    sender.join()
    os.close(reader)
    return bodies


def raw(data: bytes, read: Callable[..., Any] = read_exactly) -> bytes | bytearray:
    """The bytes as the pool hands them on (a bytearray from read_exactly: not copied)."""
    outcome = {"status": "no_reference", "whole": {"asked": {"pass": 1}, "data": data}}
    head, attached = received(result_frames("1", outcome), 2, read)  # type: ignore[arg-type]
    loads(head)
    return attached  # type: ignore[no-any-return]


def in_json(data: bytes) -> bytes:
    whole = {"asked": {"pass": 1}, "base64": base64.b64encode(data).decode("ascii")}
    (head,) = received([encode_frame({"type": "result", "outcome": {"whole": whole}})], 1)
    return base64.b64decode(loads(head)["outcome"]["whole"]["base64"])


def run(pool: Pool, job: dict[str, Any]) -> None:
    """The job run again (a key of its own each time: the pool shares identical ones)."""
    pool.run(f"bench {next(KEYS)}", job)


KEYS = itertools.count()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--mib", type=int, nargs="+", default=[16, 64])
    args = parser.parse_args()
    print("transport (worker's encoding to the bytes received), median ms")
    for mib in args.mib:
        data = np.random.default_rng(0).random(mib * 1024**2 // 4, dtype=np.float32).tobytes()
        assert raw(data) == data and in_json(data) == data
        assert raw(data, in_chunks) == data
        fast = timed(functools.partial(raw, data), args.runs)
        joined = timed(functools.partial(raw, data, in_chunks), args.runs)
        slow = timed(functools.partial(in_json, data), args.runs)
        print(f"  {mib:>3} MiB  raw frame {fast:7.1f}  read in chunks {joined:7.1f} ", end="")
        print(f"({joined / fast:.1f}x)  base64 in JSON {slow:7.1f} ({slow / fast:.1f}x)")
    print("run through a warm pool of one worker, median ms")
    with Pool(size=1, deadline=60.0, max_queue=4) as pool:
        pool.environment(timeout=120)
        for mib in args.mib:
            size = mib * 1024**2
            source = PROGRAM.replace("SIZE", str(size)).replace("GROUPS", str(size // 4 // 256))
            job = {"kind": "program", "source": source, "wgsl": {"kernel.wgsl": WGSL}}
            whole = {**job, "whole": {"pass": 1, "buffer": "y"}}
            kept = pool.run(f"check {mib}", whole)["whole"]
            assert len(kept["data"]) == size, kept.get("problem")
            plain_ms = timed(functools.partial(run, pool, job), args.runs)
            whole_ms = timed(functools.partial(run, pool, whole), args.runs)
            print(
                f"  {mib:>3} MiB  replay {plain_ms:8.1f}  keeping it whole {whole_ms:8.1f}  "
                f"({whole_ms / plain_ms:.2f}x)"
            )


if __name__ == "__main__":
    main()
