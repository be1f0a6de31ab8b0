"""`type: keyvalue` in a collection spec: validation, key codes (a list or hashed buckets), the collector it gets."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from ldpstream.cli.spec import summary
from ldpstream.contract.collector import collector_for, resolved_mechanisms
from ldpstream.contract.spec import KeyValueAttribute, SpecError, load_spec, parse_spec
from ldpstream.runtime.settings import PROJECT_ROOT

SPEC = """
name: kv
version: 1
epsilon: 2
sampling: one
attributes:
  - {{name: usage, type: keyvalue, {domain}, range: [0, 60], mechanism: {mechanism}, padding: 2}}
  - {{name: crashes, type: numeric, range: [0, 20]}}
"""


def spec_text(domain: str = "keys: [a, b, c]", mechanism: str = "auto") -> str:
    return SPEC.format(domain=domain, mechanism=mechanism)


def test_a_keyvalue_attribute_round_trips_and_builds_its_mechanism() -> None:
    spec = parse_spec(spec_text(mechanism="pckv-ue"))
    assert parse_spec(spec.canonical_json()) == spec
    attr = spec.attributes[0]
    assert isinstance(attr, KeyValueAttribute) and attr.domain_size == 3 and attr.labels == ["a", "b", "c"]
    mech = collector_for(spec).mechanisms["usage"]
    assert (mech.name, mech.domain_size, mech.padding, mech.epsilon) == ("pckv-ue", 3, 2, 2.0)  # type: ignore[attr-defined]


def test_auto_is_a_pckv_variant() -> None:
    assert resolved_mechanisms(parse_spec(spec_text()))["usage"] in ("pckv-ue", "pckv-grr")
    assert resolved_mechanisms(parse_spec(spec_text("buckets: 256")))["usage"] == "pckv-ue"


@pytest.mark.parametrize(("domain", "mechanism", "problem"), [
    ("keys: [a, a]", "auto", "distinct"),
    ("keys: []", "auto", "keys"),
    ("keys: [a], buckets: 4", "auto", "either a list of keys or a number of buckets"),
    ("range: [1, 2]", "auto", "either a list of keys or a number of buckets"),
    ("buckets: 0", "auto", "buckets"),
    ("keys: [a, b]", "grr", "unknown key-value mechanism"),
    ("keys: [a, b]", "pm", "unknown key-value mechanism"),
])
def test_bad_keyvalue_attributes_are_refused_with_the_reason(domain: str, mechanism: str, problem: str) -> None:
    with pytest.raises(SpecError, match=problem):
        parse_spec(spec_text(domain, mechanism))


def test_a_lifetime_budget_refuses_keyvalue_attributes() -> None:
    text = spec_text().replace("epsilon: 2", "privacy: {per_report: 1.0, lifetime: 4.0}")
    with pytest.raises(SpecError, match="cannot keep a lifetime budget"):
        parse_spec(text)


def test_key_codes() -> None:
    listed = parse_spec(spec_text()).attributes[0]
    assert isinstance(listed, KeyValueAttribute)
    assert [listed.code_of(k) for k in ("a", "b", "c")] == [0, 1, 2]
    with pytest.raises(SpecError, match="unknown key"):
        listed.code_of("z")
    hashed = parse_spec(spec_text("buckets: 16")).attributes[0]
    assert isinstance(hashed, KeyValueAttribute)
    codes = [hashed.code_of(f"com.app{i}") for i in range(200)]
    assert all(0 <= c < 16 for c in codes) and len(set(codes)) == 16  # 200 keys fill 16 buckets
    assert hashed.code_of("com.app7") == codes[7]  # the same on every device and aggregator


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40))
def test_any_key_of_an_open_domain_has_a_bucket(key: str) -> None:
    hashed = parse_spec(spec_text("buckets: 7")).attributes[0]
    assert 0 <= hashed.code_of(key) < 7  # type: ignore[union-attr]


def test_the_example_validates() -> None:
    spec = load_spec(PROJECT_ROOT / "examples" / "app_usage.yaml")
    assert [a.type for a in spec.attributes] == ["keyvalue", "numeric"]
    assert resolved_mechanisms(spec)["screen_minutes"].startswith("pckv-")


def test_ldp_spec_validate_describes_a_keyvalue_attribute() -> None:
    line, table = summary(load_spec(PROJECT_ROOT / "examples" / "app_usage.yaml"))
    console = Console(width=300, record=True)
    console.print(table)
    text = console.export_text()
    assert "keys chat, video" in text and "padding l = 4" in text
    assert "k = 1 of 2" in line
