"""What the tutor and the automatic reviewer are told of a run's speed: a real run on
llvmpipe (its times told as the emulator's, no speed claimed) and a GPU's figures injected
into its outcome (the time, the share of peak, the speed-up)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from kernels.engine.device import open_device
from kernels.engine.outcome import Outcome
from kernels.engine.run import execute
from tests.base import ADD_HARNESS, ADD_SOURCE
from tests.kernels.test_showcase import FIXTURES
from tutor.review import offline_review
from tutor.run_facts import outcome_for_model

H100 = "NVIDIA H100 80GB HBM3 via Vulkan"


@pytest.fixture(scope="module")
def llvmpipe_run() -> Outcome:
    device, env = open_device()
    outcome = execute(device, env, {"self": ADD_SOURCE}, ADD_HARNESS, FIXTURES)
    assert outcome["status"] == "passed" and outcome["speed"]["emulated"]
    return outcome


def on_a_gpu(outcome: Outcome) -> Outcome:
    gpu: Any = copy.deepcopy(outcome)
    gpu["passes"][0].update(gpu_ms=0.01, bytes=1536)
    gpu["speed"].update(
        adapter=H100,
        emulated=False,
        gpu_ms=0.01,
        peaks={"bandwidth_gbs": 2800.0, "fma_gflops": 46000.0, "clock": "timestamp-query"},
        reference={"name": "numpy add", "ms": 0.004, "speedup": 0.4},
    )
    return gpu


def test_on_llvmpipe_the_model_is_told_the_times_are_the_emulators(llvmpipe_run) -> None:
    facts = json.loads(outcome_for_model(llvmpipe_run))

    speed = facts["speed"]
    assert speed["gpu_ms"] == llvmpipe_run["speed"]["gpu_ms"]
    assert "emulates a GPU on the CPU" in speed["note"]
    assert "against_reference" not in speed and "passes" not in speed


def test_on_llvmpipe_the_reviewer_says_nothing_of_speed(llvmpipe_run) -> None:
    text = offline_review(llvmpipe_run, ADD_SOURCE, ADD_HARNESS)

    assert text.startswith("**It passes:**")
    for claim in ("How fast", "faster", "slower", " ms"):
        assert claim not in text


def test_on_a_gpu_the_model_gets_each_pass_and_the_speed_up(llvmpipe_run) -> None:
    facts = json.loads(outcome_for_model(on_a_gpu(llvmpipe_run)))

    speed = facts["speed"]
    assert speed["adapter"] == H100 and "note" not in speed
    assert speed["passes"][0]["gpu_ms"] == 0.01
    assert speed["passes"][0]["bandwidth"] == pytest.approx(1536 / 1e-5 / 1e9 / 2800.0)
    assert speed["against_reference"] == "2.5x slower than numpy add on this machine's CPU"


def test_on_a_gpu_the_reviewer_tells_the_time_and_why_it_is_small(llvmpipe_run) -> None:
    text = offline_review(on_a_gpu(llvmpipe_run), ADD_SOURCE, ADD_HARNESS)

    assert (
        f"**How fast:** its passes took 0.01 ms on the GPU, 2.5x slower than numpy add on "
        f"this machine's CPU ({H100})." in text
    )
    assert "the cost of starting the work" in text


def test_a_run_without_times_has_no_speed_facts(llvmpipe_run) -> None:
    untimed = copy.deepcopy(llvmpipe_run)
    del untimed["speed"]
    assert "speed" not in json.loads(outcome_for_model(untimed))
    assert "How fast" not in offline_review(untimed, ADD_SOURCE, ADD_HARNESS)
