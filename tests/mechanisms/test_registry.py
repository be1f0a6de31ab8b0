"""The registry is the one list: `auto`, the vector mechanisms, the CLI and the test suite's checks enumerate it."""

from __future__ import annotations

import json
import typing

import pytest
import typer
from typer.testing import CliRunner

from ldpstream.cli import mechanisms
from ldpstream.mechanisms import registry
from ldpstream.mechanisms.audit import audit_plan
from ldpstream.mechanisms.base import LDPError
from ldpstream.mechanisms.frequency.auto import choose_frequency, frequency_candidates
from ldpstream.mechanisms.frequency.grr import GRR
from ldpstream.mechanisms.multidim import SplitBudgetVectorMechanism, make_vector_mechanism, vector_names
from ldpstream.mechanisms.numeric.auto import (
    choose_numeric,
    one_dimensional_candidates,
    vector_candidates,
    worst_case_variances,
)
from ldpstream.mechanisms.numeric.base import VectorScheme
from ldpstream.mechanisms.numeric.laplace import Laplace
from tests.mechanisms import (
    test_audit,
    test_distribution,
    test_frequency,
    test_keyvalue,
    test_longitudinal,
    test_mechanism_doctests,
    test_multidim,
    test_numeric,
)
from tests.mechanisms.checks import run_all


class Throwaway(Laplace):
    """Laplace's mechanism under another name: all that registering a new 1-D mechanism takes."""

    name = "throwaway"
    auto_rank = 1000


class ThrowawayOracle(GRR):
    """GRR under another name, ranked after every registered oracle."""

    name = "throwaway_oracle"
    auto_rank = 1000


def test_the_suite_checks_every_registered_mechanism() -> None:
    """Contract checks (1-D, vector, oracles), the audit plan, doctests and `auto` cover exactly the registry."""
    numeric, frequency = set(registry.NUMERIC), set(registry.FREQUENCY)
    assert set(test_numeric.NAMES) == numeric
    assert set(test_multidim.NAMES) == set(vector_names()) == numeric
    assert set(test_frequency.NAMES) == frequency
    assert set(test_audit.NUMERIC_NAMES) == {name for name, _ in test_audit.VECTOR_CASES} == numeric
    assert set(test_audit.FREQUENCY_NAMES) == frequency
    longitudinal = set(registry.LONGITUDINAL)
    assert set(test_longitudinal.NAMES) == longitudinal and not longitudinal & (numeric | frequency)
    modules = {registry.mechanism_class(name).__module__ for name in numeric | frequency | longitudinal}
    assert modules <= set(test_mechanism_doctests.MODULES)
    keyvalue = set(registry.KEYVALUE)
    assert set(test_keyvalue.NAMES) == keyvalue and not keyvalue & (numeric | frequency | longitudinal)
    assert {registry.keyvalue_class(name).__module__ for name in keyvalue} <= set(test_mechanism_doctests.MODULES)
    distribution = set(registry.DISTRIBUTION)
    assert set(test_distribution.NAMES) == set(test_distribution.CASES) == distribution
    assert not distribution & (numeric | frequency | longitudinal | keyvalue)
    modules = {registry.distribution_class(name).__module__ for name in distribution}
    assert modules <= set(test_mechanism_doctests.MODULES)
    assert set(vector_candidates()) == numeric
    assert set(frequency_candidates()) == frequency
    left_out = {name for name in numeric if not registry.numeric_class(name).auto_one_dimensional}
    assert set(one_dimensional_candidates()) == numeric - left_out


def test_every_registered_class_declares_what_auto_and_multidim_need() -> None:
    for table in (registry.NUMERIC, registry.FREQUENCY, registry.LONGITUDINAL):
        ranks = [registry.mechanism_class(name).auto_rank for name in table]
        assert all(isinstance(rank, int) for rank in ranks)
        assert len(set(ranks)) == len(ranks), "ties in auto_rank would leave a choice to the dict order"
    for name in registry.NUMERIC:
        cls = registry.numeric_class(name)
        assert cls.name == name and cls.vector_scheme in typing.get_args(VectorScheme)
    for name in registry.FREQUENCY:
        assert registry.frequency_class(name).name == name
    for name in registry.LONGITUDINAL:
        cls = registry.longitudinal_class(name)
        assert cls.name == name and cls.kind in ("frequency", "numeric")  # type: ignore[attr-defined]


def test_todays_preference_orders_are_kept() -> None:
    """The tie-break orders `auto` used before the ranks moved onto the classes (tests pin choices made with them)."""
    orders = {
        one_dimensional_candidates: ("hm", "pm", "duchi", "staircase", "scdf", "laplace"),
        vector_candidates: ("hm", "pm", "harmony", "duchi", "staircase", "scdf", "laplace"),
        frequency_candidates: ("grr", "hadamard", "oue", "sue", "olh", "blh"),
    }
    for candidates, order in orders.items():
        assert tuple(name for name in candidates() if name in order) == order


@pytest.mark.parametrize("eps", [0.1, 0.61, 1.0, 4.0, 20.0])
def test_a_mechanism_left_out_in_one_dimension_is_a_candidate_there(eps: float) -> None:
    """Harmony is not a 1-D candidate: a registered candidate has exactly its variance, so no choice changes."""
    for name in set(registry.NUMERIC) - set(one_dimensional_candidates()):
        coefficients = registry.numeric_class(name)(eps).variance_coefficients()
        assert any(
            registry.numeric_class(other)(eps).variance_coefficients() == coefficients
            for other in one_dimensional_candidates()
        ), name


def test_kind_specific_lookups_refuse_the_other_kind() -> None:
    with pytest.raises(LDPError, match="unknown numeric mechanism"):
        registry.numeric_class("oue")
    with pytest.raises(LDPError, match="unknown frequency oracle"):
        registry.frequency_class("pm")


def test_one_registry_line_puts_a_new_mechanism_everywhere(monkeypatch: pytest.MonkeyPatch) -> None:
    """Register two throwaway mechanisms: `auto`, the vector forms, the CLI, the auditor and the contract checks
    take them with no other change, and the new ranks keep every earlier choice."""
    before = {eps: (choose_numeric(eps), choose_numeric(eps, 4), choose_frequency(eps, 8)) for eps in (0.5, 2.0, 8.0)}
    monkeypatch.setitem(registry.NUMERIC, Throwaway.name, f"{__name__}:Throwaway")
    monkeypatch.setitem(registry.FREQUENCY, ThrowawayOracle.name, f"{__name__}:ThrowawayOracle")

    assert one_dimensional_candidates()[-1] == vector_candidates()[-1] == Throwaway.name
    assert frequency_candidates()[-1] == ThrowawayOracle.name
    assert worst_case_variances(1.0)[Throwaway.name] == worst_case_variances(1.0)["laplace"]
    after = {eps: (choose_numeric(eps), choose_numeric(eps, 4), choose_frequency(eps, 8)) for eps in before}
    assert after == before  # exact ties with Laplace and GRR go to the lower rank

    vector = make_vector_mechanism(Throwaway.name, 1.0, 3)
    assert isinstance(vector, SplitBudgetVectorMechanism) and vector.name == Throwaway.name
    assert audit_plan(vector)[0]
    assert audit_plan(registry.make(ThrowawayOracle.name, 1.0, 4))[0] == [(0, 1)]

    app = typer.Typer()
    mechanisms.register(app)
    listed = json.loads(CliRunner().invoke(app, ["mechanisms", "list", "--json"]).output)["mechanisms"]
    assert {Throwaway.name, ThrowawayOracle.name} <= {row["mechanism"] for row in listed}

    run_all(test_numeric.numeric_case(Throwaway.name), 1.0)
    run_all(test_frequency.frequency_case(ThrowawayOracle.name), 1.0)
