"""Digits per second through the showcase's WGSL forward pass (784 -> 128 -> 10), batched
and one digit at a time, against numpy's forward pass in float32, in the same run.

    .venv/bin/python bench/mnist.py [--single 300] [--repeats 5]

The kernel is the final version of the showcase session's `mnist` kernel; the weights and
the 1,000 test digits are fixtures/mnist/. GPU timings include uploading the digits,
the three passes and reading the probabilities back; the hidden layer and the logits
stay on the GPU. The batched pass must agree with numpy on every digit's class.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kernels.engine.device import import_wgpu, open_device  # noqa: E402


def final_kernel() -> str:
    session = json.loads((ROOT / "fixtures/showcase/gpu-inference-from-scratch.json").read_text())
    kernel = next(k for k in session["kernels"] if k["name"] == "mnist")
    source: str = max(kernel["versions"], key=lambda v: v["number"])["source"]
    return source


class Forward:
    """The three passes on one device, for a fixed batch size."""

    def __init__(self, device: Any, source: str, weights: list[np.ndarray], batch: int) -> None:
        wgpu = import_wgpu()
        storage = wgpu.BufferUsage.STORAGE
        self.device, self.batch = device, batch
        self.x = device.create_buffer(
            size=batch * 784 * 4, usage=storage | wgpu.BufferUsage.COPY_DST
        )
        params = [device.create_buffer_with_data(data=w, usage=storage) for w in weights]
        scratch = [device.create_buffer(size=batch * n * 4, usage=storage) for n in (128, 10)]
        self.probs = device.create_buffer(
            size=batch * 40, usage=storage | wgpu.BufferUsage.COPY_SRC
        )
        buffers = [self.x, *params, *scratch, self.probs]
        module = device.create_shader_module(code=source)
        rows = (batch + 7) // 8
        self.passes = []
        for entry, bindings, dispatch in (
            ("layer1", (0, 1, 2, 5), (16, rows, 1)),
            ("layer2", (3, 4, 5, 6), (2, rows, 1)),
            ("softmax", (6, 7), ((batch + 63) // 64, 1, 1)),
        ):
            pipeline = device.create_compute_pipeline(
                layout="auto", compute={"module": module, "entry_point": entry}
            )
            entries = [{"binding": b, "resource": {"buffer": buffers[b]}} for b in bindings]
            group = device.create_bind_group(
                layout=pipeline.get_bind_group_layout(0), entries=entries
            )
            self.passes.append((pipeline, group, dispatch))

    def __call__(self, digits: np.ndarray) -> np.ndarray:
        self.device.queue.write_buffer(self.x, 0, digits)
        encoder = self.device.create_command_encoder()
        for pipeline, group, dispatch in self.passes:
            compute = encoder.begin_compute_pass()
            compute.set_pipeline(pipeline)
            compute.set_bind_group(0, group)
            compute.dispatch_workgroups(*dispatch)
            compute.end()
        self.device.queue.submit([encoder.finish()])
        return np.frombuffer(self.device.queue.read_buffer(self.probs), np.float32).reshape(-1, 10)


def numpy_forward(
    x: np.ndarray, w1: np.ndarray, b1: np.ndarray, w2: np.ndarray, b2: np.ndarray
) -> np.ndarray:
    logits = np.maximum(x @ w1 + b1, 0) @ w2 + b2
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    probabilities: np.ndarray = shifted / shifted.sum(axis=1, keepdims=True)
    return probabilities


def rate(seconds: list[float], digits: int) -> float:
    return digits / statistics.median(seconds)


def timed(fn: Callable[[], object], repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return times


def main() -> None:
    # Mesa complains on stderr without one; the replay workers make their own.
    os.environ.setdefault("XDG_RUNTIME_DIR", tempfile.mkdtemp())
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--single", type=int, default=300, help="digits run one at a time")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    folder = ROOT / "fixtures/mnist"
    images = np.load(folder / "test_images.npy").astype(np.float32)
    labels = np.load(folder / "test_labels.npy")
    weights = [np.load(folder / f"{n}.npy").astype(np.float32) for n in ("w1", "b1", "w2", "b2")]
    count, single = len(images), images[: args.single]

    device, environment = open_device()
    source = final_kernel()
    batched, one = Forward(device, source, weights, count), Forward(device, source, weights, 1)
    batched(images), one(images[:1])  # compile (and, on llvmpipe, JIT) before timing

    probs = batched(images)
    reference = numpy_forward(images, *weights)
    agree = int((probs.argmax(1) == reference.argmax(1)).sum())
    accuracy = float((probs.argmax(1) == labels).mean())

    results = {
        "WGSL, 1,000 per dispatch": rate(timed(lambda: batched(images), args.repeats), count),
        "WGSL, one at a time": rate(
            timed(lambda: [one(d[None]) for d in single], max(1, args.repeats // 2)), len(single)
        ),
        "numpy, 1,000 at once": rate(
            timed(lambda: numpy_forward(images, *weights), args.repeats), count
        ),
        "numpy, one at a time": rate(
            timed(lambda: [numpy_forward(d[None], *weights) for d in single], args.repeats),
            len(single),
        ),
    }
    print(f"adapter: {environment.label}")
    print(f"classes agree with numpy on {agree} of {count} digits; accuracy {accuracy:.1%}")
    print(f"{'forward pass':28} {'digits/s':>12} {'vs numpy':>9}")
    for label, value in results.items():
        numpy_rate = results["numpy, 1,000 at once" if "1,000" in label else "numpy, one at a time"]
        print(f"{label:28} {value:>12,.0f} {value / numpy_rate:>8.2f}x")


if __name__ == "__main__":
    main()
