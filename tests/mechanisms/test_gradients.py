"""Gradient randomizers (`ldpstream.mechanisms.gradients`): unbiased at d = 1,000, error = closed form within a
tolerance from n, the density-ratio bound, seeded determinism, one error type for bad arguments."""

from __future__ import annotations

import doctest
import math

import numpy as np
import pytest
from scipy import stats
from scipy.special import betainc, ndtr

from ldpstream.mechanisms import registry
from ldpstream.mechanisms.base import LDPError
from ldpstream.mechanisms.gradients import (
    PROJECTION_DIMS,
    GradientMechanism,
    default_gradient_mechanism,
    gradient_mechanism,
    gradient_names,
)
from ldpstream.mechanisms.gradients.privunit import CapMechanism
from ldpstream.mechanisms.gradients.projunit import PROJECTED_DIMS, hadamard

NAMES = ("privunitg", "privunit2", "projunit", "duchi-l2", "pm", "hm", "duchi")
D = 1000
EPSILON = 4.0
N = 3000
# Two-sided normal quantile of each check: a false alarm has probability ~6e-7 (the seeds are fixed in any case).
Z = 5.0
# Every name at its defaults, and ProjUnit projecting 1,024 padded dimensions to 128 (its defaults project to 1,000).
CASES = [(name, {}) for name in NAMES] + [("projunit", {"k": 128})]


def direction(d: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).normal(size=d)
    return x / np.linalg.norm(x)


def test_the_names_are_the_registry() -> None:
    assert gradient_names() == NAMES == tuple(registry.GRADIENT)
    for name in NAMES:
        cls = registry.gradient_class(name)
        assert cls.name == name and cls.norm in ("l2", "linf")
        assert any(t.examples for t in doctest.DocTestFinder(recurse=False).find(cls)), name


@pytest.mark.parametrize(("name", "params"), CASES)
def test_unbiased_at_d_1000(name: str, params: dict[str, int]) -> None:
    """<mean - x, w> for fixed unit w has variance Var<x_hat, w> / n <= (E||x_hat - x||^2) / n <= (mse + 1) / n
    (the error of a row of norm r is mse + 1 - r^2 for the L2 mechanisms, d a + b r^2 <= mse + 1 for the cube ones)."""
    m = gradient_mechanism(name, dims=D, epsilon=EPSILON, **params)
    x = 0.6 * direction(D, 1)  # norm < 1: the L2 mechanisms' rounding to the sphere is exercised
    est = m.mean(m.perturb(np.tile(x, (N, 1)), np.random.default_rng(2)))
    sd = math.sqrt((m.mse() + 1.0) / N)
    for w in (x / 0.6, direction(D, 3), np.ones(D) / math.sqrt(D)):
        assert abs(float((est - x) @ w)) <= Z * sd + m.bias_bound(), (name, w[:3])


@pytest.mark.parametrize(("name", "params"), CASES)
def test_error_is_the_closed_form(name: str, params: dict[str, int]) -> None:
    """The mean of n iid per-report errors ||x_hat - x||^2 is within Z sample standard errors of `mse` (CLT over
    n), plus ProjUnit's stated approximation slack."""
    m = gradient_mechanism(name, dims=D, epsilon=EPSILON, **params)
    x = direction(D, 4)
    errors = ((m.decode(m.perturb(np.tile(x, (N, 1)), np.random.default_rng(5))) - x) ** 2).sum(axis=1)
    slack = getattr(m, "mse_slack", lambda: 0.0)()
    assert abs(errors.mean() - m.mse(D)) <= Z * errors.std(ddof=1) / math.sqrt(N) + slack, (errors.mean(), m.mse())


def test_privunitg_matches_the_reference_figures() -> None:
    """AFT22's PrivUnitG errors (their code's d sigma^2; ours is the exact MSE, within 0.2% of it)."""
    for (d, eps), figure in {(100, 1): 633, (100, 4): 43.5, (100, 8): 13.3, (1000, 4): 435, (10000, 8): 1329}.items():
        assert gradient_mechanism("privunitg", dims=d, epsilon=eps).mse() == pytest.approx(figure, rel=2e-3)


@pytest.mark.parametrize("name", ["privunitg", "privunit2"])
@pytest.mark.parametrize("eps", [1.0, 8.0, 30.0])
def test_cap_density_ratio_and_sampled_law(name: str, eps: float) -> None:
    """The density ratio p (1-q) / ((1-p) q), q recomputed from gamma by the base law's cdf, is e^eps; and the
    sampled projections alpha = <U, v> follow the law that ratio is computed for (Kolmogorov-Smirnov)."""
    d = 50
    m = gradient_mechanism(name, dims=d, epsilon=eps)
    assert isinstance(m, CapMechanism)
    cap = m.cap
    if name == "privunitg":
        def base_cdf(t: np.ndarray) -> np.ndarray:
            return ndtr(t)
    else:
        def base_cdf(t: np.ndarray) -> np.ndarray:
            return betainc((d - 1) / 2, (d - 1) / 2, (1 + np.clip(t, -1, 1)) / 2)
    # The upper tail straight from the base law's symmetric cdf (no 1 - cdf cancellation when q is tiny).
    q = float(base_cdf(np.array(-cap.gamma)))
    assert cap.density_ratio(q) == pytest.approx(math.exp(eps), rel=1e-6)
    v = direction(d, 6)
    alpha = m.decode(m.perturb(np.tile(v, (4000, 1)), np.random.default_rng(7))) @ v * cap.scale

    def mixture_cdf(t: np.ndarray) -> np.ndarray:
        below = (1 - cap.p) * base_cdf(t) / (1 - q)
        return np.where(t < cap.gamma, below, (1 - cap.p) + cap.p * (base_cdf(t) - (1 - q)) / q)

    assert stats.kstest(alpha, mixture_cdf).pvalue > 1e-6


def test_duchi_l2_density_ratio() -> None:
    """Reports lie on the sphere of radius B, on v's hemisphere with probability e^eps / (1 + e^eps): density ratio
    pi / (1 - pi) = e^eps (binomial check of the fraction)."""
    m = gradient_mechanism("duchi-l2", dims=30, epsilon=2.0)
    v = direction(30, 8)
    z = m.decode(m.perturb(np.tile(v, (5000, 1)), np.random.default_rng(9)))
    assert np.allclose(np.linalg.norm(z, axis=1), m.radius)  # type: ignore[attr-defined]
    pi = math.exp(2.0) / (1 + math.exp(2.0))
    toward = float(np.mean(z @ v > 0))
    assert abs(toward - pi) <= Z * math.sqrt(pi * (1 - pi) / 5000)
    assert pi / (1 - pi) == pytest.approx(math.exp(2.0))


def test_projunit_seed_is_independent_of_the_input_and_the_report_small() -> None:
    """The projection's seed comes from the generator alone (so W is data-independent, the privacy argument),
    and a report is one int64 and k float32 values whatever d."""
    m = gradient_mechanism("projunit", dims=100_000, epsilon=8.0)
    a = m.perturb(np.eye(1, 100_000), np.random.default_rng(10))
    b = m.perturb(-np.eye(1, 100_000, 5), np.random.default_rng(10))
    assert np.array_equal(a["seed"], b["seed"])
    assert m.report_bytes() == 8 + 4 * PROJECTED_DIMS < 4096
    assert a["value"].shape == (1, PROJECTED_DIMS)


def test_projection_is_defined_bit_for_bit() -> None:
    """ProjUnit's D and S, rebuilt from a seed in plain Python integers as its docstring defines them (what another
    implementation of the device or the server must reproduce)."""
    m = gradient_mechanism("projunit", dims=200, epsilon=1.0, k=16)  # d' = 256: 4 sign words, then 256 row words
    seed, mask = 12345, 2**64 - 1

    def mix(z: int) -> int:
        z ^= z >> 30
        z = z * 0xBF58476D1CE4E5B9 & mask
        z ^= z >> 27
        z = z * 0x94D049BB133111EB & mask
        return z ^ (z >> 31)

    words = [mix((seed + (j + 1) * 0x9E3779B97F4A7C15) & mask) for j in range(4 + 256)]
    signs = [-1.0 if (words[j // 64] >> (j % 64)) & 1 else 1.0 for j in range(256)]
    rows = sorted(sorted(range(256), key=lambda i: words[4 + i])[:16])
    got_signs, got_rows = m.projection(np.array([seed]))  # type: ignore[attr-defined]
    assert got_signs[0].tolist() == signs and got_rows[0].tolist() == rows


def test_hadamard_is_the_orthonormal_sylvester_matrix() -> None:
    from scipy.linalg import hadamard as sylvester

    x = np.random.default_rng(11).normal(size=(3, 64))
    assert np.allclose(hadamard(x.copy()), x @ sylvester(64) / 8.0)


@pytest.mark.parametrize("name", NAMES)
def test_seeded_determinism_and_additive_totals(name: str) -> None:
    m = gradient_mechanism(name, dims=40, epsilon=2.0)
    g = 0.1 * np.random.default_rng(12).uniform(-1, 1, (20, 40))
    a, b = m.perturb(g, np.random.default_rng(13)), m.perturb(g, np.random.default_rng(13))
    assert all(np.array_equal(a[key], b[key]) for key in a)
    first = {key: col[:7] for key, col in a.items()}
    rest = {key: col[7:] for key, col in a.items()}
    assert np.allclose(m.total(first) + m.total(rest), m.total(a))
    assert np.allclose(m.mean(a), m.decode(a).mean(axis=0))


def test_mse_at_another_dimension_and_the_defaults() -> None:
    m = gradient_mechanism("projunit", dims=300, epsilon=2.0, k=64)
    assert m.mse(5000) == gradient_mechanism("projunit", dims=5000, epsilon=2.0, k=64).mse()
    assert default_gradient_mechanism("l2") == "privunitg"
    assert default_gradient_mechanism("l2", dims=PROJECTION_DIMS + 1) == "projunit"
    assert default_gradient_mechanism("linf") == "hm"
    for name in NAMES:
        assert isinstance(gradient_mechanism(name, dims=10, epsilon=1.0), GradientMechanism)


@pytest.mark.parametrize(("name", "kwargs", "match"), [
    ("nope", {}, "unknown gradient mechanism"),
    ("privunitg", {"epsilon": 0.0}, "epsilon"),
    ("privunitg", {"epsilon": float("nan")}, "epsilon"),
    ("privunitg", {"dims": 0}, "dims"),
    ("duchi-l2", {"dims": 2.5}, "dims"),
    ("privunit2", {"dims": 1}, "dims >= 2"),
    ("projunit", {"k": 0}, "positive integer"),
    ("duchi", {"k": 2}, "takes no k"),
    ("duchi", {"dims": 1024}, "d <= 1023"),
    ("privunitg", {"k": 2}, "unexpected parameters"),
])
def test_bad_arguments_raise_ldperror(name: str, kwargs: dict[str, object], match: str) -> None:
    args: dict[str, object] = {"dims": 10, "epsilon": 1.0, **kwargs}
    with pytest.raises(LDPError, match=match):
        gradient_mechanism(name, **args)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", NAMES)
def test_bad_inputs_and_reports_raise_ldperror(name: str) -> None:
    m = gradient_mechanism(name, dims=10, epsilon=1.0)
    rng = np.random.default_rng(14)
    too_long = np.full((1, 10), 1.0 if m.norm == "l2" else 1.5)  # L2 norm sqrt(10), or outside the cube
    for bad in (too_long, np.full((1, 10), np.nan), np.zeros((1, 9))):
        with pytest.raises(LDPError):
            m.perturb(bad, rng)
    good = m.perturb(np.zeros((2, 10)), rng)
    key = "value"
    for broken in ({}, {**good, key: np.repeat(np.asarray(good[key], dtype=np.float64)[..., None], 3, axis=-1)},
                   {**good, key: np.full_like(np.asarray(good[key], dtype=np.float64), np.nan)}):
        with pytest.raises(LDPError):
            m.decode(broken)
