"""One-dimensional numeric mechanisms: contract checks, closed forms, epsilon-LDP (exact / density + KS)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from ldpstream.mechanisms import registry
from ldpstream.mechanisms.base import LDPError
from ldpstream.mechanisms.multidim import make_vector_mechanism
from ldpstream.mechanisms.numeric import SCDF, Duchi, Harmony, Hybrid, Laplace, Piecewise, RangeScaler, Staircase
from ldpstream.mechanisms.numeric.auto import (
    choose_numeric,
    choose_sampled,
    one_dimensional_candidates,
    sampled_worst_case_variance,
    worst_case_variances,
)
from ldpstream.mechanisms.numeric.base import NumericMechanism
from ldpstream.mechanisms.numeric.hybrid import EPSILON_STAR, hybrid_alpha
from tests.mechanisms.checks import CHECKS, EPSILONS, MechanismCase

NAMES = tuple(registry.NUMERIC)  # every registered numeric mechanism goes through the checks below
EPSILON_SHARP = math.log((7 + 4 * math.sqrt(7) + 2 * math.sqrt(20 + 14 * math.sqrt(7))) / 9)  # 000 Table I


def unit_values(rng: np.random.Generator, n: int) -> np.ndarray:
    """Uniform on [-1, 1], with a tenth of the users exactly at -1, 0 or +1 (PM's empty-side-interval pitfall)."""
    t = rng.uniform(-1.0, 1.0, n)
    edge = rng.random(n) < 0.1
    t[edge] = rng.choice([-1.0, 0.0, 1.0], size=int(edge.sum()))
    return t


def numeric_case(name: str) -> MechanismCase:
    return MechanismCase(
        name=name,
        make=lambda eps: registry.make(name, eps),
        sample_values=unit_values,
        expected=lambda mech, t: t,
        contributions=lambda mech, reports: reports["value"],
        variance=lambda mech, t: mech.variance(t),
        bad_values=([np.nan], [1.5], [-1.0000001], [0.0, np.inf], np.zeros((2, 2))),
    )


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("eps", EPSILONS)
@pytest.mark.parametrize("name", NAMES)
def test_contract(name: str, eps: float, check) -> None:
    check(numeric_case(name), eps)


# --- closed forms ---------------------------------------------------------------------------------------------


def _piecewise_integral(f, breaks: np.ndarray) -> float:
    """Integral of a function smooth between consecutive break points (Gauss-Legendre, exact for cubics)."""
    nodes, weights = np.polynomial.legendre.leggauss(3)
    a, b = breaks[:-1, None], breaks[1:, None]
    x = (a + b) / 2 + (b - a) / 2 * nodes
    return float(np.sum((b - a) / 2 * weights * f(x)))


@pytest.mark.parametrize("eps", EPSILONS)
@pytest.mark.parametrize("name", ["laplace", "scdf", "staircase", "pm"])
def test_variance_equals_integral_of_density(name: str, eps: float) -> None:
    """Var from the closed form == integral of (x - t)^2 against the stated density, which integrates to 1."""
    mech = registry.make(name, eps)
    for t in (-1.0, -0.4, 0.0, 1.0):
        if name == "pm":  # density constant between l(t), r(t) and +-C: three exact pieces
            left = float(mech.left(t))
            breaks = np.unique([-mech.c, left, left + mech.c - 1, mech.c])
        elif name == "laplace":  # smooth on each side of t; tail beyond 60 scales is below 1e-26
            breaks = np.concatenate(
                [np.linspace(t - 60 * mech.scale, t, 20001), np.linspace(t, t + 60 * mech.scale, 20001)[1:]]
            )
        else:  # staircase noise: constant on [-m, m] and on each step of width 2; 80 / eps steps leave < 1e-34
            steps = mech.m + 2 * np.arange(int(80 / eps) + 2)
            breaks = t + np.unique(np.concatenate([-steps, [-mech.m, mech.m], steps]))
        mass = _piecewise_integral(lambda x, t=t: mech.output_density(t, x), breaks)
        second = _piecewise_integral(lambda x, t=t: (x - t) ** 2 * mech.output_density(t, x), breaks)
        assert mass == pytest.approx(1.0, abs=1e-9)
        assert second == pytest.approx(float(mech.variance(t)[0]), rel=1e-7)


def test_paper_worst_case_formulas() -> None:
    for eps in (0.3, 0.61, 1.0, 2.0, 5.0):
        h = math.exp(eps / 2)
        assert Piecewise(eps).worst_case_variance() == pytest.approx(4 * h / (3 * (h - 1) ** 2))  # 000 Sec. III-B
        assert Duchi(eps).worst_case_variance() == pytest.approx(((math.e**eps + 1) / (math.e**eps - 1)) ** 2)
        assert Laplace(eps).worst_case_variance() == pytest.approx(8 / eps**2)
        hm = (h + 3) / (3 * h * (h - 1)) + (math.e**eps + 1) ** 2 / (h * (math.e**eps - 1) ** 2)  # 000 Eq. 8
        expected = hm if eps > EPSILON_STAR else Duchi(eps).worst_case_variance()
        assert Hybrid(eps).worst_case_variance() == pytest.approx(expected)


def test_hybrid_variance_is_flat_above_eps_star_and_duchi_below() -> None:
    assert EPSILON_STAR == pytest.approx(0.6094, abs=1e-4)
    hm = Hybrid(2.0)
    assert hm.variance_coefficients()[1] == 0.0
    assert np.ptp(hm.variance(np.linspace(-1, 1, 11))) == pytest.approx(0.0, abs=1e-12)
    assert hybrid_alpha(0.5) == 0.0 and hybrid_alpha(1.0) == pytest.approx(1 - math.exp(-0.5))
    # Eq. 8 is continuous at eps*: both branches agree there.
    h = math.exp(EPSILON_STAR / 2)
    e = math.exp(EPSILON_STAR)
    assert (h + 3) / (3 * h * (h - 1)) + (e + 1) ** 2 / (h * (e - 1) ** 2) == pytest.approx(((e + 1) / (e - 1)) ** 2)


def test_table_one_crossovers() -> None:
    """000 Table I: PM = Duchi at eps# ~ 1.29; HM = Duchi below eps* ~ 0.61 and strictly better above."""
    assert EPSILON_SHARP == pytest.approx(1.29, abs=0.005)
    for delta, pm_vs_duchi in ((-0.01, 1), (0.01, -1)):
        v = worst_case_variances(EPSILON_SHARP + delta)
        assert np.sign(v["pm"] - v["duchi"]) == pm_vs_duchi
    v = worst_case_variances(EPSILON_SHARP)
    assert v["pm"] == pytest.approx(v["duchi"], rel=1e-9)
    below, above = worst_case_variances(EPSILON_STAR - 0.01), worst_case_variances(EPSILON_STAR + 0.01)
    assert below["hm"] == below["duchi"] < below["pm"]
    assert above["hm"] < min(above["duchi"], above["pm"])


@pytest.mark.parametrize("eps", [0.1, 0.5, 0.61, 1.0, 1.29, 2.0, 4.0, 6.0, 10.0])
def test_choose_numeric_is_the_argmin(eps: float) -> None:
    variances = worst_case_variances(eps)
    chosen = choose_numeric(eps)
    assert variances[chosen] == min(variances.values())
    assert choose_numeric(eps) in ("hm", "scdf", "staircase")  # HM dominates PM, Duchi, Laplace (000 Table I)
    d = 5
    vector = worst_case_variances(eps, d)
    assert vector[choose_numeric(eps, d)] == min(vector.values())
    k = max(1, min(d, math.floor(eps / 2.5)))
    chosen = choose_sampled(eps, d, k)
    assert all(
        sampled_worst_case_variance(chosen, eps, d, k) <= sampled_worst_case_variance(n, eps, d, k)
        for n in one_dimensional_candidates()
    )


def test_harmony_is_duchi_in_one_dimension() -> None:
    rng_a, rng_b = np.random.default_rng(1), np.random.default_rng(1)
    t = unit_values(np.random.default_rng(0), 100)
    np.testing.assert_array_equal(Harmony(1.3).perturb(t, rng_a)["value"], Duchi(1.3).perturb(t, rng_b)["value"])


# --- epsilon-LDP --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("eps", EPSILONS)
@pytest.mark.parametrize("cls", [Duchi, Harmony])
def test_discrete_outputs_exact_ratio(cls: type[Duchi], eps: float) -> None:
    mech = cls(eps)
    grid = np.linspace(-1, 1, 201)
    probs = np.array([mech.output_pmf(t)[1] for t in grid])  # (t, output)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0)
    ratio = probs.max(axis=0) / probs.min(axis=0)
    assert np.all(ratio <= math.exp(eps) * (1 + 1e-12))
    assert ratio.max() == pytest.approx(math.exp(eps))  # attained at t = +-1: the bound is tight


@pytest.mark.parametrize("eps", EPSILONS)
@pytest.mark.parametrize("name", ["pm", "laplace", "scdf", "staircase"])
def test_density_ratio(name: str, eps: float) -> None:
    """max over inputs / min over inputs of the output density <= e^eps at every output (and = e^eps somewhere)."""
    mech = registry.make(name, eps)
    inputs = np.linspace(-1, 1, 41)
    low, high = mech.output_range
    xs = np.linspace(max(low, -30), min(high, 30), 6001)
    dens = np.array([mech.output_density(t, xs) for t in inputs])
    ratio = dens.max(axis=0) / dens.min(axis=0)
    assert np.all(ratio <= math.exp(eps) * (1 + 1e-9))
    assert ratio.max() == pytest.approx(math.exp(eps), rel=1e-9)


@pytest.mark.parametrize("eps", EPSILONS)
@pytest.mark.parametrize("name", ["pm", "laplace", "scdf", "staircase"])
def test_samples_follow_the_stated_distribution(name: str, eps: float) -> None:
    """Kolmogorov-Smirnov of 20000 reports per input against the stated CDF; a shifted CDF must be rejected."""
    mech = registry.make(name, eps)
    rng = np.random.default_rng(11)
    for t in (-1.0, -0.3, 0.0, 1.0):
        x = mech.perturb(np.full(20_000, t), rng)["value"]
        assert stats.kstest(x, lambda v, t=t: mech.output_cdf(t, v)).pvalue > 1e-4
    x = mech.perturb(np.full(20_000, 0.5), rng)["value"]
    assert stats.kstest(x, lambda v: mech.output_cdf(0.3, v)).pvalue < 1e-4  # the test has power


@pytest.mark.parametrize("eps", EPSILONS)
def test_hybrid_density_and_atom_ratios(eps: float) -> None:
    """HM's output = alpha * PM density on [-C, C] + atoms at +-B: each part's ratio over inputs is <= e^eps."""
    hm = Hybrid(eps)
    inputs = np.linspace(-1, 1, 41)
    atoms = np.array([hm.output_pmf(t)[1] for t in inputs])
    assert np.all(atoms.max(axis=0) <= math.exp(eps) * atoms.min(axis=0) * (1 + 1e-12))
    if hm.alpha == 0:
        assert np.allclose(atoms.sum(axis=1), 1.0)
        return
    xs = np.linspace(-hm.piecewise.c, hm.piecewise.c, 4001)
    dens = np.array([hm.output_density(t, xs) for t in inputs])
    assert np.all(dens.max(axis=0) <= math.exp(eps) * dens.min(axis=0) * (1 + 1e-12))
    left = float(hm.piecewise.left(0.3))
    breaks = np.array([-hm.piecewise.c, left, left + hm.piecewise.c - 1, hm.piecewise.c])
    continuous_mass = _piecewise_integral(lambda x: hm.output_density(0.3, x), breaks)
    assert continuous_mass + hm.output_pmf(0.3)[1].sum() == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("eps", EPSILONS)
def test_hybrid_mixture(eps: float) -> None:
    """HM = alpha PM + (1 - alpha) Duchi: atom frequencies (binomial) and the continuous part (KS vs PM)."""
    hm = Hybrid(eps)
    rng = np.random.default_rng(12)
    n = 40_000
    for t in (-1.0, 0.2, 1.0):
        x = hm.perturb(np.full(n, t), rng)["value"]
        atom = np.isclose(np.abs(x), hm.duchi.bound, rtol=0, atol=1e-12)
        assert stats.binomtest(int(atom.sum()), n, 1 - hm.alpha).pvalue > 1e-4
        p_plus = float(hm.duchi.prob_positive(t))
        assert stats.binomtest(int((x[atom] > 0).sum()), int(atom.sum()), p_plus).pvalue > 1e-4
        if hm.alpha > 0:
            assert np.abs(x).max() <= hm.piecewise.c
            assert stats.kstest(x[~atom], lambda v, t=t: hm.piecewise.output_cdf(t, v)).pvalue > 1e-4


@pytest.mark.parametrize("t", [-1.0, 1.0])
@pytest.mark.parametrize("eps", [0.01, 0.5, 4.0, 30.0])
def test_piecewise_at_the_edges(t: float, eps: float) -> None:
    """At t = +-1 one side piece is empty: reports stay in [-C, C], are finite, and the mean is still t."""
    mech = Piecewise(eps)
    x = mech.perturb(np.full(200_000, t), np.random.default_rng(13))["value"]
    assert np.isfinite(x).all() and np.abs(x).max() <= mech.c
    assert abs(x.mean() - t) <= 4 * math.sqrt(float(mech.variance(t)[0]) / x.size)
    in_centre = (x >= float(mech.left(t))) & (x <= float(mech.left(t)) + mech.c - 1)
    assert stats.binomtest(int(in_centre.sum()), x.size, mech.centre_mass).pvalue > 1e-4


# --- estimates, scaling, bad input ----------------------------------------------------------------------------


def test_estimate_stderr_plug_in_matches_the_truth() -> None:
    """PM's plug-in of mean(t^2) from the squared reports is unbiased: stderr^2 within 4 of its own errors."""
    mech = Piecewise(1.0)
    rng = np.random.default_rng(14)
    t = unit_values(rng, 200_000)
    x = mech.perturb(t, rng)["value"]
    est = mech.estimate(mech.accumulate({"value": x}))
    a, b = mech.variance_coefficients()
    true_var = (a + b * np.mean(t**2)) / t.size
    # stderr^2 - true_var = b (m2_hat - m2) / n, m2_hat = (mean x^2 - a) / (1 + b): its sd from the 4th moment.
    tol = 4 * abs(b) / (1 + b) * np.std(x**2) / math.sqrt(t.size) / t.size
    assert abs(float(est.stderr) ** 2 - true_var) <= tol


def test_duchi_stderr_is_conservative() -> None:
    mech = Duchi(2.0)
    rng = np.random.default_rng(15)
    t = unit_values(rng, 100_000)
    est = mech.estimate(mech.accumulate(mech.perturb(t, rng)))
    assert float(est.stderr) ** 2 >= float(mech.variance(t).mean()) / t.size


def test_empty_statistics() -> None:
    est = Piecewise(1.0).estimate(Piecewise(1.0).empty_stats())
    assert est.n == 0 and np.isnan(est.value) and np.isinf(est.stderr)


def test_range_scaler_round_trip_and_estimate() -> None:
    scaler = RangeScaler(20.0, 80.0)
    values = np.array([20.0, 35.0, 80.0])
    np.testing.assert_allclose(scaler.from_unit(scaler.to_unit(values)), values)
    rng = np.random.default_rng(16)
    ages = rng.uniform(20, 80, 200_000)
    mech = Piecewise(2.0)
    est = scaler.estimate_from_unit(mech.estimate(mech.accumulate(mech.perturb(scaler.to_unit(ages), rng))))
    assert abs(float(est.value) - ages.mean()) <= 4 * float(est.stderr)
    for bad in ([19.9], [np.nan], [81.0]):
        with pytest.raises(LDPError):
            scaler.to_unit(bad)
    with pytest.raises(LDPError):
        RangeScaler(1.0, 1.0)


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(NAMES),
    values=st.lists(st.floats(allow_nan=True, allow_infinity=True, width=64), min_size=1, max_size=20),
)
def test_perturb_accepts_exactly_the_unit_interval(name: str, values: list[float]) -> None:
    mech = registry.make(name, 1.0)
    valid = all(-1.0 <= v <= 1.0 for v in values)  # False for NaN
    if valid:
        x = mech.perturb(values, np.random.default_rng(0))["value"]
        assert x.shape == (len(values),) and (mech.schema.violations({"value": x}) == "").all()
    else:
        with pytest.raises(LDPError):
            mech.perturb(values, np.random.default_rng(0))


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(NAMES), eps=st.one_of(st.floats(max_value=0.0), st.just(float("nan")), st.just(float("inf")))
)
def test_bad_epsilon_rejected(name: str, eps: float) -> None:
    with pytest.raises(LDPError):
        registry.make(name, eps)


def test_every_registered_numeric_class_is_a_numeric_mechanism() -> None:
    for name in NAMES:
        cls = registry.mechanism_class(name)
        assert issubclass(cls, NumericMechanism) and cls.name == name
    assert {SCDF.name, Staircase.name} == {"scdf", "staircase"}


@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(NAMES), eps=st.floats(min_value=50.0, max_value=1e300, exclude_min=True))
def test_epsilon_above_the_supported_maximum_rejected(name: str, eps: float) -> None:
    """Above eps = 50 the float64 constants degenerate (PM would divide by 0 near 75): a clear LDPError instead."""
    with pytest.raises(LDPError):
        registry.make(name, eps)
    with pytest.raises(LDPError):
        make_vector_mechanism(name, eps * 4, 3)  # even split 3 ways (or sampled) the per-attribute budget is > 50


@pytest.mark.parametrize("name", NAMES)
def test_largest_supported_epsilon_still_works(name: str) -> None:
    mech = registry.make(name, 50.0)
    x = mech.perturb(np.array([-1.0, 0.0, 1.0]), np.random.default_rng(0))["value"]
    assert np.isfinite(x).all() and (mech.schema.violations({"value": x}) == "").all()
    assert np.isfinite(mech.worst_case_variance())
