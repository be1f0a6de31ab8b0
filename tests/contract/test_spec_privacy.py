"""Specs with a privacy block: per-report and lifetime budgets, memoized mechanisms only, what a device spends."""

from __future__ import annotations

from pathlib import Path

import pytest

from ldpstream.contract.collector import collector_for, privacy_budgets
from ldpstream.contract.spec import SpecError, load_spec, parse_spec
from ldpstream.mechanisms.base import LDPError

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SPEC = """
name: usage
version: 1
{budget}
sampling: {sampling}
attributes:
  - {{name: category, type: categorical, values: [a, b, c, d, e, f], mechanism: {categorical}}}
  - {{name: minutes, type: numeric, range: [0, 240], mechanism: {numeric}}}
"""


def spec_text(budget: str = "privacy: {per_report: 1.0, lifetime: 4.0}", sampling: str = "one",
              categorical: str = "auto", numeric: str = "auto") -> str:
    return SPEC.format(budget=budget, sampling=sampling, categorical=categorical, numeric=numeric)


def test_a_privacy_block_sets_the_per_report_epsilon_and_round_trips() -> None:
    spec = parse_spec(spec_text())
    assert spec.epsilon == 1.0 and spec.privacy is not None
    assert (spec.privacy.per_report, spec.privacy.lifetime, spec.privacy.values) == (1.0, 4.0, 1)
    assert parse_spec(spec.canonical_json()) == spec
    assert parse_spec(spec_text("epsilon: 1.0\nprivacy: {per_report: 1.0, lifetime: 4.0}")) == spec


def test_the_example_validates_and_spends_what_it_states() -> None:
    spec = load_spec(EXAMPLES / "app_lifetime.yaml")
    budgets = privacy_budgets(spec)
    assert (budgets["per_report"], budgets["lifetime"], budgets["values"]) == (1.0, 4.0, 2)
    for spend in budgets["attributes"].values():  # k = 1: each value of the one attribute at lifetime / values
        assert spend["one_report"] == pytest.approx(1.0, rel=1e-9)
        assert spend["per_value"] == pytest.approx(2.0, rel=1e-12)


def test_with_k_attributes_each_memo_gets_its_share() -> None:
    spec = parse_spec(spec_text("privacy: {per_report: 2.0, lifetime: 9.0, values: 3}", sampling="2"))
    for spend in privacy_budgets(spec)["attributes"].values():
        assert spend["one_report"] == pytest.approx(1.0, rel=1e-9)
        assert spend["per_value"] == pytest.approx(9.0 / (2 * 3), rel=1e-12)
    assert {m.name for m in collector_for(spec).mechanisms.values()} <= {"l-grr", "l-osue", "1bitmean"}


def test_without_a_privacy_block_there_is_no_lifetime_bound() -> None:
    budgets = privacy_budgets(parse_spec(spec_text("epsilon: 2.0", categorical="oue", numeric="duchi")))
    assert budgets["lifetime"] is None and budgets["values"] is None
    assert all(s["per_value"] is None for s in budgets["attributes"].values())


@pytest.mark.parametrize(("text", "message"), [
    (spec_text("epsilon: 2.0", categorical="l-grr"), "need a privacy block"),
    (spec_text(categorical="oue"), "fresh noise per report"),
    (spec_text(numeric="pm"), "fresh noise per report"),
    (spec_text(numeric="l-grr"), "unknown numeric mechanism"),
    (spec_text(categorical="1bitmean"), "unknown frequency oracle"),
    (spec_text("epsilon: 2.0\nprivacy: {per_report: 1.0, lifetime: 4.0}"), "differ"),
    (spec_text("privacy: {per_report: 3.0, lifetime: 4.0, values: 2}"), "cannot cost more"),
    (spec_text("privacy: {per_report: 1.0}"), "lifetime"),
    (spec_text("privacy: {per_report: 1.0, lifetime: 4.0, window: 1}"), "Extra inputs"),
    (spec_text(""), "epsilon"),
])
def test_bad_privacy_blocks_say_why(text: str, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        parse_spec(text)


def test_mechanisms_that_cannot_keep_the_budgets_are_refused() -> None:
    spec = parse_spec(spec_text("privacy: {per_report: 1.9, lifetime: 2.0}", categorical="l-oue"))
    with pytest.raises(LDPError, match="L-OUE reaches"):
        privacy_budgets(spec)
    workload = spec_text().replace("mechanism: auto}", "mechanism: factorization, workload: prefix}", 1)
    with pytest.raises(SpecError, match="fresh noise per report"):
        parse_spec(workload)
