"""The store-wide Prometheus metrics the API serves, and the labels of every metric of the system (the
per-process ones are defined in `ldpstream.runtime.metrics`). Prefix `ldp_`, base units, bounded label values.

Labels and their values (no device ids, no free text):
- collection: a published collection name (as many as there are collections);
- outcome: accepted | rejected; reason: '' or one of `ldpstream.aggregator.processing.REASONS` (10 values);
- status: applied | skipped | overlap | gap | stale (a micro-batch's fate in the store);
- attribute / value: a spec's attribute names and categorical values, or a factorization attribute's workload
  queries (e.g. "<= v" for a prefix workload: K per attribute; bounded by the published specs);
- window: all (the all-time window), or a window length such as 1h for the newest window of that length.
- partition: a report topic's partition number (a spec's `partitions`, 8 by default) or of `ldp.sgd.gradients`;
- topic: a report topic (one per collection) or `ldp.sgd.gradients` (`ldp_lost_messages`).
- scope (`ldp_privacy_epsilon`): report | window | lifetime;
- metric (`ldp_sgd_held_out_error`): misclassification | mse;
- job: an SGD training job's id (one coordinator per job); for `ldp_sgd_gradients`, outcome: accepted | dropped |
  rejected and reason: '' or one of `ldpstream.sgd.coordinator`'s (stale, or the 7 `REJECT_REASONS`).
Worker processes serve the per-process metrics (batches, latency, rejects seen by that worker); the API serves
the store-wide ones (`StoreCollector`: exact report totals, consumer lag, freshness, estimates, computed from
Redis and Kafka at scrape time, for the newest published version of each collection).

Series per collection of the store-wide metrics: reports 1 + (reasons seen, <= 9); lag one per partition;
freshness 1; estimates and their standard errors (1 + tumbling windows) x (numeric attributes + categorical
values) each; suspected poisoning (`ldpstream.aggregator.poisoning`): the set-aside ratio and the alert per window
shown, the alert threshold 1, the gain removed per attribute and window, and a defended estimate per suspected value
(none in a window with no suspect). The diagnostics example: 9 reports, 8 lag, 1 freshness, 2 x 2 x 25 = 100
estimate series, 2 + 2 + 1 + 6 poisoning series.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaException
from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ldpstream.aggregator.estimates import collection_estimates
from ldpstream.aggregator.health import EndOffsets, partition_lag
from ldpstream.aggregator.plans import Plan
from ldpstream.aggregator.store import ALL_TIME, StatsStore
from ldpstream.contract.shuffled import report_path, shuffled_names

log = logging.getLogger(__name__)

ESTIMATE_LABELS = ["collection", "attribute", "value", "window"]


@dataclass(frozen=True)
class StoreFamilies:
    """The store-wide metric families of one scrape (empty until `StoreCollector.collect` fills them)."""

    collections: GaugeMetricFamily = field(default_factory=lambda: GaugeMetricFamily(
        "ldp_collections", "Published collections"))
    reports: CounterMetricFamily = field(default_factory=lambda: CounterMetricFamily(
        "ldp_reports", "Reports applied to the store, by outcome (exact totals)",
        labels=["collection", "outcome", "reason"]))
    lag: GaugeMetricFamily = field(default_factory=lambda: GaugeMetricFamily(
        "ldp_consumer_lag_messages", "Messages of a report partition not yet applied to the store",
        labels=["collection", "partition"]))
    freshness: GaugeMetricFamily = field(default_factory=lambda: GaugeMetricFamily(
        "ldp_freshness_seconds", "Age of the newest report applied to the store", labels=["collection"]))
    shuffle_epsilon: GaugeMetricFamily = field(default_factory=lambda: GaugeMetricFamily(
        "ldp_shuffle_central_epsilon", "A shuffled collection's newest released batch: its central epsilon at the "
        "spec's delta", labels=["collection"]))
    shuffle_reports: GaugeMetricFamily = field(default_factory=lambda: GaugeMetricFamily(
        "ldp_shuffle_batch_reports", "A shuffled collection's newest released batch: its reports",
        labels=["collection"]))
    privacy: GaugeMetricFamily = field(default_factory=lambda: GaugeMetricFamily(
        "ldp_privacy_epsilon", "The epsilon a device spends as the newest published spec states it: per report, per "
        "window (one report per window) and over its lifetime (a privacy block)", labels=["collection", "scope"]))
    shuffle_overdue: GaugeMetricFamily = field(default_factory=lambda: GaugeMetricFamily(
        "ldp_shuffle_window_overdue_seconds", "A shuffled collection: how long its next window has been due to "
        "close (0 while none is overdue; grows while the shuffler is stopped or stuck)", labels=["collection"]))
    estimate: GaugeMetricFamily = field(default_factory=lambda: GaugeMetricFamily(
        "ldp_estimate", "Unbiased estimate: a numeric attribute's mean (value '') or a categorical value's "
        "frequency", labels=ESTIMATE_LABELS))
    stderr: GaugeMetricFamily = field(default_factory=lambda: GaugeMetricFamily(
        "ldp_estimate_stderr", "Standard error of ldp_estimate", labels=ESTIMATE_LABELS))
    set_aside: GaugeMetricFamily = field(default_factory=lambda: GaugeMetricFamily(
        "ldp_poisoning_set_aside_ratio", "Suspected poisoning: the fraction of a window's reports its detectors set "
        "aside (from its audit, or the tests on its sums)", labels=["collection", "window"]))
    alert: GaugeMetricFamily = field(default_factory=lambda: GaugeMetricFamily(
        "ldp_poisoning_alert", "1 when ldp_poisoning_set_aside_ratio is above ldp_poisoning_alert_threshold or any "
        "attribute is suspected (a demoted item, a capped heavy hitter, a drift held)",
        labels=["collection", "window"]))
    threshold: GaugeMetricFamily = field(default_factory=lambda: GaugeMetricFamily(
        "ldp_poisoning_alert_threshold", "The set-aside fraction above which a window raises the poisoning alert",
        labels=["collection"]))
    gain_removed: GaugeMetricFamily = field(default_factory=lambda: GaugeMetricFamily(
        "ldp_poisoning_gain_removed", "What the poisoning defence took off an attribute's suspected estimates "
        "(frequencies summed over the suspects; a mean: the distance moved)", labels=["collection", "attribute",
                                                                                     "window"]))
    defended: GaugeMetricFamily = field(default_factory=lambda: GaugeMetricFamily(
        "ldp_estimate_defended", "A suspected value's estimate without the reports set aside (beside ldp_estimate)",
        labels=ESTIMATE_LABELS))

    def all(self) -> list[Metric]:
        return [self.collections, self.reports, self.lag, self.freshness, self.shuffle_epsilon, self.shuffle_reports,
                self.privacy, self.shuffle_overdue, self.estimate, self.stderr, self.set_aside, self.alert,
                self.threshold, self.gain_removed, self.defended]


class StoreCollector(Collector):
    """The store-wide metrics, read from the store and Kafka at each scrape (registered by the API process only).

    `plans` gives the published plans, `end_offsets` the high watermark of every partition of the given topics
    (topics that do not exist are left out).
    """

    def __init__(self, store: StatsStore, plans: Callable[[], Sequence[Plan]], end_offsets: EndOffsets,
                 clock_s: Callable[[], float] = time.time) -> None:
        self.store = store
        self.plans = plans
        self.end_offsets = end_offsets
        self.clock_s = clock_s

    def describe(self) -> Iterable[Metric]:
        """The families without samples (so registering the collector reads nothing)."""
        return StoreFamilies().all()

    def collect(self) -> Iterable[Metric]:
        families = StoreFamilies()
        latest = {p.spec.name: p for p in sorted(self.plans(), key=lambda p: (p.spec.name, p.spec.version))}
        families.collections.add_metric([], len(latest))
        self._lag(families.lag, list(latest.values()))
        now_s = self.clock_s()
        for name, plan in sorted(latest.items()):
            for key, n in sorted(self.store.outcomes(name).items()):
                outcome, _, reason = key.partition(":")
                families.reports.add_metric([name, outcome, reason], n)
            self._privacy(families.privacy, plan)
            if report_path(plan.spec).shuffled:
                self._shuffle(families, name, now_s)
            newest_ms = self.store.freshness(name).get("newest_report_ms")
            if newest_ms is not None:
                families.freshness.add_metric([name], now_s - newest_ms / 1000)
            self._estimates(families, plan)
        return families.all()

    @staticmethod
    def _privacy(family: GaugeMetricFamily, plan: Plan) -> None:
        """The spec's epsilon per report, per window (when a device reports at most once a window) and lifetime."""
        spec = plan.spec
        family.add_metric([spec.name, "report"], spec.epsilon)
        if spec.one_report_per_window:
            family.add_metric([spec.name, "window"], spec.epsilon)
        if spec.privacy is not None:
            family.add_metric([spec.name, "lifetime"], spec.privacy.lifetime)

    def _shuffle(self, families: StoreFamilies, name: str, now_s: float) -> None:
        """A shuffled collection's newest release and whether its next close is overdue."""
        if figures := self.store.shuffle_figures(name):
            families.shuffle_epsilon.add_metric([name], figures[-1].epsilon)
            families.shuffle_reports.add_metric([name], figures[-1].reports)
        due_ms = self.store.shuffle_due_ms(name)
        if due_ms is not None:
            families.shuffle_overdue.add_metric([name], max(0.0, now_s - due_ms / 1000))

    def _lag(self, family: GaugeMetricFamily, plans: list[Plan]) -> None:
        """High watermark - (applied offset + 1) per partition; left out (and logged) if Kafka does not answer."""
        try:
            ends = self.end_offsets([p.spec.topic for p in plans])
        except KafkaException as exc:
            log.warning("consumer lag left out of this scrape: Kafka: %s", exc)
            return
        for (name, partition), waiting in partition_lag(self.store, {p.spec.name: p.spec.topic for p in plans}, ends,
                                                        shuffled_names(p.spec for p in plans)).items():
            family.add_metric([name, str(partition)], waiting)

    def _estimates(self, families: StoreFamilies, plan: Plan) -> None:
        """All-time and newest-tumbling-window estimates of windows with reports (unbiased, no post-processing), and
        their suspected poisoning."""
        estimate, stderr = families.estimate, families.stderr
        for window in [ALL_TIME, *plan.spec.windows]:
            result = collection_estimates(self.store, plan, window)
            if not result["reports"]:
                continue
            self._poisoning(families, plan.spec.name, window, result)
            for attribute, entry in result["attributes"].items():
                values = entry.get("frequencies") or entry.get("answers") or {}
                series = ([("", entry["mean"], entry["stderr"])] if "mean" in entry else
                          [(v, f["estimate"], f["stderr"]) for v, f in values.items()])
                series += [(f"{v} mean", m["estimate"], m["stderr"]) for v, m in entry.get("means", {}).items()]
                for value, x, s in series:
                    labels = [plan.spec.name, attribute, value, window]
                    if x is not None:
                        estimate.add_metric(labels, x)
                    if s is not None:
                        stderr.add_metric(labels, s)


    @staticmethod
    def _poisoning(families: StoreFamilies, name: str, window: str, result: dict[str, Any]) -> None:
        """A window's suspected poisoning (`ldpstream.aggregator.estimates.poisoning_summary`)."""
        p = result["poisoning"]
        families.set_aside.add_metric([name, window], p["set_aside_fraction"])
        families.alert.add_metric([name, window], 1.0 if p["alert"] else 0.0)
        if window == ALL_TIME:
            families.threshold.add_metric([name], p["alert_threshold"])
        for attribute, entry in p["attributes"].items():
            families.gain_removed.add_metric([name, attribute, window], entry["gain_removed"])
            defended = entry["estimate"]
            if "mean" in defended and entry["status"] == "suspected" and defended["mean"] is not None:
                families.defended.add_metric([name, attribute, "", window], defended["mean"])
            for label in entry["suspects"]:
                x = defended.get("frequencies", {}).get(label, {}).get("estimate")
                if x is not None:
                    families.defended.add_metric([name, attribute, label, window], x)


def store_registry(collector: StoreCollector) -> CollectorRegistry:
    """A registry of the store-wide metrics and the serving process's own (CPU, memory, file descriptors)."""
    registry = CollectorRegistry()
    registry.register(collector)
    ProcessCollector(registry=registry)
    return registry
