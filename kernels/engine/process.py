"""One replay worker process as the pool sees it: its pipes, the tail of its stderr,
and how it ended. The pool (kernels/engine/pool.py) decides what runs where."""

from __future__ import annotations

import collections
import contextlib
import logging
import math
import os
import select
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Any

from kernels.engine.messages import HEADER, MAX_FRAME, loads

log = logging.getLogger("kernels.engine.process")

STOP_GRACE = 2.0
STDERR_LINES = 40


class Deadline(Exception):
    """A worker did not answer before the job's deadline."""


@dataclass(frozen=True)
class Death:
    """A worker that died in the middle of a job, and what it left on stderr."""

    pid: int
    exit: str
    error: str
    stderr: tuple[str, ...]

    @property
    def in_compiler(self) -> bool:
        """Whether it died compiling a shader: faulthandler's traceback of the thread
        that crashed (the worker enables it) ends in wgpu's create_shader_module."""
        crashed = False
        for line in self.stderr:
            if line.startswith(("Current thread", "Fatal Python error")):
                crashed = True
            elif crashed and line.strip().endswith(" in create_shader_module"):
                return True
        return False

    @property
    def in_javascript(self) -> bool:
        """Whether it died running a program's JavaScript: the thread that crashed was in
        host/js.py, the one place that enters QuickJS (no other Python runs inside it)."""
        crashed = False
        for line in self.stderr:
            if line.startswith("Current thread"):
                crashed = True
            elif crashed and not line.strip():
                return False
            elif crashed and "kernels/engine/host/js.py" in line:
                return True
        return False

    def report(self) -> str:
        stderr = "\n".join(self.stderr) or "(nothing)"
        return f"Worker {self.pid} {self.exit} ({self.error}). Last lines of its stderr:\n{stderr}"


class WorkerProcess:
    """One worker process, and the tail of what it wrote to stderr."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self.process = process
        self.pid = process.pid
        self.jobs = 0
        self.hello: dict[str, Any] = {}
        self.stderr: collections.deque[str] = collections.deque(maxlen=STDERR_LINES)
        self.stdout = process.stdout.fileno()  # type: ignore[union-attr]
        self.stdin = process.stdin.fileno()  # type: ignore[union-attr]
        os.set_blocking(self.stdin, False)
        self.drain = threading.Thread(target=self._drain, name=f"replay-stderr-{self.pid}")
        self.drain.daemon = True
        self.drain.start()

    def _drain(self) -> None:
        for raw in self.process.stderr:  # type: ignore[union-attr]
            line = raw.decode(errors="replace").rstrip()[:500]
            if line:
                self.stderr.append(line)
                log.debug("worker %s: %s", self.pid, line)

    @property
    def environment(self) -> dict[str, Any]:
        return self.hello.get("environment") or {}

    def send(self, data: bytes, deadline: float | None) -> None:
        view = memoryview(data)
        while view:
            wait_for(self.stdin, select.POLLOUT, deadline)
            try:
                written = os.write(self.stdin, view)
            except BlockingIOError:
                continue
            view = view[written:]

    def receive(self, deadline: float | None) -> dict[str, Any]:
        return loads(self.receive_bytes(deadline))

    def receive_bytes(self, deadline: float | None) -> bytearray:
        """The next frame's body (a message's JSON, or a result's attachment:
        worker.result_frame)."""
        (length,) = HEADER.unpack(read_exactly(self.stdout, HEADER.size, deadline))
        if length > MAX_FRAME:
            raise ValueError(f"worker sent a frame of {length} bytes")
        return read_exactly(self.stdout, length, deadline)

    def kill(self) -> None:
        # The worker leads its own session, so this also ends anything it started.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
        self.reap()

    def end(self) -> None:
        """After its output closed: let it finish dying, so that its exit status says how
        it ended; kill it if it lingers."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=STOP_GRACE)
        self.kill()

    def stop(self) -> None:
        """Ask the worker to exit (it does at end of input); kill it if it does not."""
        with contextlib.suppress(OSError):
            self.process.stdin.close()  # type: ignore[union-attr]
        try:
            self.process.wait(timeout=STOP_GRACE)
        except subprocess.TimeoutExpired:
            self.kill()
        self.reap()

    def reap(self) -> None:
        try:
            self.process.wait(timeout=STOP_GRACE)
        except subprocess.TimeoutExpired:
            log.error("worker %s did not exit after SIGKILL", self.pid)
        # The stderr tail is complete once the pipe reaches end of file.
        self.drain.join(timeout=1.0)
        for pipe in (self.process.stdin, self.process.stdout, self.process.stderr):
            with contextlib.suppress(OSError):
                pipe.close()  # type: ignore[union-attr]

    def exit_description(self) -> str:
        code = self.process.poll()
        if code is None:
            return "still running"
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return f"killed by {name}"
        return f"exited with status {code}"


def read_exactly(fd: int, size: int, deadline: float | None) -> bytearray:
    """size bytes from a pipe, read into one buffer made for them: reading chunks and
    joining them took 1.3x as long for 64 MiB (bench/whole_buffer.py)."""
    buffer = bytearray(size)
    view = memoryview(buffer)
    done = 0
    while done < size:
        wait_for(fd, select.POLLIN, deadline)
        read = os.readv(fd, [view[done:]])
        if not read:
            raise EOFError("the worker closed its output")
        done += read
    return buffer


def wait_for(fd: int, event: int, deadline: float | None) -> None:
    # poll, not select: a busy web process can hold file descriptors above 1024.
    poller = select.poll()
    poller.register(fd, event)
    while True:
        timeout = None
        if deadline is not None:
            timeout = deadline - time.monotonic()
            if timeout <= 0:
                raise Deadline
        if poller.poll(None if timeout is None else max(1, math.ceil(timeout * 1000))):
            return
