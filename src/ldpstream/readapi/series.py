"""Time series of one attribute: every window of one length that starts in a time range, with its unbiased
estimates, standard errors, 95% intervals, report counts and privacy figures.

A series is what `GET /collections/{name}/series`, `ldp series` and `ldpstream.Client.series` show. Its windows are
those of the store's index (`StatsStore.windows`) whose start lies in [from, to): a window without a report is not
stored, so it is absent, never a row of zeros. The interval is the normal one, estimate +- 1.96 standard errors: the
estimators are sums over independent devices, and `tests/readapi/test_series_coverage.py` counts how often the band
covers the truth over many simulated windows. The bounds checked here (`series_query`) come before any read, so a
request costs at most MAX_WINDOWS window reads and MAX_POINTS estimates.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np

from ldpstream.aggregator.estimates import attribute_entry
from ldpstream.aggregator.plans import Plan
from ldpstream.aggregator.store import StatsStore, WindowStats
from ldpstream.contract.shuffled import WindowFigures, report_path
from ldpstream.contract.spec import (
    CategoricalAttribute,
    KeyValueAttribute,
    NumericAttribute,
    StringAttribute,
    window_seconds,
)

Z95 = 1.959963984540054  # the 0.975 quantile of the standard normal: a two-sided 95% interval
CONFIDENCE = 0.95
MAX_WINDOWS = 1000  # windows one request may span
MAX_POINTS = 200_000  # windows x estimates per window one request may ask
DEFAULT_WINDOWS = 48  # windows a request without `from` spans, the current one included
MILLIS = re.compile(r"[0-9]{1,15}")  # up to year 33658: window arithmetic stays far inside int64
ISO_8601 = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}"  # a date, or a date and time with an optional zone
                      r"(T[0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]{1,6})?)?(Z|[+-][0-9]{2}:[0-9]{2})?)?")


class SeriesError(ValueError):
    """A series request that cannot be answered: `status` 400 (a bad parameter) or 404 (an unknown attribute)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class SeriesQuery:
    """What a series spans: one attribute, windows of one length (a window of the spec), starts in [from_ms, to_ms)."""

    attribute: str
    window: str
    from_ms: int
    to_ms: int

    @property
    def length_ms(self) -> int:
        return window_seconds(self.window) * 1000

    @property
    def window_count(self) -> int:
        """How many windows of the length start in [from_ms, to_ms) (with data or not)."""
        return -(-self.to_ms // self.length_ms) - -(-self.from_ms // self.length_ms)


def parse_time(value: str, what: str) -> int:
    """Milliseconds since the epoch from ASCII digits, or from an ISO 8601 date or time (UTC unless it says
    otherwise); SeriesError for anything else."""
    if MILLIS.fullmatch(value):
        return int(value)
    if ISO_8601.fullmatch(value):
        try:
            moment = datetime.fromisoformat(value)
        except ValueError as exc:
            raise SeriesError(f"{what} {value!r} is not a date: {exc}") from exc
        moment = moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
        return int(moment.timestamp() * 1000)
    raise SeriesError(f"{what} must be milliseconds since the epoch (digits) or an ISO 8601 time like "
                      f"2024-05-01T12:00:00Z, not {value[:40]!r}")


def series_query(plan: Plan, attribute: str | None, window: str | None, from_: str | None, to: str | None,
                 now_ms: int) -> SeriesQuery:
    """The query the parameters name, checked (all outside input): the attribute (may be left out when the spec has
    one), a window of the spec (default its shortest), `from`/`to` (default: the DEFAULT_WINDOWS newest windows up to
    now). SeriesError: an unknown attribute (404), no window of that length starting in the range, more than
    MAX_WINDOWS of them or more than MAX_POINTS estimates (400)."""
    spec = plan.spec
    names = [a.name for a in spec.attributes]
    if attribute is None:
        if len(names) != 1:
            raise SeriesError(f"name an attribute: attribute=one of {', '.join(names)}")
        attribute = names[0]
    if attribute not in names:
        raise SeriesError(f"collection {spec.key} has no attribute {attribute[:80]!r} (attributes: "
                          f"{', '.join(names)})", 404)
    if not spec.windows:
        raise SeriesError(f"collection {spec.key} keeps only the all-time window: it has no series")
    window = spec.windows[0] if window is None else window
    if window not in spec.windows:
        raise SeriesError(f"window {window[:40]!r} is not one of {spec.key}'s windows: {', '.join(spec.windows)}")
    length_ms = window_seconds(window) * 1000
    to_ms = now_ms if to is None else parse_time(to, "to")
    from_ms = (-(-to_ms // length_ms) - DEFAULT_WINDOWS) * length_ms if from_ is None else parse_time(from_, "from")
    query = SeriesQuery(attribute, window, from_ms, to_ms)
    if from_ms >= to_ms:
        raise SeriesError(f"an empty range: from ({from_ms}) must be before to ({to_ms}), in ms since the epoch")
    count = query.window_count
    if count == 0:
        raise SeriesError(f"no {window} window starts in [{from_ms}, {to_ms}): a window starts at a multiple of "
                          f"{length_ms} ms since the epoch")
    if count > MAX_WINDOWS:
        raise SeriesError(f"the range spans {count:,} {window} windows; a series has at most {MAX_WINDOWS:,}: narrow "
                          f"the range or take a longer window ({', '.join(spec.windows)})")
    points = count * estimates_per_window(plan, attribute)
    if points > MAX_POINTS:
        raise SeriesError(f"the range asks {points:,} estimates ({count:,} windows of {attribute!r}); a series has at "
                          f"most {MAX_POINTS:,}: narrow the range or take a longer window")
    return query


def estimates_per_window(plan: Plan, attribute: str) -> int:
    """How many estimates one window of the attribute holds (its values, keys x 2, heavy hitters, or 1)."""
    attr = plan.spec.attributes[plan.spec.attribute_index(attribute)]
    if isinstance(attr, NumericAttribute):
        return 1
    if isinstance(attr, StringAttribute):
        return attr.top
    if isinstance(attr, KeyValueAttribute):
        return 2 * attr.domain_size
    if attr.workload is None:
        return len(attr.values)
    empty = WindowStats(0.0, {j: np.zeros(size) for j, size in plan.sizes.items()})
    return int(np.atleast_1d(plan.estimate(empty)[attribute].value).size)


def with_interval(point: dict[str, Any]) -> dict[str, Any]:
    """{"estimate", "stderr"} with the 95% interval's "low" and "high" (null where either is null)."""
    x, se = point["estimate"], point["stderr"]
    bounded = x is not None and se is not None
    return {"estimate": x, "stderr": se, "low": x - Z95 * se if bounded else None,
            "high": x + Z95 * se if bounded else None}


def window_estimates(entry: dict[str, Any]) -> dict[str, Any]:
    """An attribute's `collection_estimates` entry as a series window's estimates: {"mean": point} (numeric) or
    {group: {label: point}} for the groups it has ("frequencies", "means", "answers"), each point with its interval."""
    if "mean" in entry:
        return {"mean": with_interval({"estimate": entry["mean"], "stderr": entry["stderr"]})}
    return {group: {label: with_interval(point) for label, point in entry[group].items()}
            for group in ("frequencies", "means", "answers") if group in entry}


def central_figures(batches: list[WindowFigures]) -> dict[str, Any] | None:
    """A shuffled collection's central privacy in one window: the largest batch epsilon at the batches' delta, how
    many batches were released in it and their reports (None when none was: the window is still open, or rolled on)."""
    if not batches:
        return None
    return {"epsilon": max(b.epsilon for b in batches), "delta": max(b.delta for b in batches),
            "batches": len(batches), "reports": sum(b.reports for b in batches)}


def collection_series(store: StatsStore, plan: Plan, query: SeriesQuery) -> dict[str, Any]:
    """The series of `query` (blocking: reads the store): {"collection", "version", "attribute", "type", "mechanism",
    "description", "unit", "window", "window_ms", "from_ms", "to_ms", "confidence", "privacy": {"per_report",
    "attribute_per_report", "lifetime", "shuffled"}, "windows": [...]}, windows oldest first, each {"start_ms",
    "end_ms", "reports" (devices in the window), "sampled" (of them, those whose report carries the attribute),
    "privacy": {"epsilon": eps per report, "central": null or the shuffled batches' figures}, "estimates"}."""
    spec, length = plan.spec, query.length_ms
    index = spec.attribute_index(query.attribute)
    attr = spec.attributes[index]
    starts = [s for v, w, s in store.windows(spec.name)
              if v == spec.version and w == query.window and query.from_ms <= s < query.to_ms]
    figures = [f for f in store.shuffle_figures(spec.name) if f.spec_version == spec.version] \
        if report_path(spec).shuffled else []
    # only the attribute's statistics are read; the others' blocks are left empty, which the collector's estimate
    # passes over at no cost (its estimate of one attribute does not depend on another's statistics)
    sizes, others = {index: plan.sizes[index]}, {j: np.zeros(n) for j, n in plan.sizes.items() if j != index}
    windows = []
    for start, stats in zip(starts, store.read_windows(spec.name, spec.version, query.window, starts, sizes),
                            strict=True):
        estimate = plan.estimate(WindowStats(stats.devices, {**others, **stats.stats}))[attr.name]
        entry = attribute_entry(plan, attr, estimate)
        central = central_figures([f for f in figures if start <= f.window_ms < start + length])
        windows.append({"start_ms": start, "end_ms": start + length, "reports": int(stats.devices),
                        "sampled": int(stats.stats[index][0]),
                        "privacy": {"epsilon": spec.epsilon, "central": central},
                        "estimates": window_estimates(entry)})
    mechanism = plan.mechanisms[index]
    return {"collection": spec.name, "version": spec.version, "attribute": attr.name, "type": attr.type,
            "mechanism": mechanism.name, "description": attr.description, "unit": attr.unit,
            "values": attr.values if isinstance(attr, CategoricalAttribute) and attr.workload is None else None,
            "window": query.window, "window_ms": length, "from_ms": query.from_ms, "to_ms": query.to_ms,
            "confidence": CONFIDENCE,
            "privacy": {"per_report": spec.epsilon, "attribute_per_report": mechanism.epsilon,
                        "lifetime": None if spec.privacy is None else spec.privacy.lifetime,
                        "shuffled": report_path(spec).summary(spec)},
            "windows": windows}
