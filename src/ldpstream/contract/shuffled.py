"""Everything a shuffled collection changes outside the shuffler, in one place.

`report_path(spec)`: the path a collection's reports take, `DIRECT` (the edge writes each report to the report topic
on its device's partition; the worker judges it per device: partition, age, one report per window) or `SHUFFLED`
(the edge writes it anonymous, on any partition, to the raw topic; the shuffler releases each window's batch once to
the report topic; the worker judges no device, age or duplicate). The edge, the worker, the audit, the estimates,
the read API and publishing ask the path, never the spec's `shuffle` block, what to do.

What the shuffler publishes about each window it released, for the estimates and the read API: the batch size,
each report's local epsilon, the central (epsilon, delta) of the batch and the bound that gave it. Stored in Redis
(`figures_key`: one hash per collection, a field per spec version and window) by the shuffler, read by the API; in
the same hash, `DUE_FIELD`: when the collection's next window is due to close (the API's overdue alert)."""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from typing import Any, Protocol

import msgspec
import numpy as np

from ldpstream.contract.spec import CollectionSpec
from ldpstream.contract.topics import raw_topic, report_topic
from ldpstream.contract.wire import Envelope


class ReportPath(Protocol):
    """How a collection's reports travel from the edge to the counts (module docstring)."""

    shuffled: bool
    per_device: bool  # the worker judges each report by its device: partition, age, one report per window

    def topics(self, spec: CollectionSpec) -> tuple[str, ...]:
        """The topics its reports pass through, the edge's first (publishing makes each)."""
        ...

    def partition(self, spec: CollectionSpec, device_partition: int) -> int:
        """The partition of the edge's topic a report of a device on `device_partition` goes to."""
        ...

    def outgoing(self, envelope: Envelope, window_starts: np.ndarray) -> Envelope:
        """The checked reports as the edge writes them (`window_starts`: each report's dedupe window's start)."""
        ...

    def grace_s(self, spec: CollectionSpec) -> int | None:
        """How long after its window's end a report is still admitted (None: the rule before `grace_s`)."""
        ...

    def summary(self, spec: CollectionSpec) -> dict[str, Any] | None:
        """What the read API shows of the path (None: nothing)."""
        ...


class _Direct:
    shuffled = False
    per_device = True

    def topics(self, spec: CollectionSpec) -> tuple[str, ...]:
        return (report_topic(spec.name),)

    def partition(self, spec: CollectionSpec, device_partition: int) -> int:
        return device_partition

    def outgoing(self, envelope: Envelope, window_starts: np.ndarray) -> Envelope:
        return envelope

    def grace_s(self, spec: CollectionSpec) -> int | None:
        return spec.grace_s

    def summary(self, spec: CollectionSpec) -> dict[str, Any] | None:
        return None


class _Shuffled:
    shuffled = True
    per_device = False  # anonymous (device 0), each window's batch once: the edge kept one report per device

    def topics(self, spec: CollectionSpec) -> tuple[str, ...]:
        return raw_topic(spec.name), report_topic(spec.name)

    def partition(self, spec: CollectionSpec, device_partition: int) -> int:
        return secrets.randbelow(spec.partitions)  # nothing ties a partition to a device

    def outgoing(self, envelope: Envelope, window_starts: np.ndarray) -> Envelope:
        """Every device 0 and every time the start of the report's dedupe window: who sent a report, and when within
        its window, are not written."""
        n = len(window_starts)
        return Envelope(envelope.version, envelope.collection, envelope.spec_version, bytes(8 * n),
                        window_starts.astype("<i8").tobytes(), envelope.attributes)

    def grace_s(self, spec: CollectionSpec) -> int | None:
        assert spec.shuffle is not None
        return spec.shuffle.grace_s  # the shuffler closes the window then

    def summary(self, spec: CollectionSpec) -> dict[str, Any] | None:
        assert spec.shuffle is not None
        return {"delta": spec.shuffle.delta, "min_batch": spec.shuffle.min_batch}


DIRECT: ReportPath = _Direct()
SHUFFLED: ReportPath = _Shuffled()


def report_path(spec: CollectionSpec) -> ReportPath:
    """The path the reports of `spec` take."""
    return DIRECT if spec.shuffle is None else SHUFFLED


def shuffled_names(specs: Iterable[CollectionSpec]) -> set[str]:
    """The names of the shuffled collections among `specs`."""
    return {spec.name for spec in specs if report_path(spec).shuffled}


class WindowFigures(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One released window of a shuffled collection."""

    spec_version: int
    window_ms: int  # the start of the window released (rows rolled in from earlier windows are stamped with it)
    reports: int  # the batch size n
    rolled: int  # of them, reports of earlier windows that were too small to release alone (or arrived late)
    epsilon0: float  # each report's local epsilon
    epsilon: float  # the central epsilon of the batch at `delta` (the tightest bound)
    delta: float
    bound: str  # which bound gave `epsilon` (`ldpstream.mechanisms.shuffle.window_bounds`)
    released_ms: int  # when the shuffler committed the batch


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(WindowFigures)


def figures_key(collection: str) -> str:
    """The Redis hash of a collection's released windows.

    Examples
    --------
    >>> figures_key("diagnostics")
    'ldp:shuffle:diagnostics'
    """
    return f"ldp:shuffle:{collection}"


DUE_FIELD = "due_ms"  # in `figures_key`: when the next window of the collection is due to close (epoch ms, decimal)


def figures_field(spec_version: int, window_ms: int) -> str:
    """The field of one spec version's window in `figures_key`."""
    return f"{spec_version}:{window_ms}"


def encode_figures(figures: WindowFigures) -> bytes:
    return _encoder.encode(figures)


def decode_figures(data: bytes) -> WindowFigures | None:
    """The figures stored, or None for bytes that are not (a store is outside bytes too)."""
    try:
        return _decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
