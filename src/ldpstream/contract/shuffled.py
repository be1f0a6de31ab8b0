"""What the shuffler publishes about each window it released, for the estimates and the read API: the batch size,
each report's local epsilon, the central (epsilon, delta) of the batch and the bound that gave it. Stored in Redis
(`figures_key`: one hash per collection, a field per spec version and window) by the shuffler, read by the API; in
the same hash, `DUE_FIELD`: when the collection's next window is due to close (the API's overdue alert)."""

from __future__ import annotations

import msgspec


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
