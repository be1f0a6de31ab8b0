"""Turn the true records of n devices into a `PerturbedBatch`: the only way anything reaches the wire.

`perturb` validates the records (every attribute present and no other, numeric values finite and inside the attribute's
range, categories known), maps categorical values to their codes, runs the spec's collector
(`ldpstream.contract.collector`, 000 Sec. IV-C) and wraps its output, and only its output, with
`ldpstream.contract.wire.perturbed_batch`. A spec with a privacy block perturbs with the devices' collection secrets,
and `report_memos` says which memos each device's report reads, for its ledger (`ldpstream.device.ledger`).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Mapping, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, cast, overload

import numpy as np

from ldpstream.contract.collector import Strategies, collector_for
from ldpstream.contract.pseudonym import device_partitions
from ldpstream.contract.spec import (
    CategoricalAttribute,
    CollectionSpec,
    KeyValueAttribute,
    NumericAttribute,
    SpecError,
    StringAttribute,
)
from ldpstream.contract.wire import AttributeReports, PerturbedBatch, perturbed_batch
from ldpstream.device.ledger import Memo
from ldpstream.mechanisms.base import LDPError
from ldpstream.mechanisms.keyvalue.base import EMPTY, check_pairs, pairs_array
from ldpstream.mechanisms.open_domain.strings import StringDomain

if TYPE_CHECKING:
    from ldpstream.mechanisms.longitudinal.base import Longitudinal


MEMO_NAMING = "m1"  # the memo names' version (`memo_prefix`); names without it are the legacy ones (`Memo.legacy`)


class RecordError(LDPError):
    """The true records handed to `perturb` are malformed; the message names the attribute and the problem."""


def perturb(spec: CollectionSpec, devices: np.ndarray, timestamps_ms: np.ndarray,
            records: Mapping[str, np.ndarray], rng: np.random.Generator,
            strategies: Strategies | None = None, secrets: np.ndarray | None = None) -> PerturbedBatch:
    """Perturbed reports of n devices (pseudonyms `devices`, report times in ms) for the true `records`.

    `records` maps every attribute name to a column of n true values: numeric ones inside the attribute's range,
    categorical ones as value strings or integer codes 0..K-1, keyvalue ones as n mappings {key: value} (`_pairs`)
    or a pairs array (n, slots, 2) of key codes (-1: empty slot) and values; `strategies` holds the factorization
    strategies the spec pins (`ldpstream.runtime.strategies.strategies_for`); `secrets` the devices' uint64 collection
    secrets, which a spec with a privacy block needs (and only it). RecordError if anything is malformed.
    """
    ids = np.asarray(devices)
    if ids.ndim != 1 or ids.size == 0 or ids.dtype.kind not in "iu" or (ids.dtype.kind == "i" and ids.min() < 0):
        raise RecordError(f"devices must be a non-empty 1-D array of uint64 pseudonyms, got {ids.dtype} {ids.shape}")
    times = np.asarray(timestamps_ms)
    if times.shape != ids.shape or times.dtype.kind not in "iu":
        raise RecordError(f"timestamps_ms must be {len(ids)} integer milliseconds, got {times.dtype} {times.shape}")
    columns = true_columns(spec, records, len(ids))
    batch = collector_for(spec, strategies).perturb(columns, rng, _secrets(spec, secrets, len(ids)))
    blocks = tuple(AttributeReports(index, batch.rows[a.name].astype(np.uint32), batch.reports[a.name])
                   for index, a in enumerate(spec.attributes) if len(batch.rows[a.name]))
    return perturbed_batch(spec.name, spec.version, ids.astype(np.uint64, copy=False),
                           times.astype(np.int64, copy=False), blocks)


def report_memos(spec: CollectionSpec, records: Mapping[str, np.ndarray], secrets: np.ndarray,
                 strategies: Strategies | None = None) -> list[list[Memo]]:
    """Per device, the memos its report of `records` with its collection secret reads (a spec with a privacy block):
    one per attribute it reports, named by the attribute, the mechanism with its budgets, and the memo key (the
    value's code, or 1BitMean's rounded value; `memo_prefix`), at the mechanism's eps_inf, with its legacy name."""
    n = len(np.atleast_1d(np.asarray(secrets)))
    collector = collector_for(spec, strategies)
    keys = collector.memo_keys(true_columns(spec, records, n), _secrets(spec, secrets, n))
    memos: list[list[Memo]] = [[] for _ in range(n)]
    for name, (rows, memo) in keys.items():
        mech = cast("Longitudinal", collector.mechanisms[name])
        prefix, legacy, cost = memo_prefix(name, mech), f"{name}/{mech!r}/", float(mech.epsilon_lifetime)
        for row, key in zip(rows.tolist(), memo.tolist(), strict=True):
            memos[row].append(Memo(f"{prefix}{key}", cost, f"{legacy}{key}"))
    return memos


def memo_prefix(attribute: str, mech: Longitudinal) -> str:
    """The memo name of `attribute`'s memos under `mech` without its key (docs/reference/protocol.md, "Memo
    naming", MEMO_NAMING): `m1/ATTRIBUTE/MECHANISM/NAME=HEX,.../`, each parameter as the 16 hex digits of its IEEE 754
    binary64 bits, big-endian. Exact and the same in every language, unlike a language's number formatting."""
    values = ",".join(f"{k}={struct.pack('>d', float(v)).hex()}" for k, v in mech.memo_parameters())
    return f"{MEMO_NAMING}/{attribute}/{mech.name}/{values}/"


@overload
def _secrets(spec: CollectionSpec, secrets: np.ndarray, n: int) -> np.ndarray: ...
@overload
def _secrets(spec: CollectionSpec, secrets: np.ndarray | None, n: int) -> np.ndarray | None: ...
def _secrets(spec: CollectionSpec, secrets: np.ndarray | None, n: int) -> np.ndarray | None:
    """The secrets as uint64, or RecordError unless they come with a privacy block (and only then), one a device."""
    if (secrets is None) != (spec.privacy is None):
        raise RecordError(f"{spec.key}: device secrets go with a privacy block, and a privacy block needs them")
    if secrets is None:
        return None
    keys = np.atleast_1d(np.asarray(secrets))
    if keys.shape != (n,) or keys.dtype.kind not in "iu" or (keys.dtype.kind == "i" and keys.size and keys.min() < 0):
        raise RecordError(f"secrets must be {n} unsigned 64-bit integers, got {keys.dtype} {keys.shape}")
    return keys.astype(np.uint64, copy=False)


def true_columns(spec: CollectionSpec, records: Mapping[str, np.ndarray], n: int) -> dict[str, np.ndarray]:
    """The records validated and as the collector takes them: float64 numeric values, int64 category codes,
    pairs arrays of key codes."""
    names = {a.name for a in spec.attributes}
    missing = [a.name for a in spec.attributes if a.name not in records]
    unknown = sorted(set(records) - names)
    if missing or unknown:
        raise RecordError(f"{spec.key}: records lack attributes {missing} or have unknown ones {unknown}")
    columns = {}
    for a in spec.attributes:
        if isinstance(a, KeyValueAttribute):
            columns[a.name] = _pairs(a, records[a.name], n)
            continue
        column = np.atleast_1d(np.asarray(records[a.name]))
        if column.shape != (n,):
            raise RecordError(f"attribute {a.name!r}: expected {n} values (one per device), got shape {column.shape}")
        if isinstance(a, StringAttribute):
            columns[a.name] = _strings(a, column)
        else:
            columns[a.name] = _numeric(a, column) if isinstance(a, NumericAttribute) else _codes(a, column)
    return columns


def _strings(a: StringAttribute, column: np.ndarray) -> np.ndarray:
    """The strings as padded byte rows; RecordError for one the attribute's domain refuses (too long, a byte
    outside the alphabet, empty): the device refuses it, nothing is sent."""
    try:
        return StringDomain(a.max_length, a.alphabet).encode(column)
    except LDPError as exc:
        raise RecordError(f"attribute {a.name!r}: {exc}") from exc


def _numeric(a: NumericAttribute, column: np.ndarray) -> np.ndarray:
    if column.dtype.kind not in "iuf":
        raise RecordError(f"attribute {a.name!r}: numeric values expected, got dtype {column.dtype}")
    x = column.astype(np.float64, copy=False)
    lo, hi = a.range
    if not (x.min() >= lo and x.max() <= hi):  # NaN fails both comparisons
        if np.isnan(x).any():
            raise RecordError(f"attribute {a.name!r}: NaN value")
        bad = x[(x < lo) | (x > hi)][0]
        raise RecordError(f"attribute {a.name!r}: value {bad} outside its range [{lo}, {hi}]")
    return x


def _pairs(a: KeyValueAttribute, column: object, n: int) -> np.ndarray:
    """A keyvalue column as a pairs array with key codes, checked: keys known, values finite in the range, no key
    twice. From mappings {key name or code: value} (one device's SDK call; building from Python objects), an open
    domain's keys are hashed (`KeyValueAttribute.code_of`) and a second key of a bucket already held is dropped."""
    if isinstance(column, np.ndarray) and column.dtype == object:  # the SDK's one record: an array of mappings
        column = column.tolist()
    if isinstance(column, np.ndarray) and column.dtype.kind in "iuf":
        pairs = column.astype(np.float64)
    elif isinstance(column, Sequence) and all(isinstance(row, Mapping) for row in column):
        try:
            sets = [_codes_of(a, row) for row in column]
        except SpecError as exc:
            raise RecordError(str(exc)) from None
        pairs = pairs_array(sets)
    else:
        raise RecordError(f"attribute {a.name!r}: n mappings {{key: value}} or a pairs array (n, slots, 2) expected")
    if pairs.ndim != 3 or pairs.shape[0] != n or pairs.shape[2] != 2:
        raise RecordError(f"attribute {a.name!r}: expected {n} sets of pairs, got shape {pairs.shape}")
    keys, values = pairs[:, :, 0], pairs[:, :, 1]
    try:  # keys: integer codes in the domain (or -1), none twice in a set; values are checked on their range below
        check_pairs(np.stack([keys, np.zeros_like(values)], axis=2), a.domain_size)
    except LDPError as exc:
        raise RecordError(f"attribute {a.name!r}: {exc}") from None
    held = keys != EMPTY
    lo, hi = a.range
    if not ((values[held] >= lo).all() and (values[held] <= hi).all()):  # NaN fails both
        raise RecordError(f"attribute {a.name!r}: a value outside its range [{lo}, {hi}] (or NaN)")
    return pairs


def _codes_of(a: KeyValueAttribute, row: Mapping[object, object]) -> dict[int, float]:
    codes: dict[int, float] = {}
    for key, value in row.items():
        code = a.code_of(key) if isinstance(key, str) else key
        if not isinstance(code, int | np.integer) or not isinstance(value, int | float | np.number):
            raise RecordError(f"attribute {a.name!r}: pairs are {{key: number}}, got {key!r}: {value!r}")
        codes.setdefault(int(code), float(value))
    return codes


@lru_cache(maxsize=1024)
def _sorted_values(values: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    """The values sorted, and for each sorted position the value's code (its index in the spec)."""
    order = np.argsort(np.asarray(values))
    return np.asarray(values)[order], order.astype(np.int64)


def _codes(a: CategoricalAttribute, column: np.ndarray) -> np.ndarray:
    k = len(a.values)
    if column.dtype.kind in "USO":
        ordered, codes = _sorted_values(tuple(a.values))
        text = column.astype(str)
        pos = np.minimum(np.searchsorted(ordered, text), k - 1)
        known = ordered[pos] == text
        if not known.all():
            raise RecordError(f"attribute {a.name!r}: unknown category {str(text[~known][0])!r}; known: {a.values}")
        return codes[pos]
    if column.dtype.kind not in "iu":
        raise RecordError(f"attribute {a.name!r}: categories are value strings or integer codes, got {column.dtype}")
    if column.min() < 0 or column.max() >= k:
        bad = column[(column < 0) | (column >= k)][0]
        raise RecordError(f"attribute {a.name!r}: unknown category code {bad} (codes are 0..{k - 1})")
    return column.astype(np.int64, copy=False)


def single_reports(batch: PerturbedBatch) -> Iterator[PerturbedBatch]:
    """The batch as n batches of one device each (one Kafka message per report), in row order."""
    per_row: list[list[AttributeReports]] = [[] for _ in range(len(batch))]
    zero = np.zeros(1, dtype=np.uint32)
    for block in batch.attributes:  # each row gets the k blocks it sampled: n * k one-row slices in all
        columns = list(block.reports.items())
        for position, row in enumerate(block.rows.tolist()):
            reports = {name: col[position:position + 1] for name, col in columns}
            per_row[row].append(AttributeReports(block.attribute, zero, reports))
    for i, blocks in enumerate(per_row):
        yield perturbed_batch(batch.collection, batch.spec_version, batch.devices[i:i + 1],
                              batch.timestamps_ms[i:i + 1], tuple(blocks))


def row_range(batch: PerturbedBatch, lo: int, hi: int) -> PerturbedBatch:
    """The devices lo..hi-1 of a batch as a batch of their own (rows renumbered from 0)."""
    if not 0 <= lo < hi <= len(batch):
        raise ValueError(f"row range [{lo}, {hi}) is not inside a batch of {len(batch)}")
    return select_rows(batch, np.arange(lo, hi))


def select_rows(batch: PerturbedBatch, rows: np.ndarray) -> PerturbedBatch:
    """The devices at `rows` (strictly increasing) as a batch of their own (rows renumbered from 0)."""
    blocks = []
    for block in batch.attributes:
        at = np.searchsorted(rows, block.rows)
        keep = rows[np.minimum(at, len(rows) - 1)] == block.rows
        if keep.any():
            reports = {name: col[keep] for name, col in block.reports.items()}
            blocks.append(AttributeReports(block.attribute, at[keep].astype(np.uint32), reports))
    return perturbed_batch(batch.collection, batch.spec_version, batch.devices[rows], batch.timestamps_ms[rows],
                           tuple(blocks))


def by_partition(batch: PerturbedBatch, partitions: int) -> Iterator[tuple[int, PerturbedBatch]]:
    """The batch split by the report-topic partition of its devices (`device_partitions`), lowest first."""
    owner = device_partitions(batch.devices, partitions)
    order = np.argsort(owner, kind="stable")  # rows of one partition stay in their order
    bounds = np.searchsorted(owner[order], np.arange(partitions + 1))
    for p in range(partitions):
        if bounds[p + 1] > bounds[p]:
            yield p, select_rows(batch, order[bounds[p]:bounds[p + 1]])
