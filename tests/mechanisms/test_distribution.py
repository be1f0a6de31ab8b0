"""Distribution mechanisms: the contract checks of every registered one; for Square Wave with EMS the exact output
distribution and its epsilon-LDP, the channel, EMS's fixed point and its delta-method standard errors; the
`Distribution` read-outs."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate, stats

from ldpstream.mechanisms import registry
from ldpstream.mechanisms.audit import audit_mechanism
from ldpstream.mechanisms.base import LDPError
from ldpstream.mechanisms.distribution import HierarchicalHistogram, SquareWave
from ldpstream.mechanisms.distribution.base import MAX_BINS, MAX_EPSILON, Distribution, NoiseCovariance
from ldpstream.mechanisms.distribution.ems import (
    EMS_TOLERANCE,
    BandedChannel,
    choose_smoothing,
    ems,
    ems_cdf_sensitivity,
    ems_step,
)
from ldpstream.mechanisms.distribution.square_wave import square_wave_half_width, window_overlap
from tests.mechanisms.checks import CHECKS, EPSILONS, MechanismCase, check_unbiased, check_variance
from tests.mechanisms.test_numeric import unit_values


def sw_case() -> MechanismCase:
    return MechanismCase(
        name="sw",
        make=lambda eps: SquareWave(eps, bins=16),
        sample_values=unit_values,
        expected=lambda mech, t: t,
        contributions=lambda mech, reports: reports["value"],
        variance=lambda mech, t: mech.variance(t),  # type: ignore[attr-defined]
        bad_values=([np.nan], [1.5], [-1.0000001], [0.0, np.inf], np.zeros((2, 2))),
    )


def hh_case() -> MechanismCase:
    """The hierarchical histogram's mean is not an average of per-device terms (it is least squares over the
    levels): the checks of its mean and ranges are `test_hierarchy_*` below; the case serves the other checks."""
    return MechanismCase(
        name="hh",
        make=lambda eps: HierarchicalHistogram(eps, bins=16, fanout=4),
        sample_values=unit_values,
        expected=lambda mech, t: t,
        contributions=lambda mech, reports: reports["level"],
        variance=lambda mech, t: t,
        bad_values=([np.nan], [1.5], [-1.0000001], [0.0, np.inf], np.zeros((2, 2))),
    )


CASES = {"sw": sw_case, "hh": hh_case}
NAMES = tuple(registry.DISTRIBUTION)  # every registered distribution mechanism goes through the checks below
PER_DEVICE_MEAN = {"sw"}  # whose mean is an average of per-device unbiased terms (the numeric contract)


CONTRACT = [(name, check) for name in NAMES for check in CHECKS
            if name in PER_DEVICE_MEAN or check not in (check_unbiased, check_variance)]


@pytest.mark.parametrize("eps", EPSILONS)
@pytest.mark.parametrize(("name", "check"), CONTRACT, ids=lambda x: getattr(x, "__name__", x))
def test_contract(name: str, check, eps: float) -> None:
    """Reports in their schema, seeded, additive statistics, bad input refused; for sw also the unbiased mean with
    its closed-form variance (hh's mean and ranges: the test_hierarchy_* tests)."""
    check(CASES[name](), eps)


def test_registry_builds_it_with_its_parameters() -> None:
    mech = registry.make_distribution("sw", 1.0, bins=32)
    assert isinstance(mech, SquareWave) and mech.bins == 32
    with pytest.raises(LDPError, match="no parameter 'hashes'"):
        registry.make_distribution("sw", 1.0, hashes=2)
    with pytest.raises(LDPError, match="unknown distribution mechanism"):
        registry.make_distribution("pm", 1.0)


# --- the mechanism (Li et al. Sec. 4) -------------------------------------------------------------------------


@pytest.mark.parametrize("eps", [1e-6, 0.01, 0.5, 1.0, 2.0, 8.0, MAX_EPSILON])
def test_half_width_and_densities(eps: float) -> None:
    """2 b p + q = 1 and p / q = e^eps; b matches the closed form without cancellation, in (0, 1/2)."""
    mech = SquareWave(eps)
    b = mech.half_width
    assert 0 < b < 0.5
    assert 2 * b * mech.p + mech.q == pytest.approx(1.0, rel=1e-12)
    assert mech.p / mech.q == pytest.approx(math.exp(eps), rel=1e-12)
    if eps >= 0.01:  # the printed form, fine away from eps = 0
        e = math.exp(eps)
        assert b == pytest.approx((eps * e - e + 1) / (2 * e * (e - 1 - eps)), rel=1e-9)
    assert square_wave_half_width(1e-6) == pytest.approx(0.5, abs=1e-6)


@pytest.mark.parametrize("eps", EPSILONS)
def test_density_ratio_is_e_eps(eps: float) -> None:
    """The report's density (differences of the exact CDF) takes two values, p/2 and q/2, whatever t: ratio e^eps."""
    mech = SquareWave(eps)
    low, high = mech.output_range
    xs = np.linspace(low, high, 20_001)
    dens = np.array([np.diff(mech.output_cdf(t, xs)) for t in np.linspace(-1, 1, 21)]) / np.diff(xs)
    ratio = dens.max(axis=0) / dens.min(axis=0)
    assert np.all(ratio <= math.exp(eps) * (1 + 1e-6))
    assert ratio.max() == pytest.approx(math.exp(eps), rel=1e-6)
    assert mech.output_cdf(0.3, np.array([low]))[0] == pytest.approx(0.0, abs=1e-12)
    assert mech.output_cdf(0.3, np.array([high]))[0] == pytest.approx(1.0, rel=1e-12)


@pytest.mark.parametrize("eps", [0.5, 2.0])
def test_samples_follow_the_stated_distribution(eps: float) -> None:
    """Kolmogorov-Smirnov of 20000 reports per input against the stated CDF; a shifted CDF must be rejected."""
    mech = SquareWave(eps)
    rng = np.random.default_rng(11)
    for t in (-1.0, -0.3, 0.0, 1.0):
        x = mech.perturb(np.full(20_000, t), rng)["value"]
        assert stats.kstest(x, lambda v, t=t: mech.output_cdf(t, v)).pvalue > 1e-4
    x = mech.perturb(np.full(20_000, 0.5), rng)["value"]
    assert stats.kstest(x, lambda v: mech.output_cdf(0.3, v)).pvalue < 1e-4  # the test has power


@pytest.mark.parametrize("eps", [0.5, 1.0, 4.0])
def test_variance_equals_integral_of_density(eps: float) -> None:
    """a + b' t^2 == the integral of (t* - t)^2 against the stated density."""
    mech = SquareWave(eps)
    low, high = mech.output_range
    for t in (-1.0, -0.4, 0.0, 1.0):
        u_breaks = np.unique(np.clip([-1 - mech.window, t - mech.window, t + mech.window, 1 + mech.window],
                                     -1 - mech.window, 1 + mech.window))
        breaks = u_breaks / mech.scale
        total = 0.0
        for a, b in zip(breaks[:-1], breaks[1:], strict=True):
            density = (mech.output_cdf(t, np.array([b]))[0] - mech.output_cdf(t, np.array([a]))[0]) / (b - a)
            total += density * integrate.quad(lambda x, t=t: (x - t) ** 2, a, b)[0]
        assert total == pytest.approx(float(mech.variance(t)[0]), rel=1e-9)
        assert low <= breaks[0] and breaks[-1] <= high


@pytest.mark.parametrize("eps", [0.5, 4.0])
def test_auditor_finds_no_violation(eps: float) -> None:
    result = audit_mechanism(SquareWave(eps), seed=1, n=300_000, n_select=50_000)
    assert result.epsilon_lower_bound <= eps
    assert result.epsilon_lower_bound >= 0.8 * eps  # the audit has power: the bound is close to eps


def test_worst_case_variance_is_above_pm() -> None:
    """Asking for a distribution costs a little on the mean (module docstring: 5.52 against PM's 5.22 at eps = 1)."""
    assert SquareWave(1.0).worst_case_variance() == pytest.approx(5.5161, abs=1e-4)
    assert SquareWave(1.0).worst_case_variance() > registry.make("pm", 1.0).worst_case_variance()  # type: ignore[attr-defined]


def test_bad_parameters() -> None:
    for bins in (0, 3, MAX_BINS + 1, 2.5, True):
        with pytest.raises(LDPError, match="bins"):
            SquareWave(1.0, bins=bins)  # type: ignore[arg-type]
    with pytest.raises(LDPError, match="supported maximum"):
        SquareWave(MAX_EPSILON * 1.01)
    mech = SquareWave(1.0, bins=8)
    with pytest.raises(LDPError, match="statistics"):
        mech.distribution(np.zeros(3))
    with pytest.raises(LDPError, match="no reports"):
        mech.distribution(mech.empty_stats())


# --- the channel (Li et al. Sec. 5) ---------------------------------------------------------------------------


@pytest.mark.parametrize(("eps", "bins"), [(0.5, 8), (1.0, 16), (4.0, 64), (MAX_EPSILON, 4)])
def test_channel_is_the_exact_cell_to_cell_probability(eps: float, bins: int) -> None:
    """Every column sums to 1, and an entry equals P[u in cell j | t uniform in cell i] by quadrature."""
    mech = SquareWave(eps, bins=bins)
    m = mech.channel.dense()
    assert m.shape == (mech.output_cells, bins)
    np.testing.assert_allclose(m.sum(axis=0), 1.0, rtol=1e-9)
    edges, out = mech.edges, mech.output_edges / mech.scale  # output_cdf takes reports t* = u / s
    for i, j in ((0, 0), (bins // 2, mech.output_cells // 2), (bins - 1, mech.output_cells - 2)):
        def inside(t: float, j: int = j) -> float:
            return (mech.output_cdf(t, np.array([out[j + 1]]))[0] - mech.output_cdf(t, np.array([out[j]]))[0])
        kinks = mech.scale * np.array([out[j], out[j + 1]])[:, None] + np.array([-mech.window, mech.window])
        kinks = kinks[(kinks > edges[i]) & (kinks < edges[i + 1])]  # where the window meets the cell's edges
        expected = integrate.quad(inside, edges[i], edges[i + 1], points=kinks, limit=200)[0] / (edges[i + 1]
                                                                                                 - edges[i])
        assert m[j, i] == pytest.approx(expected, rel=1e-6, abs=1e-12)


def test_window_overlap_by_quadrature() -> None:
    rng = np.random.default_rng(3)
    for _ in range(20):
        x0, y0 = rng.uniform(-1, 1, 2)
        x1, y1, w = x0 + rng.uniform(0.01, 0.5), y0 + rng.uniform(0.01, 0.5), rng.uniform(0.01, 0.6)
        def length(t: float, y0: float = y0, y1: float = y1, w: float = w) -> float:
            return max(0.0, min(y1, t + w) - max(y0, t - w))
        expected = integrate.quad(length, x0, x1, points=[y0 - w, y0 + w, y1 - w, y1 + w], limit=200)[0] / (x1 - x0)
        assert float(window_overlap(x0, x1, y0, y1, w)) == pytest.approx(expected, rel=1e-9, abs=1e-12)


def test_banded_channel_products_match_the_dense_matrix() -> None:
    rng = np.random.default_rng(4)
    channel = BandedChannel(rng.random(9), rng.random(4), offset=-2, inputs=6)
    m = channel.dense()
    theta, r = rng.random(6), rng.random(9)
    np.testing.assert_allclose(channel.forward(theta), m @ theta, rtol=1e-12)
    np.testing.assert_allclose(channel.adjoint(r), m.T @ r, rtol=1e-12)
    both = np.stack([theta, 2 * theta], 1)
    np.testing.assert_allclose(channel.forward(both), m @ both, rtol=1e-12)
    with pytest.raises(LDPError, match="cover"):
        BandedChannel(rng.random(9), rng.random(4), offset=1, inputs=6)


def test_output_cells_count_every_report_once() -> None:
    mech = SquareWave(1.0, bins=10)
    rng = np.random.default_rng(5)
    reports = mech.perturb(rng.uniform(-1, 1, 5000), rng)
    counts = mech.accumulate(reports)[3:]
    assert counts.sum() == 5000 and counts.shape == (mech.output_cells,)
    low, high = mech.output_range
    assert mech.cells_of(np.array([low, high])).tolist() == [0, mech.output_cells - 1]


# --- EMS (Li et al. Sec. 5) -------------------------------------------------------------------------------------


def _counts(mech: SquareWave, values: np.ndarray, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return mech.accumulate(mech.perturb(values, rng))[3:]


def test_squarem_reaches_the_plain_fixed_point() -> None:
    """SQUAREM's answer is the fixed point of the plain EMS map, which plain iteration reaches too (slowly)."""
    mech = SquareWave(1.0, bins=16)
    counts = _counts(mech, np.random.default_rng(6).beta(5, 2, 20_000) * 2 - 1, 7)
    fit = ems(mech.channel, counts, tol=1e-12)
    assert fit.converged
    np.testing.assert_allclose(ems_step(mech.channel, counts, fit.theta), fit.theta, atol=1e-11)
    theta = np.full(16, 1 / 16)
    for _ in range(20_000):
        theta = ems_step(mech.channel, counts, theta)
    np.testing.assert_allclose(theta, fit.theta, atol=1e-8)
    assert fit.theta.min() > 0 and fit.theta.sum() == pytest.approx(1.0)


def test_ems_refuses_bad_counts() -> None:
    mech = SquareWave(1.0, bins=8)
    for counts in (np.zeros(mech.output_cells), -np.ones(mech.output_cells), np.ones(3)):
        with pytest.raises(LDPError, match="counts"):
            ems(mech.channel, counts)
    assert not ems(mech.channel, np.arange(mech.output_cells, dtype=float), max_steps=2).converged


@pytest.mark.parametrize("level", [1.0, 0.5, 2.0])
def test_sensitivity_matches_finite_differences(level: float) -> None:
    """d F / d h from the implicit function theorem == central differences of EMS's fixed point, at a smoothing level
    below, at and above the paper's (S_lambda mixed with the identity, S itself, S twice). Beta(2, 5) leaves the last
    of 8 cells nearly empty (mass 2e-4) and the fixed point puts it on the face theta_7 = 0 (g_7 / c = 0.96), where it
    stays for small changes of the counts: the differences are those of the free derivative with that end cell held
    at 0 (rows - C w_7 d theta_7 / d h), and the first cell, inside the simplex, is free."""
    mech = SquareWave(1.0, bins=8)
    counts = _counts(mech, np.random.default_rng(8).beta(2, 5, 5000) * 2 - 1, 9)

    def fixed_point(h: np.ndarray) -> np.ndarray:  # SQUAREM's answer, then plain steps to the last digits
        theta = ems(mech.channel, h, level, tol=1e-14, max_steps=100_000).theta
        for _ in range(3000):
            theta = ems_step(mech.channel, h, theta, level)
        return theta

    theta = fixed_point(counts)
    free = ems_cdf_sensitivity(mech.channel, counts, theta, level)
    assert theta[0] > 0.1 and theta[-1] < 1e-12 and free.end_values[0] == pytest.approx(theta[0])
    assert free.end_values[1] < 0  # the free value of the last cell, one Newton step past the face
    rows = free.rows - np.outer(free.end_columns[:, 1], free.end_rows[1])
    step = 1e-3
    for j in range(0, mech.output_cells, 3):
        bump = np.zeros_like(counts)
        bump[j] = step
        up, down = fixed_point(counts + bump), fixed_point(counts - bump)
        numeric = np.concatenate([[0.0], np.cumsum((up - down) / (2 * step))])
        np.testing.assert_allclose(rows[:, j], numeric, atol=1e-9 * np.abs(rows).max() + 1e-13)


@pytest.mark.parametrize("smoothing", [1.0, 1 / 4, 1 / 16])
def test_standard_errors_match_the_spread_over_repeated_collections(smoothing: float) -> None:
    """Over R = 100 collections of n = 20000 reports, the delta-method standard error of the CDF at each edge (and
    of three quantiles) equals the empirical standard deviation: the sample SD's own relative error is
    1 / sqrt(2 (R - 1)) ~ 7%, so 4 of those (28%) per edge, and the median over edges within 10%. (At a fixed
    smoothing level: the cross-validated choice's own variability is not in the standard errors.)

    Beta(5, 2) leaves the first of 16 cells nearly empty (mass 6e-6): EMS's end cell, which the kernel keeps, is on
    the simplex's face theta_0 = 0 in some collections and not in others, and the standard errors censor it at 0
    (module docstring of `ems`; the plain delta method's SE of the first CDF value was 5.6 times too small at level
    1/4, 1.6 at 1/16). At the paper's level the cell is on the face in every collection and the CDF's first value
    is 0 up to the iteration's residue: theta_0 shrinks by g_0 / c <= 0.994 per EMS map there, so it stops below
    EMS_TOLERANCE / (1 - 0.994) < 200 EMS_TOLERANCE, and so does its spread. There the standard error (from the
    collections that might have left the face) must be at least that spread and negligible on a CDF."""
    mech = SquareWave(1.0, bins=16, smoothing=smoothing)
    rng = np.random.default_rng(10)
    values = rng.beta(5, 2, 20_000) * 2 - 1
    cdfs, ses, qs, qses = [], [], [], []
    for _ in range(100):
        dist = mech.distribution(mech.accumulate(mech.perturb(values, rng)))
        cdfs.append(dist.cdf)
        ses.append(dist.cdf_stderr)
        q, qse = dist.quantiles([0.1, 0.5, 0.9])
        qs.append(q)
        qses.append(qse)
    sd, se = np.std(cdfs, axis=0, ddof=1)[1:-1], np.mean(ses, axis=0)[1:-1]
    residue = sd < 200 * EMS_TOLERANCE
    assert not residue[1:].any()
    ratio = sd / se
    assert np.all(np.abs(ratio[~residue] - 1) < 0.28), ratio
    assert abs(np.median(ratio) - 1) < 0.10, ratio
    assert np.all((se[residue] >= sd[residue]) & (se[residue] < 1e-3)), (sd, se)
    q_ratio = np.std(qs, axis=0, ddof=1) / np.mean(qses, axis=0)
    assert np.all(np.abs(q_ratio - 1) < 0.28), q_ratio


def test_cross_validation_smooths_a_peak_less_than_a_plateau() -> None:
    """On 64 cells the chosen level is below the paper's for a distribution peaked at one end (whose CDF it brings
    much closer to the truth) and above that for the uniform one; the same counts always give the same level.

    Every level is unbiased for the uniform (the kernel keeps a constant, the kept end cells included), so its
    levels' held-out scores differ by noise alone and which level wins is the draw's: over five collections (the
    uniform values drawn afresh, perturbed with seeds 15 to 19) the choice was 1, 4, 2, 1/2 and 1 (the paper's
    level stays unless another is more than one standard error better). What holds whatever the draw is the
    ordering: the plateau is smoothed more than the peak."""
    mech = SquareWave(1.0, bins=64)
    rng = np.random.default_rng(13)
    peaked = (1 - rng.random(100_000) * (1 - 3.0**-9)) ** (-1 / 9) - 2  # density (x + 2)^-10 on [-1, 1]
    counts = _counts(mech, peaked, 14)
    choice = choose_smoothing(mech.channel, counts)
    level = choice.level
    assert level < 1 and choose_smoothing(mech.channel, counts.copy()).level == level
    assert {1.0, level, level / 2} <= choice.scores.keys() and choice.scores[level] > choice.scores[1.0]
    truth = np.searchsorted(np.sort(peaked), mech.edges, side="right") / peaked.size
    def ks(level: float) -> float:
        return float(np.abs(np.concatenate([[0], np.cumsum(ems(mech.channel, counts, level).theta)]) - truth).max())
    assert ks(level) < ks(1.0) / 3
    assert choose_smoothing(mech.channel, _counts(mech, rng.uniform(-1, 1, 100_000), 15)).level > level
    assert mech.distribution(np.concatenate([[1, 0, 0], counts])).details["smoothing"] == level
    stats = np.concatenate([[1, 0, 0], counts])
    assert mech.distribution(stats) is mech.distribution(stats.copy())  # kept by its counts, not fitted again
    assert mech.distribution(stats + np.eye(stats.size)[-1]) is not mech.distribution(stats)
    details = SquareWave(1.0, bins=64, smoothing=0.5).distribution(stats).details
    assert details["smoothing"] == 0.5 and details["smoothing_chosen_by"] == "given" and details["converged"]


def test_distribution_is_close_to_the_truth() -> None:
    """At n = 2e5, eps = 1 on 64 bins the CDF is within 0.05 of the truth everywhere (EMS smooths: Beta(5, 2) falls
    steeply to 0 at its right end, where the bias is 0.035), the median within 0.02 of the truth."""
    mech = SquareWave(1.0, bins=64)
    rng = np.random.default_rng(12)
    values = rng.beta(5, 2, 200_000) * 2 - 1
    dist = mech.distribution(mech.accumulate(mech.perturb(values, rng)))
    truth = np.searchsorted(np.sort(values), dist.edges, side="right") / values.size
    assert np.abs(dist.cdf - truth).max() < 0.05
    assert abs(dist.quantiles([0.5])[0][0] - np.median(values)) < 0.02
    assert dist.details["converged"] and dist.n == 200_000


# --- hierarchical histograms (Cormode et al. 2019) ------------------------------------------------------------


def test_hierarchy_is_exactly_eps_ldp() -> None:
    """Every output (level, row, bit) of a 2-level tree over 16 bins, under inputs in every bin: the probabilities sum
    to 1 per input and their ratio across inputs is at most e^eps, reached."""
    mech = HierarchicalHistogram(1.5, bins=16, fanout=4)
    level, row, bit = np.meshgrid([1, 2], np.arange(mech.rows), [0, 1], indexing="ij")
    reports = {"level": level.ravel().astype(np.uint8), "row": row.ravel().astype(np.uint32),
               "bit": bit.ravel().astype(np.uint8)}
    probs = np.exp(mech.log_pmf(reports, np.linspace(-1, 1, 33)))
    np.testing.assert_allclose(probs.sum(axis=0), 1.0, rtol=1e-12)
    ratio = probs.max(axis=1) / probs.min(axis=1)
    assert np.all(ratio <= math.exp(1.5) * (1 + 1e-12)) and ratio.max() == pytest.approx(math.exp(1.5))


def test_hierarchy_two_passes_are_the_constrained_least_squares() -> None:
    """The upward/downward passes give argmin sum_l w_l ||A_l x - y_l||^2 subject to sum(x) = 1, the KKT solution."""
    mech = HierarchicalHistogram(1.0, bins=27, fanout=3)
    rng = np.random.default_rng(16)
    ys = [rng.normal(0, 1, (size, 1)) for size in mech.sizes]
    variances = rng.uniform(0.5, 2.0, mech.height)
    x = mech._consistent(ys, variances, 1.0)[:, 0]
    blocks = [np.kron(np.eye(size), np.ones(27 // size)) for size in mech.sizes]  # A_l: nodes x leaves
    h = sum(a.T @ a / v for a, v in zip(blocks, variances, strict=True))
    rhs = sum(a.T @ y[:, 0] / v for a, y, v in zip(blocks, ys, variances, strict=True))
    kkt = np.block([[h, np.ones((27, 1))], [np.ones((1, 27)), np.zeros((1, 1))]])
    np.testing.assert_allclose(x, np.linalg.solve(kkt, np.append(rhs, 1.0))[:27], atol=1e-12)


def test_hierarchy_cdf_ranges_and_mean_are_unbiased_within_4_standard_errors() -> None:
    mech = HierarchicalHistogram(1.0, bins=64, fanout=4)
    rng = np.random.default_rng(17)
    values = rng.beta(5, 2, 200_000) * 2 - 1
    stats = mech.accumulate(mech.perturb(values, rng))
    dist = mech.distribution(stats)
    truth = np.searchsorted(np.sort(values), dist.edges, side="right") / values.size
    assert np.all(np.abs(dist.cdf - truth)[1:-1] <= 4 * dist.cdf_stderr[1:-1])
    assert dist.cdf[-1] == pytest.approx(1.0) and dist.probabilities.min() >= 0
    value, se = dist.range_probability(-0.3, 0.55)
    assert abs(value - np.mean((values > -0.3) & (values <= 0.55))) <= 4 * se + 1 / 64  # ends inside bins
    centres = (mech.leaves(values) + 0.5) / 64 * 2 - 1
    est = mech.estimate(stats)
    assert abs(float(est.value) - centres.mean()) <= 4 * float(est.stderr)
    assert abs(centres.mean() - values.mean()) <= 1 / 64


def test_hierarchy_standard_errors_match_the_spread_over_repeated_collections() -> None:
    """As for sw: 100 collections of 20000 devices, the exact standard errors against the empirical spread."""
    mech = HierarchicalHistogram(1.0, bins=16, fanout=4)
    rng = np.random.default_rng(18)
    values = rng.beta(5, 2, 20_000) * 2 - 1
    cdfs, ses = [], []
    for _ in range(100):
        dist = mech.distribution(mech.accumulate(mech.perturb(values, rng)))
        cdfs.append(dist.cdf)
        ses.append(dist.cdf_stderr)
    ratio = np.std(cdfs, axis=0, ddof=1)[1:-1] / np.mean(ses, axis=0)[1:-1]
    assert np.all(np.abs(ratio - 1) < 0.28) and abs(np.median(ratio) - 1) < 0.10, ratio


def test_hierarchy_with_an_unobserved_level_and_without_reports() -> None:
    mech = HierarchicalHistogram(1.0, bins=16, fanout=4)
    rng = np.random.default_rng(19)
    reports = mech.perturb(rng.uniform(-1, 1, 2000), rng)
    leaves_only = {k: v[reports["level"] == 2] for k, v in reports.items()}
    dist = mech.distribution(mech.accumulate(leaves_only))
    assert dist.details["reports_per_level"][0] == 0 and dist.cdf[-1] == pytest.approx(1.0)
    assert np.isfinite(dist.cdf_stderr).all()
    empty = mech.estimate(mech.empty_stats())
    assert empty.n == 0 and np.isnan(empty.value) and np.isinf(empty.stderr)
    with pytest.raises(LDPError, match="no reports"):
        mech.distribution(mech.empty_stats())
    bad = mech.accumulate(reports)
    bad[1] = 1e9
    with pytest.raises(LDPError, match="not those of a batch"):
        mech.distribution(bad)


def test_hierarchy_parameters() -> None:
    assert HierarchicalHistogram(1.0, bins=27, fanout=3).rows == 32
    with pytest.raises(LDPError, match="power of the fanout 4"):
        HierarchicalHistogram(1.0, bins=32, fanout=4)
    for fanout in (1, 17, 2.0, True):
        with pytest.raises(LDPError, match="fanout"):
            HierarchicalHistogram(1.0, bins=16, fanout=fanout)  # type: ignore[arg-type]
    assert HierarchicalHistogram(1.0).worst_case_variance() > SquareWave(1.0).worst_case_variance()


# --- the Distribution read-outs ---------------------------------------------------------------------------------


def _known() -> Distribution:
    """Bins [0, 1), [1, 2), [2, 4) with masses 0.2, 0.3, 0.5; CDF = z[0] + z[1] at the inner edges' noise."""
    edges = np.array([0.0, 1.0, 2.0, 4.0])
    rows = np.array([[0.0, 0.0], [1.0, 0.0], [1.0, 1.0], [0.0, 0.0]])
    noise = NoiseCovariance(np.array([0.01, 0.04]), np.zeros((2, 1)))
    return Distribution("known", 50, edges, np.array([0.2, 0.3, 0.5]), np.array([0.0, 0.2, 0.5, 1.0]), rows, noise,
                        "exact")


def test_read_outs_of_a_known_distribution() -> None:
    d = _known()
    np.testing.assert_allclose(d.density, [0.2, 0.3, 0.25])
    np.testing.assert_allclose(d.cdf_stderr, [0.0, 0.1, math.sqrt(0.05), 0.0])
    x, se = d.quantiles([0.1, 0.5, 0.75])
    np.testing.assert_allclose(x, [0.5, 2.0, 3.0])
    np.testing.assert_allclose(se, [0.05 / 0.2, math.sqrt(0.05) / 0.3, math.sqrt(0.05) / 2 / 0.25])
    value, se_range = d.range_probability(1.0, 3.0)  # F(3) - F(1): noise rows (0.5, 0.5) - (1, 0)
    assert value == pytest.approx(0.55) and se_range == pytest.approx(math.sqrt(0.01 / 4 + 0.04 / 4))
    mean, mean_se = d.mean()
    assert mean == pytest.approx(0.2 * 0.5 + 0.3 * 1.5 + 0.5 * 3.0)
    assert mean_se > 0
    value, se_at = d.cdf_at([1.5, -3.0, 9.0])
    np.testing.assert_allclose(value, [0.35, 0.0, 1.0])
    with pytest.raises(LDPError, match="low <= high"):
        d.range_probability(2.0, 1.0)
    with pytest.raises(LDPError, match="between 0 and 1"):
        d.quantiles([0.0])


def test_rescaled_moves_the_grid_only() -> None:
    d = _known().rescaled(10.0, 18.0)
    np.testing.assert_allclose(d.edges, [10.0, 12.0, 14.0, 18.0])
    np.testing.assert_allclose(d.quantiles([0.5])[0], [14.0])
    assert d.mean()[0] == pytest.approx(10 + 2 * _known().mean()[0])
    payload = d.to_dict([0.5])
    assert set(payload) == {"method", "reports", "grid", "density", "probabilities", "cdf", "cdf_stderr", "quantiles",
                            "mean", "stderr_method", "details"}
    assert payload["quantiles"] == {"0.5": {"estimate": pytest.approx(14.0),
                                            "stderr": pytest.approx(math.sqrt(0.05) / 0.15)}}
    with pytest.raises(LDPError, match="lo < hi"):
        d.rescaled(1.0, 1.0)
