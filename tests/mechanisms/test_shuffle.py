"""The shuffle accountant: its divergence equals a direct evaluation, its bounds agree with FMT21's published
numbers, each mechanism's reduction holds on its enumerated channel, and no bound falls below the exact privacy of
a shuffled randomized response (a lower bound any valid bound must respect)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import binom

from ldpstream.mechanisms.base import LDPError
from ldpstream.mechanisms.frequency.unary import OUE, SUE
from ldpstream.mechanisms.shuffle import (
    Reduction,
    composed_bounds,
    delta_for,
    epsilon_for,
    fmt21_closed_form,
    fmt21_reduction,
    mechanism_reduction,
    shuffle_bounds,
    window_bounds,
)


def direct_delta(reduction: Reduction, n: int, epsilon: float) -> float:
    """s * sum over every (c, a') of max(0, P - e^eps Q), term by term (no threshold, no tails left out)."""
    p0 = math.exp(reduction.epsilon0)
    q = p0 / (p0 + 1)
    total = 0.0
    for c in range(n):
        weight = binom.pmf(c, n - 1, reduction.clone)
        a = np.arange(c + 2)
        b_prev, b_here = binom.pmf(a - 1, c, 0.5), binom.pmf(a, c, 0.5)
        p_mass, q_mass = q * b_prev + (1 - q) * b_here, (1 - q) * b_prev + q * b_here
        total += weight * float(np.clip(p_mass - math.exp(epsilon) * q_mass, 0, None).sum())
    return reduction.emit * total


@pytest.mark.parametrize("n", [1, 2, 7, 100, 1500])
@pytest.mark.parametrize("reduction", [fmt21_reduction(1.0), fmt21_reduction(4.0), Reduction(3.0, 0.4, 0.2)])
def test_the_divergence_equals_a_direct_evaluation(n: int, reduction: Reduction) -> None:
    for epsilon in (0.0, 0.05, 0.3, 1.0, 2.9):
        assert delta_for(reduction, n, epsilon) == pytest.approx(direct_delta(reduction, n, epsilon), rel=1e-9,
                                                                 abs=1e-15)


def test_fmt21s_published_numbers() -> None:
    # github.com/apple/ml-shuffling-amplification, README: n = 100,000, eps0 = 4, delta = 1e-6: the numerical bound
    # between 0.1675385583317841 and 0.172790550755978, the closed form 0.5378040242374512
    assert 0.1675385583317841 <= epsilon_for(fmt21_reduction(4.0), 100_000, 1e-6) <= 0.172790550755978
    assert fmt21_closed_form(4.0, 100_000, 1e-6) == pytest.approx(0.5378040242374512, rel=1e-12)
    assert fmt21_closed_form(8.0, 1000, 1e-6) is None  # outside its range


def channel(name: str, epsilon: float, k: int) -> np.ndarray:
    """Every input's distribution over every output, enumerated (rows: inputs)."""
    e = math.exp(epsilon)
    if name == "grr":
        return (np.full((k, k), 1.0) + np.eye(k) * (e - 1)) / (e + k - 1)
    if name in ("sue", "oue"):
        oracle = (SUE if name == "sue" else OUE)(epsilon, k)
        rows = []
        for x in range(k):
            ones = np.array([oracle.p if i == x else oracle.q for i in range(k)])
            rows.append([float(np.prod(np.where(np.array(y), ones, 1 - ones)))
                         for y in itertools.product([0, 1], repeat=k)])
        return np.array(rows)
    if name == "hadamard":
        m = 1 << math.ceil(math.log2(k))
        h = np.array([[(-1) ** bin(s & v).count("1") for v in range(m)] for s in range(m)])
        keep = e / (e + 1)
        return np.array([[((keep if h[s, x] == b else 1 - keep) / m) for s in range(m) for b in (1, -1)]
                         for x in range(k)])
    if name in ("duchi", "harmony"):  # one bit at the extreme inputs -1, 1 and one between
        up = lambda t: 0.5 + t * (e - 1) / (2 * (e + 1))  # noqa: E731
        return np.array([[up(t), 1 - up(t)] for t in (-1.0, 0.0, 1.0)])
    raise ValueError(name)


def parameters(matrix: np.ndarray, epsilon: float) -> tuple[float, float]:
    """The largest emit probability and the smallest clone probability over every pair and every other input."""
    p = math.exp(epsilon)
    emit, clone = 0.0, 1.0
    for x0, x1 in itertools.permutations(range(len(matrix)), 2):
        r0, r1 = matrix[x0], matrix[x1]
        beta = 0.5 * float(np.abs(r0 - r1).sum())
        differ = np.abs(r0 - r1) > 1e-15
        emit = max(emit, beta * (p + 1) / (p - 1))
        for xi in range(len(matrix)):
            clone = min(clone, float((2 * beta * matrix[xi][differ] / np.abs(r0 - r1)[differ]).min()))
    return emit, clone


@pytest.mark.parametrize("name, k", [("grr", 2), ("grr", 3), ("grr", 7), ("sue", 3), ("oue", 3), ("oue", 4),
                                     ("hadamard", 3), ("hadamard", 8), ("duchi", 3)])
@pytest.mark.parametrize("epsilon", [0.5, 1.0, 4.0])
def test_each_mechanisms_reduction_holds_on_its_enumerated_channel(name: str, k: int, epsilon: float) -> None:
    matrix = channel(name, epsilon, k)
    assert np.allclose(matrix.sum(axis=1), 1.0)
    assert (matrix.max(axis=0) <= math.exp(epsilon) * matrix.min(axis=0) * (1 + 1e-9)).all()  # eps-LDP
    emit, clone = parameters(matrix, epsilon)
    reduction = mechanism_reduction(name, epsilon, k)
    assert reduction is not None
    assert reduction.emit >= emit * (1 - 1e-9) and reduction.clone <= clone * (1 + 1e-9)  # as safe as the channel
    assert reduction.emit == pytest.approx(emit, rel=1e-9) and reduction.clone == pytest.approx(clone, rel=1e-9)


def test_the_continuous_mechanisms_reductions_hold_on_their_densities() -> None:
    from ldpstream.mechanisms.numeric.piecewise import Piecewise

    epsilon = 1.5
    pm = Piecewise(epsilon)
    x = np.linspace(-pm.c, pm.c, 400_001)
    dx = x[1] - x[0]
    densities = {t: pm.output_density(t, x) for t in (-1.0, -0.3, 0.6, 1.0)}
    beta = 0.5 * float(np.abs(densities[-1.0] - densities[1.0]).sum() * dx)
    differ = np.abs(densities[-1.0] - densities[1.0]) > 1e-12
    clone = min(float((2 * beta * d[differ] / np.abs(densities[-1.0] - densities[1.0])[differ]).min())
                for d in densities.values())
    reduction = mechanism_reduction("pm", epsilon)
    assert reduction is not None
    p = math.exp(epsilon)
    assert reduction.emit == pytest.approx(beta * (p + 1) / (p - 1), rel=1e-3)
    assert reduction.clone == pytest.approx(clone, rel=1e-3)


def exact_rr_delta(epsilon0: float, n: int, epsilon: float) -> float:
    """delta(eps) of the shuffle of n binary randomized responses, user 1 holding 0 or 1 and the others 0: the
    count of ones, exactly. Any valid bound is at least this."""
    keep = math.exp(epsilon0) / (math.exp(epsilon0) + 1)
    ones = np.arange(n + 1)
    others = binom.pmf(ones, n - 1, 1 - keep)
    shifted = np.concatenate([[0.0], others[:-1]])
    p = keep * others + (1 - keep) * shifted  # user 1 holds 0
    q = (1 - keep) * others + keep * shifted  # user 1 holds 1
    e = math.exp(epsilon)
    return float(max(np.clip(p - e * q, 0, None).sum(), np.clip(q - e * p, 0, None).sum()))


@settings(max_examples=25, deadline=None)
@given(st.floats(0.3, 6.0), st.integers(2, 200_000), st.sampled_from([1e-4, 1e-6, 1e-9]))
def test_no_bound_falls_below_the_exact_privacy_of_shuffled_randomized_response(epsilon0: float, n: int,
                                                                                  delta: float) -> None:
    for name, bound in window_bounds(epsilon0, n, delta, "grr", 2).items():
        assert exact_rr_delta(epsilon0, n, bound) <= delta * (1 + 1e-6), name  # the bound is at least the truth
        assert bound <= epsilon0 + 1e-12, name


def test_the_tightest_is_reported_and_composition_grows_with_windows() -> None:
    one = shuffle_bounds(4.0, 1_000_000, 1e-8, "grr", 2)
    assert one["epsilon"] == min(one["bounds"].values()) and one["bound"] == "variation_ratio_grr"
    assert 0.04 < one["epsilon"] < 0.05  # the "about 0.05" at eps0 = 4, n = 1e6, delta = 1e-8
    day = composed_bounds(4.0, 1_000_000, 1e-8, 24, "grr", 2)
    assert day["pld"] < day["advanced"] and day["pld"] < day["basic"]
    assert day["pld"] > one["epsilon"]
    window = composed_bounds(4.0, 1_000_000, 1e-8, 1, "grr", 2)
    assert one["epsilon"] <= window["pld"] <= one["epsilon"] * 1.01  # pessimistic, and close
    sybils = shuffle_bounds(4.0, 1_000_000, 1e-8, "grr", 2, sybil_fraction=0.5)
    assert sybils["honest_reports"] == 500_000 and sybils["epsilon"] > one["epsilon"]


def test_bad_arguments_are_ldp_errors() -> None:
    for call in (lambda: epsilon_for(fmt21_reduction(1.0), 10, 0.0), lambda: fmt21_reduction(-1.0),
                 lambda: mechanism_reduction("grr", 1.0, None), lambda: shuffle_bounds(1.0, 10, 1e-6, windows=0),
                 lambda: shuffle_bounds(1.0, 10, 1e-6, sybil_fraction=1.0), lambda: Reduction(1.0, 0.0, 0.5)):
        with pytest.raises(LDPError):
            call()
    assert mechanism_reduction("rappor", 1.0) is None  # no derivation here: the general bounds apply
