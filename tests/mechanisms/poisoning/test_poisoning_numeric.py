"""Poisoning detectors of numeric means: honest windows of any shape keep their reports, output poisoning at the
largest output is set aside, an attacker who spreads under the density caps is held to the mean's bound.
Tolerances as in test_poisoning_frequency; every simulation is seeded."""

from __future__ import annotations

import math
import zlib

import numpy as np
import pytest

from ldpstream.mechanisms import registry
from ldpstream.mechanisms.distribution import SquareWave
from ldpstream.mechanisms.mixed import attribute_block
from ldpstream.mechanisms.numeric.base import NumericMechanism
from ldpstream.mechanisms.poisoning.attribute import defend
from ldpstream.mechanisms.poisoning.base import SUSPECTED, TOO_FEW, Policy
from ldpstream.mechanisms.poisoning.numeric import mean_bound, output_density
from ldpstream.simulator.poisoning import fake_numeric_reports

POLICY = Policy()
N = 50_000


def values(shape: str, n: int, rng: np.random.Generator) -> np.ndarray:
    if shape == "all_at_one":
        return np.ones(n)
    if shape == "all_at_minus_one":
        return -np.ones(n)
    return rng.uniform(-1, 1, n)


def mech_of(name: str, eps: float) -> NumericMechanism:
    mech = registry.make(name, eps)
    assert isinstance(mech, NumericMechanism)
    return mech


@pytest.mark.parametrize("shape", ["all_at_one", "all_at_minus_one", "uniform"])
@pytest.mark.parametrize("name,eps", [("pm", 1.0), ("pm", 4.0), ("laplace", 1.0), ("hm", 2.0), ("duchi", 1.0)])
def test_honest_windows_of_any_shape_keep_their_reports(name: str, eps: float, shape: str) -> None:
    rng = np.random.default_rng(zlib.crc32(f"{name} {eps} {shape}".encode()))
    mech = mech_of(name, eps)
    reference = attribute_block(4 * N, mech.accumulate(mech.perturb(values(shape, 4 * N, rng), rng)))
    reports = mech.perturb(values(shape, N, rng), rng)
    defence = defend(mech, attribute_block(N, mech.accumulate(reports)), reference, reports=reports, policy=POLICY)
    assert defence.status != SUSPECTED, defence.findings
    assert defence.set_aside == 0


@pytest.mark.parametrize("eps", [1.0, 4.0])
def test_the_largest_output_is_set_aside(eps: float) -> None:
    rng = np.random.default_rng(1)
    mech = mech_of("pm", eps)
    m = N // 20
    genuine = mech.perturb(rng.uniform(-0.5, 0.5, N - m), rng)["value"]
    reports = np.concatenate([genuine, fake_numeric_reports(mech, "maximal_gain", m, rng)["value"]])
    finding = output_density(mech, reports, POLICY)
    assert finding.status == SUSPECTED and finding.flagged is not None
    assert finding.flagged[N - m:].mean() >= 0.9  # the fakes (the excess over the top bin's cap)
    assert finding.flagged[: N - m].sum() <= N * POLICY.alpha_report + 4 * math.sqrt(N * POLICY.alpha_report)


def test_an_attacker_spread_under_the_caps_is_found_by_the_mean_bound_and_brought_back() -> None:
    rng = np.random.default_rng(2)
    mech = mech_of("pm", 1.0)
    m = N // 20
    reference = mech.estimate(mech.accumulate(mech.perturb(rng.uniform(-0.5, 0.5, 4 * N), rng)))
    genuine = mech.perturb(rng.uniform(-0.5, 0.5, N - m), rng)["value"]
    spread = fake_numeric_reports(mech, "adaptive", m, rng, adaptive_low=1.0)["value"]
    reports = np.concatenate([genuine, spread])
    assert output_density(mech, reports, POLICY).status != SUSPECTED  # under every cap: not per report
    stats = mech.accumulate({"value": reports})
    finding = mean_bound(mech, stats, reference, policy=POLICY)
    assert finding.status == SUSPECTED and finding.removed is not None
    after = float(mech.estimate(stats - finding.removed).value)
    assert after - float(reference.value) <= finding.bound + 1e-6  # what an attacker keeps: the stated bound
    # found, it keeps nothing: the mean goes back to the reference's, up to one report at the largest output
    assert abs(after - float(reference.value)) <= (mech.output_range[1] + 1) / (N - finding.set_aside)


def test_too_few_reports_are_said_so() -> None:
    mech = mech_of("pm", 1.0)
    values_ = np.full(POLICY.min_reports - 1, mech.c)
    assert output_density(mech, values_, POLICY).status == TOO_FEW
    assert mean_bound(mech, mech.accumulate({"value": values_}), None, policy=POLICY).status == TOO_FEW


def test_without_a_reference_only_an_impossible_mean_is_suspected() -> None:
    rng = np.random.default_rng(3)
    mech = mech_of("laplace", 1.0)
    reports = np.concatenate([mech.perturb(np.ones(N), rng)["value"], np.full(N // 10, 50.0)])
    finding = mean_bound(mech, mech.accumulate({"value": reports}), None, policy=POLICY)
    assert finding.status == SUSPECTED and math.isinf(finding.bound)
    assert finding.set_aside == 0  # unbounded outputs: no count explains the shift, only the sum is corrected


def test_square_wave_blocks_carry_a_histogram_and_only_their_mean_is_defended() -> None:
    """Square Wave's statistics are (count, sum, sum of squares, histogram of outputs): the detectors read the leading
    three, and a defence removes from them only (the distribution is reported undefended)."""
    rng = np.random.default_rng(4)
    mech = SquareWave(1.0)
    reference = attribute_block(4 * N, mech.accumulate(mech.perturb(rng.uniform(-0.5, 0.5, 4 * N), rng)))
    honest = mech.perturb(rng.uniform(-0.5, 0.5, N), rng)
    clean_defence = defend(mech, attribute_block(N, mech.accumulate(honest)), reference, reports=honest, policy=POLICY)
    assert clean_defence.status != SUSPECTED and clean_defence.set_aside == 0
    m = N // 20
    genuine = mech.perturb(rng.uniform(-0.5, 0.5, N - m), rng)
    fakes = fake_numeric_reports(mech, "maximal_gain", m, rng)
    reports = {"value": np.concatenate([genuine["value"], fakes["value"]])}
    block = attribute_block(N, mech.accumulate(reports))
    defence = defend(mech, block, reference, policy=POLICY)  # the tests on sums alone
    assert defence.status == SUSPECTED
    removed = defence.removed
    assert removed.shape == block.shape and not removed[1 + 3:].any()
    before, after = (float(mech.estimate(b[1:]).value) for b in (block, block - removed))
    truth = float(mech.estimate(reference[1:]).value)
    assert abs(after - truth) < abs(before - truth)
