"""Signed specs against the real Kafka: readers (and the workers' and the edge's plan registries) take only specs
signed by a trusted key; a key rotation keeps every published spec readable, before and after the old key retires.

Each test has a specs topic and key files of its own, so that what it forges or rotates touches no other test."""

from __future__ import annotations

import logging
import os
import uuid
from pathlib import Path

import pytest

from ldpstream.aggregator.plans import PlanRegistry
from ldpstream.contract.spec import CollectionSpec, SpecError, parse_spec
from ldpstream.edge.plans import edge_plans
from ldpstream.runtime.kafka import ReportProducer, client_config
from ldpstream.runtime.settings import Settings
from ldpstream.runtime.signing import (
    SIGNATURE_HEADER,
    SigningError,
    ensure_signing_keys,
    key_id,
    load_signing_key,
    load_trusted_keys,
    new_private_key,
    public_line,
    sign,
)
from ldpstream.runtime.specs import produce_signed, publish_spec, read_specs, retire_old_keys, rotate_signing_key
from tests.kafka_raw import librdkafka, produce_raw

pytestmark = pytest.mark.integration


@pytest.fixture
def own(live_services: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, topics: list[str]) -> Settings:
    """The settings of a specs topic and key files of this test's own (the pair made as `ldp up` makes it)."""
    topic = f"ldp.test.specs-{uuid.uuid4().hex[:10]}"
    topics.append(topic)
    monkeypatch.setenv("LDP_SPECS_TOPIC", topic)
    monkeypatch.setenv("LDP_SPEC_SIGNING_KEY", str(tmp_path / "keys" / "spec-signing.key"))
    monkeypatch.setenv("LDP_SPEC_TRUSTED_KEYS", str(tmp_path / "keys" / "spec-signing.pub"))
    cfg = Settings.from_env()
    ensure_signing_keys(cfg.spec_signing_key, cfg.spec_trusted_keys)
    return cfg


def new_spec(topics: list[str]) -> CollectionSpec:
    """A valid spec of a name of its own (its report topic deleted after the test)."""
    spec = parse_spec(f"""
name: test-signed-{uuid.uuid4().hex[:10]}
version: 1
epsilon: 1.0
attributes: [{{name: level, type: numeric, range: [0, 10]}}]
""")
    topics.append(spec.topic)
    return spec


def message(spec: CollectionSpec) -> tuple[bytes, bytes]:
    """(key, value) of a spec's message in the specs topic."""
    return spec.key.encode(), spec.canonical_json().encode()


def test_only_specs_signed_by_a_trusted_key_are_read(own: Settings, topics: list[str],
                                                     caplog: pytest.LogCaptureFixture,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    admin, stranger = load_signing_key(own.spec_signing_key), new_private_key()
    good = new_spec(topics)
    assert publish_spec(good, own.bootstrap).created
    forged = {kind: new_spec(topics) for kind in ("unsigned", "random", "forged", "stranger", "moved", "raw")}
    headers = {
        "unsigned": (),
        "random": ((SIGNATURE_HEADER, os.urandom(72)),),
        "forged": ((SIGNATURE_HEADER, key_id(admin.public_key()) + os.urandom(64)),),  # the admin's id, no signature
        "stranger": ((SIGNATURE_HEADER, sign(stranger, *message(forged["stranger"]))),),
        "moved": ((SIGNATURE_HEADER, sign(admin, *message(good))),),  # the good spec's signature on another key
    }
    late = new_spec(topics)  # forged first, then published for real: the genuine message counts
    producer = ReportProducer(own.bootstrap, linger_ms=0)
    for kind, extra in headers.items():
        producer.produce(own.specs_topic, message(forged[kind])[1], message(forged[kind])[0], headers=extra)
    changed = good.replace(epsilon=9.0)
    producer.produce(own.specs_topic, changed.canonical_json().encode(), good.key.encode())  # after the good one
    producer.produce(own.specs_topic, message(late)[1], message(late)[0])
    producer.flush()
    lib = librdkafka()
    assert lib is not None, "no librdkafka found to produce a header name that is not UTF-8 with"
    produce_raw(lib, client_config(own.bootstrap), own.specs_topic, *message(forged["raw"]), b"\xff\xfe", b"x")
    assert publish_spec(late, own.bootstrap).created

    invalid: list[str] = []
    assert read_specs(own.bootstrap, invalid) == {good.key: good, late.key: late}
    reasons = {"unsigned": "unsigned (no ldp-sig header)", "random": "which is not trusted",
               "forged": "bad signature by key", "moved": "bad signature by key", "raw": "headers cannot be read",
               "stranger": f"signed by key {key_id(stranger.public_key()).hex()}, which is not trusted"}
    for kind, reason in reasons.items():
        assert any(f"[{forged[kind].key}]: " in r and reason in r for r in invalid), (kind, invalid)
    assert len(invalid) == len(reasons)  # nothing about the good spec's later change, nor the superseded forgery

    with caplog.at_level(logging.ERROR):
        registry = PlanRegistry(own.bootstrap)
        assert [p.spec.key for p in registry.plans()] == sorted([good.key, late.key])
        registry.refresh()  # the reasons are logged once, not at every refresh
    assert sum("published spec refused" in r.getMessage() for r in caplog.records) == len(reasons)
    edge = edge_plans(own.bootstrap)
    edge.refresh()
    assert edge.cached(good.name, 1) is not None and edge.cached(late.name, 1) is not None
    assert all(edge.cached(spec.name, 1) is None for spec in forged.values())

    caplog.clear()
    monkeypatch.setenv("LDP_SPEC_TRUSTED_KEYS", str(own.spec_trusted_keys.with_name("missing.pub")))
    with caplog.at_level(logging.ERROR):
        assert PlanRegistry(own.bootstrap).plans() == []  # no trusted keys: every spec refused
    assert any("every published spec is refused" in r.getMessage() for r in caplog.records)


def test_rotation_keeps_every_spec_readable_and_retiring_the_old_key_keeps_the_re_signed_ones(
        own: Settings, topics: list[str]) -> None:
    first, second = new_spec(topics), new_spec(topics)
    for spec in (first, second):
        publish_spec(spec, own.bootstrap)
    reader = PlanRegistry(own.bootstrap)
    assert len(reader.plans()) == 2
    old = load_signing_key(own.spec_signing_key)
    only_old = {key_id(old.public_key()): old.public_key()}

    rotation = rotate_signing_key(own.bootstrap)
    new = load_signing_key(own.spec_signing_key)
    only_new = {key_id(new.public_key()): new.public_key()}
    assert rotation.new_key == key_id(new.public_key()).hex() != key_id(old.public_key()).hex()
    assert rotation.resigned == sorted([first.key, second.key]) and rotation.retired == []
    assert set(load_trusted_keys(own.spec_trusted_keys)) == set(only_old) | set(only_new)
    both = {first.key: first, second.key: second}
    assert read_specs(own.bootstrap) == read_specs(own.bootstrap, trusted=only_old) == both
    assert read_specs(own.bootstrap, trusted=only_new) == both  # the re-signed copies
    assert [p.spec for p in reader.plans()] == sorted(both.values(), key=lambda s: s.name)

    third = new_spec(topics)
    publish_spec(third, own.bootstrap)  # signed with the new key
    invalid: list[str] = []
    assert third.key not in read_specs(own.bootstrap, invalid, trusted=only_old)
    assert any(f"[{third.key}]: signed by key {rotation.new_key}, which is not trusted" in r for r in invalid)
    changed = first.replace(epsilon=5.0)
    produce_signed(own.bootstrap, own.specs_topic, [changed], new)  # validly signed, but the key is published
    assert read_specs(own.bootstrap)[first.key] == first
    with pytest.raises(SpecError, match="already published with different content"):
        publish_spec(changed, own.bootstrap)

    fourth = new_spec(topics)
    produce_signed(own.bootstrap, own.specs_topic, [fourth], old)  # signed by the old key after the rotation
    trusted_before = own.spec_trusted_keys.read_bytes()
    with pytest.raises(SigningError, match=f"not retiring the old keys: 1 published spec.*{fourth.key}"):
        retire_old_keys(own.bootstrap)
    assert own.spec_trusted_keys.read_bytes() == trusted_before

    again = rotate_signing_key(own.bootstrap, retire_old=True)  # re-signs the fourth too, then retires
    newest = load_signing_key(own.spec_signing_key).public_key()
    assert sorted(again.retired) == sorted([key_id(old.public_key()).hex(), rotation.new_key])
    assert own.spec_trusted_keys.read_text() == public_line(newest)
    invalid = []
    assert read_specs(own.bootstrap, invalid) == {**both, third.key: third, fourth.key: fourth}
    assert invalid == []  # the old copies are superseded by the re-signed ones, not reported
    assert publish_spec(first, own.bootstrap).created is False
    assert [p.spec for p in PlanRegistry(own.bootstrap).plans()] == [p.spec for p in reader.plans()]


def test_publishing_needs_a_signing_key_that_readers_trust(own: Settings, topics: list[str]) -> None:
    own.spec_trusted_keys.write_text(public_line(new_private_key().public_key()))
    with pytest.raises(SigningError, match="is not among the trusted keys"):
        publish_spec(new_spec(topics), own.bootstrap)
    own.spec_signing_key.unlink()
    with pytest.raises(SigningError, match="no spec-signing key at .*`ldp up`"):
        publish_spec(new_spec(topics), own.bootstrap)
