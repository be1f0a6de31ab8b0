"""A memoized attribute's mechanism parameters in a spec: checked at parse, carried to the mechanism, shown."""

from __future__ import annotations

import pytest

from ldpstream.contract.collector import collector_for, privacy_budgets
from ldpstream.contract.spec import SpecError, parse_spec
from ldpstream.mechanisms.longitudinal import RAPPOR, DBitFlip, OneBitMean

SPEC = """
name: params
version: 1
privacy: {{per_report: 1.0, lifetime: 4.0}}
sampling: split
attributes:
  - {{name: app, type: categorical, values: [a, b, c, d, e, f, g, h], mechanism: {app}}}
  - {{name: minutes, type: numeric, range: [0, 240], mechanism: {minutes}}}
"""


def spec_text(app: str = "rappor", minutes: str = "1bitmean") -> str:
    return SPEC.format(app=app, minutes=minutes)


def test_parameters_reach_the_mechanisms_and_the_privacy_block() -> None:
    spec = parse_spec(spec_text("rappor, parameters: {hashes: 1, bloom_bits: 8, cohorts: 4}",
                                "1bitmean, parameters: {buckets: 3}"))
    with pytest.raises(SpecError, match="buckets must be an integer"):
        parse_spec(spec_text(minutes="1bitmean, parameters: {buckets: 10000000000000000000000}"))
    mechanisms = collector_for(spec).mechanisms
    rappor, one_bit = mechanisms["app"], mechanisms["minutes"]
    assert isinstance(rappor, RAPPOR) and (rappor.hashes, rappor.bloom_bits, rappor.cohorts) == (1, 8, 4)
    assert isinstance(one_bit, OneBitMean) and one_bit.buckets == 3
    shown = privacy_budgets(spec)["attributes"]
    assert {k: shown["app"]["parameters"][k] for k in ("hashes", "bloom_bits", "cohorts")} == {
        "hashes": 1, "bloom_bits": 8, "cohorts": 4}
    assert shown["minutes"]["parameters"]["buckets"] == 3
    assert shown["app"]["one_report"] == pytest.approx(0.5, rel=1e-9)  # the budgets still fix the probabilities


def test_dbitflip_takes_its_d() -> None:
    mech = collector_for(parse_spec(spec_text("dbitflip, parameters: {sampled: 3}"))).mechanisms["app"]
    assert isinstance(mech, DBitFlip) and mech.sampled == 3


@pytest.mark.parametrize(
    ("app", "message"),
    [
        ("rappor, parameters: {hashes: 2, cohortz: 4}", "no parameter 'cohortz'"),
        ("rappor, parameters: {hashes: 3, bloom_bits: 8}", "multiple of hashes"),
        ("rappor, parameters: {bloom_bits: 4, cohorts: 1}", "cannot tell the 8 candidate values apart"),
        ("rappor, parameters: {cohorts: 2000}", "cohorts must be an integer in"),
        ("rappor, parameters: {hashes: true}", "a boolean where something else belongs"),
        ("rappor, parameters: {hashes: 1.5}", r"hashes must be an integer in \[1, 64\]"),
        ("rappor, parameters: {hashes: 0}", r"hashes must be an integer in \[1, 64\]"),
        ("rappor, parameters: {hashes: .nan}", "finite number"),
        ("rappor, parameters: {f: 0.5}", "no parameter 'f'"),  # the budgets fix f
        ("dbitflip, parameters: {sampled: 9}", r"in \[1, 8\]"),
        ("dbitflip, parameters: {sampled: 100000000000000000000000}", r"in \[1, 8\]"),
        ("l-grr, parameters: {hashes: 2}", "takes none"),
        ("auto, parameters: {hashes: 2}", "named memoized mechanism"),
    ],
)
def test_bad_parameters_are_a_spec_error_that_says_why(app: str, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        parse_spec(spec_text(app))


def test_without_a_privacy_block_parameters_are_refused() -> None:
    text = spec_text("oue, parameters: {hashes: 2}", "duchi").replace("privacy: {per_report: 1.0, lifetime: 4.0}",
                                                                      "epsilon: 1.0")
    with pytest.raises(SpecError, match="named memoized mechanism"):
        parse_spec(text)
