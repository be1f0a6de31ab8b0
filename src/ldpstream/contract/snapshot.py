"""A model version as bytes: the stable encoding of a network's flat parameters that a coordinator signs and serves.

    offset  size  field
    0       4     magic b"LDPM"
    4       1     format version (1)
    5       1     dtype: 4 (float32) or 8 (float64), little-endian
    6       1     architecture name length a (1..32), then a ASCII bytes: "softmax" or "mlp"
    7+a     1     number of layer widths m (2..9), then m uint32 LE widths (d, h_1, ..., C)
    ...     8     model version t, uint64 LE
    ...     8     parameter count p, uint64 LE: must equal the architecture's count
    ...     p*s   parameters, little-endian, s = dtype size; nothing after them

Decoding reads outside bytes: it checks the magic, every length against what is left, the architecture and widths
(`ldpstream.contract.networks.check_dims`, which bounds the parameter count) and the total size BEFORE it reads the
parameters, which it takes as a view (`np.frombuffer`) and refuses unless finite. Whatever the bytes, it returns a
`Snapshot` or raises `SnapshotError`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

from ldpstream.contract.networks import NETWORKS, Network, TrainingError, check_dims, make_network
from ldpstream.contract.untrusted import rejecting

MAGIC = b"LDPM"
FORMAT_VERSION = 1
DTYPES: dict[int, np.dtype[np.floating[Any]]] = {4: np.dtype("<f4"), 8: np.dtype("<f8")}
MAX_NAME = 32


class SnapshotError(TrainingError):
    """Bytes that are not a valid model snapshot."""


@dataclass(frozen=True, eq=False)
class Snapshot:
    """Model version `version` of network `name` with widths `dims`: its flat parameters (read-only float64)."""

    name: str
    dims: tuple[int, ...]
    version: int
    params: np.ndarray

    def __post_init__(self) -> None:
        net = make_network(self.name, self.dims)
        params = np.array(self.params, dtype=np.float64)
        if params.shape != (net.size,) or not np.isfinite(params).all():
            raise TrainingError(f"{self.name} {self.dims} takes {net.size} finite parameters, got {params.shape}")
        if not 0 <= self.version < 2**64:
            raise TrainingError(f"a model version is a uint64, got {self.version}")
        params.setflags(write=False)
        object.__setattr__(self, "params", params)

    @property
    def network(self) -> Network:
        return make_network(self.name, self.dims)

    def encode(self, dtype: str = "float32") -> bytes:
        """The bytes of this version (module docstring), parameters as little-endian float32 or float64.

        Examples
        --------
        >>> snap = Snapshot("softmax", (3, 2), 7, np.arange(8.0))
        >>> data = snap.encode("float64")
        >>> len(data), decode_snapshot(data).params.tolist() == snap.params.tolist()
        (103, True)
        """
        size = {"float32": 4, "float64": 8}[dtype]
        values = self.params.astype(DTYPES[size])
        name = self.name.encode("ascii")
        return b"".join([
            MAGIC, struct.pack("<BBB", FORMAT_VERSION, size, len(name)), name,
            struct.pack(f"<B{len(self.dims)}I", len(self.dims), *self.dims),
            struct.pack("<QQ", self.version, values.size), values.tobytes(),
        ])


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.at = memoryview(data), 0

    def take(self, n: int, what: str) -> memoryview:
        if n > len(self.data) - self.at:
            raise SnapshotError(f"snapshot cut short in its {what} ({len(self.data)} bytes)")
        self.at += n
        return self.data[self.at - n : self.at]

    def unpack(self, fmt: str, what: str) -> tuple[int, ...]:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), what))


@rejecting(SnapshotError, "not a model snapshot")
def decode_snapshot(data: bytes) -> Snapshot:
    """The snapshot these outside bytes encode, or SnapshotError (module docstring)."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise SnapshotError(f"a snapshot is bytes, got {type(data).__name__}")
    read = _Reader(bytes(data))
    if bytes(read.take(4, "magic")) != MAGIC:
        raise SnapshotError("bad magic: not a model snapshot")
    fmt, size, name_len = read.unpack("<BBB", "header")
    if fmt != FORMAT_VERSION:
        raise SnapshotError(f"unknown snapshot format {fmt}")
    if size not in DTYPES:
        raise SnapshotError(f"unknown parameter dtype size {size}")
    if not 1 <= name_len <= MAX_NAME:
        raise SnapshotError(f"architecture name length {name_len} out of range")
    name = bytes(read.take(name_len, "architecture")).decode("ascii", errors="replace")
    if name not in NETWORKS:
        raise SnapshotError(f"unknown architecture {name!r}")
    (m,) = read.unpack("<B", "widths")
    dims = read.unpack(f"<{m}I", "widths")
    try:
        check_dims(name, dims)
    except TrainingError as exc:
        raise SnapshotError(str(exc)) from exc
    version, count = read.unpack("<QQ", "version")
    expected = make_network(name, dims).size
    if count != expected:
        raise SnapshotError(f"{name} {dims} has {expected} parameters, the snapshot says {count}")
    if len(read.data) - read.at != count * size:
        raise SnapshotError(f"expected {count * size} parameter bytes, got {len(read.data) - read.at}")
    params = np.frombuffer(read.take(count * size, "parameters"), dtype=DTYPES[size])
    if not np.isfinite(params).all():
        raise SnapshotError("parameters must be finite")
    return Snapshot(name, dims, version, params)
