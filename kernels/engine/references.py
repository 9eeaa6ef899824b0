"""Reference implementations that a harness names in "reference": {"name": ...}.

Each takes the harness buffers (their initial contents, in their harness shapes, as
float64) and returns the expected outputs in float64, one array per output buffer, in
the order of the harness's reference outputs. Add one with @reference; the function's
name is the name a harness uses. No Django here: the worker processes import this module.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import numpy as np

Result = np.ndarray | tuple[np.ndarray, ...]

REFERENCES: dict[str, Callable[..., Result]] = {}

F = TypeVar("F", bound=Callable[..., Result])


def reference(fn: F) -> F:
    if fn.__name__ in REFERENCES:
        raise ValueError(f"reference {fn.__name__!r} is already registered")
    REFERENCES[fn.__name__] = fn
    return fn


@reference
def add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a + b


@reference
def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(M x K) @ (K x N)."""
    return a @ b


@reference
def matmul_bias(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    # A bias of shape [N] or [1, N] broadcasts over the rows.
    return x @ w + b.reshape(-1)


@reference
def relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0.0)


@reference
def softmax(x: np.ndarray) -> np.ndarray:
    """Over the last axis, shifted by the row maximum so large logits do not overflow."""
    shifted = np.exp(x - x.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


@reference
def reduce_sum(x: np.ndarray) -> np.ndarray:
    return np.array([x.sum()])


@reference
def mlp_hidden(x: np.ndarray, w1: np.ndarray, b1: np.ndarray) -> np.ndarray:
    return relu(matmul_bias(x, w1, b1))


@reference
def mlp_forward(
    x: np.ndarray, w1: np.ndarray, b1: np.ndarray, w2: np.ndarray, b2: np.ndarray
) -> np.ndarray:
    return softmax(matmul_bias(mlp_hidden(x, w1, b1), w2, b2))


@reference
def double(x: np.ndarray) -> np.ndarray:
    """Every element times two: the first kernel of the showcase (y = 2 x)."""
    return 2.0 * x
