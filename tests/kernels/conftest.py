"""The device and the host-program runner that the host program tests share.

A test module that drives kernels another way defines its own `gpu` or `run`, which takes
precedence over these.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from kernels.engine.device import Environment, open_device
from kernels.engine.host.program import ProgramResult, run_program


@pytest.fixture(scope="module")
def gpu() -> tuple[object, Environment]:
    return open_device()


@pytest.fixture
def run(gpu: tuple[object, Environment]) -> Callable[..., ProgramResult]:
    device, env = gpu

    def run(source: str, files: Mapping[str, bytes] | None = None, **kwargs: Any) -> ProgramResult:
        result = run_program(device, env, source, files, **kwargs)
        # The report crosses the worker's pipe as strict JSON.
        json.dumps(result.report(), allow_nan=False)
        return result

    return run
