"""`ReportSchema.violations`, the per-row filter the edge and the aggregator run on outside reports: against a
plain statement of its rules (every value finite and in [low, high], in the allowed set if there is one, whole for
an integer column; the first failing rule of the first failing column is the reason), over hostile values of every
dtype the wire carries."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from ldpstream.mechanisms.base import FLOAT_RTOL, Column, LDPError, ReportSchema

SCHEMA = ReportSchema((
    Column("bucket", "<u4", 0, 7),
    Column("y", "<f8", -2.5, 2.5, width=3),
    Column("sign", "|i1", -1, 1, allowed=(-1.0, 1.0)),
    Column("count", "<i8", 0, 1000, width=2),
))
WIRE_DTYPES = ("<f8", "<f4", "<i8", "<i4", "<u8", "<u4", "|u1", "|i1", "<u2", "<i2")


def rule_reasons(schema: ReportSchema, reports: dict[str, np.ndarray]) -> list[str]:
    """The reasons row by row, value by value in Python floats (the rules, not the vectorised code)."""
    n = len(next(iter(reports.values())))
    out = []
    for row in range(n):
        reason = ""
        for col in schema.columns:
            values = [float(v) for v in np.asarray(reports[col.name]).reshape(n, col.width)[row]]
            slack = FLOAT_RTOL if np.dtype(col.dtype).kind == "f" else 0.0  # a float column's bounds, within rtol
            low, high = col.low - slack * abs(col.low), col.high + slack * abs(col.high)
            if any(not np.isfinite(v) or v < low or v > high for v in values):
                reason = f"{col.name} outside [{col.low}, {col.high}]"
            elif col.allowed is not None and any(v not in col.allowed for v in values):
                reason = f"{col.name} not in the allowed set of values"
            elif np.dtype(col.dtype).kind in "iu" and any(v != np.floor(v) for v in values):
                reason = f"{col.name} is not an integer"
            if reason:
                break
        out.append(reason)
    return out


@st.composite
def batches(draw: st.DrawFn) -> dict[str, np.ndarray]:
    n = draw(st.integers(1, 12))
    reports = {}
    for col in SCHEMA.columns:
        dtype = draw(st.sampled_from(WIRE_DTYPES))
        shape = (n,) if col.width == 1 else (n, col.width)
        near = st.sampled_from([col.low, col.high, col.low - 1, col.high + 1, 0, 0.5, -0.5, 1, -1])
        if np.dtype(dtype).kind == "f":
            specials = st.sampled_from([float("nan"), float("inf"), -float("inf")])
            elements = st.one_of(near, specials, st.floats(width=np.dtype(dtype).itemsize * 8))
        else:
            lo, hi = int(np.iinfo(np.dtype(dtype)).min), int(np.iinfo(np.dtype(dtype)).max)
            elements = st.one_of(near.filter(lambda v, lo=lo, hi=hi: v == int(v) and lo <= v <= hi).map(int),
                                 st.integers(lo, hi))
        reports[col.name] = draw(hnp.arrays(np.dtype(dtype), shape, elements=elements))
    return reports


@settings(max_examples=300, deadline=None)
@given(batches())
def test_violations_follow_the_rules_on_any_values_of_any_wire_dtype(reports: dict[str, np.ndarray]) -> None:
    assert SCHEMA.violations(reports).tolist() == rule_reasons(SCHEMA, reports)


def test_a_valid_batch_has_no_reason_and_bools_count_as_numbers() -> None:
    schema = ReportSchema((Column("bit", "|u1", 0, 1), Column("y", "<f8", -1, 1)))
    reasons = schema.violations({"bit": np.array([True, False]), "y": np.array([0.25, -1.0])})
    assert reasons.tolist() == ["", ""]


@pytest.mark.parametrize("reports", [{"bucket": np.array(["a"])}, {"bucket": np.array([1, 2]), "extra": np.array([1])}])
def test_malformed_batches_raise(reports: dict[str, np.ndarray]) -> None:
    with pytest.raises(LDPError):
        ReportSchema((Column("bucket", "<u4", 0, 7),)).violations(reports)


def test_a_float_column_takes_its_bounds_and_allowed_values_within_an_ulp_of_another_libm() -> None:
    """Duchi's +-B computed by another platform's tanh (V8's for the TypeScript SDK) may be an ulp off the
    aggregator's: such a report is valid, one off by a relative 1e-6 is not."""
    bound = 2.1639534137386525
    schema = ReportSchema((Column("value", "float64", -bound, bound, allowed=(-bound, bound)),))
    near = [np.nextafter(bound, 3.0), np.nextafter(-bound, -3.0), bound * (1 - 1e-12), -bound]
    far = [bound * (1 + 1e-6), bound * (1 - 1e-6), 0.0]
    reasons = schema.violations({"value": np.array(near + far)}).tolist()
    assert reasons[:4] == [""] * 4
    assert reasons[4] == f"value outside [{-bound}, {bound}]"
    assert reasons[5:] == ["value not in the allowed set of values"] * 2
