"""The references (references.py) as PyTorch does them on a CUDA GPU, and the process that
times them there for a replay worker (gpu_reference.py starts it and asks it).

A replay worker cannot open CUDA itself: its address space is capped (worker.py,
limit_resources), which is what stops a replay's memory bombs, and CUDA reserves far more
than that cap. So this process is started by the worker before its caps, runs nothing of
a learner's, and is handed only a reference's name and its arguments' shapes: it times
the same work on arguments of those shapes that it makes itself (the time of these
operations does not depend on the values), float32 as the kernels compute.

    python -m kernels.engine.torch_references

Speaks JSON lines: first {"ready": true, "device": name} (or {"unavailable": why}, then it
exits); then for each {"name": str, "shapes": [[int, ...], ...]} one
{"ms": float, "runs": n} or {"error": str}. It exits when its input ends.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from collections.abc import Callable
from typing import Any

# Every argument together, in float32 cells: a reference on more than this (1 GiB) is not
# timed (the worker's own arrays are smaller still).
MAX_CELLS = 1 << 28
WARM_UP, RUNS = 3, 20


def _torch_references(torch: Any) -> dict[str, Callable[..., Any]]:
    """One function per reference of references.py that PyTorch does the same way."""
    functional = torch.nn.functional

    def matmul_bias(x: Any, w: Any, b: Any) -> Any:
        return torch.addmm(b.reshape(-1), x.reshape(-1, x.shape[-1]), w)

    def mlp_hidden(x: Any, w1: Any, b1: Any) -> Any:
        return torch.relu(matmul_bias(x, w1, b1))

    return {
        "add": torch.add,
        "matmul": torch.matmul,
        "matmul_bias": matmul_bias,
        "relu": torch.relu,
        "softmax": lambda x: torch.softmax(x, dim=-1),
        "reduce_sum": lambda x: x.sum().reshape(1),
        "mlp_hidden": mlp_hidden,
        "mlp_forward": lambda x, w1, b1, w2, b2: torch.softmax(
            matmul_bias(mlp_hidden(x, w1, b1), w2, b2), dim=-1
        ),
        "double": lambda x: 2.0 * x,
        "transpose": lambda x: x.permute(*range(x.dim() - 1, -1, -1)).contiguous(),
        "inclusive_scan": lambda x: torch.cumsum(x.reshape(-1), dim=0),
        "histogram": lambda values, counts: torch.bincount(
            values.reshape(-1), minlength=counts.numel()
        )[: counts.numel()],
        "conv1d": lambda x, w: functional.conv1d(x.reshape(1, 1, -1), w.reshape(1, 1, -1)),
    }


def _arguments(torch: Any, name: str, shapes: list[tuple[int, ...]]) -> list[Any]:
    device = torch.device("cuda")
    if name == "histogram":
        # Bin indices within the counts' bins, as the kernel's values are.
        bins = max(math.prod(shapes[1]), 1)
        return [
            torch.randint(0, bins, shapes[0], device=device),
            torch.zeros(shapes[1], device=device),
        ]
    return [torch.rand(shape, device=device, dtype=torch.float32) for shape in shapes]


def time_one(torch: Any, function: Callable[..., Any], args: list[Any]) -> dict[str, Any]:
    """The median time of RUNS calls after WARM_UP, each between two CUDA events."""
    for _ in range(WARM_UP):
        function(*args)
    samples = []
    for _ in range(RUNS):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        function(*args)
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end))
    return {"ms": round(statistics.median(samples), 4), "runs": RUNS}


def answer(torch: Any, known: dict[str, Callable[..., Any]], request: Any) -> dict[str, Any]:
    """The answer to one request line's value (anything JSON gives)."""
    if not isinstance(request, dict) or request.get("name") not in known:
        return {"error": "no such reference"}
    shapes = request.get("shapes")
    if not isinstance(shapes, list) or not all(
        isinstance(s, list) and all(type(n) is int and n >= 0 for n in s) for s in shapes
    ):
        return {"error": "shapes must be lists of sizes"}
    if sum(math.prod(s) for s in shapes) > MAX_CELLS:
        return {"error": "the arguments are too large to time here"}
    try:
        args = _arguments(torch, request["name"], [tuple(s) for s in shapes])
        return time_one(torch, known[request["name"]], args)
    except Exception as e:  # a shape the operation refuses, or the GPU out of memory
        return {"error": f"{type(e).__name__}: {str(e)[:200]}"}
    finally:
        torch.cuda.empty_cache()


def main() -> int:
    def say(message: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()

    try:
        import torch
    except ImportError as e:
        say({"unavailable": f"PyTorch cannot be imported: {e}"})
        return 0
    if not torch.cuda.is_available():
        say({"unavailable": "PyTorch sees no CUDA GPU"})
        return 0
    known = _torch_references(torch)
    # CUDA's context and cuBLAS's handle, made before the first request needs them: a run
    # asks for a time only once this process says it is ready, and then waits for it.
    one = torch.ones(1, 1, device="cuda")
    torch.addmm(one.reshape(-1), one, one)
    torch.cuda.synchronize()
    say({"ready": True, "device": torch.cuda.get_device_name(0)})
    for line in sys.stdin:
        try:
            request = json.loads(line)
        except ValueError:
            request = None
        say(answer(torch, known, request))
    return 0


if __name__ == "__main__":
    sys.exit(main())
