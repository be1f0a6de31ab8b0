"""The published collection specs the edge validates against and serves to devices, cached and re-read from Kafka on a
miss (and, for devices asking which version is current, at least every `current_s`)."""

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
    signed: bytes = b""  # the spec's exact bytes as the admin signed them (what devices verify)
    block: bytes = b""  # their signature block

    @classmethod
    def load(cls, spec: CollectionSpec, bootstrap: str, signed: tuple[bytes, bytes] = (b"", b"")) -> EdgePlan:
        """The plan of a published spec, with the factorization strategies it pins."""
        collector = collector_for(spec, strategies_for(spec, bootstrap))
        return cls(spec, tuple(collector.mechanisms[a.name].schema for a in spec.attributes), collector.k, *signed)


class EdgePlans:
    """name@version -> plan, re-read from the specs topic at most every `refresh_s` when a key is missing (so
    requests for unknown collections cost no Kafka read each)."""

    def __init__(self, bootstrap: str, refresh_s: float = 2.0, current_s: float = 10.0) -> None:
        self.bootstrap = bootstrap
        self.refresh_s = refresh_s
        self.current_s = current_s  # how stale the newest versions may be when a device asks for one
        self._plans: dict[str, EdgePlan] = {}
        self._newest: dict[str, EdgePlan] = {}  # name -> the plan of its newest published version
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

    def all(self) -> list[EdgePlan]:
        """Every plan loaded (never blocks)."""
        return list(self._plans.values())

    def newest(self, name: str) -> EdgePlan | None:
        """The plan of the collection's newest version (never blocks)."""
        return self._newest.get(name)

    def find_newest(self, name: str) -> EdgePlan | None:
        """The plan of the collection's newest version, the topic re-read first if it is unknown (at most every
        `refresh_s`: blocking)."""
        if self.newest(name) is None:
            with self._lock:
                if self.newest(name) is None and time.monotonic() - self._read_at >= self.refresh_s:
                    self.refresh()
        return self.newest(name)

    def stale(self) -> bool:
        """True when the newest versions were read more than `current_s` ago (refresh off the loop)."""
        return time.monotonic() - self._read_at >= self.current_s

    def refresh(self) -> None:
        """Re-read the specs topic; a spec that cannot be loaded is logged and left out."""
        with self._lock:
            self._read_at = time.monotonic()
            try:
                invalid: list[str] = []
                signed: dict[str, tuple[bytes, bytes]] = {}
                specs = read_specs(self.bootstrap, invalid, known={k: p.spec for k, p in self._plans.items()},
                                   signed=signed)
            except (SpecError, TopicError, KafkaException, RuntimeError) as exc:
                log.error("cannot read published specs: %s", exc)
                return
            log_refused(invalid, self._refused, log)
            for key, spec in specs.items():
                if key not in self._plans:
                    try:
                        self._plans[key] = EdgePlan.load(spec, self.bootstrap, signed[key])
                    except (SpecError, LDPError, RuntimeError, KafkaException) as exc:
                        log.error("published spec %s left out: %s", key, exc)
            for plan in self._plans.values():
                newest = self._newest.get(plan.spec.name)
                if newest is None or plan.spec.version > newest.spec.version:
                    self._newest[plan.spec.name] = plan
            self.loaded = True
