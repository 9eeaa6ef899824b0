"""Helpers for the draw-a-digit page: turn a drawing into an MNIST-style input.

No Django here. ``preprocess`` takes a grayscale drawing and prepares it the way the
MNIST digits were prepared, so the showcase classifier (784 -> 128 -> 10, trained by
fixtures/mnist/train.py) sees what it was trained on:

1. Scale the pixels to [0, 1]. Integer (and bool) images are read as 0..255 (bool as
   0/1); float images are read as [0, 1], unless their maximum exceeds 1, in which case
   they are read as 0..255.
2. Expect ink BRIGHT on a dark background (as MNIST stores digits). The background is
   the median of the border pixels; if it is light (> 0.5) the image is inverted, so
   dark ink on a light canvas works too. The background level is then subtracted and
   the ink rescaled so its brightest pixel is 1.
3. Crop to the bounding box of the ink (pixels >= INK_THRESHOLD after step 2).
4. Resample the crop so its longer side is 20 px, keeping the aspect ratio: area
   averaging when shrinking, bilinear interpolation when enlarging (numpy only).
5. Paste it into a 28x28 frame so that its centre of mass falls on pixel (14, 14)
   (whole-pixel shift, kept inside the frame), clip to [0, 1], flatten to (784,).

``numpy_forward`` runs the same network in float64 with numpy, for comparing with the
WGSL kernels' output.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import numpy as np

from kernels.engine.references import mlp_forward

SIDE = 28  # MNIST frame
BOX = 20  # the longer side of the digit inside the frame
CENTRE = 14.0  # where the centre of mass goes (row, column index)
MIN_SIDE = 28
MAX_SIDE = 1024
EMPTY_THRESHOLD = 0.1  # ink must rise this far above the background (in [0, 1] units)
INK_THRESHOLD = 0.1  # fraction of the brightest ink that counts for the bounding box


class EmptyDrawing(ValueError):
    """The drawing has no ink: nothing stands out from the background."""


def preprocess(image: np.ndarray) -> np.ndarray:
    """A grayscale drawing (H x W, 28 <= H, W <= 1024) as a (784,) float32 MNIST input.

    Ink is expected bright on a dark background; dark ink on a light background is
    detected from the border and inverted. Raises ValueError for an image of the wrong
    shape or type, and EmptyDrawing (a ValueError) when there is no ink.
    """
    pixels = _normalise(_check(image))
    pixels = _ink_on_black(pixels)
    rows, cols = np.nonzero(pixels >= INK_THRESHOLD)
    crop = pixels[rows.min() : rows.max() + 1, cols.min() : cols.max() + 1]
    digit = _fit_box(crop, BOX)
    peak = digit.max()
    if peak > 0.0:
        digit = digit / peak
    return _centre(digit).reshape(SIDE * SIDE).astype(np.float32)


def drawing_harness(harness: Mapping[str, Any], pixels: np.ndarray) -> dict[str, Any]:
    """A classifier's harness aimed at one drawing instead of a batch of test digits.

    The input is the reference's first argument. It holds the drawing; every buffer that
    was shaped by the batch holds one row; the labels and the report go, since a drawing
    has no label. Dispatch sizes stay: the kernels guard on their buffers' lengths.
    """
    spec = copy.deepcopy(dict(harness))
    buffers = spec["buffers"]
    source = spec["reference"]["args"][0]
    batch = buffers[source]["shape"][0]
    report = spec.pop("report", None)
    if report:
        buffers.pop(report["labels"], None)
    for buffer in buffers.values():
        if len(buffer["shape"]) > 1 and buffer["shape"][0] == batch:
            buffer["shape"] = [1, *buffer["shape"][1:]]
    input_buffer = {k: v for k, v in buffers[source].items() if k in ("usage", "dtype", "shape")}
    buffers[source] = {**input_buffer, "data": [float(v) for v in pixels.reshape(-1)]}
    return spec


def numpy_forward(
    x: np.ndarray, w1: np.ndarray, b1: np.ndarray, w2: np.ndarray, b2: np.ndarray
) -> np.ndarray:
    """Class probabilities in float64: softmax(relu(x @ w1 + b1) @ w2 + b2), row-wise.

    x is (784,) or (N, 784); the result is (10,) or (N, 10).
    """
    arrays = (np.asarray(a, dtype=np.float64) for a in (x, w1, b1, w2, b2))
    return mlp_forward(*arrays)


def _check(image: np.ndarray) -> np.ndarray:
    array = np.asarray(image)
    if array.ndim != 2:
        raise ValueError(
            f"expected a 2-D grayscale image (height x width), got {array.ndim} dimension(s) "
            f"with shape {array.shape}"
        )
    height, width = array.shape
    if min(height, width) < MIN_SIDE:
        raise ValueError(f"image is {height}x{width}; each side must be at least {MIN_SIDE} pixels")
    if max(height, width) > MAX_SIDE:
        raise ValueError(f"image is {height}x{width}; each side must be at most {MAX_SIDE} pixels")
    if not (np.issubdtype(array.dtype, np.number) or array.dtype == np.bool_):
        raise ValueError(f"expected a numeric image, got dtype {array.dtype}")
    if np.issubdtype(array.dtype, np.complexfloating):
        raise ValueError("expected a real-valued image, got complex numbers")
    if not np.isfinite(array).all():
        raise ValueError("image contains NaN or infinite values")
    return array


def _normalise(array: np.ndarray) -> np.ndarray:
    """Pixels as float64 in [0, 1] (see the module docstring for the scale rules)."""
    if array.dtype == np.bool_:
        pixels = array.astype(np.float64)
    elif np.issubdtype(array.dtype, np.integer):
        pixels = array.astype(np.float64) / 255.0
    else:
        pixels = array.astype(np.float64)
        if pixels.max() > 1.0:
            pixels = pixels / 255.0
    return np.clip(pixels, 0.0, 1.0)


def _ink_on_black(pixels: np.ndarray) -> np.ndarray:
    """Invert a light background, subtract the background level, stretch the ink to 1."""
    border = np.concatenate([pixels[0], pixels[-1], pixels[1:-1, 0], pixels[1:-1, -1]])
    background = float(np.median(border))
    if background > 0.5:
        pixels = 1.0 - pixels
        background = 1.0 - background
    ink = np.clip(pixels - background, 0.0, None)
    peak = float(ink.max())
    if peak < EMPTY_THRESHOLD:
        raise EmptyDrawing(
            "the drawing is empty: no pixel stands out from the background "
            f"by {EMPTY_THRESHOLD:.0%} or more"
        )
    return ink / peak


def _resample_matrix(n_in: int, n_out: int) -> np.ndarray:
    """(n_out, n_in) weights taking a 1-D signal of n_in pixels to n_out pixels.

    Shrinking averages the input over each output pixel's footprint (area weights);
    enlarging interpolates linearly between pixel centres.
    """
    scale = n_in / n_out
    out = np.arange(n_out, dtype=np.float64)[:, None]
    src = np.arange(n_in, dtype=np.float64)[None, :]
    if n_out <= n_in:
        lo, hi = out * scale, (out + 1.0) * scale
        overlap = np.minimum(src + 1.0, hi) - np.maximum(src, lo)
        weights: np.ndarray = np.clip(overlap, 0.0, None) / scale
        return weights
    centre = np.clip((out + 0.5) * scale - 0.5, 0.0, n_in - 1.0)
    weights = np.clip(1.0 - np.abs(centre - src), 0.0, None)
    return weights


def _fit_box(crop: np.ndarray, box: int) -> np.ndarray:
    """Resample so the longer side is ``box`` pixels, keeping the aspect ratio."""
    height, width = crop.shape
    longer = max(height, width)
    new_h = max(1, round(height * box / longer))
    new_w = max(1, round(width * box / longer))
    resampled: np.ndarray = (
        _resample_matrix(height, new_h) @ crop @ _resample_matrix(width, new_w).T
    )
    return resampled


def _centre(digit: np.ndarray) -> np.ndarray:
    """Paste into a SIDE x SIDE frame with the centre of mass on (CENTRE, CENTRE)."""
    height, width = digit.shape
    mass = digit.sum()
    com_row = float(digit.sum(axis=1) @ np.arange(height)) / mass
    com_col = float(digit.sum(axis=0) @ np.arange(width)) / mass
    top = min(max(int(np.floor(CENTRE - com_row + 0.5)), 0), SIDE - height)
    left = min(max(int(np.floor(CENTRE - com_col + 0.5)), 0), SIDE - width)
    frame = np.zeros((SIDE, SIDE))
    frame[top : top + height, left : left + width] = digit
    return np.clip(frame, 0.0, 1.0)
