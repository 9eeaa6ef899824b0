"""Bytes across the JavaScript boundary of a host program, against numpy copying them.

  in       a fetch() answered with N bytes: Python copies them into an ArrayBuffer the
           shim allocated (kernels/engine/host/js.py Script.answer)
  in+job   that, then the program's job up to its writeBuffer: Response.arrayBuffer()
           and writeBuffer each copy the bytes, as they do in a browser
  out      the N bytes a writeBuffer handed over, read by Python where they are
           (Script.blob: a view of QuickJS's memory, not a copy; the one copy left is
           wgpu-native's, into the device's staging, which the floor below makes too)
  text-in  the alternative the shim used before: the bytes as a JSON list of uint32
           words that JSON.parse and a Uint32Array's set() read (bare QuickJS context)
  text-out and its way out: escape() of the bytes as Latin-1, unquoted in Python
  program  a whole program on the device: fetch N bytes, writeBuffer them, copy them to
           a MAP_READ buffer, mapAsync and getMappedRange (two crossings in, one out)
  numpy    numpy copying the same N bytes: the floor every row is divided by

    .venv/bin/python bench/host_data.py [--runs 7] [--sizes 64K,1M,4M] [--no-device] [--no-text]

Each round measures every row once, so the machine's state weighs on all alike; prints
medians in ms and each row's ratio to numpy's copy in the same run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import urllib.parse
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import quickjs

if TYPE_CHECKING:
    from kernels.engine.device import Environment

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

NO_DEVICE: dict[str, Any] = {"features": [], "limits": {}, "info": {}}


def crossings(data: bytes) -> tuple[float, float, float]:
    """Seconds to hand data in (a fetch answer), in and through the program's job up to
    its writeBuffer, and to take it out (a writeBuffer's blob)."""
    script = Script(STAGED.replace("SIZE", str(len(data))), time.monotonic() + 60, 1 << 30)
    script.start()
    while True:
        script.run_jobs()
        [entry] = script.take().record[-1:]
        if entry["op"] == "fetch":
            break
        script.answer(entry["request"], NO_DEVICE)
    started = time.perf_counter()
    script.answer(entry["request"], {"url": "data.bin"}, data)
    handed_in = time.perf_counter() - started
    script.run_jobs()
    through_job = time.perf_counter() - started
    write = next(e for e in script.take().record if e["op"] == "writeBuffer")
    started = time.perf_counter()
    taken = script.blob(write["blob"])
    taken_out = time.perf_counter() - started
    assert taken is not None and bytes(taken) == data, "the bytes came back changed"
    return handed_in, through_job, taken_out


TEXT = quickjs.Context()
TEXT.set_memory_limit(1 << 30)
TEXT_IN = TEXT.eval(
    "(words) => { const list = JSON.parse(words); const a = new Uint32Array(list.length);"
    " a.set(list); return a.length; }"
)
TEXT_OUT = TEXT.eval(
    "(size) => { const b = new Uint8Array(size).fill(65); const parts = [];"
    " for (let k = 0; k < size; k += 8192)"
    " parts.push(String.fromCharCode.apply(null, b.subarray(k, k + 8192)));"
    " return escape(parts.join('')); }"
)


def text_crossings(data: bytes) -> tuple[float, float]:
    """The text crossing: words in (json.dumps; numpy wrote the same text 6x faster, so
    this row is the JavaScript side's cost plus Python's writing), escape()d Latin-1 out."""
    words = np.frombuffer(data + b"\0" * (-len(data) % 4), dtype="<u4").tolist()
    started = time.perf_counter()
    assert TEXT_IN(json.dumps(words)) == len(words)
    handed_in = time.perf_counter() - started
    started = time.perf_counter()
    out = urllib.parse.unquote_to_bytes(TEXT_OUT(len(data)))
    taken_out = time.perf_counter() - started
    assert len(out) == len(data)
    return handed_in, taken_out


def round_trip(gpu: tuple[Any, Environment], data: bytes) -> float:
    device, env = gpu
    started = time.perf_counter()
    result = run_program(device, env, ROUND_TRIP, {"data.bin": data})
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
    parser.add_argument("--no-text", action="store_true", help="skip the text rows (slow)")
    args = parser.parse_args()
    gpu = None
    if not args.no_device:
        from kernels.engine.device import open_device

        gpu = open_device()
        print(f"device: {gpu[1].as_dict().get('adapter', gpu[1])}")
    print(f"{'size':>6} {'row':>8} {'median ms':>10} {'x numpy':>9}")
    for text in args.sizes.split(","):
        data = np.random.default_rng(0).integers(0, 256, size_of(text), dtype=np.uint8).tobytes()
        names = ["numpy", "in", "in+job", "out", "text-in", "text-out", "program"]
        rows: dict[str, list[float]] = {name: [] for name in names}
        for _ in range(args.runs):
            for name, took in zip(["in", "in+job", "out"], crossings(data), strict=True):
                rows[name].append(took)
            if not args.no_text:
                for name, took in zip(["text-in", "text-out"], text_crossings(data), strict=True):
                    rows[name].append(took)
            rows["numpy"].append(numpy_copy(data))
            if gpu is not None:
                rows["program"].append(round_trip(gpu, data))
        floor = statistics.median(rows["numpy"])
        for name, times in rows.items():
            if times:
                ms = statistics.median(times) * 1000
                ratio = statistics.median(times) / floor
                print(f"{text:>6} {name:>8} {ms:>10.2f} {ratio:>9.1f}")


if __name__ == "__main__":
    main()
