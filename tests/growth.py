"""How work grows with its input, for checks that untrusted text is handled in linear time.

Python's regex engine and the Markdown parser count nothing we can read, so the check
compares process times across a 16-fold growth of a hostile input: linear work grows
16-fold and quadratic work 256-fold, and the bound (64) sits far from both. The best of
three runs keeps a busy machine from making a linear run look quadratic.
"""

from __future__ import annotations

import time
from collections.abc import Callable

GROWTH = 16
BOUND = 64


def cost(work: Callable[[str], object], text: str) -> float:
    best = float("inf")
    for _ in range(3):
        start = time.process_time()
        work(text)
        best = min(best, time.process_time() - start)
    return max(best, 1e-4)


def growth_problem(
    name: str, work: Callable[[str], object], make: Callable[[int], str], n: int
) -> str:
    """ "" when work(make(16n)) costs under 64 times work(make(n)), else what it cost."""
    small, large = cost(work, make(n)), cost(work, make(GROWTH * n))
    if large / small < BOUND:
        return ""
    return f"{name}: {small:.4f}s at {n:,} → {large:.4f}s at {GROWTH * n:,}"
