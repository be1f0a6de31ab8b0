"""The edge's limits and places: one `EdgeConfig` per edge process (`ldp edge`, `python -m ldpstream.edge`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ldpstream.edge.join import EnrolLimits


@dataclass(frozen=True)
class EdgeConfig:
    """The edge's limits and places (`ldp edge --help` describes each)."""

    bootstrap: str
    redis_url: str
    keyring: Path
    spool_dir: Path
    spool_bytes: int = 256 * 2**20
    max_body_bytes: int = 1 * 2**20
    max_inflated_bytes: int = 4 * 2**20
    max_reports: int = 100
    rate_per_s: int = 20
    linger_s: float = 0.005
    max_in_flight: int = 200_000
    delivery_timeout_ms: int = 10_000
    idle_timeout_s: float = 60.0
    body_timeout_s: float = 30.0
    max_connections: int = 10_000
    pointer_key: Path | None = None  # the online key that signs pointers (`ldpstream.runtime.join_keys`)
    enrolment_keys: Path | None = None  # the public keys enrolment tokens are signed with
    enrol_limits: EnrolLimits = EnrolLimits()
    cors_origins: frozenset[str] = frozenset()  # origins whose browser pages may call the edge (exact match)
