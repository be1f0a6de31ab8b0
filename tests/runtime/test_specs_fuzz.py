"""Reading the specs topic on untrusted bytes (the topic stubbed, no Kafka): a message that is not a validly signed,
valid spec under its key is skipped with a reason, whatever its bytes and headers; every valid one is read."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ldpstream.contract.spec import CollectionSpec, load_spec
from ldpstream.runtime.kafka import Headers, Record
from ldpstream.runtime.settings import PROJECT_ROOT
from ldpstream.runtime.signing import SIGNATURE_HEADER, key_id, new_private_key, sign
from ldpstream.runtime.specs import read_specs
from tests.fuzzing import untrusted

GOOD = load_spec(PROJECT_ROOT / "examples" / "diagnostics.yaml")
OTHER = load_spec(PROJECT_ROOT / "examples" / "numeric16.yaml")
VALUES = st.sampled_from([GOOD, OTHER]).map(lambda spec: spec.canonical_json().encode())
KEYS = st.one_of(st.sampled_from([GOOD.key, OTHER.key, "diagnostics@2"]).map(str.encode), st.binary(max_size=16),
                 st.none())
ADMIN, STRANGER = new_private_key(), new_private_key()
TRUSTED = {key_id(ADMIN.public_key()): ADMIN.public_key()}


def signed(key: bytes | None, value: bytes | None) -> Record:
    """The message as the admin publishes it: signed in its `ldp-sig` header."""
    return Record(key, value, ((SIGNATURE_HEADER, sign(ADMIN, key or b"", value or b"")),))


@contextmanager
def specs_topic(messages: list[Record]) -> Iterator[None]:
    """The specs topic holding these messages, in this order."""
    with mock.patch("ldpstream.runtime.specs.ensure_topic"), \
            mock.patch("ldpstream.runtime.specs.read_to_end", lambda bootstrap, topic: iter(messages)):
        yield


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(KEYS, st.one_of(untrusted(VALUES), st.none())), max_size=8))
def test_signed_messages_that_are_not_specs_are_skipped_with_a_reason(
        bad: list[tuple[bytes | None, bytes | None]]) -> None:
    invalid: list[str] = []
    with specs_topic([signed(GOOD.key.encode(), GOOD.canonical_json().encode()), *(signed(k, v) for k, v in bad)]):
        specs = read_specs("unused:0", invalid, trusted=TRUSTED)
    assert specs[GOOD.key] == GOOD
    assert all(isinstance(spec, CollectionSpec) and spec.key == key for key, spec in specs.items())
    read = {key.decode(errors="replace") for key, value in bad if key is not None and value is not None}
    for key in read - set(specs):  # every key that is not a spec has a reason that names it
        assert any(key in reason or repr(key) in reason for reason in invalid), (key, invalid)


OTHER_KEY, OTHER_VALUE = OTHER.key.encode(), OTHER.canonical_json().encode()
OTHER_SIGNATURE = sign(ADMIN, OTHER_KEY, OTHER_VALUE)
SIGNATURES = st.one_of(
    st.none(), st.just(OTHER_SIGNATURE), untrusted(st.just(OTHER_SIGNATURE)),
    st.just(sign(ADMIN, GOOD.key.encode(), GOOD.canonical_json().encode())),  # moved from another message
    st.just(sign(STRANGER, OTHER_KEY, OTHER_VALUE)),  # by a key nobody trusts
    st.binary(max_size=64).map(lambda b: OTHER_SIGNATURE[:8] + b.ljust(64, b"\0")))  # a trusted id, forged bytes
HEADERS: st.SearchStrategy[Headers | None] = st.one_of(
    st.none(), st.lists(st.tuples(st.one_of(st.just(SIGNATURE_HEADER), st.text(max_size=8)), SIGNATURES),
                        max_size=3).map(tuple))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(HEADERS)
def test_a_spec_is_read_only_under_its_one_valid_signature(headers: Headers | None) -> None:
    invalid: list[str] = []
    good = signed(GOOD.key.encode(), GOOD.canonical_json().encode())
    with specs_topic([good, Record(OTHER_KEY, OTHER_VALUE, headers)]):
        specs = read_specs("unused:0", invalid, trusted=TRUSTED)
    assert specs[GOOD.key] == GOOD
    if [v for n, v in headers or () if n == SIGNATURE_HEADER] == [OTHER_SIGNATURE]:
        assert specs[OTHER.key] == OTHER and not invalid
    else:
        assert OTHER.key not in specs and len(invalid) == 1 and f"[{OTHER.key}]: " in invalid[0]


def test_a_refused_message_before_a_valid_one_of_its_key_is_superseded_not_reported() -> None:
    value = OTHER_VALUE
    stale = Record(OTHER_KEY, value, ((SIGNATURE_HEADER, sign(STRANGER, OTHER_KEY, value)),))  # e.g. a retired key
    changed = signed(OTHER_KEY, GOOD.replace(name=OTHER.name, version=OTHER.version)
                     .canonical_json().encode())  # validly signed, but not the first valid message of its key
    invalid: list[str] = []
    with specs_topic([stale, signed(OTHER_KEY, value), changed, Record(b"x@1", value, ())]):
        specs = read_specs("unused:0", invalid, trusted=TRUSTED)
    assert specs == {OTHER.key: OTHER}
    assert len(invalid) == 1 and "x@1" in invalid[0] and "unsigned" in invalid[0]
