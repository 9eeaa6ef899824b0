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
import numpy.typing as npt

# The references compute in float64 (the runner converts the buffers).
F64 = npt.NDArray[np.float64]
Result = F64 | tuple[F64, ...]

REFERENCES: dict[str, Callable[..., Result]] = {}

F = TypeVar("F", bound=Callable[..., Result])


def reference(fn: F) -> F:
    if fn.__name__ in REFERENCES:
        raise ValueError(f"reference {fn.__name__!r} is already registered")
    REFERENCES[fn.__name__] = fn
    return fn


@reference
def add(a: F64, b: F64) -> F64:
    return a + b


@reference
def matmul(a: F64, b: F64) -> F64:
    """(M x K) @ (K x N)."""
    return a @ b


@reference
def matmul_bias(x: F64, w: F64, b: F64) -> F64:
    # A bias of shape [N] or [1, N] broadcasts over the rows.
    return x @ w + b.reshape(-1)


@reference
def relu(x: F64) -> F64:
    return np.maximum(x, 0.0)


@reference
def softmax(x: F64) -> F64:
    """Over the last axis, shifted by the row maximum so large logits do not overflow."""
    shifted = np.exp(x - x.max(axis=-1, keepdims=True))
    probabilities: F64 = shifted / shifted.sum(axis=-1, keepdims=True)
    return probabilities


@reference
def reduce_sum(x: F64) -> F64:
    return np.array([x.sum()])


@reference
def mlp_hidden(x: F64, w1: F64, b1: F64) -> F64:
    return relu(matmul_bias(x, w1, b1))


@reference
def mlp_forward(x: F64, w1: F64, b1: F64, w2: F64, b2: F64) -> F64:
    return softmax(matmul_bias(mlp_hidden(x, w1, b1), w2, b2))


@reference
def double(x: F64) -> F64:
    """Every element times two: the first kernel of the showcase (y = 2 x)."""
    return 2.0 * x


@reference
def transpose(x: F64) -> F64:
    return x.T.copy()


@reference
def inclusive_scan(x: F64) -> F64:
    """Prefix sums including each element: out[i] = x[0] + … + x[i]."""
    return np.cumsum(x)


@reference
def histogram(values: F64, counts: F64) -> F64:
    """How many of the values equal each bin index; the output buffer gives the bins."""
    bins = counts.size
    found = np.bincount(values.astype(np.int64).reshape(-1), minlength=bins)[:bins]
    return found.astype(np.float64)


@reference
def conv1d(x: F64, w: F64) -> F64:
    """Valid 1-D convolution as GPUs compute it (no flip): out[i] = Σ_k x[i + k] w[k]."""
    return np.correlate(x, w, mode="valid")
