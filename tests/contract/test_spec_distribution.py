"""A numeric attribute asks for its distribution by naming a distribution mechanism: the spec checks its parameters,
the collector builds it at eps / k, and specs that do not name one keep their canonical JSON."""

from __future__ import annotations

import json

import pytest

from ldpstream.contract.collector import collector_for
from ldpstream.contract.spec import SpecError, load_spec, parse_spec
from ldpstream.mechanisms.distribution import HierarchicalHistogram, SquareWave
from ldpstream.runtime.settings import PROJECT_ROOT

SPEC = """
name: latency
version: 1
epsilon: 2.0
sampling: split
attributes:
  - {{name: request_ms, type: numeric, range: [0, 2000], mechanism: sw{parameters}}}
  - {{name: network, type: categorical, values: [wifi, cell]}}
"""


def test_sw_is_built_with_its_bins_at_eps_over_k() -> None:
    spec = parse_spec(SPEC.format(parameters=", parameters: {bins: 32}"))
    mech = collector_for(spec).mechanisms["request_ms"]
    assert isinstance(mech, SquareWave) and mech.bins == 32 and mech.epsilon == pytest.approx(1.0)
    default = collector_for(parse_spec(SPEC.format(parameters=""))).mechanisms["request_ms"]
    assert isinstance(default, SquareWave) and default.bins == 64


def test_hh_is_built_with_its_tree() -> None:
    hh = SPEC.replace("mechanism: sw", "mechanism: hh")
    spec = parse_spec(hh.format(parameters=", parameters: {bins: 27, fanout: 3}"))
    mech = collector_for(spec).mechanisms["request_ms"]
    assert isinstance(mech, HierarchicalHistogram) and (mech.bins, mech.fanout, mech.height) == (27, 3, 3)
    with pytest.raises(SpecError, match="bins must be a power of the fanout 4"):
        parse_spec(hh.format(parameters=", parameters: {bins: 32}"))


@pytest.mark.parametrize(("parameters", "message"), [
    (", parameters: {bins: 3}", "bins must be an integer in"),
    (", parameters: {bins: 5000}", "bins must be an integer in"),
    (", parameters: {hashes: 2}", "no parameter 'hashes'"),
])
def test_bad_parameters_are_refused(parameters: str, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        parse_spec(SPEC.format(parameters=parameters))


def test_a_distribution_mechanism_cannot_keep_a_lifetime_budget() -> None:
    text = SPEC.format(parameters="") + "privacy: {per_report: 1.0, lifetime: 4.0}\n"
    with pytest.raises(SpecError, match="fresh noise per report"):
        parse_spec(text.replace("epsilon: 2.0\n", ""))


def test_a_categorical_attribute_cannot_name_a_distribution_mechanism() -> None:
    with pytest.raises(SpecError, match="unknown frequency oracle 'sw'"):
        parse_spec(SPEC.format(parameters="").replace("values: [wifi, cell]}", "values: [wifi, cell], mechanism: sw}"))


def test_specs_without_one_keep_their_canonical_json() -> None:
    """No field was added to a numeric attribute: an attribute's keys are those it always had (description and unit,
    the analyst's, because this spec gives them)."""
    diagnostics = json.loads(load_spec(PROJECT_ROOT / "examples" / "diagnostics.yaml").canonical_json())
    assert set(diagnostics["attributes"][0]) == {"distribution", "mechanism", "name", "parameters", "range", "type",
                                                 "description", "unit"}
    latency = json.loads(load_spec(PROJECT_ROOT / "examples" / "request_latency.yaml").canonical_json())
    assert latency["attributes"][0]["mechanism"] == "sw" and latency["attributes"][0]["parameters"] == {"bins": 64}
