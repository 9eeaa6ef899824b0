"""The driver around a learner's Triton or CUDA program, run inside the sandbox with the
learner's Python (it imports nothing of Kernelbin's: it is copied into the run's scratch
folder and run there).

    python3 driver.py ENTRY REPORT [--check]

It runs ENTRY as __main__ in its folder and writes REPORT (JSON): the error the program
stopped at (type, message, and the line of the learner's file it was raised at, with
the Triton compiler's own line where it gives one), each kernel launch it could see
(Triton's JIT functions and cupy's RawKernel: the kernel, its grid, block and its
arguments' shapes and dtypes, counted by kernel and grid, and the median GPU time of its
launches after the first, TIMED_LAUNCHES of them, each between two CUDA events), and each
triton.testing.do_bench the program called (its line, its code, and the median of its
timed runs in milliseconds: do_bench times with CUDA events). With --check the program
runs for correctness only (under compute-sanitizer): do_bench runs its function once, and
no launch is timed.

The report is untrusted: the runner reads it with limits (gpu_run.py).
"""

from __future__ import annotations

import json
import linecache
import os
import runpy
import sys
import traceback
from typing import Any

MAX_LAUNCH_KINDS = 64
MAX_BENCHMARKS = 32
# Launches of a kernel (and grid) timed one by one: its second to 21st, so that the many a
# do_bench makes afterwards run as the program wrote them, with no event around them.
TIMED_LAUNCHES = 20

launches: dict[str, dict[str, Any]] = {}
benchmarks: list[dict[str, Any]] = []


def _shape(value: Any) -> Any:
    shape = getattr(value, "shape", None)
    if shape is not None and hasattr(value, "dtype"):
        return {"shape": [int(n) for n in shape], "dtype": str(value.dtype)}
    if isinstance(value, bool | int | float):
        return value
    return type(value).__name__


def _learner_line() -> tuple[str, int] | None:
    """The innermost frame of the learner's files (under the program's folder)."""
    root = os.getcwd() + os.sep
    for frame in reversed(traceback.extract_stack()[:-1]):
        if frame.filename.startswith(root) and not frame.filename.endswith("driver.py"):
            return os.path.relpath(frame.filename), frame.lineno or 0
    return None


def _record(kernel: str, grid: Any, block: Any, args: Any) -> list[Any] | None:
    """Count a launch; the list its CUDA events go in while it is among the first timed
    (None when it is not timed)."""
    key = f"{kernel}|{grid}|{block}"
    if key not in launches and len(launches) >= MAX_LAUNCH_KINDS:
        return None
    where = _learner_line()
    entry = launches.setdefault(
        key,
        {
            "kernel": kernel,
            "grid": grid,
            "block": block,
            "args": [_shape(a) for a in args][:32],
            "file": where[0] if where else "",
            "line": where[1] if where else None,
            "count": 0,
            "events": [],
        },
    )
    entry["count"] += 1
    # Not the first: it compiles and loads the kernel, which its events would count too.
    timed = entry["count"] > 1 and len(entry["events"]) < TIMED_LAUNCHES
    return entry["events"] if timed else None


def _timed(events: list[Any] | None, event: Any, launch: Any) -> Any:
    """Run launch() between two events of this kind (torch's or cupy's), kept in events."""
    if events is None:
        return launch()
    start, end = event(), event()
    start.record()
    result = launch()
    end.record()
    events.append((start, end))
    return result


def _launch_times() -> None:
    """Each launch kind's median time in ms, from its events (the GPU has finished)."""
    for entry in launches.values():
        times = []
        for start, end in entry.pop("events"):
            try:
                elapsed = start.elapsed_time(end) if hasattr(start, "elapsed_time") else None
                if elapsed is None:  # cupy's events
                    import cupy

                    elapsed = cupy.cuda.get_elapsed_time(start, end)
            except Exception:  # a context an illegal access broke answers nothing
                break
            times.append(float(elapsed))
        if times:
            times.sort()
            entry["median_ms"] = times[len(times) // 2]
            entry["timed"] = len(times)


def _grid(grid: Any, meta: dict[str, Any]) -> Any:
    if callable(grid):
        try:
            grid = grid(meta)
        except Exception:
            return "computed"
    return [int(n) for n in grid] if isinstance(grid, tuple | list) else grid


def _hook_triton(check: bool) -> None:
    try:
        import triton
        import triton.testing
        from triton.runtime.jit import JITFunction
    except ImportError:
        return
    original_getitem = JITFunction.__getitem__

    def getitem(self: Any, grid: Any) -> Any:
        launch = original_getitem(self, grid)

        def launched(*args: Any, **kwargs: Any) -> Any:
            events = _record(self.fn.__name__, _grid(grid, kwargs), None, args)
            return _timed(None if check else events, _torch_event, lambda: launch(*args, **kwargs))

        return launched

    JITFunction.__getitem__ = getitem
    original_bench = triton.testing.do_bench

    def do_bench(fn: Any, *args: Any, **kwargs: Any) -> Any:
        where = _learner_line()
        if check:
            fn()
            return float("nan")
        ask = {**kwargs, "return_mode": "median", "quantiles": None}
        median = original_bench(fn, *args, **ask)
        if len(benchmarks) < MAX_BENCHMARKS:
            code = linecache.getline(where[0], where[1]).strip() if where else ""
            benchmarks.append(
                {
                    "file": where[0] if where else "",
                    "line": where[1] if where else None,
                    "code": code[:300],
                    "median_ms": float(median),
                }
            )
        if "return_mode" in kwargs or "quantiles" in kwargs:
            return original_bench(fn, *args, **kwargs)
        return median

    triton.testing.do_bench = do_bench


def _torch_event() -> Any:
    import torch

    return torch.cuda.Event(enable_timing=True)


def _hook_cupy(check: bool) -> None:
    try:
        import cupy
    except ImportError:
        return
    # RawKernel is a compiled type whose methods cannot be replaced: the name the program
    # calls is given a subclass that records each launch.
    try:

        class RawKernel(cupy.RawKernel):  # type: ignore[misc]
            def __call__(self, grid: Any, block: Any, args: Any, *rest: Any, **kw: Any) -> Any:
                events = _record(self.name, _grid(grid, {}), _grid(block, {}), args)
                return _timed(
                    None if check else events,
                    cupy.cuda.Event,
                    lambda: super(RawKernel, self).__call__(grid, block, args, *rest, **kw),
                )

        cupy.RawKernel = RawKernel
    except TypeError:
        pass


def _error(error: BaseException) -> dict[str, Any]:
    root = os.getcwd() + os.sep
    frames = [
        f
        for f in traceback.extract_tb(error.__traceback__)
        if f.filename.startswith(root) and not f.filename.endswith("driver.py")
    ]
    where = frames[-1] if frames else None
    found: dict[str, Any] = {
        "type": type(error).__name__,
        "module": type(error).__module__,
        "message": str(error)[:4000],
        "file": os.path.relpath(where.filename) if where else "",
        "line": where.lineno if where else None,
        "code": (where.line or "")[:300] if where else "",
    }
    # Triton's CompilationError says where in the kernel: "at 7:12:".
    source_line = getattr(error, "src", None)
    node = getattr(error, "node", None)
    if node is not None and hasattr(node, "lineno") and source_line is not None:
        found["kernel_line"] = int(node.lineno)
    return found


def _device() -> dict[str, Any]:
    torch = sys.modules.get("torch")
    if torch is None:
        return {"name": ""}
    try:
        if torch.cuda.is_available():
            properties = torch.cuda.get_device_properties(0)
            return {
                "name": properties.name,
                "torch": torch.__version__,
                "cuda": torch.version.cuda,
                "capability": list(torch.cuda.get_device_capability(0)),
            }
        return {"name": "", "torch": torch.__version__}
    except Exception as error:
        return {"name": "", "problem": str(error)[:300]}


def main() -> None:
    entry, report_path = sys.argv[1], sys.argv[2]
    check = "--check" in sys.argv[3:]
    _hook_triton(check)
    _hook_cupy(check)
    error: dict[str, Any] | None = None
    sys.argv = [os.path.abspath(entry)]
    sys.path.insert(0, os.getcwd())
    try:
        runpy.run_path(os.path.abspath(entry), run_name="__main__")
    except SystemExit as stop:
        if stop.code not in (None, 0):
            error = _error(stop)
    except BaseException as raised:
        error = _error(raised)
    # Work still queued on the GPU fails here, if it fails (an illegal memory access).
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            if torch.cuda.is_initialized():
                torch.cuda.synchronize()
        except Exception as raised:
            error = error or _error(raised)
    if "cupy" in sys.modules:
        try:
            sys.modules["cupy"].cuda.Device().synchronize()
        except Exception as raised:
            error = error or _error(raised)
    _launch_times()
    report = {
        "error": error,
        "launches": list(launches.values()),
        "benchmarks": benchmarks,
        "device": _device(),
        "triton": sys.modules["triton"].__version__ if "triton" in sys.modules else None,
    }
    with open(report_path, "w", encoding="utf-8") as handle:
        json.dump(report, handle)
    sys.stdout.flush()
    os._exit(1 if error else 0)


if __name__ == "__main__":
    main()
