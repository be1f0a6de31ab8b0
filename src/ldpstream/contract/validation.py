"""The checks every server runs on reports against a published spec, pure: the aggregator's worker and the
ingestion edge run this same chain, so a report the edge accepts passes the worker's schema checks.

The chain, in order: `read_message` (the bytes are an envelope of a known version, its byte lengths whole),
`envelope_problem` (its spec version is published, and its blocks have the declared shapes), then, over the reports
of one or more envelopes concatenated, `screen` (per report: range, attribute count, report time, dedupe window).
What each server adds is its own: the edge the authenticated device and one report per window within a request, the
worker the partition and the devices counted before.

- `shape_problem`: every attribute block of an envelope has the columns and row widths its mechanism declares
  (from byte lengths alone, before anything is decoded into numpy);
- `row_problems`: per report (row), whether an attribute's values leave the declared range, and whether the
  report carries the spec's number of attributes;
- `time_problems`: per report, whether its time is in the future or past the time its window admits it
  (`admitted_until_ms`: the window's end and the spec's grace);
- `window_starts` / `dedupe_window`: the window a report falls in, where "one report per window" is judged.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ldpstream.contract.shuffled import report_path
from ldpstream.contract.spec import ALL_TIME, CollectionSpec, window_seconds
from ldpstream.contract.wire import (
    ITEMSIZE,
    AttributeBlock,
    AttributeColumns,
    Envelope,
    check_envelope,
    decode_envelope,
)
from ldpstream.mechanisms.base import ReportSchema

# Reasons a report is rejected for, by the worker and the edge alike (bounded: they are metric labels).
MALFORMED = "malformed"
UNKNOWN_COLLECTION = "unknown_collection"
WRONG_SHAPE = "wrong_shape"
OUT_OF_RANGE = "out_of_range"
DUPLICATE = "duplicate"
STALE = "stale_timestamp"
FUTURE = "future_timestamp"
MAX_FUTURE_SKEW_MS = 5 * 60 * 1000  # how far ahead of the server's clock a report's time may be, by default
MAX_CLOCK_SKEW_SETTING_S = 7 * 86400  # the most a worker may be set to accept (`clock_skew_ms`)
DEFAULT_MAX_AGE_MS = 24 * 3600 * 1000


@dataclass(frozen=True)
class RowProblems:
    """Per row of a concatenation: values outside the declared range (with the first such reason), and a number of
    attributes other than the spec's."""

    out_of_range: np.ndarray
    out_of_range_detail: str
    wrong_count: np.ndarray


class Checkable(Protocol):
    """What the checks need of a published spec version: the spec, each attribute's report schema, and how many
    attributes a device reports."""

    @property
    def spec(self) -> CollectionSpec: ...

    @property
    def schemas(self) -> Sequence[ReportSchema]: ...

    @property
    def attributes_per_device(self) -> int: ...


@dataclass(frozen=True)
class Screen:
    """Per report of a concatenation: each problem `screen` found, and the start of its dedupe window."""

    out_of_range: np.ndarray
    out_of_range_detail: str
    wrong_count: np.ndarray
    future: np.ndarray
    stale: np.ndarray
    starts: np.ndarray


def read_message(data: bytes) -> tuple[Envelope, int]:
    """The envelope in `data` and its number of reports, checked as far as byte lengths tell (WireError)."""
    env = decode_envelope(data)
    return env, check_envelope(env)


def envelope_problem(env: Envelope, plan: Checkable | None) -> tuple[str, str] | None:
    """(reason, detail) if the envelope as a whole cannot be checked against `plan` (None: its spec version is not
    published) or its attribute blocks do not have the shapes the plan declares; None if it can."""
    if plan is None:
        return UNKNOWN_COLLECTION, f"no published spec {env.collection}@{env.spec_version}"
    problem = shape_problem(env, plan.schemas)
    return (WRONG_SHAPE, problem) if problem else None


def screen(plan: Checkable, attributes: Mapping[int, AttributeColumns], timestamps_ms: np.ndarray, now_ms: int,
           max_skew_ms: int = MAX_FUTURE_SKEW_MS) -> Screen:
    """The per-report checks over the reports of envelopes that passed `envelope_problem`, concatenated
    (`attributes`: their columns, `timestamps_ms`: one per report)."""
    spec = plan.spec
    problems = row_problems(spec, attributes, plan.schemas, len(timestamps_ms), plan.attributes_per_device)
    future, stale = time_problems(spec, timestamps_ms, now_ms, max_skew_ms)
    return Screen(problems.out_of_range, problems.out_of_range_detail, problems.wrong_count, future, stale,
                  window_starts(dedupe_window(spec), timestamps_ms))


def dedupe_window(spec: CollectionSpec) -> str:
    """The window in which a device may report once: the spec's smallest tumbling window, else all-time."""
    return spec.windows[0] if spec.windows else ALL_TIME


def max_age_ms(spec: CollectionSpec) -> int:
    """How old a report may be when it arrives: its window's length and the spec's `grace_s` when it states one
    (`admitted_until_ms`), else the dedupe window's length (a day without windows)."""
    if spec.grace_s is not None:
        return (window_seconds(spec.windows[0]) * 1000 if spec.windows else 0) + spec.grace_s * 1000
    return window_seconds(spec.windows[0]) * 1000 if spec.windows else DEFAULT_MAX_AGE_MS


def admitted_until_ms(spec: CollectionSpec, timestamps_ms: np.ndarray) -> np.ndarray:
    """Per report time, the last moment (ms) a server admits it: its window's end plus the grace (`shuffle.grace_s`
    for a shuffled collection, whose shuffler then closes the window; the spec's `grace_s` when it states one; a
    report without windows: its time plus the grace), else the report's time plus the dedupe window's length (a
    day without windows: the rule before `grace_s`)."""
    grace_s = report_path(spec).grace_s(spec)
    if grace_s is None:
        return timestamps_ms + max_age_ms(spec)
    if not spec.windows:
        return timestamps_ms + grace_s * 1000
    length = window_seconds(spec.windows[0]) * 1000
    return window_starts(spec.windows[0], timestamps_ms) + length + grace_s * 1000


def mark_ttl_ms(spec: CollectionSpec) -> int:
    """How long a server must remember that a device reported in a dedupe window: from the earliest its reports are
    admitted (the window's start less the clock skew) to the last (`admitted_until_ms` of its last moment)."""
    length = window_seconds(spec.windows[0]) * 1000 if spec.windows else DEFAULT_MAX_AGE_MS
    last = int(admitted_until_ms(spec, np.array([length - 1], dtype=np.int64))[0])
    return max(2 * length, last + 1 + MAX_FUTURE_SKEW_MS)


def window_starts(window: str, timestamps_ms: np.ndarray) -> np.ndarray:
    """Start (ms) of each report's tumbling window (0 for all-time)."""
    if window == ALL_TIME:
        return np.zeros(len(timestamps_ms), dtype=np.int64)
    length = window_seconds(window) * 1000
    return (timestamps_ms // length) * length


def clock_skew_ms(seconds: float | str) -> int:
    """A worker's accepted clock skew (`python -m ldpstream.aggregator --max-clock-skew-s`, env `LDP_MAX_CLOCK_SKEW_S`)
    in ms, from seconds in [0, MAX_CLOCK_SKEW_SETTING_S]; ValueError otherwise.

    Examples
    --------
    >>> clock_skew_ms("300"), clock_skew_ms(0.5)
    (300000, 500)
    """
    try:
        value = float(seconds)
    except ValueError:
        value = math.nan
    if not 0 <= value <= MAX_CLOCK_SKEW_SETTING_S:  # NaN fails too
        raise ValueError(f"the accepted clock skew must be a number of seconds in 0..{MAX_CLOCK_SKEW_SETTING_S}, "
                         f"got {seconds!r}")
    return round(value * 1000)


def time_problems(spec: CollectionSpec, timestamps_ms: np.ndarray, now_ms: int,
                  max_skew_ms: int = MAX_FUTURE_SKEW_MS) -> tuple[np.ndarray, np.ndarray]:
    """Per report: (from the future beyond the allowed clock skew, stale: past `admitted_until_ms`). A shuffled
    collection's report is stale once its window has closed: its end and the shuffle's grace have passed (the
    shuffler has released that window's batch); another's once its end and the spec's `grace_s` have."""
    future = timestamps_ms > now_ms + max_skew_ms
    return future, admitted_until_ms(spec, timestamps_ms) < now_ms


def shape_problem(env: Envelope, schemas: Sequence[ReportSchema]) -> str:
    """'' if every attribute block has the columns and row shapes its mechanism declares, else the problem."""
    for block in env.attributes:
        if block.attribute >= len(schemas):
            return f"attribute index {block.attribute} >= {len(schemas)}"
        widths = schemas[block.attribute].widths
        if len(block.columns) != len(widths):
            return _columns_problem(block, widths)
        n = len(block.rows) // ITEMSIZE["<u4"]
        for col in block.columns:
            width = widths.get(col.name)
            if width is None:  # as many columns as declared (names are unique), but not the same ones
                return _columns_problem(block, widths)
            values = len(col.data) // ITEMSIZE[col.dtype]
            if values != n * width:
                return (f"attribute {block.attribute}: column {col.name!r} has {values} values for {n} rows of width "
                        f"{width}")
    return ""


def shaped(cols: Mapping[str, np.ndarray], schema: ReportSchema, n: int) -> dict[str, np.ndarray]:
    """An attribute's flat columns (n rows) reshaped to the rows the schema declares."""
    widths = schema.widths
    return {k: (v.reshape(n, widths[k]) if widths[k] != 1 else v) for k, v in cols.items()}


def row_problems(spec: CollectionSpec, attributes: Mapping[int, AttributeColumns], schemas: Sequence[ReportSchema],
                 rows: int, attributes_per_device: int) -> RowProblems:
    """The range and attribute-count problems of `rows` reports whose blocks passed `shape_problem`."""
    out = np.zeros(rows, dtype=bool)
    detail = ""
    counts = np.zeros(rows, dtype=np.int64)
    for attr, columns in attributes.items():
        bad = schemas[attr].violations(shaped(columns.columns, schemas[attr], len(columns.rows)))
        hit = bad != ""
        if hit.any():
            out[columns.rows[hit]] = True
            detail = detail or f"{spec.attributes[attr].name}: {bad[hit][0]}"
        counts[columns.rows] += 1
    return RowProblems(out, detail, counts != attributes_per_device)


def _columns_problem(block: AttributeBlock, widths: Mapping[str, int]) -> str:
    return f"attribute {block.attribute}: columns {sorted(col.name for col in block.columns)} != {sorted(widths)}"
