"""Publishing collection specs to the compacted topic `ldp.collections`, and reading them back.

A message's key is "name@version" and its value the spec's canonical JSON. A published version is immutable:
`publish_spec` reads the topic to its end first, does nothing if the same content is already there, and refuses
(`SpecError`) a different content under a published key. Two publishers racing on the same new key are not
serialised by Kafka; publishing is an operator's act, done once per version.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from collection.collector import sampled_count
from collection.spec import CollectionSpec, SpecError, parse_spec
from collection.topics import DLQ_TOPIC
from runtime.dlq import DLQ_PARTITIONS
from runtime.kafka import ReportProducer, ensure_topic, read_to_end
from runtime.settings import Settings
from runtime.strategies import with_strategies


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


def read_specs(bootstrap: str, invalid: list[str] | None = None,
               known: Mapping[str, CollectionSpec] | None = None) -> dict[str, CollectionSpec]:
    """Every published spec by "name@version" (the topic read to its end; an empty dict if it does not exist yet).

    The first message of a key is authoritative (a later, different one can only come from a race); deletions
    (empty values) are ignored, since a published version is never withdrawn. A message that is not a valid spec
    under its key is skipped, and its reason appended to `invalid` when given: one bad message must not stop
    the readers of every good one (`parse_spec` raises SpecError and nothing else, whatever the bytes). A key in
    `known` keeps the spec given there without parsing the message again (published versions are immutable;
    parsing is most of the cost of a re-read).
    """
    topic = specs_topic()
    ensure_topic(bootstrap, topic, 1, compacted=True)
    specs: dict[str, CollectionSpec] = {}
    for key, value in read_to_end(bootstrap, topic):
        if key is None or value is None:
            continue
        name = key.decode(errors="replace")
        if name in specs:
            continue
        if known is not None and name in known:
            specs[name] = known[name]
            continue
        try:
            spec = parse_spec(value, f"{topic}[{name}]")
            if spec.key != name:
                raise SpecError(f"{topic}: the message keyed {name!r} holds the spec {spec.key!r}")
        except SpecError as exc:
            if invalid is not None:
                invalid.append(str(exc))
            continue
        specs[name] = spec
    return specs


def publish_spec(spec: CollectionSpec, bootstrap: str) -> Published:
    """Publish `spec` once; create its report topic (spec.partitions partitions) and the dead-letter topic.

    Publishing the same content again is a no-op; SpecError if that name@version holds a different spec.
    Factorization attributes get their optimised strategies first (stored by hash in `ldp.strategies`; the
    optimiser is deterministic, so publishing the same file twice gives the same spec).
    """
    spec = with_strategies(spec, spec.epsilon / sampled_count(spec), bootstrap)
    existing = read_specs(bootstrap).get(spec.key)
    if existing is not None and existing.canonical_json() != spec.canonical_json():
        raise SpecError(f"{spec.key} is already published with different content (sha256 "
                        f"{existing.content_hash()[:12]} vs {spec.content_hash()[:12]}); a published version is "
                        f"immutable: publish a new version")
    ensure_topic(bootstrap, spec.topic, spec.partitions)
    ensure_topic(bootstrap, DLQ_TOPIC, DLQ_PARTITIONS, exact=False)
    if existing is None:
        producer = ReportProducer(bootstrap, linger_ms=0)
        producer.produce(specs_topic(), spec.canonical_json().encode(), spec.key.encode())
        producer.flush()
    return Published(spec.key, existing is None, spec.topic, spec)
