"""Bytes across the JavaScript boundary of a host program, against numpy copying them.

  in       a fetch() answered with N bytes, up to the program holding them in a
           Uint8Array (kernels/engine/host/js.py Script.answer, then the program's job)
  out      the N bytes a writeBuffer handed over, read into Python (Script.blob)
  program  a whole program on the device: fetch N bytes, writeBuffer them, copy them to
           a MAP_READ buffer, mapAsync and getMappedRange (two crossings in, one out)
  numpy    numpy copying the same N bytes: the floor every row is divided by

    .venv/bin/python bench/host_data.py [--runs 7] [--sizes 64K,1M,4M] [--no-device]

Each round measures every row once, so the machine's state weighs on all alike; prints
medians in ms and each row's ratio to numpy's copy in the same run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kernels.engine.host.js import Script
from kernels.engine.host.program import run_program

STAGED = """const adapter = await navigator.gpu.requestAdapter();
const device = await adapter.requestDevice();
const buffer = device.createBuffer({ size: SIZE, usage: GPUBufferUsage.COPY_DST });
const data = new Uint8Array(await (await fetch("data.bin")).arrayBuffer());
device.queue.writeBuffer(buffer, 0, data);
"""

ROUND_TRIP = """const adapter = await navigator.gpu.requestAdapter();
const device = await adapter.requestDevice();
const data = new Uint8Array(await (await fetch("data.bin")).arrayBuffer());
const usage = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST | GPUBufferUsage.COPY_SRC;
const buffer = device.createBuffer({ size: data.byteLength, usage });
const readUsage = GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST;
const read = device.createBuffer({ size: data.byteLength, usage: readUsage });
device.queue.writeBuffer(buffer, 0, data);
const encoder = device.createCommandEncoder();
encoder.copyBufferToBuffer(buffer, 0, read, 0, data.byteLength);
device.queue.submit([encoder.finish()]);
await read.mapAsync(GPUMapMode.READ);
const back = new Uint8Array(read.getMappedRange());
console.log(back[back.length - 1]);
"""

NO_DEVICE = {"features": [], "limits": {}, "info": {}}


def crossings(data: bytes) -> tuple[float, float]:
    """Seconds to hand data in (a fetch answer) and to take it out (a writeBuffer's blob)."""
    script = Script(STAGED.replace("SIZE", str(len(data))), time.monotonic() + 60, 1 << 30)
    script.start()
    while True:
        script.run_jobs()
        [entry] = script.take().record[-1:]
        if entry["op"] == "fetch":
            break
        script.answer(entry["request"], NO_DEVICE)
    started = time.perf_counter()
    script.answer(entry["request"], {"url": "data.bin", "size": len(data)}, data)
    script.run_jobs()
    handed_in = time.perf_counter() - started
    write = next(e for e in script.take().record if e["op"] == "writeBuffer")
    started = time.perf_counter()
    taken = script.blob(write["blob"])
    taken_out = time.perf_counter() - started
    assert taken == data, "the bytes came back changed"
    return handed_in, taken_out


def round_trip(gpu: tuple[object, object], data: bytes) -> float:
    device, env = gpu
    started = time.perf_counter()
    result = run_program(device, env, ROUND_TRIP, {"data.bin": data})  # type: ignore[arg-type]
    took = time.perf_counter() - started
    assert result.error is None, result.error
    assert result.readbacks[0].data == data, "the readback differs from what was written"
    return took


def numpy_copy(data: bytes) -> float:
    # Into memory already touched, so the floor is the copy, not the page faults.
    source = np.frombuffer(data, dtype=np.uint8)
    target = np.ones_like(source)
    started = time.perf_counter()
    np.copyto(target, source)
    return time.perf_counter() - started


def size_of(text: str) -> int:
    units = {"K": 1024, "M": 1024 * 1024}
    return int(text[:-1]) * units[text[-1].upper()] if text[-1].upper() in units else int(text)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--sizes", default="64K,1M,4M")
    parser.add_argument("--no-device", action="store_true")
    args = parser.parse_args()
    gpu = None
    if not args.no_device:
        from kernels.engine.device import open_device

        gpu = open_device()
        print(f"device: {gpu[1].as_dict().get('adapter', gpu[1])}")
    print(f"{'size':>6} {'row':>8} {'median ms':>10} {'x numpy':>9}")
    for text in args.sizes.split(","):
        data = np.random.default_rng(0).integers(0, 256, size_of(text), dtype=np.uint8).tobytes()
        rows: dict[str, list[float]] = {"numpy": [], "in": [], "out": [], "program": []}
        for _ in range(args.runs):
            handed_in, taken_out = crossings(data)
            rows["in"].append(handed_in)
            rows["out"].append(taken_out)
            rows["numpy"].append(numpy_copy(data))
            if gpu is not None:
                rows["program"].append(round_trip(gpu, data))
        floor = statistics.median(rows["numpy"])
        for name, times in rows.items():
            if times:
                ms = statistics.median(times) * 1000
                print(f"{text:>6} {name:>8} {ms:>10.2f} {statistics.median(times) / floor:>9.0f}")


if __name__ == "__main__":
    main()
