"""A Triton or CUDA program's run on a GPU worker: the state's files in a scratch folder,
the learner's script run by gpu_driver.py in the sandbox (sandbox.py), first for
correctness under compute-sanitizer's memcheck where the worker has it (an out-of-bounds
read or write is found at its kernel, even where the results come out right), then as
it is, timed; the outcome in the one Outcome shape.

Job payload: kind ("triton" or "cuda"), entry (the script's path in the state), files
(path → base64), deadline_s, and where the worker sets them gpu (its GPU's index) and
python (the interpreter with PyTorch and Triton; KERNELBIN_GPU_PYTHON, else python3).
One job at a time per GPU: a lock file per GPU index, held for the whole run.

This module imports neither torch nor triton: only the sandboxed driver does.
"""

from __future__ import annotations

import base64
import fcntl
import json
import math
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kernels.engine import sandbox
from kernels.engine.outcome import Outcome, PassRecord, Status, failure, new_outcome

DRIVER = Path(__file__).with_name("gpu_driver.py")
MEMCHECK_EXIT = 86
MAX_REPORT_BYTES = 1 << 20
MAX_FILES_BYTES = 32 << 20
_PATH = re.compile(r"[A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)*")
_DEF = re.compile(r"^\s*def\s+([A-Za-z_]\w*)", re.M)
# compute-sanitizer's report of a bad access: "Invalid __global__ read of size 4 bytes",
# then "at add_relu_kernel+0x1a0 in /work/project/add_relu.py:10".
_INVALID = re.compile(r"=+\s+(Invalid __\w+__ (?:read|write)[^\n]*)")
_AT = re.compile(r"=+\s+at (?:0x[0-9a-f]+ in )?([^\s+]+)(?:\+0x[0-9a-f]+)?(?: in (\S+))?")


def scratch_base() -> Path:
    return Path(os.environ.get("KERNELBIN_GPU_SCRATCH") or tempfile.gettempdir())


@contextmanager
def gpu_lock(gpu: int | None) -> Iterator[None]:
    """One job at a time on a GPU (across this worker's processes and others')."""
    if gpu is None:
        yield
        return
    path = scratch_base() / f"kernelbin-gpu{gpu}.lock"
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _write_files(project: Path, files: dict[str, str]) -> None:
    total = 0
    for path, encoded in files.items():
        if not _PATH.fullmatch(path) or ".." in path.split("/") or len(path) > 200:
            raise ValueError(f"{path!r} is not a file name a program can have.")
        data = base64.b64decode(encoded, validate=True)
        total += len(data)
        if total > MAX_FILES_BYTES:
            raise ValueError("The program's files are larger than a run may take.")
        target = project / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)


def _environment(python_env: dict[str, str], gpu: int | None) -> dict[str, str]:
    env = {
        "PATH": "/usr/local/cuda/bin:/usr/local/bin:/usr/bin:/bin",
        "HOME": "/work",
        "TMPDIR": "/tmp",  # noqa: S108 (the sandbox's own tmpfs)
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
        "TRITON_CACHE_DIR": "/work/.cache/triton",
        "CUPY_CACHE_DIR": "/work/.cache/cupy",
        "TORCH_EXTENSIONS_DIR": "/work/.cache/torch_extensions",
        "XDG_CACHE_HOME": "/work/.cache",
        "MPLCONFIGDIR": "/work/.cache/matplotlib",
    }
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = "0"  # its own node is the only one it sees
    # The host's settings that keep NVLink multicast off, and where CUDA is.
    for name in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS"):
        if name in os.environ:
            env[name] = os.environ[name]
    return {**env, **python_env}


def _report(path: Path) -> dict[str, Any]:
    """The driver's report, read as untrusted: size-capped, a dict or nothing."""
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_REPORT_BYTES + 1)
        report = json.loads(data) if len(data) <= MAX_REPORT_BYTES else {}
    except (OSError, ValueError):
        return {}
    return report if isinstance(report, dict) else {}


def memcheck_errors(text: str) -> list[dict[str, str]]:
    """compute-sanitizer's bad accesses: what (the first line) and where (kernel, file)."""
    errors: list[dict[str, str]] = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if match := _INVALID.search(line):
            kernel = where = ""
            for after in lines[i + 1 : i + 8]:
                if at := _AT.search(after):
                    kernel, where = at[1], at[2] or ""
                    break
            error = {"what": match[1].strip(), "kernel": kernel, "where": where}
            if error not in errors:  # one bad access is reported by each thread making it
                errors.append(error)
            if len(errors) == 5:
                break
    return errors


def _text(value: Any, cap: int = 4000) -> str:
    return value[:cap] if isinstance(value, str) else ""


def _line(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _ms(value: Any) -> float | None:
    """A time the report gives, where it is one (the report is the program's to forge)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return round(float(value), 5) if math.isfinite(value) and 0 <= value < 1e7 else None


def outcome_passes(report: dict[str, Any]) -> list[PassRecord]:
    """Each kernel launch the driver saw (by kernel, grid and block), as a pass."""
    passes: list[PassRecord] = []
    launches = report.get("launches")
    for launch in launches if isinstance(launches, list) else []:
        if not isinstance(launch, dict) or len(passes) >= 64:
            continue
        record: dict[str, Any] = {
            "number": len(passes) + 1,
            "name": _text(launch.get("kernel"), 120) or "kernel",
            "line": _line(launch.get("line")),
            "dispatches": _line(launch.get("count")) or 0,
            # The median of its first launches, each between two CUDA events (the driver).
            "gpu_ms": _ms(launch.get("median_ms")),
            "timed": _line(launch.get("timed")) or 0,
            "grid": launch.get("grid") if isinstance(launch.get("grid"), list | str) else None,
            "block": launch.get("block") if isinstance(launch.get("block"), list) else None,
            "args": args[:32] if isinstance(args := launch.get("args"), list) else [],
        }
        passes.append(record)  # type: ignore[arg-type]  # PassRecord and the launch's keys
    return passes


def speed(report: dict[str, Any], entry_source: str) -> dict[str, Any] | None:
    """outcome["speed"] from the program's do_bench calls: the PyTorch reference is a
    benchmark whose code calls none of the functions the script defines (`lambda: a @ b`,
    `lambda: torch.relu(x + y)`); the first other one is the program's time."""
    benchmarks = [
        b
        for b in (report.get("benchmarks") or [])
        if isinstance(b, dict) and isinstance(b.get("median_ms"), int | float)
    ]
    if not benchmarks:
        return None
    defined = set(_DEF.findall(entry_source))

    def is_reference(b: dict[str, Any]) -> bool:
        code = _text(b.get("code"), 300)
        return not any(re.search(rf"\b{n}\s*[\[(]", code) for n in defined)

    references = [b for b in benchmarks if is_reference(b)]
    ours = [b for b in benchmarks if not is_reference(b)]
    if not ours:
        return None
    mine = float(ours[0]["median_ms"])
    result: dict[str, Any] = {
        "clock": "cuda-events",
        "adapter": _text((report.get("device") or {}).get("name"), 200),
        "emulated": False,
        "repeats": 0,  # do_bench decides: as many as fit in its 100 ms
        "gpu_ms": mine,
        # The program moves its own tensors: no copy of it is timed apart.
        "upload_ms": None,
        "readback_ms": None,
        "line": _line(ours[0].get("line")),
        "problem": "",
    }
    if references:
        theirs = float(references[0]["median_ms"])
        result["reference"] = {
            "name": "PyTorch",
            "where": "the same GPU",
            "code": _text(references[0].get("code"), 300),
            "ms": theirs,
            "speedup": theirs / mine if mine > 0 else None,
        }
    return result


def _status_of(error: dict[str, Any]) -> tuple[Status, str]:
    kind, module = _text(error.get("type"), 100), _text(error.get("module"), 100)
    where = f"{_text(error.get('file'), 200)} line {error.get('line')}"
    message = _text(error.get("message"), 300)
    if kind == "AssertionError":
        return Status.MISMATCH, f"A check failed at {where}: {message or 'assert'}"
    if kind in ("CompilationError", "CompileException") or module.startswith("triton.compiler"):
        return Status.COMPILE_ERROR, f"The kernel does not compile ({where}): {message}"
    if "illegal memory access" in message:
        return Status.THREW, f"An illegal memory access was found at {where}: {message}"
    return Status.THREW, f"{kind} at {where}: {message}"


def run_program(payload: dict[str, Any], limits: sandbox.Limits | None = None) -> Outcome:
    started = time.monotonic()
    gpu = payload.get("gpu")
    gpu = gpu if isinstance(gpu, int) else None
    entry = payload.get("entry")
    files = payload.get("files") or {}
    if not isinstance(entry, str) or not isinstance(files, dict) or entry not in files:
        return failure(Status.REJECTED, "The program state names no script to run.", "")
    deadline = float(payload.get("deadline_s") or 60.0)
    limits = limits or sandbox.Limits(wall_s=deadline, cpu_s=int(deadline * 2) + 5)
    python = payload.get("python") or os.environ.get("KERNELBIN_GPU_PYTHON") or "python3"
    scratch = Path(tempfile.mkdtemp(prefix="kernelbin-run-", dir=scratch_base()))
    try:
        project = scratch / "project"
        project.mkdir()
        try:
            _write_files(project, files)
        except (ValueError, TypeError) as error:
            return failure(Status.REJECTED, str(error), "")
        shutil.copyfile(DRIVER, scratch / "driver.py")
        env = _environment({}, gpu)
        memcheck: list[dict[str, str]] = []
        checked: sandbox.Finished | None = None
        with gpu_lock(gpu):
            sanitizer = shutil.which("compute-sanitizer", path=env["PATH"])
            if gpu is not None and sanitizer:
                checked = sandbox.run(
                    scratch,
                    [
                        sanitizer,
                        "--tool",
                        "memcheck",
                        "--print-limit",
                        "5",
                        "--error-exitcode",
                        str(MEMCHECK_EXIT),
                        python,
                        "/work/driver.py",
                        entry,
                        "/work/check.json",
                        "--check",
                    ],
                    {**env, "PYTORCH_NO_CUDA_MEMORY_CACHING": "1"},
                    limits,
                    gpu,
                )
                memcheck = memcheck_errors(checked.stdout + checked.stderr)
            # A program that never ends under memcheck would not end timed either: its
            # deadline is spent once.
            finished = (
                checked
                if checked is not None and checked.timed_out
                else sandbox.run(
                    scratch,
                    [python, "/work/driver.py", entry, "/work/report.json"],
                    env,
                    limits,
                    gpu,
                )
            )
        report = _report(scratch / "report.json")
        source = base64.b64decode(files[entry]).decode("utf-8", "replace")
        return _outcome(payload, report, finished, memcheck, sanitizer is not None, source, started)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _outcome(
    payload: dict[str, Any],
    report: dict[str, Any],
    finished: sandbox.Finished,
    memcheck: list[dict[str, str]],
    checked: bool,
    source: str,
    started: float,
) -> Outcome:
    error = report.get("error") if isinstance(report.get("error"), dict) else None
    if finished.timed_out:
        status = Status.TIMEOUT
        message = f"The program did not finish within {payload.get('deadline_s', 60)} s."
    elif memcheck:
        first = memcheck[0]
        status = Status.THREW
        message = (
            f"{first['what']} in {first['kernel'] or 'a kernel'}"
            f"{' at ' + first['where'] if first['where'] else ''} (compute-sanitizer memcheck)"
        )
        if error is not None:
            message += "; then " + _status_of(error)[1]
        elif report:
            message += "; its own checks passed nonetheless"
    elif error is not None:
        status, message = _status_of(error)
    elif finished.returncode != 0 or not report:
        status = Status.CRASHED
        message = f"The program ended without a report (exit {finished.returncode})."
    else:
        status = Status.PASSED
        message = "The program ran to its end: its own checks passed."
    device: dict[str, Any] = report["device"] if isinstance(report.get("device"), dict) else {}
    name = _text(device.get("name"), 200)
    environment = {
        "adapter": name,
        "backend": "cuda",
        "description": (
            f"torch {_text(device.get('torch'), 40)}, CUDA {_text(device.get('cuda'), 20)}"
        ),
        "software": not name,
        "runner": "gpu-1",
        "label": name or "no GPU",
        "id": f"cuda:{name}:{_text(device.get('torch'), 40)}:{_text(report.get('triton'), 20)}",
    }
    wall_ms = round((time.monotonic() - started) * 1000, 1)
    # Its GPU time is in speed: the run's wall clock (PyTorch's start, compute-sanitizer's
    # pass) is not a dispatch's.
    timings = {"compile_ms": None, "run_ms": None, "wall_ms": wall_ms}
    outcome = new_outcome(status, message, environment, timings)  # type: ignore[arg-type]
    outcome["passes"] = outcome_passes(report)
    if figures := speed(report, source):
        outcome["speed"] = figures  # type: ignore[typeddict-item]
    outcome["gpu"] = {  # type: ignore[typeddict-unknown-key]
        "kind": payload.get("kind"),
        "entry": payload.get("entry"),
        "stdout": finished.stdout,
        "stderr": finished.stderr[-8000:],
        "output_cut": finished.output_cut,
        "exit": finished.returncode,
        "error": error,
        "memcheck": memcheck,
        "memchecked": checked,
        "benchmarks": found if isinstance(found := report.get("benchmarks"), list) else [],
        "device": device,
    }
    if error is not None:
        outcome["error"] = _text(error.get("message"))
    return outcome
