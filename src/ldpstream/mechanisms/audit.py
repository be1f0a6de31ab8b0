"""Audit an implementation's epsilon-LDP from samples: a high-confidence lower bound on the epsilon it provides.

For two inputs a, b and an event E over single reports, eps-LDP implies P[E | a] <= e^eps P[E | b], so
ln(P[E | a] / P[E | b]) is a lower bound on the epsilon the mechanism actually provides. The auditor estimates
both probabilities from n reports each and takes the Clopper-Pearson lower bound of P[E | a] and upper bound of
P[E | b], each at level 1 - (1 - confidence)/2 (a union bound: jointly at `confidence`). A bound above the
claimed epsilon is therefore a violation at that confidence, whatever the event was, provided the event was chosen
before the measured samples were drawn. The auditor does so in two phases: it draws a selection sample for every
candidate pair of inputs, picks the (pair, event, orientation) with the largest bound there, then measures that
single choice on fresh samples.

The core (`audit`) works on any `Mechanism`: it takes candidate input pairs and an event factory (selection
reports of a and of b -> candidate events). `audit_plan` chooses them per kind of mechanism:
- numeric (one value in [-1, 1]): inputs +-1; events {t* >= c}, {t* <= c} at quantiles, and each outcome of a
  discrete output (Duchi's +-B);
- vector ([-1, 1]^d): inputs (1, ..., 1) against itself with the first 1, 2 or all coordinates flipped; events on
  the dense vectors: each distinct outcome (Duchi et al.'s 2^d sign vectors) and thresholds on the first
  coordinate, the minimum and the maximum;
- open-domain oracles and trees (strings): two full-length strings differing in every byte, events as below;
- frequency oracles (categories, with a `log_pmf(reports, values)`): inputs 0 and 1; events
  {ln P[y | a] - ln P[y | b] >= c}, the Neyman-Pearson tests of a against b, plus each distinct report;
  hierarchical histograms (`ldpstream.mechanisms.distribution.hierarchy`, whose `log_pmf` takes values in [-1, 1])
  go the same way, inputs 0 and 1 (Square Wave is numeric: the first case);
- key-value mechanisms (a set of (key, value) pairs per device, `ldpstream.mechanisms.keyvalue`): inputs {(0, +1)} and
{(1, -1)}
  (where their exact epsilon is reached: one key's value at +1 against another key's at -1), the same events.

Longitudinal mode (`audit_longitudinal`): each sample is one device reporting the same value T times
(`RepeatedReports`: a memoized mechanism keeps the device's secret across the T reports, any other draws fresh noise
each time), and the events are on the sum over the T reports of the one-report statistic above (the one-report
log-likelihood ratio, or the numeric report). The bound then lower-bounds the budget of all T reports together:
it grows about T eps for fresh noise (sequential composition is tight for i.i.d. reports, up to the ln(n) ceiling
of what n samples can show) and stays <= eps_lifetime for a memoized mechanism.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from scipy.stats import beta

from ldpstream.mechanisms.base import LDPError, Mechanism, Reports
from ldpstream.mechanisms.keyvalue.base import KeyValueMechanism
from ldpstream.mechanisms.longitudinal.base import Longitudinal
from ldpstream.mechanisms.longitudinal.memo import draw_secrets
from ldpstream.mechanisms.multidim import VectorMechanism
from ldpstream.mechanisms.numeric.base import NumericMechanism
from ldpstream.mechanisms.open_domain import SFP, PrefixTree, SketchOracle, StringDomain

MAX_OUTCOMES = 256  # a report batch with at most this many distinct rows gets one event per outcome
QUANTILES = np.concatenate([np.linspace(0.001, 0.05, 8), np.linspace(0.1, 0.9, 9), np.linspace(0.95, 0.999, 8)])


class Perturbs(Protocol):
    """What the auditor samples from: a mechanism, or T repeated reports of one (`RepeatedReports`)."""

    def perturb(self, values: Any, rng: np.random.Generator) -> Reports: ...


@dataclass(frozen=True)
class Event:
    """A set of single reports: {y : test(statistic(y))}, vectorised over a report batch.

    Events that share a statistic (thresholds on one quantity) let the auditor compute it once per batch.
    """

    description: str
    statistic: Callable[[Reports], np.ndarray]
    test: Callable[[np.ndarray], np.ndarray]

    def occurs(self, reports: Reports) -> np.ndarray:
        return self.test(self.statistic(reports))


EventFactory = Callable[[Reports, Reports], list[Event]]


@dataclass(frozen=True)
class AuditResult:
    """The chosen pair and event, the counts in the measurement samples, and the lower bound on epsilon."""

    epsilon_lower_bound: float
    confidence: float
    n: int
    input_a: np.ndarray
    input_b: np.ndarray
    event: str
    count_a: int
    count_b: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "epsilon_lower_bound": self.epsilon_lower_bound,
            "confidence": self.confidence,
            "n": self.n,
            "inputs": [np.asarray(self.input_a).tolist(), np.asarray(self.input_b).tolist()],
            "event": self.event,
            "counts": [self.count_a, self.count_b],
        }


def clopper_pearson(count: int, n: int, level: float) -> tuple[float, float]:
    """One-sided Clopper-Pearson bounds (lower, upper) for a binomial proportion, each at `level`."""
    tail = 1.0 - level
    lower = 0.0 if count == 0 else float(beta.ppf(tail, count, n - count + 1))
    upper = 1.0 if count == n else float(beta.ppf(level, count + 1, n - count))
    return lower, upper


def epsilon_lower_bound(count_a: int, count_b: int, n_a: int, n_b: int, confidence: float) -> float:
    """Lower bound on ln(P[E | a] / P[E | b]) holding with probability >= confidence (0 if none is shown)."""
    level = 1.0 - (1.0 - confidence) / 2.0
    p_a_low = clopper_pearson(count_a, n_a, level)[0]
    p_b_high = clopper_pearson(count_b, n_b, level)[1]
    return max(0.0, math.log(p_a_low / p_b_high)) if p_a_low > 0 else 0.0


def _event_counts(events: list[Event], reports_a: Reports, reports_b: Reports) -> list[tuple[Event, int, int]]:
    """How often each event occurs in the two batches; each distinct statistic is computed once per batch."""
    computed: dict[tuple[int, str], np.ndarray] = {}

    def count(event: Event, reports: Reports, which: str) -> int:
        key = (id(event.statistic), which)
        if key not in computed:
            computed[key] = event.statistic(reports)
        return int(event.test(computed[key]).sum())

    return [(e, count(e, reports_a, "a"), count(e, reports_b, "b")) for e in events]


def _batch(value: np.ndarray, n: int) -> np.ndarray:
    return np.array(np.broadcast_to(value, (n, *value.shape)))


def audit(
    mechanism: Perturbs,
    pairs: Sequence[tuple[Any, Any]],
    events: EventFactory,
    rng: np.random.Generator,
    n: int = 500_000,
    n_select: int = 100_000,
    confidence: float = 0.999,
) -> AuditResult:
    """Select the most telling (pair, event) on selection samples, then bound epsilon on n fresh reports each."""
    if not pairs:
        raise LDPError("the auditor needs at least one pair of inputs")
    best: tuple[float, np.ndarray, np.ndarray, Event] | None = None
    for a, b in pairs:
        a, b = np.asarray(a), np.asarray(b)
        reports_a = mechanism.perturb(_batch(a, n_select), rng)
        reports_b = mechanism.perturb(_batch(b, n_select), rng)
        for event, count_a, count_b in _event_counts(events(reports_a, reports_b), reports_a, reports_b):
            for first, second, ka, kb in ((a, b, count_a, count_b), (b, a, count_b, count_a)):
                score = epsilon_lower_bound(ka, kb, n_select, n_select, confidence)
                if best is None or score > best[0]:
                    best = (score, first, second, event)
    if best is None:
        raise LDPError("the event factory produced no events")
    _, a, b, event = best
    count_a = int(event.occurs(mechanism.perturb(_batch(a, n), rng)).sum())
    count_b = int(event.occurs(mechanism.perturb(_batch(b, n), rng)).sum())
    return AuditResult(
        epsilon_lower_bound=epsilon_lower_bound(count_a, count_b, n, n, confidence),
        confidence=confidence,
        n=n,
        input_a=a,
        input_b=b,
        event=event.description,
        count_a=count_a,
        count_b=count_b,
    )


# --- event families -----------------------------------------------------------------------------------------


def _at_least(c: float) -> Callable[[np.ndarray], np.ndarray]:
    return lambda s: s >= c


def _at_most(c: float) -> Callable[[np.ndarray], np.ndarray]:
    return lambda s: s <= c


def _equal_to(c: float) -> Callable[[np.ndarray], np.ndarray]:
    return lambda s: s == c


def threshold_events(label: str, statistic: Callable[[Reports], np.ndarray]) -> EventFactory:
    """{s(y) >= c} and {s(y) <= c} for c at quantiles of the pooled selection sample of a scalar statistic s."""

    def factory(reports_a: Reports, reports_b: Reports) -> list[Event]:
        pooled = np.concatenate([statistic(reports_a), statistic(reports_b)])
        out = []
        for c in np.unique(np.quantile(pooled, QUANTILES)):
            out.append(Event(f"{label} >= {c:.6g}", statistic, _at_least(c)))
            out.append(Event(f"{label} <= {c:.6g}", statistic, _at_most(c)))
        return out

    return factory


def outcome_events(label: str, rows: Callable[[Reports], np.ndarray]) -> EventFactory:
    """{y = r} for each distinct report r, when the selection samples have at most MAX_OUTCOMES of them.

    A row is identified by a fixed random projection of it (a fingerprint), so each event is one comparison of
    floats; two rows sharing a fingerprint (probability 0) would only merge two outcomes into one event, which
    is still a fixed event, so the bound stays valid. The projection adds one column at a time (elementwise,
    correctly rounded), so equal rows get equal fingerprints on any machine; a matrix product would not do, as
    BLAS kernels round the same row differently at different positions of a batch.
    """

    def fingerprint(reports: Reports) -> np.ndarray:
        x = rows(reports)
        width: int = x.shape[1]
        weights = np.random.default_rng(width).standard_normal(width)
        out = x[:, 0] * weights[0]
        for j in range(1, width):  # the report's columns, each vectorised over the reports
            out += x[:, j] * weights[j]
        return out

    def factory(reports_a: Reports, reports_b: Reports) -> list[Event]:
        pooled_rows = np.concatenate([rows(reports_a), rows(reports_b)])
        pooled = np.concatenate([fingerprint(reports_a), fingerprint(reports_b)])
        distinct, first = np.unique(pooled, return_index=True)
        if len(distinct) > MAX_OUTCOMES:
            return []
        return [
            Event(f"{label} == {np.round(pooled_rows[i], 6).tolist()}", fingerprint, _equal_to(f))
            for f, i in zip(distinct, first, strict=True)
        ]

    return factory


def combined(*factories: EventFactory) -> EventFactory:
    return lambda reports_a, reports_b: [e for f in factories for e in f(reports_a, reports_b)]


def _report_rows(reports: Reports) -> np.ndarray:
    """All columns of a report batch side by side, float64 (n, total width)."""
    return np.column_stack(
        [np.asarray(reports[k], dtype=np.float64).reshape(len(reports[k]), -1) for k in sorted(reports)]
    )


def audit_plan(mechanism: Mechanism) -> tuple[list[tuple[Any, Any]], EventFactory]:
    """Candidate input pairs and events for a numeric, vector or frequency-oracle mechanism (module docstring)."""
    if isinstance(mechanism, NumericMechanism):
        value = lambda r: np.asarray(r["value"], dtype=np.float64)  # noqa: E731
        return [(1.0, -1.0)], combined(outcome_events("t*", lambda r: value(r)[:, None]), threshold_events("t*", value))
    if isinstance(mechanism, VectorMechanism):
        d = mechanism.dims
        ones = np.ones(d)
        flips = sorted({1, min(2, d), d})
        pairs = [(ones, np.where(np.arange(d) < f, -1.0, 1.0)) for f in flips]
        dense = mechanism.dense
        return pairs, combined(
            outcome_events("t*", dense),
            threshold_events("t*[0]", lambda r: dense(r)[:, 0]),
            threshold_events("min t*", lambda r: dense(r).min(axis=1)),
            threshold_events("max t*", lambda r: dense(r).max(axis=1)),
        )
    if isinstance(mechanism, KeyValueMechanism):
        first, second = np.array([[0.0, 1.0]]), np.array([[min(1, mechanism.domain_size - 1), -1.0]])
        sets = np.stack([first, second])
        loss = lambda r: np.subtract(*mechanism.log_pmf(r, sets).T)  # noqa: E731
        return [(first, second)], combined(outcome_events("y", _report_rows),
                                           threshold_events("ln P[y|a] - ln P[y|b]", loss))
    a, b = (0, 1) if not isinstance(mechanism, (SketchOracle, PrefixTree, SFP)) else _distinct_strings(mechanism.domain)
    log_pmf = getattr(mechanism, "log_pmf", None)
    factories = [outcome_events("y", _report_rows)]
    if log_pmf is not None:
        loss = lambda r: log_pmf(r, [a])[:, 0] - log_pmf(r, [b])[:, 0]  # noqa: E731
        factories.append(threshold_events(f"ln P[y|{a}] - ln P[y|{b}]", loss))
    return [(a, b)], combined(*factories)


def _distinct_strings(domain: StringDomain) -> tuple[str, str]:
    """Two strings of the domain's full length that differ in every byte (open-domain mechanisms' inputs)."""
    first, second = (chr(int(c)) for c in domain.symbols[:2])
    return first * domain.max_length, second * domain.max_length


def audit_mechanism(
    mechanism: Mechanism, seed: int = 0, n: int = 500_000, n_select: int = 100_000, confidence: float = 0.999
) -> AuditResult:
    """`audit` with `audit_plan`'s inputs and events.

    Examples
    --------
    >>> from ldpstream.mechanisms.numeric import Piecewise
    >>> audit_mechanism(Piecewise(1.0), n=20_000, n_select=5_000).epsilon_lower_bound <= 1.0
    True
    """
    pairs, events = audit_plan(mechanism)
    return audit(mechanism, pairs, events, np.random.default_rng(seed), n=n, n_select=n_select, confidence=confidence)


# --- longitudinal mode ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RepeatedReports:
    """Each row is one device reporting its value `reports` times: columns gain a report axis, (n, T, ...).

    A longitudinal mechanism gets one secret per device for all T reports (its memo), any other fresh noise.
    """

    mechanism: Mechanism
    reports: int

    def perturb(self, values: Any, rng: np.random.Generator) -> Reports:
        n = len(values)
        memo = {"secrets": draw_secrets(rng, n)} if isinstance(self.mechanism, Longitudinal) else {}
        perturb: Callable[..., Reports] = self.mechanism.perturb
        batches = [perturb(values, rng, **memo) for _ in range(self.reports)]
        return {name: np.stack([b[name] for b in batches], axis=1) for name in batches[0]}


def one_report_statistic(mechanism: Mechanism) -> Callable[[Reports], np.ndarray]:
    """A scalar per report: the numeric report itself, or ln P[y | 0] - ln P[y | 1] for a frequency mechanism."""
    if isinstance(mechanism, NumericMechanism):
        return lambda r: np.asarray(r["value"], dtype=np.float64)
    log_pmf = getattr(mechanism, "log_pmf", None)
    if log_pmf is None:
        raise LDPError(f"{type(mechanism).__name__} has no one-report statistic for the longitudinal audit")
    return lambda r: log_pmf(r, [0])[:, 0] - log_pmf(r, [1])[:, 0]


def audit_longitudinal(
    mechanism: Mechanism,
    reports: int,
    seed: int = 0,
    n: int = 200_000,
    n_select: int = 50_000,
    confidence: float = 0.999,
) -> AuditResult:
    """Lower-bound the budget of `reports` reports of one value by one device (module docstring).

    Examples
    --------
    >>> from ldpstream.mechanisms.frequency import GRR
    >>> audit_longitudinal(GRR(0.5, 2), reports=4, n=20_000, n_select=5_000).epsilon_lower_bound > 0.5
    True
    """
    if isinstance(reports, bool) or not isinstance(reports, int) or reports < 1:
        raise LDPError(f"reports must be a positive integer, got {reports!r}")
    single = one_report_statistic(mechanism)

    def total(r: Reports) -> np.ndarray:
        summed = sum(single({k: col[:, t] for k, col in r.items()}) for t in range(reports))
        assert isinstance(summed, np.ndarray)  # reports >= 1 terms: never sum's start, 0
        return summed

    inputs = (1.0, -1.0) if isinstance(mechanism, NumericMechanism) else (0, 1)
    label = f"sum over {reports} reports"
    events = combined(outcome_events(label, lambda r: total(r)[:, None]), threshold_events(label, total))
    rng = np.random.default_rng(seed)
    return audit(RepeatedReports(mechanism, reports), [inputs], events, rng, n, n_select, confidence)
