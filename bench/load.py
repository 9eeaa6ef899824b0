"""Load and faults on the scale-out stack: gunicorn (2 processes x 4 threads), PostgreSQL,
Redis (cache and broker) and a Celery worker with two replay processes, on this machine.

    .venv/bin/python bench/load.py [--seconds 30] [--connections 64]

1. wrk against a session page, an embed and a cached replay.json: requests/s, p99, errors.
2. 50 concurrent uncached replays of distinct kernels while wrk loads the session page:
   page p99 before and during, and every replay's outcome.
3. Faults: a Celery worker process killed (SIGKILL) in the middle of a job, then Redis
   stopped for 10 s: what readers saw, and that no Run was lost or left unfinished.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from common import ROOT, free_port, gunicorn

SHOWCASE = "gpu-inference-from-scratch"
ADD = """@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    out[id.x] = a[id.x] * SCALE + b[id.x];
}
"""
# Long on any adapter: about 4096 x 256 invocations of a 60,000-step loop.
SLOW = ADD.replace(
    "out[id.x] = a[id.x] * SCALE + b[id.x];",
    "var acc = 0.0;\n"
    "    for (var i = 0u; i < 60000u; i++) { acc += sin(f32(i) * a[id.x % 256u]); }\n"
    "    out[id.x % 256u] = acc;",
)


def harness(dispatch: int) -> dict[str, Any]:
    def filled(seed: int) -> dict[str, Any]:
        random = {"seed": seed, "low": -1, "high": 1}
        return {"usage": "read", "dtype": "f32", "shape": [256], "random": random}

    return {
        "buffers": {
            "a": filled(1),
            "b": filled(2),
            "out": {"usage": "read_write", "dtype": "f32", "shape": [256], "output": True},
        },
        "passes": [
            {"kernel": "self", "bind": {"0": "a", "1": "b", "2": "out"}, "dispatch": [dispatch]}
        ],
    }


def get(url: str) -> tuple[int, dict[str, Any] | str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:  # noqa: S310 (our own server)
            body = response.read().decode()
            status = response.status
    except urllib.error.HTTPError as error:
        body, status = error.read().decode(), error.code
    try:
        return status, json.loads(body)
    except ValueError:
        return status, body


def wrk(url: str, seconds: int, connections: int) -> dict[str, Any]:
    output = subprocess.run(
        ["wrk", "-t2", f"-c{connections}", f"-d{seconds}s", "--latency", url],
        capture_output=True,
        text=True,
        check=True,
    ).stdout

    def found(pattern: str, text: str = output) -> str:
        match = re.search(pattern, text)
        if match is None:
            raise RuntimeError(f"wrk's output has no {pattern!r}:\n{output}")
        return match[1]

    def millis(text: str) -> float:
        unit = found(r"(us|ms|s)$", text)
        return float(text.removesuffix(unit)) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]

    errors = re.search(
        r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", output
    )
    non_2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    return {
        "rps": float(found(r"Requests/sec:\s+([\d.]+)")),
        "p99": millis(found(r"99%\s+(\S+)")),
        "errors": sum(int(n) for n in errors.groups()) if errors else 0,
        "non_2xx": int(non_2xx[1]) if non_2xx else 0,
    }


def finish(base: str, path: str, give_up: float = 120) -> tuple[dict[str, Any], float, list[str]]:
    """Ask for a replay as a reader's page does, until it is done."""
    started = time.monotonic()
    seen: list[str] = []
    status, body = get(f"{base}{path}")
    while True:
        state = body.get("state") if isinstance(body, dict) else f"HTTP {status}"
        if not seen or seen[-1] != f"{status} {state}":
            seen.append(f"{status} {state}")
        if status == 200 and isinstance(body, dict):
            return body, time.monotonic() - started, seen
        if time.monotonic() - started > give_up:
            raise RuntimeError(f"{path} did not finish: {seen}")
        time.sleep(0.25)
        query = f"?run={body['run']['id']}" if status == 202 and isinstance(body, dict) else ""
        status, body = get(f"{base}{path}{query}")


def prepare() -> dict[str, str]:
    """Schema, showcase, 50 distinct kernels and a slow one; returns paths to load."""
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    call_command("load_showcase", verbosity=0)
    from sessions.models import Session, Turn
    from sessions.programs import Kernel, KernelVersion

    session = Session.objects.create(slug="load", title="Load", visibility="public")
    kernel = Kernel.objects.create(session=session, name="scale", harness=harness(4))
    # Turns 1-50 load the queue; 51-61 are kept for the Redis fault.
    for number in range(1, 62):
        turn = Turn.objects.create(session=session, number=number, role="learner", content="x")
        source = ADD.replace("SCALE", f"{number}.0")
        version = KernelVersion.objects.create(
            kernel=kernel, number=number, source=source, turn=turn
        )
        turn.kernel_version = version
        turn.save()
    slow = Session.objects.create(slug="slow", title="Slow", visibility="public")
    turn = Turn.objects.create(session=slow, number=1, role="learner", content="x")
    kernel = Kernel.objects.create(session=slow, name="slow", harness=harness(4096))
    version = KernelVersion.objects.create(kernel=kernel, number=1, source=SLOW, turn=turn)
    turn.kernel_version = version
    turn.save()
    reviewed = Turn.objects.filter(session__slug=SHOWCASE, kernel_version__isnull=False)
    replay_turn = reviewed.order_by("number").values_list("number", flat=True)[0]
    return {
        "session page": f"/s/{SHOWCASE}/",
        "embed": f"/s/{SHOWCASE}/embed/?from=1&to=10",
        "cached replay.json": f"/s/{SHOWCASE}/turns/{replay_turn}/replay.json",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=30)
    parser.add_argument("--connections", type=int, default=64)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp())
    services = ROOT / ".ci" / "services"
    env = {"PG_PORT": str(free_port()), "REDIS_PORT": str(free_port())}
    exports = subprocess.run(
        [services, "start", work],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **env},
    ).stdout
    env.update(re.findall(r"export (\w+)=(\S+)", exports))
    env.update({"REPLAY_BACKEND": "celery", "DJANGO_SETTINGS_MODULE": "config.settings"})
    os.environ.update(env)
    sys.path.insert(0, str(ROOT))
    celery = None
    try:
        targets = prepare()
        celery = subprocess.Popen(
            [
                Path(sys.executable).parent / "celery",
                "-A",
                "config",
                "worker",
                "-Q",
                "replay",
                "--concurrency",
                "2",
                "--loglevel",
                "WARNING",
            ],
            cwd=ROOT,
            env={**os.environ, "CONN_MAX_AGE": "0"},
            stdout=subprocess.DEVNULL,
            stderr=open(work / "celery.log", "w"),  # noqa: SIM115
        )
        with gunicorn("config.wsgi:application", env, workers=2, threads=4) as base:
            for path in targets.values():  # warm caches, run the replay once
                finish(base, path) if path.endswith(".json") else get(base + path)
            run_load(base, targets, args)
            run_faults(base, work, env)
            report_runs()
    finally:
        if celery:
            celery.terminate()
            celery.wait(30)
        subprocess.run([services, "stop", work], env={**os.environ, **env}, check=False)


def run_load(base: str, targets: dict[str, str], args: argparse.Namespace) -> None:
    print(f"== wrk: {args.connections} connections, {args.seconds} s each; gunicorn 2 x 4 threads")
    print(f"{'target':22} {'req/s':>8} {'p99 ms':>8} {'errors':>7} {'non-2xx':>8}")
    results = {}
    for label, path in targets.items():
        results[label] = wrk(base + path, args.seconds, args.connections)
        r = results[label]
        print(f"{label:22} {r['rps']:>8.0f} {r['p99']:>8.1f} {r['errors']:>7} {r['non_2xx']:>8}")

    print("\n== 50 concurrent uncached replays of distinct kernels, page under load meanwhile")
    during = {}
    loader = threading.Thread(
        target=lambda: during.update(
            wrk(base + targets["session page"], args.seconds, args.connections)
        )
    )
    loader.start()
    time.sleep(3)
    with ThreadPoolExecutor(50) as pool:
        finished = list(
            pool.map(lambda n: finish(base, f"/s/load/turns/{n}/replay.json"), range(1, 51))
        )
    loader.join()
    statuses: dict[str, int] = {}
    for body, _, _ in finished:
        statuses[body["outcome"]["status"]] = statuses.get(body["outcome"]["status"], 0) + 1
    slowest = max(elapsed for _, elapsed, _ in finished)
    print(
        f"replays: {sum(statuses.values())} of 50 finished: {statuses}; "
        f"the last after {slowest:.1f} s"
    )
    before = results["session page"]
    print(
        f"session page p99: {before['p99']:.1f} ms before, {during['p99']:.1f} ms during "
        f"({during['rps']:.0f} req/s, {during['errors']} errors, {during['non_2xx']} non-2xx)"
    )


def run_faults(base: str, work: Path, env: dict[str, str]) -> None:
    from kernels.models import Run

    print("\n== fault 1: a Celery worker process killed (SIGKILL) in the middle of a job")
    seen: list[str] = []
    reader = threading.Thread(
        target=lambda: seen.extend(finish(base, "/s/slow/turns/1/replay.json")[2])
    )
    reader.start()
    give_up = time.monotonic() + 60
    while time.monotonic() < give_up:
        run = Run.objects.filter(state=Run.State.RUNNING).exclude(worker="").first()
        if run:
            break
        time.sleep(0.05)
    else:
        raise RuntimeError("the slow replay never started")
    os.kill(int(run.worker.rsplit(":", 1)[1]), signal.SIGKILL)
    reader.join()
    run.refresh_from_db()
    print(f"killed {run.worker.split(':')[0]} worker pid; the reader saw: {' -> '.join(seen)}")
    print(f"run {run.pk}: {run.state}, {run.status}, attempts {run.attempts}")

    print("\n== fault 2: Redis (cache and broker) stopped for 10 s")
    services = ROOT / ".ci" / "services"
    subprocess.run([services, "redis-stop", work], env={**os.environ, **env}, check=True)
    answers: dict[str, list[int]] = {"session page": [], "cached replay": [], "new replay": []}
    told = ""
    for second in range(10):
        answers["session page"].append(get(f"{base}/s/{SHOWCASE}/")[0])
        answers["cached replay"].append(get(f"{base}/s/load/turns/1/replay.json")[0])
        status, body = get(f"{base}/s/load/turns/{51 + second}/replay.json")
        answers["new replay"].append(status)
        if status == 503 and isinstance(body, dict):
            told = body["error"]
        time.sleep(1)
    subprocess.run([services, "redis-start", work], env={**os.environ, **env}, check=True)
    for label, codes in answers.items():
        counts = {code: codes.count(code) for code in sorted(set(codes))}
        print(f"{label:14} HTTP status counts over 10 s: {counts}")
    if told:
        print(f"a reader asking for a new run was told: {told!r}")
    body, elapsed, _ = finish(base, "/s/load/turns/61/replay.json")
    print(
        f"after Redis came back a new replay finished in {elapsed:.1f} s "
        f"({body['outcome']['status']})"
    )


def report_runs() -> None:
    from kernels.models import Run
    from kernels.replay import lost

    time.sleep(2)
    unfinished = Run.objects.exclude(state=Run.State.DONE)
    print(
        f"\n== runs: {Run.objects.count()} in all; {unfinished.count()} unfinished "
        f"({unfinished.filter(lost()).count()} of them lost); statuses: "
        + ", ".join(
            f"{s}: {Run.objects.filter(status=s).count()}"
            for s in sorted(set(Run.objects.values_list("status", flat=True)))
        )
    )


if __name__ == "__main__":
    main()
