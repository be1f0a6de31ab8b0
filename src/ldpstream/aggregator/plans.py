"""Published collection specs as aggregation plans: the spec, its collector, one mechanism per attribute.

A plan is built when its spec is first read: the factorization strategies the spec pins are loaded then
(`ldpstream.runtime.strategies`), so the collector itself is pure (`ldpstream.contract.collector`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from ldpstream.aggregator.store import WindowStats
from ldpstream.contract.collector import Strategies, collector_for
from ldpstream.contract.spec import CollectionSpec
from ldpstream.mechanisms.base import Estimate, Mechanism, ReportSchema
from ldpstream.mechanisms.distribution.base import Distribution
from ldpstream.mechanisms.mixed import MixedCollector, block_size, joined_stats
from ldpstream.mechanisms.open_domain.tree import LevelCap
from ldpstream.runtime.specs import PublishedSpecs
from ldpstream.runtime.strategies import strategies_for


@dataclass(frozen=True)
class Plan:
    """How to aggregate and estimate one published spec version (the same collector the devices use)."""

    spec: CollectionSpec
    strategies: Strategies = field(default_factory=dict, compare=False)

    @classmethod
    def load(cls, spec: CollectionSpec, bootstrap: str | None = None) -> Plan:
        """The plan of a published spec, with the strategies it pins (read from Kafka if not cached locally)."""
        return cls(spec, strategies_for(spec, bootstrap))

    @cached_property
    def collector(self) -> MixedCollector:
        return collector_for(self.spec, self.strategies)

    @cached_property
    def mechanisms(self) -> tuple[Mechanism, ...]:
        return tuple(self.collector.mechanisms[a.name] for a in self.spec.attributes)

    @cached_property
    def schemas(self) -> tuple[ReportSchema, ...]:
        """Each attribute's report schema (computed once: the hot path checks every message against it)."""
        return tuple(m.schema for m in self.mechanisms)

    @property
    def attributes_per_device(self) -> int:
        return self.collector.k

    @cached_property
    def sizes(self) -> dict[int, int]:
        """Statistics length per attribute index in the store: [devices that sampled it, mechanism statistics]."""
        return {j: block_size(m) for j, m in enumerate(self.mechanisms)}

    def estimate(self, window: WindowStats, caps: Mapping[str, LevelCap] | None = None) -> dict[str, Estimate]:
        """Per attribute, the collector's unbiased estimate from a window's statistics (`caps`: per string
        attribute, a cap of its heavy-hitter decode)."""
        return self.collector.estimate(self._joined(window), caps)

    def distributions(self, window: WindowStats) -> dict[str, Distribution | None]:
        """Per numeric attribute with a distribution mechanism, its distribution in a window (None: no reports)."""
        return self.collector.distributions(self._joined(window))

    def _joined(self, window: WindowStats) -> np.ndarray:
        return joined_stats(window.devices, [window.stats[j] for j in range(len(self.spec.attributes))])


class PlanRegistry(PublishedSpecs[Plan]):
    """The published specs as plans (`ldpstream.runtime.specs.PublishedSpecs`), re-read (at most every `refresh_s`)
    on a miss; a plan's collector is built when its spec is first read, not in the first batch that needs it."""

    def __init__(self, bootstrap: str, refresh_s: float = 5.0) -> None:
        super().__init__(bootstrap, lambda spec, _: _built(Plan.load(spec, bootstrap)), refresh_s=refresh_s)

    def latest(self, name: str) -> Plan | None:
        """The highest published version of a collection (the topic read first)."""
        versions = [p for p in self.plans() if p.spec.name == name]
        return versions[-1] if versions else None


def _built(plan: Plan) -> Plan:
    plan.schemas  # noqa: B018 - builds the collector now
    return plan
