"""The published collection specs the edge validates against and serves to devices, as plans in the one cache of
published specs (`ldpstream.runtime.specs.PublishedSpecs`)."""

from __future__ import annotations

from dataclasses import dataclass

from ldpstream.contract.collector import collector_for
from ldpstream.contract.spec import CollectionSpec
from ldpstream.mechanisms.base import ReportSchema
from ldpstream.runtime.specs import PublishedSpecs
from ldpstream.runtime.strategies import strategies_for


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


EdgePlans = PublishedSpecs[EdgePlan]


def edge_plans(bootstrap: str) -> EdgePlans:
    """The published plans of one edge process: re-read on a miss at most every 2 s, and for devices asking which
    version is current at least every 10 s (`PublishedSpecs.stale`)."""
    return PublishedSpecs(bootstrap, lambda spec, signed: EdgePlan.load(spec, bootstrap, signed), refresh_s=2.0,
                          current_s=10.0)
