"""PyTorch's time for a reference on the worker's CUDA GPU, beside numpy's on its CPU
(gpu_reference.py asking torch_references.py in a process of its own).

Without PyTorch and a CUDA GPU (CI), the real reference process says it is unavailable and
a run is compared with numpy alone; a process that does not answer, or answers what is not
a time, is dropped and costs a run nothing. Where PyTorch sees a GPU (the H100, through
the README's device commands), the PyTorch references compute what the numpy ones do and a
real replay carries PyTorch's time beside numpy's.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kernels.engine import gpu_reference
from kernels.engine.gpu_reference import GpuReference
from kernels.engine.outcome import cacheable
from kernels.engine.references import REFERENCES
from tests.kernels.test_speed import gpu, run_harness  # noqa: F401 (gpu: a fixture)

TORCH_REFERENCES = [sys.executable, "-m", "kernels.engine.torch_references"]


STARTED: list[GpuReference] = []


def process(command: list[str]) -> GpuReference:
    reference = GpuReference(
        subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    )
    STARTED.append(reference)
    return reference


@pytest.fixture(autouse=True)
def processes_stopped():
    """Whatever a test asserts, the processes it started are stopped and reaped."""
    yield
    while STARTED:
        STARTED.pop().close()


def settled(reference: GpuReference) -> GpuReference:
    """The process once it has said whether it is ready (asking never waits for that)."""
    reference.settle()
    return reference


def talking(*lines: str) -> list[str]:
    """A process that says these lines, one per line it reads (the first at once)."""
    script = (
        "import sys\n"
        f"lines = {list(lines)!r}\n"
        "print(lines[0], flush=True)\n"
        "for said, _ in zip(lines[1:], sys.stdin):\n"
        "    print(said, flush=True)\n"
        "sys.stdin.read()\n"
    )
    return [sys.executable, "-c", script]


def cuda() -> bool:
    if importlib.util.find_spec("torch") is None:
        return False
    import torch

    return bool(torch.cuda.is_available())


@pytest.fixture
def no_reference_process():
    yield
    gpu_reference.use(None)


@pytest.mark.skipif(cuda(), reason="PyTorch sees a CUDA GPU here")
def test_without_a_cuda_gpu_the_reference_process_says_so_and_nothing_is_timed():
    reference = settled(process(TORCH_REFERENCES))

    assert reference.time("matmul", [(4, 4), (4, 4)]) is None
    assert reference.problem.startswith("PyTorch's reference process is not used: PyTorch")
    assert reference.process.returncode is not None


def test_a_process_that_never_says_it_is_ready_is_stopped_and_logged(monkeypatch, caplog):
    reference = process([sys.executable, "-c", "import time; time.sleep(30)"])

    assert reference.time("add", [(8,), (8,)]) is None
    assert reference.loading and reference.process.poll() is None
    monkeypatch.setattr(gpu_reference, "READY_SECONDS", 0.0)  # as if a minute went by

    assert reference.time("add", [(8,), (8,)]) is None
    assert not reference.loading
    assert "did not start" in reference.problem
    assert caplog.messages == [reference.problem]
    assert reference.process.returncode is not None


def test_a_run_made_while_pytorch_loads_goes_without_it_and_is_not_cached_and_a_later_one_has_it(
    gpu,  # noqa: F811
    no_reference_process,
    tmp_path,
):
    device, env = gpu
    loaded = tmp_path / "loaded"
    ready = '{"ready": true, "device": "a GPU"}'
    slow = talking(ready, '{"ms": 0.25, "runs": 20}')
    # It says it is ready only once the test has made `loaded`: "loading" until then.
    wait = f"import os, time\nwhile not os.path.exists({str(loaded)!r}): time.sleep(0.01)\n"
    slow[-1] = wait + slow[-1]
    reference = process(slow)
    gpu_reference.use(reference)

    outcome = run_harness(device, env, "matmul", 4)

    assert outcome["status"] == "passed"
    assert "gpu_reference" not in outcome["speed"]
    assert outcome["speed"]["gpu_reference_loading"] is True
    assert outcome["speed"]["reference"]["name"] == "numpy matmul"
    assert not cacheable(outcome)
    assert reference.problem == "" and reference.process.poll() is None
    loaded.touch()
    settled(reference)

    later = run_harness(device, env, "matmul", 4)

    assert later["speed"]["gpu_reference"]["ms"] == 0.25
    assert later["speed"]["gpu_reference"]["where"] == "a GPU"
    assert "gpu_reference_loading" not in later["speed"]
    assert cacheable(later)


@pytest.mark.parametrize(
    "answer",
    ['{"ms": -1.0}', '{"ms": "0.5"}', '{"ms": 1e300}', '{"ms": true}', "[1]", "not json", "{}"],
)
def test_an_answer_that_is_not_a_time_gives_no_time(answer):
    reference = settled(process(talking('{"ready": true, "device": "a GPU"}', answer)))

    assert reference.time("add", [(8,), (8,)]) is None


def test_a_time_is_asked_once_per_reference_and_shapes():
    ready = '{"ready": true, "device": "a GPU"}'
    reference = settled(
        process(talking(ready, '{"ms": 0.25, "runs": 20}', '{"ms": 0.5, "runs": 20}'))
    )

    first = reference.time("add", [(8,), (8,)])
    again = reference.time("add", [(8,), (8,)])
    other = reference.time("add", [(16,), (16,)])

    assert first == again == {"ms": 0.25, "runs": 20, "where": "a GPU"}
    assert other == {"ms": 0.5, "runs": 20, "where": "a GPU"}


def test_a_process_that_dies_mid_run_leaves_the_run_compared_with_numpy(
    gpu,  # noqa: F811
    no_reference_process,
):
    device, env = gpu
    ready = """print('{"ready": true, "device": "a GPU"}')"""
    gpu_reference.use(settled(process([sys.executable, "-c", ready])))  # then it ends

    outcome = run_harness(device, env, "matmul", 4)

    assert outcome["status"] == "passed"
    assert outcome["speed"]["reference"]["name"] == "numpy matmul"
    assert "gpu_reference" not in outcome["speed"]
    assert gpu_reference._started.problem.startswith("PyTorch's reference process is not used")


needs_cuda = pytest.mark.skipif(not cuda(), reason="needs PyTorch with a CUDA GPU")


@needs_cuda
def test_each_pytorch_reference_computes_what_the_numpy_one_does():
    import torch

    from kernels.engine.torch_references import _torch_references

    known = _torch_references(torch)
    assert set(known) == set(REFERENCES)
    rng = np.random.default_rng(1)
    shapes: dict[str, list[tuple[int, ...]]] = {
        "add": [(64,), (64,)],
        "matmul": [(8, 5), (5, 3)],
        "matmul_bias": [(8, 5), (5, 3), (3,)],
        "relu": [(64,)],
        "softmax": [(4, 10)],
        "reduce_sum": [(100,)],
        "mlp_hidden": [(8, 5), (5, 3), (3,)],
        "mlp_forward": [(8, 5), (5, 3), (3,), (3, 4), (4,)],
        "double": [(64,)],
        "transpose": [(6, 4)],
        "inclusive_scan": [(50,)],
        "conv1d": [(40,), (5,)],
    }
    for name, sizes in shapes.items():
        args = [rng.standard_normal(s).astype(np.float32) for s in sizes]
        ours = known[name](*[torch.from_numpy(a).cuda() for a in args]).cpu().numpy()
        expected = REFERENCES[name](*[a.astype(np.float64) for a in args])
        np.testing.assert_allclose(ours.reshape(-1), np.ravel(expected), rtol=1e-4, atol=1e-4)
    values = rng.integers(0, 10, 200)
    expected = np.asarray(REFERENCES["histogram"](values.astype(np.float64), np.zeros(10)))
    counted = known["histogram"](torch.from_numpy(values).cuda(), torch.zeros(10).cuda())
    assert counted.tolist() == expected.astype(np.int64).tolist()


@needs_cuda
def test_on_a_cuda_machine_a_replay_carries_pytorch_s_time_beside_numpy_s(
    gpu,  # noqa: F811
    no_reference_process,
    monkeypatch,
):
    device, env = gpu
    monkeypatch.setattr(gpu_reference, "NVIDIA_DEVICE", Path("/"))
    reference = gpu_reference.start()
    assert reference is not None
    STARTED.append(reference)
    gpu_reference.use(settled(reference))  # PyTorch loading: a minute at most

    outcome = run_harness(device, env, "matmul", 4)

    theirs = outcome["speed"]["gpu_reference"]
    assert theirs["name"] == "PyTorch matmul"
    assert theirs["where"] == torch_device_name()
    assert theirs["runs"] == 20 and theirs["ms"] > 0
    assert theirs["speedup"] == pytest.approx(theirs["ms"] / outcome["speed"]["gpu_ms"], rel=0.01)
    assert outcome["speed"]["reference"]["name"] == "numpy matmul"


def torch_device_name() -> str:
    import torch

    return str(torch.cuda.get_device_name(0))
