"""kernels.digits: preparing a drawn digit for the MNIST classifier. No database needed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kernels.digits import EmptyDrawing, numpy_forward, preprocess

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "mnist"


@pytest.fixture(scope="module")
def model() -> tuple[np.ndarray, ...]:
    return tuple(np.load(FIXTURE / f"{name}.npy") for name in ("w1", "b1", "w2", "b2"))


@pytest.fixture(scope="module")
def digits() -> tuple[np.ndarray, np.ndarray]:
    return np.load(FIXTURE / "test_images.npy"), np.load(FIXTURE / "test_labels.npy")


def accuracy(model: tuple[np.ndarray, ...], images: np.ndarray, labels: np.ndarray) -> float:
    return float((numpy_forward(images, *model).argmax(axis=1) == labels).mean())


def upscale(image: np.ndarray, size: int) -> np.ndarray:
    """Bilinear enlargement of a square image to size x size (pixel centres aligned)."""
    n = image.shape[0]
    coords = np.clip((np.arange(size) + 0.5) * n / size - 0.5, 0.0, n - 1.0)
    lo = np.floor(coords).astype(int)
    hi = np.minimum(lo + 1, n - 1)
    frac = coords - lo
    rows = image[lo] * (1 - frac)[:, None] + image[hi] * frac[:, None]
    return rows[:, lo] * (1 - frac)[None, :] + rows[:, hi] * frac[None, :]


def redraw(
    image: np.ndarray, size: int, canvas: tuple[int, int], rng: np.random.Generator, dark: bool
) -> np.ndarray:
    """The 28x28 digit enlarged to size px, placed off-centre on a larger canvas.

    dark=True gives a uint8 canvas with dark ink on white; otherwise float, bright on black.
    """
    big = upscale(image.reshape(28, 28).astype(np.float64), size)
    top = int(rng.integers(0, canvas[0] - size + 1))
    left = int(rng.integers(0, canvas[1] - size + 1))
    out = np.zeros(canvas)
    out[top : top + size, left : left + size] = big
    if dark:
        return np.round(255 * (1.0 - out)).astype(np.uint8)
    return out


def test_redrawn_test_digits_keep_the_models_accuracy(model, digits) -> None:
    images, labels = digits
    original = accuracy(model, images, labels)
    rng = np.random.default_rng(7)
    prepared = np.stack(
        [
            preprocess(
                redraw(
                    image,
                    200,
                    (200 + int(rng.integers(1, 150)), 200 + int(rng.integers(1, 150))),
                    rng,
                    dark=bool(i % 2),
                )
            )
            for i, image in enumerate(images)
        ]
    )
    redrawn = accuracy(model, prepared, labels)
    assert redrawn >= original - 0.05, (original, redrawn)


def test_large_canvas_digits_are_still_recognised(model, digits) -> None:
    images, labels = digits
    rng = np.random.default_rng(8)
    picked = rng.choice(len(images), size=100, replace=False)
    prepared = np.stack(
        [preprocess(redraw(images[i], 700, (1024, 900), rng, dark=i % 3 == 0)) for i in picked]
    )
    assert accuracy(model, prepared, labels[picked]) >= 0.88


def test_mnist_digits_pass_through_nearly_unchanged(model, digits) -> None:
    images, labels = digits
    prepared = np.stack([preprocess(image.reshape(28, 28)) for image in images[:200]])
    assert np.abs(prepared - images[:200]).mean() < 0.01
    assert accuracy(model, prepared, labels[:200]) == accuracy(model, images[:200], labels[:200])


def test_output_is_784_float32_in_unit_range(digits) -> None:
    rng = np.random.default_rng(9)
    canvas = redraw(digits[0][0], 300, (400, 512), rng, dark=False)
    out = preprocess(canvas)
    assert out.shape == (784,)
    assert out.dtype == np.float32
    assert out.min() >= 0.0
    assert out.max() == pytest.approx(1.0)


def test_square_blob_is_scaled_to_20_px_and_centred() -> None:
    canvas = np.zeros((500, 300), dtype=np.uint8)
    canvas[10:110, 180:280] = 255
    frame = preprocess(canvas).reshape(28, 28)
    rows, cols = np.nonzero(frame > 0.5)
    assert rows.max() - rows.min() + 1 == 20
    assert cols.max() - cols.min() + 1 == 20
    mass = frame.sum()
    assert frame.sum(axis=1) @ np.arange(28) / mass == pytest.approx(14.0, abs=0.5)
    assert frame.sum(axis=0) @ np.arange(28) / mass == pytest.approx(14.0, abs=0.5)


def test_aspect_ratio_is_kept() -> None:
    canvas = np.zeros((400, 400))
    canvas[50:350, 190:250] = 1.0  # 300 tall, 60 wide: a "1"
    frame = preprocess(canvas).reshape(28, 28)
    rows, cols = np.nonzero(frame > 0.5)
    assert rows.max() - rows.min() + 1 == 20
    assert cols.max() - cols.min() + 1 == 4


def test_dark_on_light_equals_bright_on_dark() -> None:
    rng = np.random.default_rng(10)
    canvas = np.zeros((256, 256), dtype=np.uint8)
    canvas[60:200, 100:130] = 255
    canvas[60:80, 70:160] = rng.integers(128, 256, size=(20, 90), dtype=np.uint8)
    np.testing.assert_allclose(preprocess(255 - canvas), preprocess(canvas), atol=1e-6)


def test_uint8_and_float_scales_agree() -> None:
    canvas = np.zeros((64, 80), dtype=np.uint8)
    canvas[10:50, 30:45] = 200
    from_uint8 = preprocess(canvas)
    np.testing.assert_allclose(preprocess(canvas / 255.0), from_uint8, atol=1e-6)
    np.testing.assert_allclose(preprocess(canvas.astype(np.float32)), from_uint8, atol=1e-6)


@pytest.mark.parametrize(
    "canvas",
    [
        np.zeros((280, 280), dtype=np.uint8),
        np.full((280, 280), 255, dtype=np.uint8),  # blank white paper
        np.full((100, 120), 0.5),
        np.random.default_rng(11).uniform(0.0, 0.05, size=(64, 64)),  # faint noise only
    ],
    ids=["black", "white", "grey", "faint-noise"],
)
def test_empty_drawing_raises(canvas: np.ndarray) -> None:
    with pytest.raises(EmptyDrawing, match="empty"):
        preprocess(canvas)
    assert issubclass(EmptyDrawing, ValueError)


@pytest.mark.parametrize(
    ("image", "message"),
    [
        (np.zeros(784), "2-D"),
        (np.zeros((28, 28, 3)), "2-D"),
        (np.zeros(()), "2-D"),
        (np.zeros((27, 100)), "at least 28"),
        (np.zeros((100, 20)), "at least 28"),
        (np.zeros((1025, 300)), "at most 1024"),
        (np.zeros((64, 2000)), "at most 1024"),
        (np.full((64, 64), "x"), "numeric"),
        (np.full((64, 64), np.nan), "NaN"),
    ],
)
def test_wrong_input_raises_value_error(image: np.ndarray, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        preprocess(image)


def test_sizes_at_the_limits_are_accepted() -> None:
    for shape in [(28, 28), (1024, 1024), (28, 1024)]:
        canvas = np.zeros(shape)
        canvas[5:20, 10:18] = 1.0
        assert preprocess(canvas).shape == (784,)


def test_numpy_forward_gives_probabilities(model, digits) -> None:
    images, _ = digits
    probs = numpy_forward(images[:5], *model)
    assert probs.shape == (5, 10)
    assert probs.dtype == np.float64
    np.testing.assert_allclose(probs.sum(axis=1), 1.0)
    single = numpy_forward(images[0], *model)
    assert single.shape == (10,)
    np.testing.assert_allclose(single, probs[0])
    w1, b1, w2, b2 = (a.astype(np.float64) for a in model)
    logits = np.maximum(images[:5].astype(np.float64) @ w1 + b1, 0.0) @ w2 + b2
    expected = np.exp(logits - logits.max(axis=1, keepdims=True))
    np.testing.assert_allclose(probs, expected / expected.sum(axis=1, keepdims=True))
