"""The sandbox a learner's Triton or CUDA program runs in (kernels/engine/sandbox.py), tried
by programs that attempt escapes, on a machine without a GPU: files outside the run's
scratch folder, the network, the worker's environment, another run's scratch, a fork
bomb, a loop that never ends, output without end. And the runner's outcome for what it
can run here (gpu_run.py): the program's output, its error at its line, its checks."""

from __future__ import annotations

import base64
import os
import shutil
import socket
import tempfile
import threading
import time
from pathlib import Path
from unittest import mock

import pytest

from kernels.engine import gpu_run, sandbox

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")

LIMITS = sandbox.Limits(wall_s=8, cpu_s=8, memory_bytes=1 << 30, processes=32)


def run(source: str, limits: sandbox.Limits = LIMITS, **files: str) -> dict:
    payload = {
        "kind": "triton",
        "entry": "main.py",
        "files": {
            name: base64.b64encode(text.encode()).decode()
            for name, text in {"main.py": source, **files}.items()
        },
        "deadline_s": limits.wall_s,
        "python": "python3",
    }
    return dict(gpu_run.run_program(payload, limits))


def printed(outcome: dict) -> str:
    return outcome["gpu"]["stdout"]


def test_a_program_runs_and_says_what_it_printed() -> None:
    outcome = run("import os\nprint('hello from', os.getcwd())\n")
    assert outcome["status"] == "passed", outcome
    assert printed(outcome) == "hello from /work/project\n"


def test_an_exception_is_reported_at_its_line() -> None:
    outcome = run("x = 1\n\n\ndef f():\n    return 1 / 0\n\n\nf()\n")
    assert outcome["status"] == "threw"
    error = outcome["gpu"]["error"]
    assert (error["type"], error["file"], error["line"]) == ("ZeroDivisionError", "main.py", 5)
    assert "main.py line 5" in outcome["message"]


def test_a_failed_check_is_a_mismatch_at_its_line() -> None:
    outcome = run("a = [1.0]\nassert a == [2.0], 'out differs from the reference'\n")
    assert outcome["status"] == "mismatch"
    assert outcome["message"] == (
        "A check failed at main.py line 2: out differs from the reference"
    )


def test_no_file_outside_the_scratch_folder() -> None:
    secret = Path(tempfile.mkdtemp()) / "db.sqlite3"
    secret.write_text("the database")
    outcome = run(
        "import os\n"
        f"for path in ['{secret}', '/etc/shadow', '/root', '/home', '{os.getcwd()}']:\n"
        "    try:\n"
        "        print(path, open(path).read(20) if os.path.isfile(path) else os.listdir(path))\n"
        "    except Exception as error:\n"
        "        print(path, type(error).__name__)\n"
        "try:\n"
        "    open('/usr/evil', 'w')\n"
        "except OSError as error:\n"
        "    print('write', type(error).__name__)\n"
    )
    lines = printed(outcome).splitlines()
    assert lines[0] == f"{secret} FileNotFoundError"
    assert lines[1] == "/etc/shadow PermissionError"
    assert lines[2:4] == ["/root FileNotFoundError", "/home FileNotFoundError"]
    assert lines[4] == f"{os.getcwd()} FileNotFoundError"
    assert lines[5] == "write OSError"
    assert not Path("/usr/evil").exists()


def test_no_network() -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    accepted: list[object] = []
    threading.Thread(target=lambda: accepted.append(server.accept()), daemon=True).start()
    outcome = run(
        "import socket\n"
        "try:\n"
        f"    socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
        "    print('connected')\n"
        "except OSError as error:\n"
        "    print(type(error).__name__)\n"
        "try:\n"
        "    socket.create_connection(('example.com', 80), timeout=2)\n"
        "except OSError as error:\n"
        "    print(type(error).__name__)\n"
    )
    server.close()
    assert printed(outcome).splitlines() == ["ConnectionRefusedError", "gaierror"]
    assert accepted == []


def test_no_secret_from_the_environment() -> None:
    with mock.patch.dict(os.environ, {"ANTHROPIC_API_KEY": "sk-ant-test-secret"}):
        outcome = run(
            "import os\nprint(sorted(os.environ))\nprint(open('/proc/1/environ').read())\n"
        )
    assert "sk-ant" not in printed(outcome)
    assert "ANTHROPIC" not in printed(outcome)
    assert "DJANGO" not in printed(outcome)


def test_no_other_runs_scratch() -> None:
    other = Path(tempfile.mkdtemp(prefix="kernelbin-run-", dir=gpu_run.scratch_base()))
    (other / "project").mkdir()
    (other / "project" / "answer.py").write_text("SECRET = 42\n")
    outcome = run(
        "import glob, os\n"
        "print(glob.glob('/tmp/kernelbin-run-*'), glob.glob('/work/../kernelbin-run-*'))\n"
        "print(os.listdir('/work'))\n"
    )
    shutil.rmtree(other)
    first, second = printed(outcome).splitlines()
    assert first == "[] []"
    assert sorted(eval(second)) == ["driver.py", "project"]  # noqa: S307 (our own output)


def test_a_fork_bomb_is_stopped_and_leaves_nothing() -> None:
    outcome = run(
        "import os, time\n"
        "children = 0\n"
        "for _ in range(10_000):\n"
        "    try:\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(60)\n"
        "            os._exit(0)\n"
        "        children += 1\n"
        "    except OSError:\n"
        "        break\n"
        "print('children', children)\n"
    )
    count = int(printed(outcome).split()[1])
    assert count < LIMITS.processes
    time.sleep(0.5)
    sleeping = [
        pid
        for pid in os.listdir("/proc")
        if pid.isdigit() and _cmdline(pid).startswith("python3\0/work/driver.py")
    ]
    assert sleeping == []


def _cmdline(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text()
    except OSError:
        return ""


def test_a_loop_that_never_ends_is_killed_at_the_deadline() -> None:
    limits = sandbox.Limits(wall_s=2, cpu_s=30, processes=32)
    started = time.monotonic()
    outcome = run(
        "import os, subprocess\n"
        "subprocess.Popen(['python3', '-c', 'import os; os.setsid(); "
        "[0 for _ in iter(int, 1)]'])\n"
        "while True:\n"
        "    pass\n",
        limits,
    )
    assert outcome["status"] == "timeout"
    assert time.monotonic() - started < 6
    time.sleep(0.3)
    assert not [p for p in os.listdir("/proc") if p.isdigit() and "iter(int, 1)" in _cmdline(p)]


def test_output_without_end_is_cut() -> None:
    limits = sandbox.Limits(wall_s=5, output_bytes=4096, file_bytes=1 << 20)
    outcome = run("while True:\n    print('x' * 1000)\n", limits)
    assert len(printed(outcome)) == 4096
    assert outcome["gpu"]["output_cut"]
    assert outcome["status"] != "passed"


def test_a_file_outside_the_project_cannot_be_named() -> None:
    outcome = run("print(1)\n", LIMITS, **{"../escape.py": "x"})
    assert outcome["status"] == "rejected"


def test_memcheck_errors_are_read_with_their_kernel() -> None:
    text = (
        "========= COMPUTE-SANITIZER\n"
        "========= Invalid __global__ write of size 16 bytes\n"
        "=========     at add_relu_kernel+0x1b0 in add_relu.py:12\n"
        "=========     by thread (0,0,0) in block (96,0,0)\n"
        "========= Invalid __global__ read of size 4 bytes\n"
        "=========     at matmul_naive+0x90\n"
    )
    assert gpu_run.memcheck_errors(text) == [
        {
            "what": "Invalid __global__ write of size 16 bytes",
            "kernel": "add_relu_kernel",
            "where": "add_relu.py:12",
        },
        {"what": "Invalid __global__ read of size 4 bytes", "kernel": "matmul_naive", "where": ""},
    ]


def test_speed_against_the_pytorch_reference() -> None:
    source = "def matmul(a, b):\n    pass\n"
    report = {
        "device": {"name": "NVIDIA H100 80GB HBM3"},
        "benchmarks": [
            {"line": 30, "code": "ours = do_bench(lambda: matmul(a, b))", "median_ms": 0.25},
            {"line": 31, "code": "theirs = do_bench(lambda: a @ b)", "median_ms": 0.0625},
        ],
    }
    figures = gpu_run.speed(report, source)
    assert figures is not None
    assert (figures["gpu_ms"], figures["line"], figures["clock"]) == (0.25, 30, "cuda-events")
    assert figures["reference"]["ms"] == 0.0625
    assert figures["reference"]["speedup"] == 0.25
    assert gpu_run.speed({"benchmarks": [{"code": "x", "median_ms": "1"}]}, source) is None


def test_each_launch_kind_carries_its_own_median_time_where_the_report_gives_one() -> None:
    # The driver's report is the program's to forge: only a finite, sane time is taken.
    launch = {"kernel": "add_relu_kernel", "grid": [97], "args": [], "count": 39, "line": 20}
    report = {
        "launches": [
            {**launch, "median_ms": 0.0123, "timed": 20},
            {**launch, "kernel": "untimed"},
            *(
                {**launch, "kernel": "forged", "median_ms": bad}
                for bad in (float("nan"), True, 1e9, -1)
            ),
        ]
    }

    timed, untimed, *forged = gpu_run.outcome_passes(report)

    assert (timed["name"], timed["gpu_ms"], timed["timed"], timed["dispatches"]) == (
        "add_relu_kernel",
        0.0123,
        20,
        39,
    )
    assert (untimed["gpu_ms"], untimed["timed"]) == (None, 0)
    assert [p["gpu_ms"] for p in forged] == [None] * 4
