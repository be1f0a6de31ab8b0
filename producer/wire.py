"""The wire format: one msgspec msgpack envelope per Kafka message, columnar, led by its version.

An envelope carries the reports of n devices (n = 1 for a single device using the SDK; hundreds or thousands for
the fleet simulator or an ingestion gateway) as columns of little-endian numpy bytes, so that decoding a whole
message is a handful of `np.frombuffer` calls. One format for both sizes keeps one decode and validation path.

    Envelope  = [version, collection, spec_version, devices, timestamps, attributes]
    devices     uint64 LE device pseudonyms, one per row (never a raw identifier)
    timestamps  int64 LE report time in ms since the epoch, one per row
    attributes  [AttributeBlock], one per attribute that at least one row reports
    AttributeBlock = [attribute, rows, columns]
    attribute   index of the attribute in the spec
    rows        uint32 LE rows of the envelope that report it, strictly increasing
    columns     [WireColumn] = [[name, dtype, data]]: the mechanism's report columns for those rows

Evolution is append-only: a later version may only add trailing fields with defaults, so an old reader decodes
a new message's prefix; a message whose version this reader does not know is rejected with that reason.
Only mechanism output can be encoded: `encode` takes a `PerturbedBatch`, which only `producer.perturb` makes.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec
import numpy as np

from ldp.base import Reports

WIRE_VERSION = 1
ALLOWED_DTYPES = frozenset({"<f8", "<f4", "<i8", "<i4", "<u8", "<u4", "|u1", "|i1", "<u2", "<i2"})


class WireError(ValueError):
    """A message that cannot be decoded; the message is the reason that goes to the dead-letter topic."""


class WireColumn(msgspec.Struct, array_like=True, frozen=True):
    name: str
    dtype: str
    data: bytes


class AttributeBlock(msgspec.Struct, array_like=True, frozen=True):
    attribute: int
    rows: bytes
    columns: list[WireColumn]


class Envelope(msgspec.Struct, array_like=True, frozen=True):
    version: int
    collection: str
    spec_version: int
    devices: bytes
    timestamps: bytes
    attributes: list[AttributeBlock]


@dataclass(frozen=True)
class AttributeReports:
    """The reports of one attribute: the batch rows that report it and the mechanism's columns for them."""

    attribute: int
    rows: np.ndarray
    reports: Reports


@dataclass(frozen=True)
class PerturbedBatch:
    """Mechanism output for n devices, ready to encode. Built only by `producer.perturb`, never from raw values."""

    collection: str
    spec_version: int
    devices: np.ndarray
    timestamps_ms: np.ndarray
    attributes: tuple[AttributeReports, ...]
    _token: object = None

    def __post_init__(self) -> None:
        if self._token is not _PERTURBED:
            raise TypeError("a PerturbedBatch is made only by producer.perturb (mechanism output, never raw values)")

    def __len__(self) -> int:
        return len(self.devices)


_PERTURBED = object()


def perturbed_batch(collection: str, spec_version: int, devices: np.ndarray, timestamps_ms: np.ndarray,
                    attributes: tuple[AttributeReports, ...]) -> PerturbedBatch:
    """For `producer.perturb` only: wrap mechanism output as an encodable batch."""
    return PerturbedBatch(collection, spec_version, devices, timestamps_ms, attributes, _PERTURBED)


def encode_column(name: str, values: np.ndarray) -> WireColumn:
    """A numpy column as little-endian bytes with its dtype (WireError for a dtype the wire does not carry)."""
    arr = np.asarray(values)
    dtype = arr.dtype.newbyteorder("<") if arr.dtype.byteorder == ">" else arr.dtype
    arr = np.ascontiguousarray(arr, dtype=dtype)
    if arr.dtype.str not in ALLOWED_DTYPES:
        raise WireError(f"column {name!r}: dtype {arr.dtype.str} cannot go on the wire")
    return WireColumn(name, arr.dtype.str, arr.tobytes())


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Envelope)


def encode(batch: PerturbedBatch) -> bytes:
    """The msgpack bytes of one envelope holding the whole batch."""
    if not isinstance(batch, PerturbedBatch):
        raise TypeError("only a PerturbedBatch (mechanism output) can be encoded")
    blocks = [AttributeBlock(a.attribute, np.ascontiguousarray(a.rows, dtype="<u4").tobytes(),
                             [encode_column(k, v) for k, v in sorted(a.reports.items())]) for a in batch.attributes]
    env = Envelope(WIRE_VERSION, batch.collection, batch.spec_version,
                   np.ascontiguousarray(batch.devices, dtype="<u8").tobytes(),
                   np.ascontiguousarray(batch.timestamps_ms, dtype="<i8").tobytes(), blocks)
    return _encoder.encode(env)


@dataclass(frozen=True)
class DecodedBatch:
    """A decoded envelope as numpy columns (attributes' report columns are flat; the schema gives row shapes)."""

    collection: str
    spec_version: int
    devices: np.ndarray
    timestamps_ms: np.ndarray
    attributes: tuple[AttributeReports, ...]

    def __len__(self) -> int:
        return len(self.devices)


def decode(data: bytes) -> DecodedBatch:
    """Decode one message; WireError with the reason if it is not a well-formed envelope of a known version."""
    try:
        env = _decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        version = leading_version(data)
        if version is not None and version != WIRE_VERSION:
            raise WireError(f"unknown wire version {version}") from exc
        raise WireError(f"malformed envelope: {exc}") from exc
    if env.version != WIRE_VERSION:
        raise WireError(f"unknown wire version {env.version}")
    devices = column_from_bytes(env.devices, "<u8", "devices")
    timestamps = column_from_bytes(env.timestamps, "<i8", "timestamps")
    n = len(devices)
    if len(timestamps) != n:
        raise WireError(f"{n} devices but {len(timestamps)} timestamps")
    if n == 0:
        raise WireError("empty envelope")
    blocks = []
    seen: set[int] = set()
    for block in env.attributes:
        if block.attribute in seen or block.attribute < 0:
            raise WireError(f"attribute {block.attribute} repeated or negative")
        seen.add(block.attribute)
        rows = column_from_bytes(block.rows, "<u4", "rows")
        if len(rows) and (rows[-1] >= n or (len(rows) > 1 and np.any(np.diff(rows.astype(np.int64)) <= 0))):
            raise WireError(f"attribute {block.attribute}: rows must be strictly increasing and < {n}")
        cols = {}
        for col in block.columns:
            if col.dtype not in ALLOWED_DTYPES:
                raise WireError(f"attribute {block.attribute}: column {col.name!r} has dtype {col.dtype!r}")
            if col.name in cols:
                raise WireError(f"attribute {block.attribute}: column {col.name!r} repeated")
            cols[col.name] = column_from_bytes(col.data, col.dtype, col.name)
        blocks.append(AttributeReports(block.attribute, rows, cols))
    return DecodedBatch(env.collection, env.spec_version, devices, timestamps, tuple(blocks))


def column_from_bytes(data: bytes, dtype: str, what: str) -> np.ndarray:
    """The numpy column in `data` (WireError if it is not a whole number of values)."""
    size = np.dtype(dtype).itemsize
    if len(data) % size:
        raise WireError(f"{what}: {len(data)} bytes is not a whole number of {dtype} values")
    return np.frombuffer(data, dtype=dtype)


def leading_version(data: bytes) -> int | None:
    """The first element of a msgpack array, if the message is one and it is an int (to name unknown versions)."""
    try:
        head = msgspec.msgpack.decode(data)
    except msgspec.DecodeError:
        return None
    if isinstance(head, list) and head and isinstance(head[0], int) and not isinstance(head[0], bool):
        return head[0]
    return None
