"""The app's privacy policy: its fields and defaults, how it is loaded, and what the ledger holds a report to."""

from __future__ import annotations

from pathlib import Path

import pytest

import ldpstream.device.policy as policy_module
from ldpstream.contract.spec import parse_spec
from ldpstream.device.ledger import BudgetExceeded, PrivacyLedger
from ldpstream.device.policy import EVERY_MECHANISM, PolicyError, PrivacyPolicy, commitment, judge
from ldpstream.device.sdk import Device, SpecRefused

HOUR_MS, DAY_MS = 3_600_000, 86_400_000
T0 = 1_795_788_000_000 // DAY_MS * DAY_MS  # the start of a UTC day
SPEC = parse_spec("""
name: diag
version: 1
epsilon: 4.0
windows: [1h]
attributes: [{name: battery, type: numeric, range: [0, 100], mechanism: pm}]
""")


def test_the_defaults_are_on_and_documented() -> None:
    policy = PrivacyPolicy()
    assert (policy.max_epsilon_per_report, policy.max_epsilon_per_day, policy.max_lifetime_per_collection,
            policy.max_lifetime_per_device) == (8.0, 16.0, 8.0, 32.0)
    assert policy.allowed_mechanisms == EVERY_MECHANISM
    assert {"grr", "oue", "pm", "pem", "pckv-ue", "rappor", "factorization"} <= EVERY_MECHANISM
    assert policy_module.__doc__ is not None
    assert "Tang et al." in policy_module.__doc__ and "Erlingsson" in policy_module.__doc__  # the sources


def test_a_policy_loads_from_yaml_or_json_and_refuses_what_is_not_one(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text("max_epsilon_per_report: 2\nallowed_mechanisms: [grr, oue]\n")
    policy = PrivacyPolicy.load(path)
    assert policy.max_epsilon_per_report == 2 and policy.allowed_mechanisms == {"grr", "oue"}
    assert policy.max_epsilon_per_day == 16.0  # the rest are the defaults
    for text, problem in [("max_epsilon_per_report: true", "finite number"), ("max_epsilon_per_day: -1", "> 0"),
                          ("max_epsilon_per_report: .inf", "finite"), ("unknown_field: 1", "unknown policy fields"),
                          ("allowed_mechanisms: [rot13]", "does not know"), ("allowed_mechanisms: grr", "a list"),
                          ("max_lifetime_per_collection: 64", "cannot exceed"), ("[1, 2]", "a mapping")]:
        path.write_text(text)
        with pytest.raises(PolicyError, match=problem):
            PrivacyPolicy.load(path)
    with pytest.raises(PolicyError, match="cannot read"):
        PrivacyPolicy.load(tmp_path / "missing.yaml")
    assert PrivacyPolicy.from_dict(PrivacyPolicy().to_dict()) == PrivacyPolicy()


def test_a_spec_without_a_lifetime_commits_the_per_collection_cap_and_stops_there() -> None:
    policy = PrivacyPolicy()
    ledger = PrivacyLedger()
    verdict = judge(SPEC, policy, ledger.commitments)
    assert verdict.accepted and verdict.commitment == commitment(SPEC, policy) == 8.0
    ledger.commit(SPEC.name, verdict.commitment)
    ledger.charge(SPEC, T0, policy=policy)
    ledger.charge(SPEC, T0 + HOUR_MS, policy=policy)  # 8 = the cap: every later report is refused
    with pytest.raises(BudgetExceeded, match="committed to it"):
        ledger.check(SPEC, T0 + 5 * DAY_MS, policy=policy)


def test_the_day_is_capped_over_every_collection_of_the_device() -> None:
    policy = PrivacyPolicy(max_lifetime_per_collection=16.0)
    ledger = PrivacyLedger()
    other = SPEC.replace(name="other")
    for spec in (SPEC, other):
        ledger.commit(spec.name, 16.0)
    for hour in range(2):
        ledger.charge(SPEC, T0 + hour * HOUR_MS, policy=policy)
        ledger.charge(other, T0 + hour * HOUR_MS, policy=policy)
    assert ledger.spent_on_day(T0) == 16.0
    with pytest.raises(BudgetExceeded, match="max_epsilon_per_day"):
        ledger.check(SPEC, T0 + 3 * HOUR_MS, policy=policy)
    ledger.check(SPEC, T0 + DAY_MS, policy=policy)  # the next day
    with pytest.raises(BudgetExceeded, match="has not accepted"):
        ledger.check(SPEC.replace(name="never-accepted"), T0 + DAY_MS, policy=policy)


def test_a_device_made_directly_is_judged_too_and_none_means_no_policy() -> None:
    greedy = SPEC.replace(epsilon=50.0)
    with pytest.raises(SpecRefused) as refused:
        Device(greedy, "phone")
    assert refused.value.code == "policy_epsilon_per_report"
    Device(greedy, "phone", policy=None)  # the app said: no policy


def test_the_default_policy_allows_the_distribution_mechanisms() -> None:
    """A spec naming sw or hh (examples/request_latency.yaml) is accepted by default: they are mechanisms this SDK
    implements, like every other; the policy used to leave them out of EVERY_MECHANISM and refused such a spec."""
    assert {"sw", "hh"} <= EVERY_MECHANISM
    spec = parse_spec((Path(__file__).resolve().parents[2] / "examples" / "request_latency.yaml").read_text())
    assert judge(spec, PrivacyPolicy(), {}).accepted
