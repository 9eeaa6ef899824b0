"""Helpers shared by the benchmark scripts: a scratch database and a real server."""

from __future__ import annotations

import http.client
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def setup_django(database: Path) -> None:
    """Point Django at a scratch SQLite file and create the schema."""
    os.environ["SQLITE_PATH"] = str(database)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    sys.path.insert(0, str(ROOT))
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


@contextmanager
def gunicorn(app: str, env: dict[str, str], workers: int = 1, threads: int = 1) -> Iterator[str]:
    """Serve app on a free port; yields its base URL."""
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "gunicorn",
        app,
        f"--workers={workers}",
        f"--threads={threads}",
        f"--bind=127.0.0.1:{port}",
        "--log-level=warning",
    ]
    process = subprocess.Popen(command, cwd=ROOT, env={**os.environ, **env})
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        else:
            raise RuntimeError("gunicorn did not start")
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=10)


def timed_gets(base: str, path: str, count: int, warmup: int = 20) -> tuple[list[float], int]:
    """Seconds per GET over one keep-alive connection, and the body size."""
    host = base.removeprefix("http://")
    connection = http.client.HTTPConnection(host, timeout=30)
    times, size = [], 0
    for index in range(warmup + count):
        started = time.perf_counter()
        connection.request("GET", path)
        response = connection.getresponse()
        body = response.read()
        elapsed = time.perf_counter() - started
        if response.status != 200:
            raise RuntimeError(f"GET {path}: {response.status}")
        if index >= warmup:
            times.append(elapsed)
        size = len(body)
    connection.close()
    return times, size


def median_seconds(work: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def median_ms(times: list[float]) -> float:
    return 1000 * statistics.median(times)


def p95_ms(times: list[float]) -> float:
    return 1000 * statistics.quantiles(times, n=20)[-1]
