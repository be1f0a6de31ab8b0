"""Reading report columns from outside: the shape, dtype and finiteness a gradient report must have."""

from __future__ import annotations

import numpy as np

from ldpstream.mechanisms.base import LDPError, Reports


def float_column(reports: Reports, key: str, width: int) -> np.ndarray:
    """Column `key` as float64 (n, width); LDPError if it is missing, not numeric, of another width or not finite."""
    if key not in reports:
        raise LDPError(f"reports lack the column {key!r} (have {sorted(reports)})")
    col = np.asarray(reports[key])
    if col.dtype.kind not in "iuf":
        raise LDPError(f"column {key!r} is not numeric ({col.dtype})")
    if col.ndim == 1 and width == 1:
        col = col[:, None]
    if col.ndim != 2 or col.shape[1] != width:
        raise LDPError(f"column {key!r} has shape {col.shape}, expected (n, {width})")
    out = col.astype(np.float64, copy=False)
    if not np.isfinite(out).all():
        raise LDPError(f"column {key!r} holds NaN or infinities")
    return out


def seed_column(reports: Reports, key: str) -> np.ndarray:
    """Column `key` as uint64 (n,) seeds; LDPError unless it is a 1-D integer column of non-negative values."""
    if key not in reports:
        raise LDPError(f"reports lack the column {key!r} (have {sorted(reports)})")
    col = np.asarray(reports[key])
    if col.dtype.kind not in "iu" or col.ndim != 1:
        raise LDPError(f"column {key!r} must be a 1-D integer column, got {col.dtype} {col.shape}")
    if col.dtype.kind == "i" and col.size and col.min() < 0:
        raise LDPError(f"column {key!r} holds negative seeds")
    return col.astype(np.uint64)
