"""Publishing collection specs to the compacted topic `ldp.collections`, and reading them back.

A message's key is "name@version", its value the spec's canonical JSON, and its `ldp-sig` header the admin's signature
of both (`ldpstream.runtime.signing`): readers take only specs signed by a trusted key, so a spec that reaches the topic
any other way is refused. A published version is immutable: `publish_spec` reads the topic to its end first, does
nothing if the same content is already there, and refuses (`SpecError`) a different content under a published key. Two
publishers racing on the same new key are not serialised by Kafka; publishing is an operator's act, done once per
version. `rotate_signing_key` re-signs every published spec with a new key.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ldpstream.contract.collector import sampled_count
from ldpstream.contract.spec import CollectionSpec, SpecError, parse_spec
from ldpstream.contract.topics import DLQ_TOPIC
from ldpstream.runtime.dlq import DLQ_PARTITIONS
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


def log_refused(reasons: Iterable[str], logged: set[str], log: logging.Logger) -> None:
    """Log each reason `read_specs` gave for refusing a message once (`logged`: those logged before), so that a
    reader that re-reads the topic often says it once."""
    for reason in reasons:
        if reason not in logged:
            logged.add(reason)
            log.error("published spec refused: %s", reason)


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
    ensure_topic(bootstrap, spec.topic, spec.partitions)
    if spec.shuffle is not None:
        ensure_topic(bootstrap, spec.raw_topic, spec.partitions)
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
