"""Multiclass data for the networks of `ldpstream.contract.networks`: Fashion-MNIST from Debian's package, a synthetic
set of Gaussian classes, and how examples are dealt to devices (IID, one example each; or non-IID, each device's
examples from few classes).

Fashion-MNIST (Xiao, Rasul, Vollgraf 2017; MIT licence) is read from `dataset-fashion-mnist`
(`apt-get install dataset-fashion-mnist`; `make install-test` installs it when missing): 60,000 training and 10,000
test images of 28 x 28 grey pixels in 10 classes, as gzip'd IDX files. Pixels are scaled to [0, 1] (float32).

IDX (LeCun's format): two zero bytes, a type byte (0x08: unsigned bytes), the number of dimensions m, m big-endian
uint32 sizes, then the data in row-major order. The files are read as outside bytes: the header is checked and the
declared size bounded before the data is read, and the data must fill exactly that size.
"""

from __future__ import annotations

import gzip
import math
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ldpstream.sgd.datasets import DatasetUnavailable
from ldpstream.sgd.models import TrainingError

FASHION_MNIST_PACKAGE = "dataset-fashion-mnist"
FASHION_MNIST_DIR = Path("/usr/share/datasets/fashion-mnist")
FASHION_MNIST_FILES = {"train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
                       "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")}
FASHION_MNIST_CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
                         "Ankle boot")
MAX_IDX_BYTES = 1 << 28  # 256 MiB of data: Fashion-MNIST's training images are 47 MB
IDX_UBYTE = 0x08


class IdxError(TrainingError):
    """A file that is not a valid IDX file of unsigned bytes."""


def read_idx(path: Path) -> np.ndarray:
    """The uint8 array in a gzip'd IDX file (module docstring), or IdxError."""
    try:
        with gzip.open(path, "rb") as handle:
            head = handle.read(4)
            if len(head) != 4 or head[:2] != b"\0\0" or head[2] != IDX_UBYTE or not 1 <= head[3] <= 4:
                raise IdxError(f"{path}: not an IDX file of unsigned bytes (header {head!r})")
            sizes = handle.read(4 * head[3])
            if len(sizes) != 4 * head[3]:
                raise IdxError(f"{path}: cut short in its header")
            shape = struct.unpack(f">{head[3]}I", sizes)
            size = math.prod(shape)
            if size > MAX_IDX_BYTES:
                raise IdxError(f"{path}: declared shape {shape} is over {MAX_IDX_BYTES} bytes")
            data = handle.read(size)
            if len(data) != size or handle.read(1):
                raise IdxError(f"{path}: declared shape {shape} does not match its {len(data)}+ data bytes")
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise IdxError(f"{path}: {exc}") from exc
    return np.frombuffer(data, dtype=np.uint8).reshape(shape)


@dataclass(frozen=True)
class LabelledSet:
    """Examples x (n, d) float32 and class labels y (n,) in 0..classes-1."""

    name: str
    x: np.ndarray
    y: np.ndarray
    classes: int

    def __post_init__(self) -> None:
        if self.x.ndim != 2 or self.y.shape != (self.x.shape[0],):
            raise TrainingError(f"expected x (n, d) and y (n,), got {self.x.shape} and {self.y.shape}")
        if len(self.y) and (self.y.min() < 0 or self.y.max() >= self.classes):
            raise TrainingError(f"labels must lie in 0..{self.classes - 1}")

    @property
    def dims(self) -> int:
        return int(self.x.shape[1])

    def head(self, n: int) -> LabelledSet:
        """The first n examples."""
        return LabelledSet(self.name, self.x[:n], self.y[:n], self.classes)


def fashion_mnist(part: str, directory: Path | None = None) -> LabelledSet:
    """Fashion-MNIST's 'train' (60,000) or 'test' (10,000) images, pixels in [0, 1]; DatasetUnavailable (naming the
    Debian package) when the files are not there."""
    if part not in FASHION_MNIST_FILES:
        raise TrainingError(f"Fashion-MNIST has parts 'train' and 'test', not {part!r}")
    where = directory or FASHION_MNIST_DIR
    images_file, labels_file = (where / f for f in FASHION_MNIST_FILES[part])
    if not (images_file.is_file() and labels_file.is_file()):
        raise DatasetUnavailable(f"Fashion-MNIST is not in {where}: install Debian's package "
                                 f"{FASHION_MNIST_PACKAGE!r} (apt-get install {FASHION_MNIST_PACKAGE}, or make "
                                 "install-test)")
    images, labels = read_idx(images_file), read_idx(labels_file)
    if images.ndim != 3 or labels.ndim != 1 or images.shape[0] != labels.shape[0]:
        raise IdxError(f"{where}: images {images.shape} and labels {labels.shape} do not pair")
    x = images.reshape(len(labels), -1).astype(np.float32) / np.float32(255.0)
    return LabelledSet(f"fashion-mnist-{part}", x, labels.astype(np.intp), len(FASHION_MNIST_CLASSES))


def gaussian_classes(n: int, dims: int, classes: int, seed: int = 0, spread: float = 1.0) -> LabelledSet:
    """n examples of `classes` equally likely classes, class c's examples N(mu_c, spread^2 I) with the means
    mu_c drawn N(0, I / dims) per coordinate (so their distance is about sqrt(2): the classes overlap)."""
    if n < 1 or dims < 1 or classes < 2:
        raise TrainingError(f"need n >= 1, dims >= 1 and classes >= 2, got {n}, {dims}, {classes}")
    rng = np.random.default_rng(seed)
    means = rng.standard_normal((classes, dims)) / np.sqrt(dims)
    y = rng.integers(0, classes, n)
    x = (means[y] + spread * rng.standard_normal((n, dims)) / np.sqrt(dims)).astype(np.float32)
    return LabelledSet(f"gaussian-{classes}-d{dims}", x, y.astype(np.intp), classes)


@dataclass(frozen=True)
class DeviceSplit:
    """Which examples each device holds: `rows[i]` are device i's example indices (every device holds as many)."""

    kind: str
    rows: np.ndarray  # (devices, examples per device)

    @property
    def devices(self) -> int:
        return int(self.rows.shape[0])


def iid_split(n: int, seed: int = 0) -> DeviceSplit:
    """One example per device: n devices, in a random order."""
    if n < 1:
        raise TrainingError(f"need n >= 1 examples, got {n}")
    return DeviceSplit("iid", np.random.default_rng(seed).permutation(n)[:, None])


def non_iid_split(labels: np.ndarray, per_device: int = 10, classes_per_device: int = 2,
                  seed: int = 0) -> DeviceSplit:
    """Each device's `per_device` examples from at most `classes_per_device` classes (McMahan et al., "Communication-
    efficient learning of deep networks from decentralized data", AISTATS 2017, Sec. 3: sort by label, cut into
    shards, deal each device `classes_per_device` random shards). Examples beyond a whole number of devices are
    left out."""
    labels = np.asarray(labels)
    if per_device < 1 or classes_per_device < 1 or per_device % classes_per_device:
        raise TrainingError(f"per_device ({per_device}) must be a positive multiple of classes_per_device "
                            f"({classes_per_device})")
    devices = len(labels) // per_device
    if devices < 1:
        raise TrainingError(f"{len(labels)} examples are fewer than one device's {per_device}")
    rng = np.random.default_rng(seed)
    shard = per_device // classes_per_device
    order = np.lexsort((rng.random(len(labels)), labels))[: devices * per_device]  # by label, ties at random
    shards = order.reshape(devices * classes_per_device, shard)[rng.permutation(devices * classes_per_device)]
    return DeviceSplit("non-iid", shards.reshape(devices, per_device))


def device_split(kind: str, labels: np.ndarray, seed: int = 0) -> DeviceSplit:
    """The split called `kind`: 'iid' or 'non-iid' (10 examples from 2 classes per device)."""
    if kind == "iid":
        return iid_split(len(labels), seed)
    if kind == "non-iid":
        return non_iid_split(labels, seed=seed)
    raise TrainingError(f"unknown split {kind!r}; known: iid, non-iid")
