"""Vector mechanisms: contract checks, Duchi et al. multi-D proved by exact enumeration, Lemma 6, Alg. 4."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from scipy import stats

from ldpstream.mechanisms.base import LDPError
from ldpstream.mechanisms.multidim import (
    DuchiVector,
    SampledVectorMechanism,
    VectorMechanism,
    make_vector_mechanism,
    sampled_attributes,
    vector_names,
)
from ldpstream.mechanisms.numeric.duchi import duchi_bound_1d
from ldpstream.mechanisms.numeric.hybrid import EPSILON_STAR
from tests.mechanisms.checks import CHECKS, EPSILONS, MechanismCase
from tests.mechanisms.flawed_duchi import Published000Duchi, Published001Duchi

DIMS = 3


def unit_vectors(rng: np.random.Generator, n: int, d: int = DIMS) -> np.ndarray:
    t = rng.uniform(-1, 1, (n, d))
    edge = rng.random((n, d)) < 0.1
    t[edge] = rng.choice([-1.0, 1.0], size=int(edge.sum()))
    return t


def vector_case(name: str, k: int | None = None) -> MechanismCase:
    return MechanismCase(
        name=f"{name}-k{k}",
        make=lambda eps: make_vector_mechanism(name, eps, DIMS, k=k),
        sample_values=unit_vectors,
        expected=lambda mech, t: t,
        contributions=lambda mech, reports: mech.dense(reports),
        variance=lambda mech, t: mech.variance(t),
        bad_values=(np.full((2, DIMS), np.nan), np.full((1, DIMS), 1.01), np.zeros((3, DIMS + 1)), np.zeros(DIMS + 1)),
    )


NAMES = vector_names()  # every registered numeric mechanism's d-dimensional form goes through the checks
CASES = [vector_case(n) for n in NAMES] + [vector_case("pm", k=2), vector_case("hm", k=3)]


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("eps", EPSILONS)
@pytest.mark.parametrize("case", CASES, ids=str)
def test_contract(case: MechanismCase, eps: float, check) -> None:
    check(case, eps)


# --- Duchi et al. multi-D, exactly --------------------------------------------------------------------------


def conditional_pmf(mech: DuchiVector) -> np.ndarray:
    """P[z | v] for all v, z in {-1, 1}^d as bit masks (bit set = +1), from the weights the sampler uses."""
    d = mech.dims
    codes = np.arange(2**d, dtype=np.uint64)
    agreements = d - np.bitwise_count(codes[:, None] ^ codes[None, :]).astype(np.int64)
    return mech.weights[agreements]


def signs(d: int) -> np.ndarray:
    """(2^d, d) matrix of +-1: row c is the vector whose bit j is coordinate j."""
    codes = np.arange(2**d)
    return np.where((codes[:, None] >> np.arange(d)) & 1, 1.0, -1.0)


def exact_checks(mech: DuchiVector) -> dict[str, bool]:
    pmf = conditional_pmf(mech)
    s = signs(mech.dims)
    sums_to_one = np.allclose(pmf.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    unbiased = np.allclose(pmf @ (mech.bound * s), s, rtol=0, atol=1e-9)  # E[B z | v] = v for every v
    ratio = pmf.max(axis=0) / pmf.min(axis=0)  # P[z | t] mixes P[z | v]: this bounds every ratio over t
    private = bool(np.all(ratio <= math.exp(mech.epsilon) * (1 + 1e-12)))
    return {"sums_to_one": sums_to_one, "unbiased": unbiased, "private": private}


@pytest.mark.parametrize("eps", EPSILONS)
@pytest.mark.parametrize("d", range(1, 11))
def test_duchi_multidim_exact_enumeration(d: int, eps: float) -> None:
    """All 2^d outputs: probabilities sum to 1, B z exactly unbiased, every probability ratio <= e^eps."""
    mech = DuchiVector(eps, d)
    assert exact_checks(mech) == {"sums_to_one": True, "unbiased": True, "private": True}
    assert conditional_pmf(mech).max(axis=0).max() / conditional_pmf(mech).min() == pytest.approx(math.exp(eps))
    # And for inputs inside the cube: P[z | t] = sum_v P[v | t] P[z | v] is unbiased too.
    t = np.random.default_rng(d).uniform(-1, 1, d)
    p_v = np.prod(np.where(signs(d) > 0, (1 + t) / 2, (1 - t) / 2), axis=1)
    np.testing.assert_allclose(p_v @ conditional_pmf(mech) @ (mech.bound * signs(d)), t, atol=1e-9)


@pytest.mark.parametrize("eps", EPSILONS)
@pytest.mark.parametrize("d", range(1, 11))
def test_published_duchi_fails_the_same_checks_for_even_d(d: int, eps: float) -> None:
    printed_000, printed_001 = exact_checks(Published000Duchi(eps, d)), exact_checks(Published001Duchi(eps, d))
    if d % 2:  # odd d: no ties, all three coincide with the shipped mechanism
        assert printed_000 == printed_001 == {"sums_to_one": True, "unbiased": True, "private": True}
        assert Published000Duchi(eps, d).bound == pytest.approx(DuchiVector(eps, d).bound)
        return
    # 001 Sec. 3.1: the original (T+ = {z.v > 0}) is biased and not eps-LDP for even d.
    assert printed_001 == {"sums_to_one": True, "unbiased": False, "private": False}
    # 000 Alg. 3 as printed (ties in both sets, Eq. 9's constant) is unbiased, but ties get (e^eps + 1) times the
    # probability of z.v < 0 outputs: only ln(e^eps + 1)-LDP.
    assert printed_000 == {"sums_to_one": True, "unbiased": True, "private": False}
    pmf = conditional_pmf(Published000Duchi(eps, d))
    assert (pmf.max(axis=0) / pmf.min(axis=0)).max() == pytest.approx(math.exp(eps) + 1)


def test_published_001_ratio_at_d2_is_3e_eps() -> None:
    """001 Sec. 3.1's example: P[f(1,1) = (B,B)] = 3 e^eps P[f(-1,-1) = (B,B)]."""
    pmf = conditional_pmf(Published001Duchi(1.0, 2))
    both_plus, both_minus = 0b11, 0b00
    assert pmf[both_plus, both_plus] / pmf[both_minus, both_plus] == pytest.approx(3 * math.e)


@pytest.mark.parametrize("d", [3, 4])
def test_duchi_sampler_follows_the_enumerated_pmf(d: int) -> None:
    mech = DuchiVector(1.0, d)
    t = np.linspace(-0.8, 0.6, d)
    p_v = np.prod(np.where(signs(d) > 0, (1 + t) / 2, (1 - t) / 2), axis=1)
    p_z = p_v @ conditional_pmf(mech)
    n = 200_000
    z = mech.perturb_dense(np.tile(t, (n, 1)), np.random.default_rng(21)) > 0
    codes = (z * (1 << np.arange(d))).sum(axis=1)
    observed = np.bincount(codes, minlength=2**d)
    assert stats.chisquare(observed, n * p_z).pvalue > 1e-4
    wrong = p_v @ conditional_pmf(Published000Duchi(1.0, d)) if d % 2 == 0 else np.roll(p_z, 1)
    assert stats.chisquare(observed, n * wrong / wrong.sum()).pvalue < 1e-4  # the test has power


def test_duchi_constants() -> None:
    assert DuchiVector(1.3, 1).bound == pytest.approx(duchi_bound_1d(1.3))
    # even d: B = coth(eps/2) 2^{d-1} / binom(d-1, d/2) - 1 (module docstring of ldpstream.mechanisms.numeric.duchi)
    for d in (2, 4, 6):
        expected = duchi_bound_1d(1.3) * 2 ** (d - 1) / math.comb(d - 1, d // 2) - 1
        assert DuchiVector(1.3, d).bound == pytest.approx(expected)
        assert Published000Duchi(1.3, d).bound - DuchiVector(1.3, d).bound == pytest.approx(
            2 * math.e**1.3 / math.expm1(1.3)
        )
    assert DuchiVector(2.0, 300).bound > 0 and np.isfinite(DuchiVector(2.0, 300).bound)  # no overflow at large d


# --- Algorithm 4 and Lemma 6 ----------------------------------------------------------------------------------


def test_k_from_equation_12() -> None:
    assert [sampled_attributes(e, 10) for e in (0.5, 2.49, 2.5, 5.0, 7.6, 100.0)] == [1, 1, 1, 2, 3, 10]
    assert sampled_attributes(100.0, 4) == 4
    assert make_vector_mechanism("pm", 8.0, 10).k == 3
    assert make_vector_mechanism("harmony", 8.0, 10).k == 1


@pytest.mark.parametrize(("eps", "d"), [(0.5, 5), (1.0, 5), (4.0, 10), (8.0, 10), (2.0, 40)])
def test_lemma_6_variances(eps: float, d: int) -> None:
    t = np.linspace(-1, 1, 9)
    k = sampled_attributes(eps, d)
    e = math.exp(eps / (2 * k))
    pm = make_vector_mechanism("pm", eps, d).variance(t)
    eq14 = d * (e + 3) / (3 * k * (e - 1) ** 2) + (d * e / (k * (e - 1)) - 1) * t**2  # 000 Eq. 14
    np.testing.assert_allclose(pm, eq14)
    hm = make_vector_mechanism("hm", eps, d).variance(t)
    b = (math.exp(eps / k) + 1) / (math.exp(eps / k) - 1)
    if eps / k > EPSILON_STAR:
        eq15 = d / k * ((e + 3) / (3 * e * (e - 1)) + b**2 / e) + (d / k - 1) * t**2  # 000 Lemma 6, HM, upper case
        np.testing.assert_allclose(hm, eq15)
    else:
        # Lemma 6 prints (d/k) B^2 + (d/k - 1) t^2 here; HM is Duchi's mechanism below eps*, whose E[x^2] = B^2,
        # so Var = (d/k) B^2 - t^2. The contract checks' simulation confirms the corrected form.
        np.testing.assert_allclose(hm, d / k * b**2 - t**2)
    duchi = make_vector_mechanism("duchi", eps, d)
    np.testing.assert_allclose(duchi.variance(t), duchi.bound**2 - t**2)  # 000 Eq. 13 with B in place of C_d
    lap = make_vector_mechanism("laplace", eps, d)
    np.testing.assert_allclose(lap.variance(t), 8 * d**2 / eps**2)


def test_lemma_6_erratum_by_simulation() -> None:
    """HM at eps/k <= eps* and t = 0.9: the simulated variance is (d/k) B^2 - t^2, not (d/k) B^2 + (d/k - 1) t^2."""
    mech = make_vector_mechanism("hm", 0.5, 5)
    n = 400_000
    x = mech.perturb_dense(np.full((n, 5), 0.9), np.random.default_rng(22))[:, 0]
    b2 = duchi_bound_1d(0.5) ** 2
    corrected, printed = 5 * b2 - 0.81, 5 * b2 + 4 * 0.81
    tol = 4 * np.std((x - 0.9) ** 2) / math.sqrt(n)
    assert abs(np.var(x) - corrected) < tol < abs(np.var(x) - printed)


def test_figure_3_for_odd_d_and_the_even_d_caveat() -> None:
    """000 Fig. 3: for d = 5, HM <= 77% and PM < 100% of Duchi's worst-case variance over eps in (0, 10].
    For even d the corrected Duchi mechanism has B smaller by 2e^eps/(e^eps - 1) than 000 Eq. 10, and Corollary 2
    no longer holds everywhere: at d = 2, eps = 3 Duchi's worst case is below HM's and PM's."""
    for eps in np.linspace(0.05, 10, 100):
        duchi = make_vector_mechanism("duchi", eps, 5).worst_case_variance()
        assert make_vector_mechanism("hm", eps, 5).worst_case_variance() <= 0.77 * duchi
        assert make_vector_mechanism("pm", eps, 5).worst_case_variance() < duchi
    duchi2 = make_vector_mechanism("duchi", 3.0, 2).worst_case_variance()
    assert (
        duchi2
        < make_vector_mechanism("hm", 3.0, 2).worst_case_variance()
        < make_vector_mechanism("pm", 3.0, 2).worst_case_variance()
    )


# --- the API SGD and the pipeline use -------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_perturb_dense_is_unbiased_and_matches_reports(name: str) -> None:
    d, n = 6, 200_000
    mech = make_vector_mechanism(name, 6.0, d)
    assert isinstance(mech, VectorMechanism)
    t = unit_vectors(np.random.default_rng(23), n, d)
    x = mech.perturb_dense(t, np.random.default_rng(24))
    assert x.shape == (n, d) and x.dtype == np.float64
    z = np.abs(x.mean(axis=0) - t.mean(axis=0)) / np.sqrt(mech.variance(t).mean(axis=0) / n)
    assert np.all(z <= 4)
    reports = mech.perturb(t, np.random.default_rng(24))
    np.testing.assert_array_equal(mech.dense(reports), x)  # same draws, same vectors
    if isinstance(mech, SampledVectorMechanism):
        assert (np.count_nonzero(x, axis=1) <= mech.k).all()
        index = np.asarray(reports["index"]).reshape(n, -1)
        assert all(len(set(row)) == mech.k for row in index[:100])


def test_estimate_mean_vector() -> None:
    mech = make_vector_mechanism("pm", 2.0, 4)
    rng = np.random.default_rng(25)
    t = unit_vectors(rng, 100_000, 4)
    est = mech.estimate(mech.accumulate(mech.perturb(t, rng)))
    assert est.n == 100_000 and est.value.shape == est.stderr.shape == (4,)
    assert np.all(np.abs(est.value - t.mean(axis=0)) <= 4 * est.stderr)


def test_bad_arguments() -> None:
    with pytest.raises(LDPError):
        make_vector_mechanism("oue", 1.0, 3)
    with pytest.raises(LDPError):
        make_vector_mechanism("duchi", 1.0, 3, k=2)
    with pytest.raises(LDPError):
        make_vector_mechanism("pm", 1.0, 3, k=4)
    for dims in (0, -2, 2.5, True):
        with pytest.raises(LDPError):
            make_vector_mechanism("pm", 1.0, dims)  # type: ignore[arg-type]


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(NAMES),
    values=hnp.arrays(
        np.float64,
        st.tuples(st.integers(1, 6), st.integers(2, 4)),
        elements=st.floats(allow_nan=True, allow_infinity=True, width=64),
    ),
)
def test_vector_input_validation(name: str, values: np.ndarray) -> None:
    """Exactly the (n, 3) arrays with every entry in [-1, 1] are accepted; everything else is an LDPError."""
    mech = make_vector_mechanism(name, 2.0, 3)
    valid = values.shape[1] == 3 and bool(np.all((values >= -1) & (values <= 1)))
    if valid:
        reports = mech.perturb(values, np.random.default_rng(0))
        assert (mech.schema.violations(reports) == "").all()
        assert mech.perturb_dense(values, np.random.default_rng(0)).shape == values.shape
    else:
        with pytest.raises(LDPError):
            mech.perturb(values, np.random.default_rng(0))
        with pytest.raises(LDPError):
            mech.perturb_dense(values, np.random.default_rng(0))
