"""A request body -> the checked reports of one authenticated device, or the reason they are refused. Pure.

Steps (every byte is hostile; each failure is a `Refusal` with an HTTP status and a bounded reason code):
1. `inflate`: gzip bodies are decompressed up to a bound (a gzip bomb is refused as too large, never expanded);
2. `parse`: a wire envelope (application/msgpack, `ldpstream.contract.wire`) or the JSON form (`JsonBody`) becomes one
   envelope; it must name the collection of the path and carry at most `max_reports` reports;
3. `check`: the spec version is published (404 otherwise), and the same schema code the aggregator runs
   (`ldpstream.contract.validation`) checks shape (the whole request), then per report range, attribute count and
   report time; every row's device must be the authenticated device's pseudonym (the body never chooses it: a
   missing/zero column is set, another device refuses the whole request), and a device reports at most once per
   dedupe window within the request. A report that fails a per-report check is refused alone, with its verdict
   (`Checked.verdicts`: the reason code, `ldpstream.contract.validation`), and the others go on; only when every
   report fails is the request refused, with the first report's status and reason (a batch of one answers as it
   always did) and the verdicts.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated

import msgspec
import numpy as np

from ldpstream.contract.validation import (
    DUPLICATE,
    FUTURE,
    MALFORMED,
    OUT_OF_RANGE,
    STALE,
    UNKNOWN_COLLECTION,
    WRONG_SHAPE,
    Screen,
    envelope_problem,
    read_message,
    screen,
)
from ldpstream.contract.wire import AttributeColumns, Concatenation, Envelope, WireError, concatenate, envelope_of
from ldpstream.edge.plans import EdgePlan
from ldpstream.mechanisms.base import ReportSchema

# Reason codes (metric labels: a bounded set); the detail goes in the answer.
TOO_LARGE = "too_large"
UNSUPPORTED = "unsupported_media_type"
WRONG_DEVICE = "wrong_device"
UNAUTHORIZED = "unauthorized"
REPLAYED = "replayed"
RATE_LIMITED = "rate_limited"
OVERLOADED = "overloaded"
SPOOL_FULL = "spool_full"
SLOW_BODY = "body_timeout"
TOO_MANY_CONNECTIONS = "too_many_connections"
REASONS = (MALFORMED, TOO_LARGE, UNSUPPORTED, UNKNOWN_COLLECTION, WRONG_SHAPE, OUT_OF_RANGE, STALE, FUTURE,
           WRONG_DEVICE, DUPLICATE, UNAUTHORIZED, REPLAYED, RATE_LIMITED, OVERLOADED, SPOOL_FULL, SLOW_BODY,
           TOO_MANY_CONNECTIONS)
MSGPACK = "application/msgpack"
JSON = "application/json"


ADMITTED = "admitted"  # the verdict on a report the edge took (the others are reason codes)


class Refusal(Exception):
    """A request refused: the HTTP status, the reason code and a detail for the device, and the verdict on each of
    its reports when they were judged one by one (else none)."""

    def __init__(self, status: int, reason: str, detail: str, verdicts: Sequence[str] = ()) -> None:
        super().__init__(detail)
        self.status, self.reason, self.detail, self.verdicts = status, reason, detail, list(verdicts)


@dataclass(frozen=True)
class Checked:
    """The reports of one request that passed every check: as one envelope (devices set), with their windows, their
    positions in the request (`rows`) and the verdicts on the request's reports so far ('' for those that passed)."""

    plan: EdgePlan
    envelope: Envelope
    window_starts: np.ndarray  # per report, the start (ms) of its dedupe window
    rows: np.ndarray  # per report, its position in the request
    verdicts: tuple[str, ...]  # per report of the request: a reason code, or '' for one of these

    def __len__(self) -> int:
        return len(self.window_starts)


class JsonReport(msgspec.Struct, forbid_unknown_fields=True):
    """One report in the JSON form: its time and, per sampled attribute (by name), the mechanism's columns."""

    timestamp_ms: int
    attributes: dict[str, dict[str, float | list[float]]]


class JsonBody(msgspec.Struct, forbid_unknown_fields=True):
    """The JSON form of a request: the spec version and a device's reports (its outbox)."""

    spec_version: int
    reports: list[JsonReport]


class _Version(msgspec.Struct):
    spec_version: Annotated[int, msgspec.Meta(ge=1, lt=2**31)]


_json_decoder = msgspec.json.Decoder(JsonBody)
_version_decoder = msgspec.json.Decoder(_Version)


def inflate(body: bytes, encoding: str | None, limit: int) -> bytes:
    """The body decompressed (gzip) to at most `limit` bytes; Refusal if it is larger, corrupt or not gzip."""
    if encoding in (None, "", "identity"):
        return body
    if encoding.strip().lower() != "gzip":
        raise Refusal(415, UNSUPPORTED, f"Content-Encoding {encoding[:40]!r}: only gzip is accepted")
    inflater = zlib.decompressobj(wbits=31)
    try:
        out = inflater.decompress(body, limit + 1)
    except zlib.error as exc:
        raise Refusal(400, MALFORMED, f"gzip body cannot be decompressed: {exc}") from None
    if len(out) > limit or inflater.unconsumed_tail:
        raise Refusal(413, TOO_LARGE, f"decompressed body exceeds {limit} bytes")
    if not inflater.eof:
        raise Refusal(400, MALFORMED, "gzip body is truncated")
    return out


def media_type(content_type: str) -> str:
    """The media type of a Content-Type header, lower case, without parameters."""
    return content_type.split(";")[0].strip().lower()


def json_version(body: bytes) -> int | None:
    """The spec version a JSON body names (to find the plan its parse needs), or None if it names none."""
    try:
        return _version_decoder.decode(body).spec_version
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


def parse(body: bytes, content_type: str, collection: str, json_plan: EdgePlan | None, max_reports: int) -> Envelope:
    """The envelope of a request body (`json_plan`: the plan of the version a JSON body names, `json_version`);
    Refusal if it is not one."""
    kind = media_type(content_type)
    if kind == MSGPACK:
        try:
            env, rows = read_message(body)
        except WireError as exc:
            raise Refusal(400, MALFORMED, str(exc)) from None
    elif kind == JSON:
        env, rows = _from_json(body, collection, json_plan)
    else:
        raise Refusal(415, UNSUPPORTED, f"Content-Type must be {MSGPACK} or {JSON}")
    if env.collection != collection:
        raise Refusal(400, MALFORMED, f"the body is for collection {env.collection[:80]!r}, the path for "
                                      f"{collection!r}")
    if rows > max_reports:
        raise Refusal(413, TOO_LARGE, f"{rows} reports in one request (at most {max_reports})")
    return env


def check(env: Envelope, plan: EdgePlan | None, pseudonym: int, now_ms: int) -> Checked:
    """The reports of an envelope checked against its published plan for the authenticated device `pseudonym`."""
    problem = envelope_problem(env, plan)
    if problem is not None:
        reason, detail = problem
        raise Refusal(404 if reason == UNKNOWN_COLLECTION else 400, reason, detail)
    assert plan is not None
    joined = concatenate([env])
    if joined.rejected:
        raise Refusal(400, MALFORMED, joined.rejected[0])
    n = len(joined.devices)
    screen = _screen(plan, joined, np.full(n, pseudonym, dtype=np.uint64), np.zeros(n, dtype=np.int64), now_ms)
    wrong_device = screen.wrong_device
    if wrong_device.any():
        raise Refusal(403, WRONG_DEVICE, f"report {_first(wrong_device)}: a report names another device: the "
                                         f"pseudonym is the authenticated device's (send 0 or your own)")
    verdicts = np.full(n, "", dtype=object)
    first: dict[str, tuple[int, str]] = {}
    checks = screen.checks
    for mask, reason, detail in (  # the first that applies to a report is its verdict
            (checks.out_of_range, OUT_OF_RANGE, checks.out_of_range_detail),
            (checks.wrong_count, WRONG_SHAPE, f"a report carries {plan.attributes_per_device} attribute(s)"),
            (checks.future, FUTURE, "report time is in the future"),
            (checks.stale, STALE, "report time is past its window's end and the spec's grace"),
            (screen.duplicate, DUPLICATE, "two reports for one window in the request")):
        hit = mask & (verdicts == "")
        if hit.any():
            verdicts[hit] = reason
            first.setdefault(reason, (_first(hit), detail))
    bad = verdicts != ""
    checked = _checked(env, plan, pseudonym, checks.starts)
    if not bad.any():
        return checked
    if bad.all():
        reason = str(verdicts[0])
        row, detail = first[reason]
        raise Refusal(400, reason, f"report {row}: {detail}", verdicts.tolist())
    return without_rows(Checked(plan, checked.envelope, checked.window_starts, checked.rows,
                                tuple(verdicts.tolist())), bad)


Item = tuple[Envelope, EdgePlan | None, int]  # a request's envelope, its plan and the authenticated pseudonym


def check_many(items: Sequence[Item], now_ms: int) -> list[Checked | Refusal]:
    """`check` for many requests at once: per plan, one concatenation and one vectorised pass over all their
    reports; a request that shows any problem is checked again alone, for its exact reason."""
    results: list[Checked | Refusal | None] = [None] * len(items)
    groups: dict[int, list[int]] = {}
    for i, (env, plan, _) in enumerate(items):
        if envelope_problem(env, plan) is None:
            groups.setdefault(id(plan), []).append(i)
    for members in groups.values():
        if len(members) < 2:
            continue
        plan = items[members[0]][1]
        assert plan is not None
        try:
            joined = concatenate([items[i][0] for i in members])
        except WireError:
            continue
        kept = [members[m] for m in joined.messages.tolist()]
        message = np.repeat(np.arange(len(kept)), joined.sizes)
        pseudonyms = np.fromiter((items[i][2] for i in kept), dtype=np.uint64, count=len(kept))
        screen = _screen(plan, joined, pseudonyms[message], message, now_ms)
        checks = screen.checks
        bad = checks.out_of_range | checks.wrong_count | checks.future | checks.stale | screen.wrong_device \
            | screen.duplicate
        dirty = np.bincount(message[bad], minlength=len(kept)) > 0
        bounds = np.cumsum(joined.sizes) - joined.sizes
        for m, i in enumerate(kept):
            if not dirty[m]:
                env, _, pseudonym = items[i]
                starts = checks.starts[bounds[m]:bounds[m] + joined.sizes[m]]
                results[i] = _checked(env, plan, pseudonym, starts)
    for i, result in enumerate(results):
        if result is None:
            try:
                results[i] = check(*items[i], now_ms)
            except Refusal as refusal:
                results[i] = refusal
    return results  # type: ignore[return-value]  # every entry is set


@dataclass(frozen=True)
class _Screen:
    """Per report of a concatenation: the checks every server runs (`ldpstream.contract.validation.screen`), and
    the edge's own: a device other than the authenticated one, a second report in one window of a request."""

    checks: Screen
    wrong_device: np.ndarray
    duplicate: np.ndarray


def _screen(plan: EdgePlan, joined: Concatenation, pseudonyms: np.ndarray, message: np.ndarray,
            now_ms: int) -> _Screen:
    """The checks of `check` over the reports of many requests (row i from request message[i], whose device has
    the pseudonym pseudonyms[i]), vectorised."""
    checks = screen(plan, joined.attributes, joined.timestamps_ms, now_ms)
    starts, claimed = checks.starts, joined.devices
    duplicate = np.zeros(len(starts), dtype=bool)
    if plan.spec.one_report_per_window and len(starts) > 1:
        order = np.lexsort((starts, message))
        again = (message[order][1:] == message[order][:-1]) & (starts[order][1:] == starts[order][:-1])
        duplicate[order[1:][again]] = True
    return _Screen(checks, (claimed != 0) & (claimed != pseudonyms), duplicate)


def _checked(env: Envelope, plan: EdgePlan, pseudonym: int, starts: np.ndarray) -> Checked:
    """A request's reports that passed, as its envelope with every row's device set to the authenticated one."""
    devices = int(pseudonym).to_bytes(8, "little") * len(starts)  # uint64 LE per row, as the wire carries them
    n = len(starts)
    return Checked(plan, msgspec.structs.replace(env, devices=devices), starts, np.arange(n), ("",) * n)


def without_rows(checked: Checked, drop: np.ndarray) -> Checked:
    """The checked reports less the rows where `drop` holds (reports refused alone, or the device already made in
    their window)."""
    joined = concatenate([checked.envelope])
    keep = ~drop
    renumber = np.cumsum(keep) - 1
    attributes = {}
    for a, c in joined.attributes.items():
        take = keep[c.rows]
        attributes[a] = AttributeColumns(renumber[c.rows[take]], {k: _rows_of(v, take) for k, v in c.columns.items()})
    env = checked.envelope
    return Checked(checked.plan, envelope_of(env.collection, env.spec_version, joined.devices[keep],
                                             joined.timestamps_ms[keep], {a: c for a, c in attributes.items()
                                                                          if len(c.rows)}),
                   checked.window_starts[keep], checked.rows[keep], checked.verdicts)


def _rows_of(flat: np.ndarray, take: np.ndarray) -> np.ndarray:
    """The rows `take` of a flat column of len(take) rows of equal width."""
    return flat.reshape(len(take), -1)[take].reshape(-1)


def _first(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


def _from_json(body: bytes, collection: str, plan: EdgePlan | None) -> tuple[Envelope, int]:
    """The envelope of a JSON body; the attribute columns take the dtypes the schema declares where the values
    fit them exactly (else float64, which the range checks then refuse)."""
    try:
        doc = _json_decoder.decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise Refusal(400, MALFORMED, f"malformed JSON body: {exc}") from None
    n = len(doc.reports)
    if n == 0:
        raise Refusal(400, MALFORMED, "no reports")
    if plan is None or plan.spec.version != doc.spec_version:
        raise Refusal(404, UNKNOWN_COLLECTION, f"no published spec {collection}@{doc.spec_version}")
    index = {a.name: i for i, a in enumerate(plan.spec.attributes)}
    per_attribute: dict[int, tuple[list[int], dict[str, list[float | list[float]]]]] = {}
    for row, report in enumerate(doc.reports):
        for name, columns in report.attributes.items():
            if name not in index:
                raise Refusal(400, WRONG_SHAPE, f"report {row}: unknown attribute {name[:80]!r}")
            rows, values = per_attribute.setdefault(index[name], ([], {}))
            rows.append(row)
            for column, value in columns.items():
                values.setdefault(column[:80], []).append(value)
    attributes = {a: AttributeColumns(np.asarray(rows, dtype=np.uint32),
                                      {k: _json_column(v, plan.schemas[a], k, a) for k, v in values.items()})
                  for a, (rows, values) in per_attribute.items()}
    times = np.asarray([r.timestamp_ms for r in doc.reports])
    if times.dtype != np.int64:
        raise Refusal(400, MALFORMED, "timestamp_ms out of range")
    env = envelope_of(collection, doc.spec_version, np.zeros(n, dtype=np.uint64), times, attributes)
    return env, n


def _json_column(values: list[float | list[float]], schema: ReportSchema, name: str, attribute: int) -> np.ndarray:
    """One JSON column as flat numpy values (ragged rows: Refusal; their shape is checked with the schema's)."""
    try:
        flat = np.asarray(values, dtype=np.float64).reshape(-1)
    except (ValueError, OverflowError):
        raise Refusal(400, WRONG_SHAPE, f"attribute {attribute}: column {name!r} has rows of different widths") \
            from None
    declared = {c.name: c.dtype for c in schema.columns}.get(name)
    if declared is not None and np.dtype(declared).kind in "iu":
        info = np.iinfo(np.dtype(declared))
        if np.isfinite(flat).all() and (flat == np.floor(flat)).all() and flat.min(initial=0) >= info.min \
                and flat.max(initial=0) <= info.max:
            return flat.astype(declared)
    return flat

