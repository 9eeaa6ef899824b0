"""PyTorch's time for a run's reference on this machine's CUDA GPU, beside numpy's on its CPU:
what a WebGPU version on a GPU worker is compared with, as Triton and CUDA versions are.

The times come from a process of their own (torch_references.py), which a replay worker
starts before it caps its address space (CUDA cannot open under the cap) and asks for a
reference's name and its arguments' shapes only. It is started where PyTorch is installed
and an NVIDIA GPU is present, unless KERNELBIN_TORCH_REFERENCE is "off"; PyTorch takes
seconds to load, so nothing waits for it: a run made while it loads is compared with
numpy alone and says so (speed's gpu_reference_loading), which keeps it from standing in
for later runs (outcome.cacheable). Each (name, shapes) is timed once per worker.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
import select
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

SWITCH = "KERNELBIN_TORCH_REFERENCE"
NVIDIA_DEVICE = Path("/dev/nvidiactl")
# Loading PyTorch and opening CUDA took 4.3 to 4.6 s on the H100's host; a process not
# ready READY_SECONDS after its start is given up. A time asked of a ready one is waited
# for at most ANSWER_SECONDS (well inside a replay's deadline: the pool stops a worker
# past it).
READY_SECONDS = 60.0
ANSWER_SECONDS = 5.0
MAX_LINE = 4096


class GpuReference:
    """One torch_references process and what it answered."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self.process = process
        self.device = ""
        self.problem = ""
        self.pending = b""
        self.started = time.monotonic()
        self.times: dict[tuple[str, tuple[tuple[int, ...], ...]], dict[str, Any] | None] = {}

    @property
    def loading(self) -> bool:
        """Whether the process has not yet said whether it times on a GPU, nor been given up."""
        return not (self.device or self.problem)

    def settle(self) -> bool:
        """Wait until the process has said whether it times on a GPU (or is given up,
        READY_SECONDS after its start); whether it does. For a caller that may wait (a
        benchmark), where a replay goes on without it."""
        while self.loading and not self.ready():
            time.sleep(0.02)
        return bool(self.device)

    def ready(self) -> bool:
        """Whether the process has said it times on a GPU; never waits for it to say."""
        if not self.loading:
            return bool(self.device)
        said = self._read(0.0)
        young = time.monotonic() - self.started < READY_SECONDS
        if said is None and self.process.poll() is None and young:
            return False  # still loading: a later run asks again
        if said and said.get("ready"):
            self.device = str(said.get("device") or "this GPU")[:100]
        else:
            self._stop(str((said or {}).get("unavailable") or "it did not start"))
        return bool(self.device)

    def time(self, name: str, shapes: list[tuple[int, ...]]) -> dict[str, Any] | None:
        """{"ms", "runs", "where"} for the reference on arguments of these shapes; None
        where it cannot be timed here, or not yet (loading says which)."""
        key = (name, tuple(tuple(s) for s in shapes))
        if key not in self.times:
            if not self.ready():
                return None
            self.times[key] = self._ask(name, shapes)
        return self.times[key]

    def _ask(self, name: str, shapes: list[tuple[int, ...]]) -> dict[str, Any] | None:
        request = json.dumps({"name": name, "shapes": [list(s) for s in shapes]}) + "\n"
        try:
            assert self.process.stdin is not None
            self.process.stdin.write(request.encode())
            self.process.stdin.flush()
        except OSError:
            self._stop("it stopped")
            return None
        said = self._read(ANSWER_SECONDS)
        if said is None:
            self._stop("it did not answer")
            return None
        ms = said.get("ms")
        if type(ms) is not float or not 0 < ms < 1e6:
            return None
        return {"ms": ms, "runs": said.get("runs"), "where": self.device}

    def _read(self, seconds: float) -> dict[str, Any] | None:
        """The process's next line as JSON; None when it ends, is late, or says no object.
        With seconds 0, only what the process has written already is read."""
        assert self.process.stdout is not None
        out = self.process.stdout.fileno()
        deadline = time.monotonic() + seconds
        while b"\n" not in self.pending:
            left = max(deadline - time.monotonic(), 0.0)
            if len(self.pending) > MAX_LINE or not select.select([out], [], [], left)[0]:
                return None
            chunk = os.read(out, MAX_LINE)
            if not chunk:
                return None
            self.pending += chunk
        line, _, self.pending = self.pending.partition(b"\n")
        try:
            said = json.loads(line)
        except ValueError:
            return None
        return said if isinstance(said, dict) else None

    def _stop(self, why: str) -> None:
        if not self.problem:
            self.problem = f"PyTorch's reference process is not used: {why}."
            log.warning("%s", self.problem)
        self.device = ""
        self.close()

    def close(self) -> None:
        """Stop the process and close its pipes."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                # A request still buffered for a process that is gone cannot be flushed.
                with contextlib.suppress(OSError):
                    pipe.close()


_started: GpuReference | None = None


def start() -> GpuReference | None:
    """This worker's reference process, started where there can be one (before the worker
    caps its resources); asked once use() has made it the one gpu_reference_time asks."""
    wanted = os.environ.get(SWITCH, "auto") != "off"
    if not (wanted and NVIDIA_DEVICE.exists() and importlib.util.find_spec("torch")):
        return None
    command = [sys.executable, "-m", "kernels.engine.torch_references"]
    process = subprocess.Popen(  # noqa: S603 - our own module, run by this interpreter
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    return GpuReference(process)


def use(reference: GpuReference | None) -> None:
    global _started
    _started = reference


def gpu_reference_time(
    name: str, shapes: Callable[[], list[tuple[int, ...]]]
) -> dict[str, Any] | None:
    """The started process's time for the reference on arguments of shapes() (called only
    where there is a process); None without one."""
    return _started.time(name, shapes()) if _started is not None else None


def gpu_reference_loading() -> bool:
    """Whether this worker's reference process is still loading: a run now goes without
    the time it will give."""
    return _started is not None and _started.loading
