"""Reading the specs topic on untrusted bytes (the topic stubbed, no Kafka): a message that is not a valid spec under
its key is skipped with a reason, whatever its bytes; every valid one is read."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collection.spec import CollectionSpec, load_spec
from runtime.settings import PROJECT_ROOT
from runtime.specs import read_specs
from tests.fuzzing import untrusted

GOOD = load_spec(PROJECT_ROOT / "examples" / "diagnostics.yaml")
OTHER = load_spec(PROJECT_ROOT / "examples" / "numeric16.yaml")
VALUES = st.sampled_from([GOOD, OTHER]).map(lambda spec: spec.canonical_json().encode())
KEYS = st.one_of(st.sampled_from([GOOD.key, OTHER.key, "diagnostics@2"]).map(str.encode), st.binary(max_size=16),
                 st.none())


@contextmanager
def specs_topic(messages: list[tuple[bytes | None, bytes | None]]) -> Iterator[None]:
    """The specs topic holding these (key, value) messages, in this order."""
    with mock.patch("runtime.specs.ensure_topic"), \
            mock.patch("runtime.specs.read_to_end", lambda bootstrap, topic: iter(messages)):
        yield


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(KEYS, st.one_of(untrusted(VALUES), st.none())), max_size=8))
def test_messages_that_are_not_specs_are_skipped_with_a_reason(bad: list[tuple[bytes | None, bytes | None]]) -> None:
    good = (GOOD.key.encode(), GOOD.canonical_json().encode())
    invalid: list[str] = []
    with specs_topic([good, *bad]):
        specs = read_specs("unused:0", invalid)
    assert specs[GOOD.key] == GOOD
    assert all(isinstance(spec, CollectionSpec) and spec.key == key for key, spec in specs.items())
    read = {key.decode(errors="replace") for key, value in bad if key is not None and value is not None}
    for key in read - set(specs):  # every key that is not a spec has a reason that names it
        assert any(key in reason or repr(key) in reason for reason in invalid), (key, invalid)
