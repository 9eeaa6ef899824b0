"""Buffers a worker keeps on its device between runs (kernels/engine/resident.py), on a
real wgpu device (llvmpipe here): inputs uploaded once, outputs made zeroed every run,
inputs a kernel may write never kept, least recently used first out past the budget."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kernels.engine.device import Environment, open_device
from kernels.engine.outcome import Outcome
from kernels.engine.resident import DeviceBuffers
from kernels.engine.run import execute
from tests.kernels.test_runner import ADD, add_harness


class CountingQueue:
    """The device's queue, naming each buffer the host writes into."""

    def __init__(self, queue: Any, uploads: list[str]) -> None:
        self.queue = queue
        self.uploads = uploads

    def write_buffer(self, buffer: Any, *args: Any, **kwargs: Any) -> Any:
        self.uploads.append(buffer.label)
        return self.queue.write_buffer(buffer, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.queue, name)


class CountingDevice:
    """The device, counting the uploads from the host into its buffers."""

    def __init__(self, device: Any) -> None:
        self.device = device
        self.uploads: list[str] = []
        self.queue = CountingQueue(device.queue, self.uploads)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.device, name)


@pytest.fixture(scope="module")
def gpu() -> tuple[Any, Environment]:
    return open_device()


@pytest.fixture
def run(gpu: tuple[Any, Environment], tmp_path: Path):
    device, env = gpu
    counting = CountingDevice(device)

    def run(source: str, harness: dict, kept: DeviceBuffers) -> tuple[Outcome, list[str]]:
        counting.uploads.clear()
        outcome = execute(counting, env, {"self": source}, harness, tmp_path, kept=kept)
        return outcome, list(counting.uploads)

    return run


# Adds into its output instead of storing: right only if c starts zeroed.
ACCUMULATE = ADD.replace("c[i] = a[i] + b[i];", "c[i] = c[i] + a[i] + b[i];")
# Declares a writable and writes into it before reading it back.
OVERWRITE = ADD.replace(
    "var<storage, read> a: array<f32>", "var<storage, read_write> a: array<f32>"
).replace("c[i] = a[i] + b[i];", "a[i] = 100.0;\n        c[i] = a[i] + b[i];")


def test_a_second_run_under_the_same_inputs_uploads_nothing(run) -> None:
    kept = DeviceBuffers()
    first, uploaded = run(ADD, add_harness(), kept)
    assert first["status"] == "passed" and sorted(uploaded) == ["a", "b"]
    again, uploaded = run(ADD, add_harness(), kept)
    assert again["status"] == "passed" and uploaded == []
    # Another version under the same harness shares them too.
    other, uploaded = run(ADD.replace("a[i] + b[i]", "b[i] + a[i]"), add_harness(), kept)
    assert other["status"] == "passed" and uploaded == []


# 16 workgroups of 64 for 1,024 cells: no store-count rerun (which runs the passes
# again on fresh buffers when the dispatch and the output disagree in size).
EXACT = {"n": 1024, "dispatch": 16}


def test_without_a_worker_cache_every_run_uploads_its_inputs(run) -> None:
    for _ in range(2):
        outcome, uploaded = run(ADD, add_harness(**EXACT), DeviceBuffers(budget=0))
        assert outcome["status"] == "passed" and sorted(uploaded) == ["a", "b"]


def test_an_output_starts_zeroed_every_run(run) -> None:
    kept = DeviceBuffers()
    for _ in range(3):
        outcome, _ = run(ACCUMULATE, add_harness(), kept)
        assert outcome["status"] == "passed", outcome["message"]
    # Only what the host fills is kept: an output is made new, zeroed, every run.
    assert sorted(key[-1] for key in kept.kept) == ["a", "b"]


def test_a_kernel_writing_into_an_input_does_not_poison_the_next_run(run) -> None:
    kept = DeviceBuffers()
    run(ADD, add_harness(**EXACT), kept)
    for _ in range(2):
        written, uploaded = run(OVERWRITE, add_harness(**EXACT), kept)
        # Its own copy of a every run (the diagnostic run's too, whose c starts with the
        # never-written sentinel); b, which it cannot write, stays kept.
        assert written["status"] == "mismatch" and uploaded == ["a", "a"]
        assert written["outputs"][0]["bad"] == 1024
    after, uploaded = run(ADD, add_harness(**EXACT), kept)
    assert after["status"] == "passed" and uploaded == []


def test_the_least_recently_used_buffers_go_past_the_budget(run) -> None:
    # a and b of 1,000 floats are 8,000 bytes, of 512 floats 4,096: not both.
    kept = DeviceBuffers(budget=10_000)
    run(ADD, add_harness(), kept)
    run(ADD, add_harness(n=512, dispatch=8), kept)
    assert sum(buffer.size for buffer in kept.kept.values()) <= 10_000
    # The first a went first; the first b stays.
    assert sorted((key[-1], buffer.size) for key, buffer in kept.kept.items()) == [
        ("a", 2048),
        ("b", 2048),
        ("b", 4000),
    ]
    outcome, uploaded = run(ADD, add_harness(), kept)
    assert outcome["status"] == "passed" and uploaded == ["a"]


def test_a_buffer_larger_than_the_budget_is_made_for_its_run_alone(run) -> None:
    kept = DeviceBuffers(budget=1000)
    for _ in range(2):
        outcome, uploaded = run(ADD, add_harness(**EXACT), kept)
        assert outcome["status"] == "passed" and sorted(uploaded) == ["a", "b"]
    assert not kept.kept
