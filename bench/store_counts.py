"""What counting each invocation's stores costs a replay (kernels/engine/store_counts.py).

The runner alone (execute() with a worker's memo and kept buffers, warm) replays the
showcase's softmax versions, whose 512 invocations cover 2,048 outputs, with the count
and without it (count_stores answering nothing), interleaved one of each per round.
Prints medians and the ratio with to without.

    .venv/bin/python bench/store_counts.py [--runs 30]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from common import ROOT, median_ms

SOFTMAX = ROOT / "fixtures/showcase/gpu-inference-from-scratch/kernels/softmax"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=30)
    runs = parser.parse_args().runs
    sys.path.insert(0, str(ROOT))
    from kernels.engine.device import open_device
    from kernels.engine.resident import DeviceBuffers
    from kernels.engine.run import _Run, execute
    from kernels.engine.worker import Memo

    spec = json.loads((SOFTMAX / "kernel.json").read_text())["harness"]
    device, env = open_device(os.environ.get("REPLAY_WGPU_BACKEND", ""))
    counting = _Run.count_stores
    print(f"runner on {env.label}, softmax 8x256, median of {runs} (ms)")
    print(f"{'version':>8} {'without':>8} {'with':>8} {'ratio':>7}  counted")
    for number in (1, 2, 3, 4):
        source = (SOFTMAX / f"v{number}.wgsl").read_text()
        memo, kept = Memo(), DeviceBuffers()
        times: dict[bool, list[float]] = {False: [], True: []}
        counted = None
        for round in range(runs + 1):
            for on, elapsed in times.items():
                # The store counts switched off by replacing the method for the run.
                _Run.count_stores = counting if on else lambda *args: []  # type: ignore[method-assign]
                started = time.perf_counter()
                outcome = execute(
                    device, env, {"self": source}, spec, SOFTMAX, memo=memo, kept=kept
                )
                if round:  # the first round warms the memo, the kept buffers, the JIT
                    elapsed.append(time.perf_counter() - started)
                if on:
                    counted = outcome.get("store_counts")
        _Run.count_stores = counting  # type: ignore[method-assign]  # put back
        without, with_ = median_ms(times[False]), median_ms(times[True])
        stores = counted[0]["stores"] if counted else None
        ratio = with_ / without
        print(f"{'v' + str(number):>8} {without:>8.2f} {with_:>8.2f} {ratio:>6.2f}x  {stores}")


if __name__ == "__main__":
    main()
