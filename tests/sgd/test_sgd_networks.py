"""Softmax regression and the MLP: per-example gradients against finite differences; the snapshot bytes."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from ldpstream.contract.networks import make_network
from ldpstream.contract.snapshot import Snapshot, SnapshotError, decode_snapshot
from ldpstream.sgd.models import TrainingError


@pytest.mark.parametrize(("name", "dims"), [("softmax", (5, 3)), ("mlp", (5, 4, 3)), ("mlp", (4, 6, 5, 3))])
def test_per_example_gradients_match_central_finite_differences(name: str, dims: tuple[int, ...]) -> None:
    net = make_network(name, dims)
    rng = np.random.default_rng(1)
    theta = net.init(rng) + rng.normal(0, 0.3, net.size)  # nonzero output layer, so every layer's gradient shows
    x = rng.standard_normal((7, dims[0]))
    y = rng.integers(0, dims[-1], 7)
    h = 1e-6
    numeric = np.stack([(net.loss(theta + e, x, y) - net.loss(theta - e, x, y)) / (2 * h)
                        for e in np.eye(net.size) * h], axis=1)
    # central differences err by O(h^2 f''') plus rounding O(eps_machine / h) ~ 1e-10; ReLU kinks are measure zero
    np.testing.assert_allclose(net.gradients(theta, x, y), numeric, rtol=1e-5, atol=1e-7)


def test_loss_is_finite_for_huge_logits_and_bad_input_is_refused() -> None:
    net = make_network("softmax", (2, 2))
    theta = np.array([1e4, -1e4, -1e4, 1e4, 0.0, 0.0])
    assert np.isfinite(net.loss(theta, np.array([[1.0, 0.0]]), np.array([1]))).all()
    with pytest.raises(TrainingError):
        net.gradients(theta, np.ones((2, 3)), np.array([0, 1]))
    with pytest.raises(TrainingError):
        net.gradients(theta, np.ones((2, 2)), np.array([0, 2]))
    with pytest.raises(TrainingError):
        make_network("softmax", (4, 8, 2))
    with pytest.raises(TrainingError):
        make_network("mlp", (4, 1))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_snapshot_round_trip(dtype: str) -> None:
    net = make_network("mlp", (6, 5, 3))
    snap = Snapshot("mlp", net.dims, 41, net.init(np.random.default_rng(0)))
    back = decode_snapshot(snap.encode(dtype))
    assert (back.name, back.dims, back.version) == ("mlp", (6, 5, 3), 41)
    np.testing.assert_allclose(back.params, snap.params, rtol=1e-7 if dtype == "float32" else 0)
    assert back.encode(dtype) == snap.encode(dtype)  # stable bytes


def _header(name: bytes, dims: tuple[int, ...], count: int, size: int = 8) -> bytes:
    return (b"LDPM" + struct.pack("<BBB", 1, size, len(name)) + name + struct.pack(f"<B{len(dims)}I", len(dims), *dims)
            + struct.pack("<QQ", 0, count))


@pytest.mark.parametrize("data", [
    b"", b"LDPM", b"XXXX" + b"\0" * 40,
    _header(b"softmax", (3, 2), 8) + b"\0" * 63,  # one byte short
    _header(b"softmax", (3, 2), 8) + b"\0" * 65,  # one byte over
    _header(b"softmax", (3, 2), 9) + b"\0" * 72,  # count disagrees with the architecture
    _header(b"cnn", (3, 2), 8) + b"\0" * 64,
    _header(b"mlp", (2**20, 2**20, 10), 2**40 + 2**20 * 11 + 10) + b"\0" * 8,  # huge: refused before allocating
    _header(b"softmax", (3, 2), 8, size=2) + b"\0" * 16,
    _header(b"softmax", (3, 2), 8) + np.full(8, np.nan).tobytes(),
])
def test_bad_snapshot_bytes_are_refused(data: bytes) -> None:
    with pytest.raises(SnapshotError):
        decode_snapshot(data)


def test_mutated_snapshot_bytes_decode_or_are_refused() -> None:
    good = Snapshot("mlp", (4, 3, 2), 5, np.linspace(-1, 1, 23)).encode()
    rng = np.random.default_rng(0)
    for _ in range(500):
        data = bytearray(good)
        for at in rng.integers(0, len(data), rng.integers(1, 4)):
            data[at] = int(rng.integers(0, 256))
        data = data[: int(rng.integers(0, len(data) + 1))] if rng.random() < 0.3 else data
        try:
            decode_snapshot(bytes(data))
        except SnapshotError:
            pass
