"""Locks that die with the process holding them: who holds one, and whether it still runs.

A lock stored in the database records its holder's name: the host, the process's start
time (so a recycled process id is not taken for the holder) and its id, last. Any
process on the same host can then tell at once that a holder killed mid-work is gone,
and treat its lock as free. A holder on another host cannot be checked from here: its
lock is held by a short lease that a Heartbeat renews while the work goes on, and is free
once the lease runs out.
"""

from __future__ import annotations

import functools
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

from django.db import connection

log = logging.getLogger("config.processes")


@functools.cache
def _host() -> str:
    """This host, as its processes see each other: the host name, and on Linux the process
    id namespace (containers that share a host name do not share process ids)."""
    name = socket.gethostname()
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        return name
    return f"{name}/{namespace.removeprefix('pid:[').removesuffix(']')}"


def _start_time(pid: int) -> str | None:
    """When the process started, in clock ticks since boot ("" where that cannot be
    read); None if there is no such process."""
    if not Path("/proc/self/stat").exists():
        return _exists(pid)
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None
    except OSError:
        return _exists(pid)
    # Field 22, counted after the command name, which may hold spaces and parentheses.
    return stat.rsplit(")", 1)[1].split()[19]


def _exists(pid: int) -> str | None:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass  # it exists, under another user
    return ""


def process_name(pid: int) -> str:
    """host:start:pid of a running process."""
    return f"{_host()}:{_start_time(pid) or ''}:{pid}"


# This process's name, by pid: a forked child (a gunicorn worker) computes its own.
_named: dict[int, str] = {}


def this_process() -> str:
    pid = os.getpid()
    if pid not in _named:
        # Read once: /proc's stat costs more than the INSERT of the run it names.
        _named[pid] = process_name(pid)
    return _named[pid]


def claim_name() -> str:
    """This process's name and a fresh nonce: each claim of a lock is told apart, also
    between two threads of one process."""
    return f"{this_process()} {secrets.token_hex(4)}"


def is_gone(name: str) -> bool:
    """Whether the process a lock names (process_name or claim_name) has ended on this host.

    False for a process on another host, and for a name that is not one of ours: their
    leases decide.
    """
    parts = name.split(" ")[0].split(":")
    if len(parts) != 3:
        return False
    host, start, pid = parts
    if host != _host() or not pid.isdigit():
        return False
    started = _start_time(int(pid))
    if started is None:
        return True
    # Where start times are known, a different one is another process with a recycled id.
    return bool(started and start) and started != start


class Heartbeat:
    """Calls renew every interval seconds on a thread of its own until stopped, or until
    for_at_most seconds have passed (a stream that is never closed must not hold a lock
    for ever). renew runs with this thread's own database connection, closed after."""

    def __init__(self, renew: Callable[[], object], interval: float, for_at_most: float) -> None:
        self.renew = renew
        self.interval = interval
        self.until = time.monotonic() + for_at_most
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._beat, name="heartbeat", daemon=True)

    def start(self) -> Heartbeat:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopped.set()

    def _beat(self) -> None:
        while not self.stopped.wait(self.interval) and time.monotonic() < self.until:
            try:
                self.renew()
            except Exception:
                log.exception("renewing a lease failed")
            finally:
                connection.close()
