"""kernels.engine.pool: worker processes, deadlines, crashes and back-pressure. No database."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from kernels.engine.device import NoAdapter
from kernels.engine.pool import REPO_ROOT, Busy, Pool
from kernels.engine.process import Death

NO_VULKAN = {"VK_ICD_FILENAMES": "/nonexistent.json"}

ADD = """@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> c: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    if (gid.x < arrayLength(&c)) {
        c[gid.x] = a[gid.x] + b[gid.x];
    }
}
"""

# llvmpipe stops loops at 65,535 iterations, so this is long by sheer work: about a
# million invocations of 60,000 iterations each, well over 15 s on two cores.
HOSTILE = """@group(0) @binding(0) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    var acc = 0.0;
    for (var i = 0u; i < 60000u; i++) {
        acc = acc * 0.999 + sin(f32(i) + out[gid.x % 16u]);
    }
    out[gid.x] = acc;
}
"""

# 18 KB of nested parentheses overflow naga's stack: the compiler dies with SIGSEGV.
NAGA_CRASH = (
    "@group(0) @binding(0) var<storage, read_write> out: array<f32>;\n"
    "@compute @workgroup_size(1)\n"
    f"fn main() {{ out[0] = {'(' * 9000}1.0{')' * 9000}; }}\n"
)


def add_job(seed: int = 1) -> dict:
    def rand(s: int) -> dict:
        return {
            "usage": "read",
            "dtype": "f32",
            "shape": [256],
            "random": {"seed": s, "low": -1, "high": 1},
        }

    return {
        "sources": {"self": ADD},
        "harness": {
            "buffers": {
                "a": rand(seed),
                "b": rand(seed + 1),
                "c": {"usage": "read_write", "dtype": "f32", "shape": [256], "output": True},
            },
            "passes": [{"bind": {"0": "a", "1": "b", "2": "c"}, "dispatch": [4]}],
            "reference": {"name": "add", "args": ["a", "b"]},
        },
        "fixtures_dir": "fixtures",
    }


def hostile_job(workgroups: int = 4096) -> dict:
    """HOSTILE over this many workgroups: 4096 take minutes on llvmpipe, 32 about a second."""
    return {
        "sources": {"self": HOSTILE},
        "harness": {
            "buffers": {
                "out": {"usage": "read_write", "dtype": "f32", "shape": [4096 * 256], "zeros": True}
            },
            "passes": [{"bind": {"0": "out"}, "dispatch": [workgroups]}],
        },
        "fixtures_dir": "fixtures",
    }


def compile_only(source: str) -> dict:
    return {"sources": {"self": source}, "harness": None, "fixtures_dir": "fixtures"}


T = TypeVar("T")


def wait_for(condition: Callable[[], T], timeout: float = 20.0) -> T:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = condition()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError("condition not met in time")


def busy_pid(pool: Pool, other_than: int = 0) -> int:
    pids = wait_for(lambda: [p for p in pool.status()["busy_pids"] if p != other_than])
    return pids[0]


def kill_twice(pool: Pool) -> list[int]:
    """Kill the worker running the job, then the fresh one it is run again on."""
    first = busy_pid(pool)
    os.kill(first, signal.SIGKILL)
    second = busy_pid(pool, other_than=first)
    os.kill(second, signal.SIGKILL)
    return [first, second]


@pytest.fixture(scope="module")
def pool() -> Iterator[Pool]:
    with Pool(size=2, deadline=2.0) as pool:
        yield pool


@pytest.fixture(scope="module")
def single() -> Iterator[Pool]:
    with Pool(size=1, deadline=30.0, max_queue=1) as pool:
        yield pool


def test_it_runs_a_job(pool: Pool) -> None:
    outcome = pool.run("add-1", add_job())

    assert outcome["status"] == "passed", outcome["message"]
    assert outcome["timings"]["wall_ms"] > 0
    assert outcome["environment"] == pool.environment()
    status = pool.status()
    assert status["alive"] == 2 and status["environment"] == outcome["environment"]["label"]


def test_a_worker_warms_up_before_it_says_hello(pool: Pool) -> None:
    pool.environment()
    # A harness and a host program, run on the worker's device before its first job.
    assert pool.status()["warm_up"] == ["passed", "passed"]
    # It says where its start went, step by step (the pool logs it).
    # (a worker still starting has said nothing yet)
    workers = [s.worker for s in pool._slots if s.worker is not None]
    started = [w.hello["start_s"] for w in workers if w.hello.get("environment")]
    assert started
    for steps in started:
        assert list(steps) == ["device", "peaks", "warm-up"]
        assert all(seconds >= 0 for seconds in steps.values())


def test_identical_keys_share_one_run(pool: Pool) -> None:
    first = pool.submit("shared", add_job())
    second = pool.submit("shared", add_job())

    assert first is second
    assert first.result(timeout=30)["status"] == "passed"
    again = pool.submit("shared", add_job())
    assert again is not first
    assert again.result(timeout=30)["status"] == "passed"


def test_it_stops_a_job_past_its_deadline_and_keeps_serving(pool: Pool) -> None:
    started = time.monotonic()
    hostile = pool.submit("hostile", hostile_job())
    victim = busy_pid(pool)
    others = [pool.submit(f"meanwhile-{i}", add_job(seed=i)) for i in range(3)]

    # The other worker answers while the hostile job runs and is killed.
    assert [f.result(timeout=30)["status"] for f in others] == ["passed"] * 3
    outcome = hostile.result(timeout=30)
    elapsed = time.monotonic() - started

    assert outcome["status"] == "timeout"
    assert outcome["message"].startswith("Stopped after 2.0 s")
    assert outcome["environment"]["label"] and outcome["outputs"] == []
    assert elapsed < pool.deadline + 5
    wait_for(lambda: pool.status()["alive"] == 2 and victim not in pool.status()["worker_pids"])
    assert pool.run("after-timeout", add_job(seed=9))["status"] == "passed"
    assert pool.status()["timeouts"] == 1 and pool.status()["respawns"] >= 1


def test_it_reports_a_worker_killed_mid_job(single: Pool) -> None:
    future = single.submit("to-be-killed", hostile_job())
    pids = kill_twice(single)
    outcome = future.result(timeout=30)

    assert outcome["status"] == "crashed"
    assert "killed by SIGKILL" in outcome["message"]
    assert outcome["crash"] == {"stage": "run", "exit": "killed by SIGKILL", "workers": 2}
    # Process ids and stderr are for staff, kept apart from what a reader is shown.
    assert "Last lines of its stderr" in outcome["detail"]
    assert all(str(pid) in outcome["detail"] for pid in pids)
    assert not any(str(pid) in outcome["message"] + outcome["error"] for pid in pids)
    assert single.run("after-crash", add_job())["status"] == "passed"
    assert not set(pids) & set(single.status()["worker_pids"])
    assert single.status()["crashes"] >= 2


def test_a_job_whose_worker_dies_once_runs_again_on_a_fresh_one(single: Pool) -> None:
    future = single.submit("killed-once", hostile_job(workgroups=32))
    os.kill(busy_pid(single), signal.SIGKILL)

    outcome = future.result(timeout=60)

    assert outcome["status"] == "no_reference", outcome["message"]
    assert "crash" not in outcome


def test_a_kernel_that_crashes_the_compiler_ends_one_worker_and_says_so(single: Pool) -> None:
    before = single.status()

    outcome = single.run("naga-crash", compile_only(NAGA_CRASH))

    assert outcome["status"] == "crashed"
    assert outcome["message"].startswith("The kernel made the shader compiler crash")
    assert outcome["crash"] == {"stage": "compile", "exit": "killed by SIGSEGV", "workers": 1}
    # Not retried: naga is deterministic, so one dead worker is enough to know.
    assert single.status()["crashes"] == before["crashes"] + 1
    assert "in create_shader_module" in outcome["detail"]
    assert "Worker" not in outcome["message"] + outcome["error"]
    assert single.run("after-naga", add_job())["status"] == "passed"


def test_it_refuses_work_when_the_queue_is_full(single: Pool) -> None:
    running = single.submit("long", hostile_job())
    pid = busy_pid(single)
    queued = single.submit("queued", add_job())

    with pytest.raises(Busy) as refused:
        single.submit("one-too-many", add_job())

    assert refused.value.retry_after >= 1
    # A job already queued is shared, even with the queue full.
    assert single.submit("queued", add_job()) is queued
    os.kill(pid, signal.SIGKILL)
    os.kill(busy_pid(single, other_than=pid), signal.SIGKILL)
    assert running.result(timeout=30)["status"] == "crashed"
    assert queued.result(timeout=30)["status"] == "passed"


def test_it_falls_back_to_opengl_and_recycles_workers() -> None:
    with Pool(size=1, max_jobs_per_worker=1, env_overrides=NO_VULKAN) as pool:
        first = pool.run("gl-1", add_job())
        pid = wait_for(lambda: pool.status()["worker_pids"])
        second = pool.run("gl-2", add_job(seed=5))

        assert first["status"] == second["status"] == "passed"
        assert first["environment"]["backend"] == "OpenGL"
        assert "via OpenGL" in pool.environment()["label"]
        assert pool.status()["respawns"] >= 1
        assert pid != wait_for(lambda: pool.status()["worker_pids"])


def test_it_answers_infra_error_without_an_adapter() -> None:
    with Pool(size=1, backend="vulkan", env_overrides=NO_VULKAN) as pool:
        outcome = pool.run("no-adapter", add_job())

        assert outcome["status"] == "infra_error"
        assert "No vulkan adapter found" in outcome["message"]
        with pytest.raises(NoAdapter):
            pool.environment(timeout=10)
        assert pool.status()["environment"] is None


def test_it_answers_when_no_worker_starts(tmp_path: Path) -> None:
    # From an empty folder "-m kernels.engine.worker" cannot be imported: the worker dies at once.
    with Pool(size=1, python=sys.executable, cwd=tmp_path) as pool:
        outcome = pool.run("nowhere", add_job())

        assert outcome["status"] == "infra_error"
        assert "No module named 'kernels'" in outcome["error"]
        with pytest.raises(NoAdapter):
            pool.environment(timeout=10)


def test_closing_answers_queued_jobs() -> None:
    pool = Pool(size=1, deadline=30.0)
    running = pool.submit("long", hostile_job())
    busy_pid(pool)
    queued = pool.submit("waiting", add_job())

    pool.close()

    assert queued.result(timeout=1)["status"] == "infra_error"
    assert running.result(timeout=10)["status"] == "infra_error"
    with pytest.raises(RuntimeError):
        pool.submit("late", add_job())


def test_jobs_nobody_waits_for_any_more_are_dropped_before_they_run() -> None:
    with Pool(size=1, deadline=4.0, max_queue=8) as pool:
        slow = pool.submit("slow", hostile_job())
        busy_pid(pool)
        started = time.monotonic()
        gave_up = [pool.submit(f"gave-up-{i}", hostile_job(), wanted_for=0.2) for i in range(5)]
        asked_again = pool.submit("asked-again", add_job(), wanted_for=0.2)
        # Asked for again in time (a learner submitting again): shared, and kept.
        assert pool.submit("asked-again", add_job(), wanted_for=30) is asked_again
        waited_for = pool.submit("waited-for", add_job(seed=3), wanted_for=0.2)
        # A reader polling the run says how much longer it waits.
        assert pool.want("waited-for", 30)
        time.sleep(0.3)

        assert slow.result(timeout=30)["status"] == "timeout"
        assert asked_again.result(timeout=30)["status"] == "passed"
        assert waited_for.result(timeout=30)["status"] == "passed"
        elapsed = time.monotonic() - started

        assert all(future.cancelled() for future in gave_up)
        assert pool.status()["abandoned"] == 5 and pool.status()["timeouts"] == 1
        # Five more runs to the deadline would have taken six deadlines in all.
        assert elapsed < 3 * pool.deadline
        # Dropped jobs leave nothing behind: the same key is a new job.
        again = pool.submit("gave-up-0", add_job(), wanted_for=30)
        assert again.result(timeout=30)["status"] == "passed"


def test_workers_run_below_the_web_process_with_a_memory_cap_of_their_own(pool: Pool) -> None:
    import resource

    from kernels.engine.worker import MEMORY_BYTES, NICENESS

    assert pool.run("nice-add", add_job(5))["status"] == "passed"
    for pid in pool.status()["worker_pids"]:
        lower = min(19, os.getpriority(os.PRIO_PROCESS, 0) + NICENESS)  # 19 is the lowest
        assert os.getpriority(os.PRIO_PROCESS, pid) == lower
        assert resource.prlimit(pid, resource.RLIMIT_AS) == (MEMORY_BYTES, MEMORY_BYTES)


def test_workers_keep_freed_memory_for_their_next_job(pool: Pool) -> None:
    assert pool.run("malloc-add", add_job(6))["status"] == "passed"
    for pid in pool.status()["worker_pids"]:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        assert b"MALLOC_MMAP_THRESHOLD_=33554432" in environ
        assert b"MALLOC_TRIM_THRESHOLD_=134217728" in environ


def test_a_program_stuck_in_a_regular_expression_is_stopped_naming_its_line(single: Pool) -> None:
    # QuickJS cannot interrupt its regular expressions: the worker's watchdog answers.
    timeouts = single.status()["timeouts"]
    source = "await navigator.gpu.requestAdapter();\nconst text = 'a'.repeat(40);\n/(a+)+b/.test(text);\n"

    outcome = single.run("stuck-regex", {"kind": "program", "source": source, "deadline_s": 1})

    assert outcome["status"] == "timeout"
    assert outcome["program"]["error"]["line"] == 3
    assert outcome["message"].startswith("The program was still running at line 3 at its deadline")
    assert "regular expression" in outcome["message"]
    assert single.status()["timeouts"] == timeouts  # answered, not killed by the pool
    assert single.run("after-stuck-regex", add_job(3))["status"] == "passed"


def test_an_endless_loop_is_stopped_by_its_own_deadline_naming_its_line(single: Pool) -> None:
    timeouts = single.status()["timeouts"]
    source = "await navigator.gpu.requestAdapter();\nlet i = 0;\nwhile (true) i++;\n"

    outcome = single.run("endless", {"kind": "program", "source": source, "deadline_s": 1})

    assert outcome["status"] == "timeout"
    # QuickJS knows the line of the loop or of its condition.
    assert outcome["program"]["error"]["line"] in (2, 3)
    assert single.status()["timeouts"] == timeouts  # its own deadline, not the pool's kill


def test_a_fault_in_the_runner_is_told_without_its_exception(single: Pool) -> None:
    outcome = single.run("no-sources", {"harness": None, "fixtures_dir": "fixtures"})

    assert outcome["status"] == "crashed"
    assert "a fault in Kernelbin" in outcome["message"]
    assert "KeyError" not in outcome["message"] + outcome["error"]
    assert "KeyError: 'sources'" in outcome["detail"]  # for staff (Run.detail)


def test_a_worker_that_crashes_inside_quickjs_is_recognised_from_its_traceback() -> None:
    # A real crash in the frame that enters QuickJS, as the worker's faulthandler reports it.
    crash = (
        "import ctypes, faulthandler, time\n"
        "from kernels.engine.host.js import Script\n"
        "faulthandler.enable()\n"
        "Script('', time.monotonic() + 5, 1 << 20)._enter(lambda: ctypes.string_at(0))\n"
    )
    died = subprocess.run(
        [sys.executable, "-c", crash], capture_output=True, text=True, cwd=REPO_ROOT, check=False
    )
    stderr = tuple(died.stderr.splitlines())
    death = Death(1, "killed by SIGSEGV", "the worker closed its output", stderr)

    assert died.returncode == -signal.SIGSEGV
    assert death.in_javascript
    assert not death.in_compiler
    elsewhere = Death(
        1, "killed by SIGSEGV", "", tuple(line.replace("host/js.py", "run.py") for line in stderr)
    )
    assert not elsewhere.in_javascript
