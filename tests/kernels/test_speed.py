"""Each pass's GPU time, measured by the device's timestamps, and the run's speed report.

Real wgpu on llvmpipe (which has timestamp queries): the figures are there, labelled as
the CPU's emulation, and a device without timestamp queries gives none and says so. No
test asserts a time's size, only that it was measured and what it is labelled.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from kernels.engine.device import TIMESTAMPS, open_device
from kernels.engine.host.gpu import REPEATS
from kernels.engine.host.program import run_program_job
from kernels.engine.outcome import Outcome
from kernels.engine.peaks import measure_peaks
from kernels.engine.run import execute
from kernels.engine.speed import fractions
from tests.kernels.test_showcase import DATA, FIXTURES, KERNELS, harness_of, sources_for


@pytest.fixture(scope="module")
def gpu():
    return open_device()


def version(kernel: str, number: int) -> dict:
    return next(v for v in KERNELS[kernel]["versions"] if v["number"] == number)


def run_harness(device, env, kernel: str, number: int) -> Outcome:
    k = KERNELS[kernel]
    v = version(kernel, number)
    outcome = execute(device, env, sources_for(k, v), harness_of(k, v), FIXTURES)
    json.dumps(outcome, allow_nan=False)  # it crosses the worker's pipe as strict JSON
    return outcome


def test_the_device_is_opened_with_timestamps_where_the_adapter_has_them(gpu) -> None:
    device, env = gpu
    assert TIMESTAMPS in device.features
    assert env.timestamps
    assert env.as_dict()["timestamps"] is True


def test_each_pass_of_a_harness_run_has_its_gpu_time(gpu) -> None:
    device, env = gpu
    outcome = run_harness(device, env, "forward", 2)

    assert outcome["status"] == "passed"
    passes = outcome["passes"]
    assert len(passes) == 3
    assert all(isinstance(p["gpu_ms"], float) and p["gpu_ms"] >= 0 for p in passes)
    speed = outcome["speed"]
    assert speed["clock"] == "timestamp-query"
    assert speed["adapter"] == env.label
    assert speed["emulated"] is env.software  # llvmpipe: the CPU's time, not a GPU's
    assert speed["gpu_ms"] == pytest.approx(sum(p["gpu_ms"] for p in passes), abs=1e-3)
    # A cheap run is repeated and each time is the median of the runs.
    assert speed["repeats"] == REPEATS
    assert speed["upload_ms"] >= 0 and speed["readback_ms"] >= 0
    assert speed["problem"] == ""


def test_a_failed_run_that_dispatched_keeps_its_times(gpu) -> None:
    device, env = gpu
    outcome = run_harness(device, env, "matmul", 3)

    assert outcome["status"] == "mismatch"
    assert outcome["passes"][0]["gpu_ms"] is not None


def test_a_run_that_never_ran_has_no_speed(gpu) -> None:
    device, env = gpu
    outcome = run_harness(device, env, "matmul", 1)

    assert outcome["status"] == "compile_error"
    assert "speed" not in outcome


def scale_program_job() -> dict:
    """The showcase's scale v2 as its host program, checked against its harness."""
    kernel, v = KERNELS["scale"], version("scale", 2)
    return {
        "kind": "program",
        "source": v["host_program"],
        "files": {file["name"]: file["data"] for file in DATA["files"]},
        "wgsl": {"kernel.wgsl": v["source"], "scale.wgsl": v["source"]},
        "harness": harness_of(kernel, v),
    }


def test_a_host_program_run_is_timed_once(gpu) -> None:
    device, env = gpu
    outcome = run_program_job(device, env, scale_program_job())

    assert outcome["status"] == "passed"
    assert outcome["passes"] and all(p["gpu_ms"] is not None for p in outcome["passes"])
    assert outcome["speed"]["repeats"] == 1  # a program's passes are not run again
    assert outcome["speed"]["clock"] == "timestamp-query"


def test_a_device_without_timestamps_gives_no_figure_and_says_so(gpu) -> None:
    _, env = gpu
    import wgpu

    adapter = wgpu.gpu.request_adapter_sync()
    device = adapter.request_device_sync(label="untimed")
    untimed = dataclasses.replace(env, timestamps=False)
    outcome = run_harness(device, untimed, "forward", 2)

    assert outcome["status"] == "passed"
    assert [p["gpu_ms"] for p in outcome["passes"]] == [None, None, None]
    speed = outcome["speed"]
    assert speed["clock"] == "none"
    assert speed["gpu_ms"] is None
    assert "no timestamp queries" in speed["problem"]
    assert env.label in speed["problem"]


def test_a_pass_counts_its_bytes_and_a_known_operation_its_arithmetic(gpu) -> None:
    device, env = gpu
    outcome = run_harness(device, env, "matmul", 4)

    (record,) = outcome["passes"]
    # dims (16 bytes), a (24 x 20), b (20 x 16) and c (24 x 16) f32s, each bound once.
    assert record["bytes"] == 16 + 4 * (24 * 20 + 20 * 16 + 24 * 16)
    assert record["flops"] == 2 * 24 * 20 * 16
    reference = outcome["speed"]["reference"]
    assert reference["name"] == "numpy matmul"
    assert reference["ms"] >= 0
    assert reference["speedup"] == pytest.approx(
        reference["ms"] / outcome["speed"]["gpu_ms"], rel=0.01
    )


def test_a_pass_of_several_operations_has_no_flops(gpu) -> None:
    device, env = gpu
    outcome = run_harness(device, env, "forward", 2)

    assert all("flops" not in p and p["bytes"] > 0 for p in outcome["passes"])
    assert outcome["speed"]["reference"]["name"] == "numpy mlp_forward"


def test_a_worker_started_again_reads_the_peaks_the_first_one_kept(gpu, tmp_path, monkeypatch):
    from kernels.engine import peaks as module

    device, env = gpu
    first = module.kept_peaks(device, env, tmp_path)
    assert first is not None and first["bandwidth_gbs"] > 0
    assert json.loads((tmp_path / f"peaks-{env.id}.json").read_text()) == first

    def not_again(*args: object) -> None:
        raise AssertionError("measured again")

    monkeypatch.setattr(module, "measure_peaks", not_again)
    assert module.kept_peaks(device, env, tmp_path) == first
    # Another environment (a new driver, say) has none kept: it measures its own.
    other = dataclasses.replace(env, description=env.description + " (updated)")
    with pytest.raises(AssertionError, match="measured again"):
        module.kept_peaks(device, other, tmp_path)
    # A damaged file is measured over and replaced.
    monkeypatch.undo()
    (tmp_path / f"peaks-{env.id}.json").write_text('{"bandwidth_gbs": -1}')
    again = module.kept_peaks(device, env, tmp_path)
    assert again is not None and again["bandwidth_gbs"] > 0
    assert json.loads((tmp_path / f"peaks-{env.id}.json").read_text()) == again
    # Without timestamps there is nothing to measure or read.
    untimed_device, untimed_env = open_device(timestamps=False)
    assert module.kept_peaks(untimed_device, untimed_env, tmp_path) is None


def test_peaks_are_measured_where_the_device_has_timestamps(gpu) -> None:
    device, env = gpu
    peaks = measure_peaks(device, env)

    assert peaks is not None
    assert peaks["bandwidth_gbs"] > 0 and peaks["fma_gflops"] > 0
    assert peaks["clock"] == TIMESTAMPS
    untimed_device, untimed_env = open_device(timestamps=False)
    assert measure_peaks(untimed_device, untimed_env) is None
    # A worker's environment carries them into each run's speed report.
    measured = dataclasses.replace(env, peaks=peaks)
    outcome = run_harness(device, measured, "matmul", 4)
    assert outcome["speed"]["peaks"] == peaks
    assert outcome["environment"]["peaks"] == peaks
    assert outcome["environment"]["id"] == env.id  # a measurement is not a new environment


def test_fractions_of_peak_from_injected_figures() -> None:
    peaks = {"bandwidth_gbs": 1000.0, "fma_gflops": 50_000.0, "clock": TIMESTAMPS}
    # 1 GB in 2 ms is 500 GB/s: half the peak; 10 GFLOP in 2 ms is 5 TFLOP/s: a tenth.
    record = {"gpu_ms": 2.0, "bytes": 1_000_000_000, "flops": 10_000_000_000}
    assert fractions(record, peaks) == pytest.approx({"bandwidth": 0.5, "arithmetic": 0.1})
    assert fractions({"gpu_ms": None, "bytes": 10}, peaks) == {}
    assert fractions(record, None) == {}
    assert "arithmetic" not in fractions({"gpu_ms": 1.0, "bytes": 10}, peaks)


def test_a_program_checked_against_a_reference_gets_the_references_time(gpu) -> None:
    device, env = gpu
    job = scale_program_job()
    outcome = run_program_job(device, env, job)

    reference = outcome["speed"]["reference"]
    assert reference["name"] == f"numpy {job['harness']['reference']['name']}"
    assert reference["ms"] >= 0
    assert reference["speedup"] == pytest.approx(
        reference["ms"] / outcome["speed"]["gpu_ms"], rel=0.01
    )
