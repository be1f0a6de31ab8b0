"""Publishing collection specs to the compacted topic `ldp.collections`, and reading them back.

A message's key is "name@version", its value the spec's canonical JSON, and its `ldp-sig` header the admin's signature
of both (`ldpstream.runtime.signing`): readers take only specs signed by a trusted key, so a spec that reaches the topic
any other way is refused. A published version is immutable: `publish_spec` reads the topic to its end first, does
nothing if the same content is already there, and refuses (`SpecError`) a different content under a published key. Two
publishers racing on the same new key are not serialised by Kafka; publishing is an operator's act, done once per
version. `rotate_signing_key` re-signs every published spec with a new key.

`PublishedSpecs` is the one cache of the published specs every service reads (the edge, the aggregator's worker, the
read API, the shuffler): each spec as the service's own plan of it, re-read from the topic on a miss.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from confluent_kafka import KafkaException
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ldpstream.contract.collector import sampled_count
from ldpstream.contract.shuffled import report_path
from ldpstream.contract.spec import CollectionSpec, SpecError, parse_spec
from ldpstream.contract.topics import DLQ_TOPIC
from ldpstream.runtime.dlq import DLQ_PARTITIONS
from ldpstream.runtime.fresh_reads import read_since
from ldpstream.runtime.join_keys import ensure_key, next_spec_key_path
from ldpstream.runtime.kafka import ReportProducer, ensure_topic, read_to_end
from ldpstream.runtime.secrets import replace_secret
from ldpstream.runtime.settings import Settings
from ldpstream.runtime.signing import (
    SIGNATURE_HEADER,
    SigningError,
    TrustedKeys,
    key_id,
    load_signing_key,
    load_trusted_keys,
    new_private_key,
    private_pem,
    retain_only,
    sign,
    trust,
    verify,
)
from ldpstream.runtime.strategies import with_strategies

log = logging.getLogger(__name__)
P = TypeVar("P")
Signed = tuple[bytes, bytes]  # a spec's exact bytes as the admin signed them, and their signature block


@dataclass(frozen=True)
class Published:
    """What `publish_spec` did: the spec's key, whether it was new, and the topic of its reports."""

    key: str
    created: bool
    topic: str
    spec: CollectionSpec  # as published (factorization strategies pinned by hash)


def specs_topic() -> str:
    """The topic the collection specs are published to: `LDP_SPECS_TOPIC`, else `ldp.collections`."""
    return Settings.from_env().specs_topic


def read_specs(bootstrap: str, invalid: list[str] | None = None, known: Mapping[str, CollectionSpec] | None = None,
               trusted: TrustedKeys | None = None,
               signed: dict[str, tuple[bytes, bytes]] | None = None) -> dict[str, CollectionSpec]:
    """Every published spec by "name@version" (the topic read to its end; an empty dict if it does not exist yet).

    A message counts only if it is signed by a trusted key (`trusted`, else those of `Settings.spec_trusted_keys`;
    SigningError if there are none: a reader without trusted keys refuses every spec) and is a valid spec under
    its key. The first message of a key that counts is authoritative (a later, different one can only come from a
    race; a later identical one is a re-signed copy, `rotate_signing_key`); deletions (empty values) are ignored,
    since a published version is never withdrawn. A message that does not count is skipped: one bad message must
    not stop the readers of every good one (`verify` and `parse_spec` raise SpecError and nothing else, whatever the
    bytes). The reasons go to `invalid` when given, for each key left without a spec (a rejected message before
    a valid one of its key, such as one signed by a retired key, is superseded, not reported). A key in `known`
    keeps the spec given there without checking the message again (published versions are immutable; parsing is
    most of the cost of a re-read). `signed`, when given, gets the exact value and signature block of every spec
    read here (not of those in `known`): what the edge serves to devices.
    """
    cfg = Settings.from_env()
    trusted = load_trusted_keys(cfg.spec_trusted_keys) if trusted is None else trusted
    topic = cfg.specs_topic
    ensure_topic(bootstrap, topic, 1, compacted=True)
    specs: dict[str, CollectionSpec] = {}
    rejected: dict[str, list[str]] = {}
    for key, value, headers in read_to_end(bootstrap, topic):
        if key is None or value is None:
            continue
        name = key.decode(errors="replace")
        if name in specs:
            continue
        if known is not None and name in known:
            specs[name] = known[name]
            continue
        try:
            verify(trusted, key, value, headers, f"{topic}[{name}]")  # before parsing: unsigned bytes stay unread
            spec = parse_spec(value, f"{topic}[{name}]")
            if spec.key != name:
                raise SpecError(f"{topic}: the message keyed {name!r} holds the spec {spec.key!r}")
        except SpecError as exc:
            rejected.setdefault(name, []).append(str(exc))
            continue
        specs[name] = spec
        if signed is not None:
            signed[name] = (value, next(v for k, v in headers or () if k == SIGNATURE_HEADER and v is not None))
    if invalid is not None:
        invalid.extend(reason for name, reasons in rejected.items() if name not in specs for reason in reasons)
    return specs


# how far the clock of a message's producer (an edge) may run ahead of this process's: `PublishedSpecs.get`
PRODUCER_SKEW_MS = 30_000


class PublishedSpecs(Generic[P]):
    """name@version -> a service's plan of each published spec (`load`: the spec and its signed bytes -> the plan;
    only the specs `wanted` holds for), read from the specs topic and re-read on a miss at most every `refresh_s` (so
    requests for unknown collections cost no Kafka read each; `read_since` waits for the next one, `get` does not).
    A spec whose plan cannot be built (a published spec is outside input: whatever `load` raises) is logged once and
    tried again at the next read; a message the reader refuses (`read_specs`) is logged once. Thread-safe: a miss
    during a re-read waits for it."""

    def __init__(self, bootstrap: str, load: Callable[[CollectionSpec, Signed], P], refresh_s: float = 2.0,
                 current_s: float = 10.0, wanted: Callable[[CollectionSpec], bool] = lambda _: True) -> None:
        self.bootstrap = bootstrap
        self.load = load
        self.refresh_s = refresh_s
        self.current_s = current_s  # how stale the newest versions may be when a device asks for one (`stale`)
        self.wanted = wanted
        self._plans: dict[str, tuple[CollectionSpec, P]] = {}
        self._newest: dict[str, tuple[int, P]] = {}  # name -> the plan of its newest published version
        self._read_at = -float("inf")  # monotonic seconds at the start of the last read
        self._read_at_ms = -float("inf")  # the same on the wall clock, in ms (Kafka timestamps')
        self._logged: set[str] = set()  # reasons logged once
        self._lock = threading.RLock()
        self.loaded = False  # the topic was read once

    def cached(self, name: str, version: int) -> P | None:
        """The plan if it is known already (never blocks)."""
        known = self._plans.get(f"{name}@{version}")
        return None if known is None else known[1]

    def get(self, name: str, version: int, produced_ms: int | None = None) -> P | None:
        """The plan of name@version, or None if it is not published (may read Kafka: blocking). `produced_ms`: when
        the message naming it was produced (its Kafka timestamp): on a miss, unless the topic was last read more than
        PRODUCER_SKEW_MS after that, a read begun since is waited for (`read_since`), so the report of a version
        published just before it is never taken for one of a version that does not exist."""
        if self.cached(name, version) is None:
            if produced_ms is not None and self._read_at_ms < produced_ms + PRODUCER_SKEW_MS:
                self.read_since(time.monotonic())
            else:
                with self._lock:
                    if self.cached(name, version) is None and self.age_s() >= self.refresh_s:
                        self.refresh()
        return self.cached(name, version)

    def newest(self, name: str) -> P | None:
        """The plan of the collection's newest version (never blocks)."""
        known = self._newest.get(name)
        return None if known is None else known[1]

    def read_since(self, arrived: float, every_s: float | None = None) -> None:
        """Return once a read of the topic begun at or after `arrived` is done: a spec published before a miss
        arrived is found by it. Misses share reads, and reads begin at most every `every_s` (default `refresh_s`;
        a miss waits up to that long), so requests for unknown collections cost no Kafka read each."""
        read_since(self._lock, lambda: self._read_at, self.refresh, arrived,
                   self.refresh_s if every_s is None else every_s)

    def all(self) -> list[P]:
        """Every plan loaded, by name then version (never blocks)."""
        return [plan for _, (_, plan) in sorted(self._plans.items(), key=lambda kv: (kv[1][0].name, kv[1][0].version))]

    def plans(self, max_age_s: float = 0.0) -> list[P]:
        """Every plan, by name then version, the topic read at most `max_age_s` ago (blocking)."""
        if self.age_s() >= max_age_s:
            with self._lock:
                if self.age_s() >= max_age_s:
                    self.refresh()
        return self.all()

    def age_s(self) -> float:
        """Seconds since the topic was last read."""
        return time.monotonic() - self._read_at

    def stale(self) -> bool:
        """True when the newest versions were read more than `current_s` ago (refresh off the loop)."""
        return self.age_s() >= self.current_s

    def refresh(self) -> None:
        """Re-read the specs topic and build the plans of the specs not known yet."""
        with self._lock:
            self._read_at, self._read_at_ms = time.monotonic(), time.time() * 1000
            try:
                invalid: list[str] = []
                signed: dict[str, Signed] = {}
                specs = read_specs(self.bootstrap, invalid, known={k: s for k, (s, _) in self._plans.items()},
                                   signed=signed)
            except (SpecError, RuntimeError, KafkaException) as exc:
                log.error("cannot read published specs: %s", exc)
                return
            self._log_once(f"published spec refused: {reason}" for reason in invalid)
            for key, spec in specs.items():
                if key not in self._plans and self.wanted(spec):
                    try:
                        self._plans[key] = spec, self.load(spec, signed.get(key, (b"", b"")))
                    except Exception as exc:  # a published spec is outside input: whatever building its plan raises
                        self._log_once([f"published spec {key} left out: {exc}"])
            for spec, plan in self._plans.values():
                newest = self._newest.get(spec.name)
                if newest is None or spec.version > newest[0]:
                    self._newest[spec.name] = spec.version, plan
            self.loaded = True

    def _log_once(self, lines: Iterable[str]) -> None:
        """Log each line once: a reader that re-reads the topic often says it once."""
        for line in lines:
            if line not in self._logged:
                self._logged.add(line)
                log.error("%s", line)


def publish_spec(spec: CollectionSpec, bootstrap: str) -> Published:
    """Publish `spec` once, signed with the admin's key; create its report topic (spec.partitions partitions) and
    the dead-letter topic.

    Publishing the same content again is a no-op; SpecError if that name@version holds a different spec;
    SigningError if there is no signing key, or it is not among the trusted keys (readers would refuse the spec).
    Factorization attributes get their optimised strategies first (stored by hash in `ldp.strategies`; the
    optimiser is deterministic, so publishing the same file twice gives the same spec).
    """
    cfg = Settings.from_env()
    signer = load_signing_key(cfg.spec_signing_key)
    trusted = load_trusted_keys(cfg.spec_trusted_keys)
    if key_id(signer.public_key()) not in trusted:
        raise SigningError(f"the spec-signing key {key_id(signer.public_key()).hex()} ({cfg.spec_signing_key}) is "
                           f"not among the trusted keys in {cfg.spec_trusted_keys}: readers would refuse its specs")
    spec = with_strategies(spec, spec.epsilon / sampled_count(spec), bootstrap)
    existing = read_specs(bootstrap, trusted=trusted).get(spec.key)
    if existing is not None and existing.canonical_json() != spec.canonical_json():
        raise SpecError(f"{spec.key} is already published with different content (sha256 "
                        f"{existing.content_hash()[:12]} vs {spec.content_hash()[:12]}); a published version is "
                        f"immutable: publish a new version")
    for topic in report_path(spec).topics(spec):
        ensure_topic(bootstrap, topic, spec.partitions)
    ensure_topic(bootstrap, DLQ_TOPIC, DLQ_PARTITIONS, exact=False)
    if existing is None:
        produce_signed(bootstrap, cfg.specs_topic, [spec], signer)
    return Published(spec.key, existing is None, spec.topic, spec)


def produce_signed(bootstrap: str, topic: str, specs: Iterable[CollectionSpec], signer: Ed25519PrivateKey) -> None:
    """Write each spec to the specs topic under its key, signed by `signer`; DeliveryError unless all are stored."""
    producer = ReportProducer(bootstrap, linger_ms=0)
    for spec in specs:
        key, value = spec.key.encode(), spec.canonical_json().encode()
        producer.produce(topic, value, key, headers=((SIGNATURE_HEADER, sign(signer, key, value)),))
    producer.flush()


@dataclass(frozen=True)
class Rotation:
    """What `rotate_signing_key` did: the new key's id, the specs re-signed with it, the key ids retired."""

    new_key: str
    resigned: list[str]
    retired: list[str]


def rotate_signing_key(bootstrap: str, retire_old: bool = False) -> Rotation:
    """Sign specs with a new key from now on, and re-sign every published spec with it.

    1. Take the next key (`ldpstream.runtime.join_keys`: apps pinned it ahead, so devices accept the re-signed specs),
       make a fresh next one, and trust the new key's public half beside the old ones (readers accept both).
    2. Make it the signing key: a publish from now on signs with it.
    3. Re-publish every spec readable now with its content unchanged, signed with the new key. A reader that
       trusts the old key keeps the first message of each key (the old copy; the same content); one that trusts
       only the new key skips the old copy and takes the new one; compaction drops the old copies in time.
    4. With `retire_old`, `retire_old_keys`.
    A failure between steps leaves every spec readable (the old key stays trusted until step 4); rotating again
    finishes the job with yet another key. SigningError if there is no signing key to rotate.
    """
    cfg = Settings.from_env()
    load_signing_key(cfg.spec_signing_key)
    upcoming = next_spec_key_path(cfg)
    new = ensure_key(upcoming)
    replace_secret(upcoming, private_pem(new_private_key()))
    trust(cfg.spec_trusted_keys, new.public_key())
    replace_secret(cfg.spec_signing_key, private_pem(new))
    specs = read_specs(bootstrap)
    produce_signed(bootstrap, cfg.specs_topic, specs.values(), new)
    retired = retire_old_keys(bootstrap) if retire_old else []
    return Rotation(key_id(new.public_key()).hex(), sorted(specs), retired)


def retire_old_keys(bootstrap: str) -> list[str]:
    """Trust only the signing key from now on; the ids of the keys no longer trusted. SigningError, and nothing
    changed, if a spec readable now would not be read the same with the signing key alone (not re-signed yet:
    `rotate_signing_key` re-signs it)."""
    cfg = Settings.from_env()
    signer = load_signing_key(cfg.spec_signing_key).public_key()
    now = read_specs(bootstrap)
    alone = read_specs(bootstrap, trusted={key_id(signer): signer})
    missing = sorted(key for key, spec in now.items() if alone.get(key) != spec)
    if missing:
        raise SigningError(f"not retiring the old keys: {len(missing)} published spec(s) are not signed by the "
                           f"signing key {key_id(signer).hex()} with their content ({', '.join(missing[:5])}"
                           f"{', ...' if len(missing) > 5 else ''}); `ldp spec keys rotate` re-signs them")
    return [k.hex() for k in retain_only(cfg.spec_trusted_keys, signer)]
