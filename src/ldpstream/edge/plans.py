"""The published collection specs the edge validates against, cached and re-read from Kafka on a miss."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from confluent_kafka import KafkaException

from ldpstream.contract.collector import collector_for
from ldpstream.contract.spec import CollectionSpec, SpecError
from ldpstream.mechanisms.base import LDPError, ReportSchema
from ldpstream.runtime.kafka import TopicError
from ldpstream.runtime.specs import log_refused, read_specs
from ldpstream.runtime.strategies import strategies_for

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EdgePlan:
    """What the edge checks reports of one published spec version against (the collector the devices use)."""

    spec: CollectionSpec
    schemas: tuple[ReportSchema, ...]
    attributes_per_device: int

    @classmethod
    def load(cls, spec: CollectionSpec, bootstrap: str) -> EdgePlan:
        """The plan of a published spec, with the factorization strategies it pins."""
        collector = collector_for(spec, strategies_for(spec, bootstrap))
        return cls(spec, tuple(collector.mechanisms[a.name].schema for a in spec.attributes), collector.k)


class EdgePlans:
    """name@version -> plan, re-read from the specs topic at most every `refresh_s` when a key is missing (so
    requests for unknown collections cost no Kafka read each)."""

    def __init__(self, bootstrap: str, refresh_s: float = 2.0) -> None:
        self.bootstrap = bootstrap
        self.refresh_s = refresh_s
        self._plans: dict[str, EdgePlan] = {}
        self._read_at = -float("inf")
        self._refused: set[str] = set()  # reasons for refused spec messages, logged once
        self._lock = threading.RLock()
        self.loaded = False  # the topic was read once


    def cached(self, name: str, version: int) -> EdgePlan | None:
        """The plan if it is known already (never blocks)."""
        return self._plans.get(f"{name}@{version}")

    def get(self, name: str, version: int) -> EdgePlan | None:
        """The plan of name@version, or None if it is not published (may read Kafka: blocking). A miss during a
        re-read waits for it."""
        plan = self.cached(name, version)
        if plan is None:
            with self._lock:
                if self.cached(name, version) is None and time.monotonic() - self._read_at >= self.refresh_s:
                    self.refresh()
            plan = self.cached(name, version)
        return plan

    def refresh(self) -> None:
        """Re-read the specs topic; a spec that cannot be loaded is logged and left out."""
        with self._lock:
            self._read_at = time.monotonic()
            try:
                invalid: list[str] = []
                specs = read_specs(self.bootstrap, invalid, known={k: p.spec for k, p in self._plans.items()})
            except (SpecError, TopicError, KafkaException, RuntimeError) as exc:
                log.error("cannot read published specs: %s", exc)
                return
            log_refused(invalid, self._refused, log)
            for key, spec in specs.items():
                if key not in self._plans:
                    try:
                        self._plans[key] = EdgePlan.load(spec, self.bootstrap)
                    except (SpecError, LDPError, RuntimeError, KafkaException) as exc:
                        log.error("published spec %s left out: %s", key, exc)
            self.loaded = True
