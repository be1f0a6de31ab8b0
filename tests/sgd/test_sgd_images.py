"""The IDX reader on small files written here, Fashion-MNIST's loader, and the device splits."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np
import pytest

from ldpstream.sgd.datasets import DatasetUnavailable
from ldpstream.sgd.images import FASHION_MNIST_FILES, IdxError, fashion_mnist, iid_split, non_iid_split, read_idx


def _write_idx(path: Path, array: np.ndarray, header: bytes | None = None) -> Path:
    head = header if header is not None else bytes([0, 0, 8, array.ndim]) + struct.pack(f">{array.ndim}I",
                                                                                         *array.shape)
    path.write_bytes(gzip.compress(head + array.astype(np.uint8).tobytes()))
    return path


def _tiny_fashion_mnist(directory: Path, n: int = 6) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    images, labels = rng.integers(0, 256, (n, 28, 28)), rng.integers(0, 10, n)
    for part in ("train", "test"):
        _write_idx(directory / FASHION_MNIST_FILES[part][0], images)
        _write_idx(directory / FASHION_MNIST_FILES[part][1], labels)
    return images, labels


def test_loader_reads_idx_files(tmp_path: Path) -> None:
    images, labels = _tiny_fashion_mnist(tmp_path)
    data = fashion_mnist("test", tmp_path)
    assert data.x.shape == (6, 784) and data.x.dtype == np.float32 and data.classes == 10
    np.testing.assert_allclose(data.x * 255, images.reshape(6, -1), atol=1e-4)
    np.testing.assert_array_equal(data.y, labels)


def test_missing_data_names_the_debian_package(tmp_path: Path) -> None:
    with pytest.raises(DatasetUnavailable, match="dataset-fashion-mnist"):
        fashion_mnist("train", tmp_path)


@pytest.mark.parametrize("header", [
    b"\0\0\x0d\x01\0\0\0\x02", b"\1\0\x08\x01\0\0\0\x02", b"\0\0\x08\x01\0\0", b"\0\0\x08\x01\0\0\0\x03",
    b"\0\0\x08\x01\0\0\0\x01", b"\0\0\x08\x02\xff\xff\xff\xff\xff\xff\xff\xff",
])
def test_bad_idx_files_are_refused(tmp_path: Path, header: bytes) -> None:
    with pytest.raises(IdxError):
        read_idx(_write_idx(tmp_path / "bad.gz", np.array([1, 2]), header))
    (tmp_path / "plain").write_bytes(b"not gzip")
    with pytest.raises(IdxError):
        read_idx(tmp_path / "plain")


def test_iid_gives_one_example_per_device_and_non_iid_few_classes() -> None:
    labels = np.repeat(np.arange(10), 100)
    iid = iid_split(len(labels), seed=1)
    assert iid.rows.shape == (1000, 1) and sorted(iid.rows[:, 0]) == list(range(1000))
    split = non_iid_split(labels, per_device=10, classes_per_device=2, seed=1)
    assert split.rows.shape == (100, 10) and len(np.unique(split.rows)) == 1000
    assert max(len(np.unique(labels[r])) for r in split.rows) <= 2
