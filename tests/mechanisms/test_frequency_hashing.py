"""The hash family of local hashing (exact collision probability, exact float aggregation, seeds that cannot wrap)
and the Sylvester-Hadamard machinery of the Hadamard response (001 Alg. 3 and 5)."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from ldpstream.mechanisms.base import LDPError
from ldpstream.mechanisms.frequency import BLH, OLH, HadamardResponse
from ldpstream.mechanisms.frequency.base import MAX_DOMAIN_SIZE
from ldpstream.mechanisms.frequency.hadamard import hadamard_bit, walsh_hadamard_transform
from ldpstream.mechanisms.frequency.local_hash import (
    HASH_PRIME,
    bucket_starts,
    collision_probability,
    hash_buckets,
    other_support_probability,
    supported,
)

# --- local hashing: the family ------------------------------------------------------------------------------


def all_seeds(prime: int) -> tuple[np.ndarray, np.ndarray]:
    a, b = np.meshgrid(np.arange(1, prime), np.arange(prime), indexing="ij")
    return a.ravel(), b.ravel()


@pytest.mark.parametrize("prime", [13, 17, 31])
@pytest.mark.parametrize("g", [2, 3, 4, 5, 8])
def test_collision_probability_is_exact_for_every_pair(prime: int, g: int) -> None:
    """Over all (a, b) of a small prime field, Pr[H(u) = H(v)] is the same for every pair u != v and equals
    sum_h m_h (m_h - 1) / (P (P - 1)) exactly."""
    a, b = all_seeds(prime)
    buckets = hash_buckets(a[:, None], b[:, None], np.arange(prime), g, prime)  # (seeds, values)
    expected = collision_probability(g, prime)
    for u, v in itertools.combinations(range(prime), 2):
        assert Fraction(int(np.count_nonzero(buckets[:, u] == buckets[:, v])), a.size) == expected
    sizes = np.bincount(buckets[0], minlength=g)  # any seed: a bijection of the residues, so the bucket sizes
    assert sizes.sum() == prime and set(sizes.tolist()) <= {prime // g, -(-prime // g)}
    np.testing.assert_array_equal(bucket_starts(np.arange(g + 1), g, prime), np.r_[0, np.cumsum(sizes)])


@pytest.mark.parametrize("prime", [13, 31])
@pytest.mark.parametrize("g", [2, 3, 5])
def test_support_probability_of_other_values_is_exact(prime: int, g: int) -> None:
    """Summing the report distribution over all seeds and buckets: a user with value u supports v != u with
    probability p c + (1 - p)(1 - c)/(g - 1), the q* the estimator uses, and her own value with probability p."""
    keep = 0.6
    a, b = all_seeds(prime)
    buckets = hash_buckets(a[:, None], b[:, None], np.arange(prime), g, prime)
    for u, v in [(0, 1), (3, 11), (12, 2)]:
        prob_y = np.where(np.arange(g) == buckets[:, [u]], keep, (1 - keep) / (g - 1))  # (seeds, y) given H(u)
        supports_v = np.arange(g) == buckets[:, [v]]
        assert (prob_y * supports_v).sum() / a.size == pytest.approx(
            other_support_probability(keep, g, prime), rel=1e-12
        )
        supports_u = np.arange(g) == buckets[:, [u]]
        assert (prob_y * supports_u).sum() / a.size == pytest.approx(keep, rel=1e-12)


def test_q_star_is_one_over_g_up_to_the_prime() -> None:
    for eps in (0.5, 1.0, 4.0, 8.0):
        olh = OLH(eps, 10)
        assert abs(olh.q - 1 / olh.g) <= 1 / HASH_PRIME
        assert olh.q < 1 / olh.g  # distinct pairs collide slightly less than an ideal hash would


# --- local hashing: the exact float aggregation ---------------------------------------------------------------


def crafted_reports(g: int, values: np.ndarray, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """One report per value v whose shifted residue (a v + b - lo(y)) mod P at v is 0, P - 1, w - 1 or w (the edges
    of bucket y), with a drawn near P as well as at random: where the float error analysis of `supported` is tight."""
    n = values.size
    a = np.where(rng.random(n) < 0.3, HASH_PRIME - rng.integers(1, 4, n), rng.integers(1, HASH_PRIME, n))
    y = rng.integers(0, g, n)
    lo = bucket_starts(y, g)
    width = bucket_starts(y + 1, g) - lo
    edge = np.choose(rng.integers(0, 4, n), [np.zeros(n, dtype=np.int64), np.full(n, HASH_PRIME - 1), width - 1, width])
    b = (edge + lo - a * values) % HASH_PRIME
    return {"a": a.astype(np.uint32), "b": b.astype(np.uint32), "y": y.astype(np.uint32)}


@pytest.mark.parametrize("eps", [0.5, 2.0, 6.0])
def test_float_hash_equals_integer_hash_on_boundary_seeds(eps: float) -> None:
    """`supported` (float64) == exact int64 hashing at the crafted value and its neighbours, values up to 2^20 - 1.
    (With 1/P in place of the scaled inverse, about 1 in 8 reports at residue 0 come out wrong here.)"""
    g = OLH(eps, 10).g
    rng = np.random.default_rng(1)
    values = np.r_[MAX_DOMAIN_SIZE - 1 - np.arange(50), rng.integers(1, MAX_DOMAIN_SIZE - 1, 1500)]
    reports = crafted_reports(g, values, rng)
    a, b, y = (reports[name].astype(np.int64) for name in ("a", "b", "y"))
    for j, v in enumerate(values):
        codes = np.array([v - 1, v, min(v + 1, MAX_DOMAIN_SIZE - 1)])
        exact = hash_buckets(a[j], b[j], codes, g) == y[j]
        np.testing.assert_array_equal(supported(a[j : j + 1], b[j : j + 1], y[j : j + 1], codes, g)[0], exact)


def test_aggregation_at_the_largest_domain_equals_exact_hashing() -> None:
    """accumulate over all 2^20 values (one report per chunk) == exact hashing, for boundary-hitting reports."""
    oracle = OLH(2.0, MAX_DOMAIN_SIZE)
    reports = crafted_reports(oracle.g, np.array([MAX_DOMAIN_SIZE - 1, 123_457, 0]), np.random.default_rng(2))
    exact = (
        hash_buckets(
            reports["a"].astype(np.int64)[:, None],
            reports["b"].astype(np.int64)[:, None],
            np.arange(MAX_DOMAIN_SIZE),
            oracle.g,
        )
        == reports["y"].astype(np.int64)[:, None]
    )
    np.testing.assert_array_equal(oracle.accumulate(reports)[:-1], exact.sum(axis=0))


@pytest.mark.parametrize("cls,eps,k", [(OLH, 1.0, 1000), (OLH, 4.0, 33), (OLH, 9.0, 257), (BLH, 1.0, 1000)])
def test_float_aggregation_equals_exact_hashing(cls: type[OLH], eps: float, k: int) -> None:
    """accumulate's chunked counts == the exact int64 support of every value, on perturbed and crafted reports."""
    oracle = cls(eps, k)
    rng = np.random.default_rng(3)
    perturbed = oracle.perturb(rng.integers(0, k, 3000), rng)
    crafted = crafted_reports(oracle.g, rng.integers(0, k, 3000), rng)
    for batch in (perturbed, crafted):
        a, b, y = (batch[name].astype(np.int64)[:, None] for name in ("a", "b", "y"))
        exact = hash_buckets(a, b, np.arange(k), oracle.g) == y
        np.testing.assert_array_equal(oracle.support_matrix(batch), exact)
        np.testing.assert_array_equal(oracle.accumulate(batch)[:-1], exact.sum(axis=0))


# --- local hashing: seeds cannot wrap ------------------------------------------------------------------------


def test_hash_at_the_largest_seed_and_value_matches_big_integer_arithmetic() -> None:
    g = 7
    for a, b, v in [(HASH_PRIME - 1, HASH_PRIME - 1, MAX_DOMAIN_SIZE - 1), (HASH_PRIME - 2, 5, 999_983)]:
        exact = ((a * v + b) % HASH_PRIME) * g // HASH_PRIME  # Python integers: no overflow anywhere
        assert int(hash_buckets(np.uint32(a), np.uint32(b), np.int64(v), g)) == exact


def test_seeds_outside_the_field_are_refused_not_reduced() -> None:
    """A seed >= P (or a = 0, or one that only fits after wrapping 2^32) is an impossible report: refused."""
    oracle = OLH(1.0, 100)
    good = oracle.perturb(np.arange(10), np.random.default_rng(3))
    assert good["a"].dtype == np.uint32 and good["b"].dtype == np.uint32
    assert good["a"].min() >= 1 and max(good["a"].max(), good["b"].max()) < HASH_PRIME
    for column, bad in [("a", 0), ("a", HASH_PRIME), ("b", HASH_PRIME), ("a", 2**32 + 5), ("b", -1)]:
        reports = {name: col.astype(np.int64) for name, col in good.items()}
        reports[column][0] = bad
        assert oracle.schema.violations(reports)[0] != ""
        with pytest.raises(LDPError):
            oracle.accumulate(reports)
        with pytest.raises(LDPError):
            oracle.log_pmf(reports, [0])


def test_seeds_are_uniform_over_the_field() -> None:
    """a uniform on [1, P - 1] and b on [0, P - 1]: 16 equal-width cells, chi-square."""
    reports = OLH(1.0, 10).perturb(np.zeros(160_000, dtype=int), np.random.default_rng(4))
    for column, low in (("a", 1), ("b", 0)):
        cells = (reports[column].astype(np.int64) - low) * 16 // (HASH_PRIME - low)
        assert stats.chisquare(np.bincount(cells, minlength=16)).pvalue > 1e-4


# --- Hadamard response -------------------------------------------------------------------------------------


def sylvester(m: int) -> np.ndarray:
    """H[s, v] = (-1)^popcount(s & v)."""
    return np.array([[(-1) ** bin(s & v).count("1") for v in range(m)] for s in range(m)])


def algorithm5(d: int) -> set[tuple[int, ...]]:
    """001 Alg. 5 as printed: S = {[1, -1], [1, 1]}; repeat S' = {v || v, v || -v}."""
    vectors = [(1, -1), (1, 1)]
    while len(vectors) < d:
        vectors = [w for v in vectors for w in (v + v, v + tuple(-x for x in v))]
    return set(vectors)


@pytest.mark.parametrize("m", [2, 4, 8, 16, 64])
def test_sylvester_matrix_is_algorithm5_and_orthogonal(m: int) -> None:
    h = sylvester(m)
    assert {tuple(row) for row in h.tolist()} == algorithm5(m)  # the same set of vectors (001 Lemma 5)
    np.testing.assert_array_equal(h @ h.T, m * np.eye(m))
    np.testing.assert_array_equal(hadamard_bit(np.arange(m)[:, None], np.arange(m)[None, :]), (h + 1) // 2)
    x = np.random.default_rng(m).normal(size=m)
    np.testing.assert_allclose(walsh_hadamard_transform(x), h @ x, atol=1e-9)


@pytest.mark.parametrize("k", [2, 3, 5, 16, 100])
def test_hadamard_estimate_is_harmony_algorithm3(k: int) -> None:
    """f_hat(l) = c_eps / n * sum_j H[s_j, l] b_j with c_eps = (e^eps + 1)/(e^eps - 1) (001 Alg. 3, lines 6-10), and
    the transform-based support counts equal the support matrix's column sums."""
    oracle = HadamardResponse(1.5, k)
    rng = np.random.default_rng(k)
    reports = oracle.perturb(rng.integers(0, k, 5000), rng)
    h = sylvester(oracle.rows)
    signs = 2.0 * reports["bit"] - 1.0
    c_eps = (math.exp(1.5) + 1) / (math.exp(1.5) - 1)
    harmony = c_eps * (h[reports["row"].astype(np.int64)][:, :k] * signs[:, None]).mean(axis=0)
    stats_ = oracle.accumulate(reports)
    np.testing.assert_allclose(oracle.estimate(stats_).value, harmony, atol=1e-12)
    np.testing.assert_array_equal(stats_[:-1], oracle.support_matrix(reports).sum(axis=0))
