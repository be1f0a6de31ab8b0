"""The wire format: one msgspec msgpack envelope per Kafka message, columnar, led by its version.

An envelope carries the reports of n devices (n = 1 for a single device using the SDK; hundreds or thousands for
the fleet simulator or an ingestion gateway) as columns of little-endian numpy bytes, so that decoding a whole
message is a handful of `np.frombuffer` calls. One format for both sizes keeps one decode and validation path:
`decode_envelope` and `check_envelope` take one message as far as byte lengths tell, and `concatenate` turns any
number of checked messages into one set of numpy columns (checking their rows), which is how a consumer decodes a
micro-batch of small messages; `decode` is the three for a single message.

    Envelope  = [version, collection, spec_version, devices, timestamps, attributes]
    devices     uint64 LE device pseudonyms, one per row (never a raw identifier)
    timestamps  int64 LE report time in ms since the epoch, one per row
    attributes  [AttributeBlock], one per attribute that at least one row reports
    AttributeBlock = [attribute, rows, columns]
    attribute   index of the attribute in the spec
    rows        uint32 LE rows of the envelope that report it, strictly increasing
    columns     [WireColumn] = [[name, dtype, data]]: the mechanism's report columns for those rows

Evolution is append-only: a later version may only add trailing fields with defaults, so an old reader decodes a new
message's prefix; a message whose version this reader does not know is rejected with that reason. Every decoder here
takes outside bytes: whatever they are, it returns or raises `WireError`, nothing else
(`ldpstream.contract.untrusted.rejecting`, or at the one library call of the per-message steps); `leading_version`
returns None for anything it cannot read. Only mechanism output can be encoded: `encode` takes a `PerturbedBatch`, which
only `ldpstream.device.perturb` makes.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import accumulate
from typing import ClassVar, Generic, Protocol, TypeVar

import msgspec
import numpy as np

from ldpstream.contract.untrusted import describe, rejecting
from ldpstream.mechanisms.base import Reports

WIRE_VERSION = 1
ITEMSIZE = {d: np.dtype(d).itemsize for d in ("<f8", "<f4", "<i8", "<i4", "<u8", "<u4", "|u1", "|i1", "<u2", "<i2")}
ALLOWED_DTYPES = frozenset(ITEMSIZE)
SMALL_BLOCK = 32  # rows below which a block's row numbers are shifted in Python


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


class _Head(msgspec.Struct, array_like=True):
    """The first element of any msgpack array (the rest is skipped, not decoded): where every envelope of ours
    keeps its version."""

    version: int


@dataclass(frozen=True)
class AttributeReports:
    """The reports of one attribute: the batch rows that report it and the mechanism's columns for them."""

    attribute: int
    rows: np.ndarray
    reports: Reports


class SealedBatch:
    """Base of the batches that can be encoded: only the factory holding the class's seal builds one, so what
    reaches the wire is mechanism output, never raw values. A subclass is a frozen dataclass whose last field is
    `_token: object = None`, and names its maker and a seal of its own."""

    made_by: ClassVar[str]
    _seal: ClassVar[object]
    _token: object
    devices: np.ndarray

    def __post_init__(self) -> None:
        if self._token is not self._seal:
            raise TypeError(f"a {type(self).__name__} is made only by {self.made_by} (mechanism output, never raw "
                            "values)")

    def __len__(self) -> int:
        return len(self.devices)


@dataclass(frozen=True)
class PerturbedBatch(SealedBatch):
    """Mechanism output for n devices, ready to encode. Built only by `ldpstream.device.perturb`, never from raw
    values."""

    made_by: ClassVar[str] = "ldpstream.device.perturb"
    _seal: ClassVar[object] = object()

    collection: str
    spec_version: int
    devices: np.ndarray
    timestamps_ms: np.ndarray
    attributes: tuple[AttributeReports, ...]
    _token: object = None


def perturbed_batch(collection: str, spec_version: int, devices: np.ndarray, timestamps_ms: np.ndarray,
                    attributes: tuple[AttributeReports, ...]) -> PerturbedBatch:
    """For `ldpstream.device.perturb` only: wrap mechanism output as an encodable batch."""
    return PerturbedBatch(collection, spec_version, devices, timestamps_ms, attributes, PerturbedBatch._seal)


def encode_column(name: str, values: np.ndarray) -> WireColumn:
    """A numpy column as little-endian bytes with its dtype (WireError for a dtype the wire does not carry)."""
    arr = np.asarray(values)
    dtype = arr.dtype.newbyteorder("<") if arr.dtype.byteorder == ">" else arr.dtype
    arr = np.ascontiguousarray(arr, dtype=dtype)
    if arr.dtype.str not in ALLOWED_DTYPES:
        raise WireError(f"column {name!r}: dtype {arr.dtype.str} cannot go on the wire")
    return WireColumn(name, arr.dtype.str, arr.tobytes())


class Versioned(Protocol):
    """A message struct that leads with its wire version."""

    @property
    def version(self) -> int: ...


V = TypeVar("V", bound=Versioned)


class Codec(Generic[V]):
    """The msgpack codec of one kind of message (an array led by its version; `ldpstream.sgd.wire` has two more):
    `decode` raises WireError only, naming an unknown version when the bytes lead with one."""

    def __init__(self, kind: type[V], version: int) -> None:
        self.version = version
        self._decoder = msgspec.msgpack.Decoder(kind)

    def encode(self, message: V) -> bytes:
        return _encoder.encode(message)

    def decode(self, data: bytes) -> V:
        """The message in `data`; WireError with the reason if it is not one of this version.

        Per message, so guarded without a wrapper's call: its one library call is the boundary, and whatever msgspec
        raises there (its errors, UnicodeDecodeError on a string that is not UTF-8, TypeError on no bytes) is a
        WireError."""
        try:
            message = self._decoder.decode(data)
        except Exception as exc:  # outside bytes: msgspec raises more than its own errors
            version = leading_version(data)
            if version is not None and version != self.version:
                raise WireError(f"unknown wire version {version}") from exc
            reason = str(exc) if isinstance(exc, msgspec.DecodeError) else describe(exc)  # msgspec's own say enough
            raise WireError(f"malformed envelope: {reason}") from exc
        if message.version != self.version:
            raise WireError(f"unknown wire version {message.version}")
        return message


_encoder = msgspec.msgpack.Encoder()
_head_decoder = msgspec.msgpack.Decoder(_Head)
ENVELOPES = Codec(Envelope, WIRE_VERSION)


def encode(batch: PerturbedBatch) -> bytes:
    """The msgpack bytes of one envelope holding the whole batch."""
    if not isinstance(batch, PerturbedBatch):
        raise TypeError("only a PerturbedBatch (mechanism output) can be encoded")
    blocks = [AttributeBlock(a.attribute, np.ascontiguousarray(a.rows, dtype="<u4").tobytes(),
                             [encode_column(k, v) for k, v in sorted(a.reports.items())]) for a in batch.attributes]
    env = Envelope(WIRE_VERSION, batch.collection, batch.spec_version,
                   np.ascontiguousarray(batch.devices, dtype="<u8").tobytes(),
                   np.ascontiguousarray(batch.timestamps_ms, dtype="<i8").tobytes(), blocks)
    return ENVELOPES.encode(env)


def envelope_of(collection: str, spec_version: int, devices: np.ndarray, timestamps_ms: np.ndarray,
                attributes: Mapping[int, AttributeColumns]) -> Envelope:
    """The envelope of reports given as columns (say a `concatenate` of received envelopes with the devices set by
    the server): how an ingestion edge rebuilds and re-batches what devices sent."""
    blocks = [AttributeBlock(a, np.ascontiguousarray(c.rows, dtype="<u4").tobytes(),
                             [encode_column(k, v) for k, v in sorted(c.columns.items())])
              for a, c in sorted(attributes.items())]
    return Envelope(WIRE_VERSION, collection, spec_version, np.ascontiguousarray(devices, dtype="<u8").tobytes(),
                    np.ascontiguousarray(timestamps_ms, dtype="<i8").tobytes(), blocks)


def encode_envelope(env: Envelope) -> bytes:
    """The msgpack bytes of an envelope."""
    return ENVELOPES.encode(env)


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


@dataclass(frozen=True)
class AttributeColumns:
    """One attribute's reports in a concatenation: their rows in it and the mechanism's columns for them (flat)."""

    rows: np.ndarray
    columns: dict[str, np.ndarray]


@dataclass(frozen=True)
class Concatenation:
    """The reports of several envelopes as one set of columns, in message order, rows numbered across messages.

    `messages` are the indices (in the envelopes given) of the messages it holds and `sizes` their numbers of rows;
    `rejected` gives, for each message left out whole, the reason.
    """

    messages: np.ndarray
    sizes: np.ndarray
    devices: np.ndarray
    timestamps_ms: np.ndarray
    attributes: dict[int, AttributeColumns]
    rejected: dict[int, str]


@rejecting(WireError, "malformed envelope")
def decode(data: bytes) -> DecodedBatch:
    """Decode one message; WireError with the reason if it is not a well-formed envelope of a known version."""
    env = decode_envelope(data)
    check_envelope(env)
    joined = concatenate([env])
    if joined.rejected:
        raise WireError(joined.rejected[0])
    return DecodedBatch(env.collection, env.spec_version, joined.devices, joined.timestamps_ms,
                        tuple(AttributeReports(a, c.rows, c.columns) for a, c in joined.attributes.items()))


def decode_envelope(data: bytes) -> Envelope:
    """The envelope of one message; WireError with the reason if it is not an envelope of a known version
    (`Codec.decode`)."""
    return ENVELOPES.decode(data)


def check_envelope(env: Envelope) -> int:
    """The number of rows n of an envelope; WireError with the reason unless it is well formed as far as the byte
    lengths tell (the values of its rows are checked by `concatenate`). Per message, so without a wrapper's call:
    it only compares lengths and ints of fields msgspec has typed, and raises WireError and nothing else."""
    if len(env.devices) % 8:
        raise WireError(_not_whole(env.devices, "<u8", "devices"))
    if len(env.timestamps) % 8:
        raise WireError(_not_whole(env.timestamps, "<i8", "timestamps"))
    n = len(env.devices) // 8
    if len(env.timestamps) != len(env.devices):
        raise WireError(f"{n} devices but {len(env.timestamps) // 8} timestamps")
    if n == 0:
        raise WireError("empty envelope")
    seen: set[int] = set()
    for block in env.attributes:
        if block.attribute in seen or block.attribute < 0:
            raise WireError(f"attribute {block.attribute} repeated or negative")
        seen.add(block.attribute)
        if len(block.rows) % 4:
            raise WireError(_not_whole(block.rows, "<u4", "rows"))
        if len(block.rows) > 4 * n:
            raise WireError(_rows_problem(block.attribute, n))
        names: set[str] = set()
        for col in block.columns:
            size = ITEMSIZE.get(col.dtype)
            if size is None:
                raise WireError(f"attribute {block.attribute}: column {col.name!r} has dtype {col.dtype!r}")
            if col.name in names:
                raise WireError(f"attribute {block.attribute}: column {col.name!r} repeated")
            names.add(col.name)
            if len(col.data) % size:
                raise WireError(_not_whole(col.data, col.dtype, col.name))
    return n


@rejecting(WireError, "malformed envelopes")
def concatenate(envelopes: Sequence[Envelope]) -> Concatenation:
    """The reports of envelopes that passed `check_envelope` as one set of columns. A message whose rows of an
    attribute are not strictly increasing and < its n is left out whole, with the reason in `rejected`.
    WireError if messages carry different columns for the same attribute (their rows could not be matched)."""
    sizes = np.fromiter((len(env.devices) for env in envelopes), dtype=np.int64, count=len(envelopes)) // 8
    by_attribute: dict[int, list[tuple[int, AttributeBlock]]] = {}
    for i, env in enumerate(envelopes):
        for block in env.attributes:
            by_attribute.setdefault(block.attribute, []).append((i, block))
    placed = [pair for pairs in by_attribute.values() for pair in pairs]  # by attribute, then message
    counts = np.fromiter((len(block.rows) for _, block in placed), dtype=np.int64, count=len(placed)) // 4
    block_of = np.repeat(np.arange(len(placed)), counts)
    message = np.fromiter((i for i, _ in placed), dtype=np.int64, count=len(placed))[block_of]
    local = np.frombuffer(b"".join([block.rows for _, block in placed]), dtype="<u4").astype(np.int64)
    bad = local >= sizes[message]
    bad[1:] |= (local[1:] <= local[:-1]) & (block_of[1:] == block_of[:-1])
    if bad.any():
        rejected: dict[int, str] = {}
        for j in np.unique(block_of[bad]).tolist():
            i, block = placed[j]
            rejected.setdefault(i, _rows_problem(block.attribute, int(sizes[i])))
        keep = np.array([i for i in range(len(envelopes)) if i not in rejected], dtype=np.int64)
        return replace(concatenate([envelopes[i] for i in keep]), messages=keep, rejected=rejected)
    rows = local + (np.cumsum(sizes) - sizes)[message]
    edges = [0, *np.cumsum(counts).tolist()]
    attributes: dict[int, AttributeColumns] = {}
    first = 0
    for attribute, pairs in by_attribute.items():
        last = first + len(pairs)
        if edges[last] > edges[first]:  # an attribute no row reports (empty blocks) carries nothing to count
            attributes[attribute] = AttributeColumns(rows[edges[first]:edges[last]],
                                                     _attribute_columns(attribute, [block for _, block in pairs]))
        first = last
    return Concatenation(np.arange(len(envelopes)), sizes,
                         np.frombuffer(b"".join([env.devices for env in envelopes]), dtype="<u8"),
                         np.frombuffer(b"".join([env.timestamps for env in envelopes]), dtype="<i8"),
                         attributes, {})


def join_envelopes(envelopes: Sequence[Envelope]) -> Envelope:
    """Envelopes of one collection and spec version whose rows `concatenate` accepts, as one envelope: the envelope
    `envelope_of` makes of their concatenation (attributes and columns sorted, rows numbered across the messages),
    built from their bytes, without decoding a column unless two messages give it different dtypes. WireError if
    messages carry different columns for one attribute. (How an edge or an outbox re-batches checked reports.)"""
    first = envelopes[0]
    offsets = list(accumulate((len(env.devices) // 8 for env in envelopes[:-1]), initial=0))
    by_attribute: dict[int, list[tuple[int, AttributeBlock]]] = {}
    for i, env in enumerate(envelopes):
        for block in env.attributes:
            by_attribute.setdefault(block.attribute, []).append((i, block))
    blocks = []
    for attribute in sorted(by_attribute):
        pairs = by_attribute[attribute]
        rows = b"".join([_shifted_rows(block.rows, offsets[i]) for i, block in pairs])  # numbered across messages
        if not rows:  # an attribute no row reports carries nothing (as in `concatenate`)
            continue
        by_name: dict[str, list[WireColumn]] = {}
        for _, block in pairs:
            for col in block.columns:
                by_name.setdefault(col.name, []).append(col)
        if any(len(cols) != len(pairs) for cols in by_name.values()):
            raise WireError(f"attribute {attribute}: the messages carry different columns")
        columns = [cols[0] if len(cols) == 1 else
                   WireColumn(name, cols[0].dtype, b"".join([c.data for c in cols]))
                   if len({c.dtype for c in cols}) == 1 else encode_column(name, _joined(cols))
                   for name, cols in sorted(by_name.items())]
        blocks.append(AttributeBlock(attribute, rows, columns))
    return Envelope(WIRE_VERSION, first.collection, first.spec_version, b"".join([env.devices for env in envelopes]),
                    b"".join([env.timestamps for env in envelopes]), blocks)


def _shifted_rows(rows: bytes, offset: int) -> bytes:
    """uint32 LE row numbers plus `offset` (a few rows, a device's, by struct: numpy's fixed cost is larger)."""
    if offset == 0:
        return rows
    n = len(rows) // 4
    if n <= SMALL_BLOCK:
        return struct.pack(f"<{n}I", *[r + offset for r in struct.unpack(f"<{n}I", rows)])
    return (np.frombuffer(rows, dtype="<u4") + np.uint32(offset)).astype("<u4").tobytes()


def _rows_problem(attribute: int, n: int) -> str:
    return f"attribute {attribute}: rows must be strictly increasing and < {n}"


def _attribute_columns(attribute: int, blocks: list[AttributeBlock]) -> dict[str, np.ndarray]:
    """Each column of an attribute's blocks, concatenated (WireError if the blocks carry different columns)."""
    by_name: dict[str, list[WireColumn]] = {}
    for block in blocks:
        for col in block.columns:
            by_name.setdefault(col.name, []).append(col)
    if any(len(cols) != len(blocks) for cols in by_name.values()):
        raise WireError(f"attribute {attribute}: the messages carry different columns")
    return {name: _joined(cols) for name, cols in by_name.items()}


def _joined(cols: list[WireColumn]) -> np.ndarray:
    """The values of the columns one after the other (promoted to a common dtype where the messages differ)."""
    dtypes = {col.dtype for col in cols}
    if len(dtypes) == 1:
        return np.frombuffer(b"".join([col.data for col in cols]), dtype=dtypes.pop())
    return np.concatenate([np.frombuffer(col.data, dtype=col.dtype) for col in cols])


def column_from_bytes(data: bytes, dtype: str, what: str) -> np.ndarray:
    """The numpy column in `data` of a dtype the wire carries (WireError if it is not a whole number of values)."""
    if len(data) % ITEMSIZE[dtype]:
        raise WireError(_not_whole(data, dtype, what))
    return np.frombuffer(data, dtype=dtype)


def _not_whole(data: bytes, dtype: str, what: str) -> str:
    return f"{what}: {len(data)} bytes is not a whole number of {dtype} values"


def leading_version(data: bytes) -> int | None:
    """The first element of a msgpack array, if the message is one and it is an int (to name unknown versions);
    None for anything else, whatever the bytes."""
    try:
        return _head_decoder.decode(data).version
    except Exception:  # outside bytes: whatever msgspec raises on them, there is no version to name
        return None
