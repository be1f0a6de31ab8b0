"""Post-processing: clipping a mean, Norm-Sub, the least-squares projection onto the simplex (properties)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from ldpstream.mechanisms.base import LDPError
from ldpstream.mechanisms.postprocess import clip_mean, norm_sub, project_simplex

vectors = arrays(np.float64, st.integers(1, 30), elements=st.floats(-3.0, 3.0, allow_nan=False, width=64))


def on_simplex(z: np.ndarray) -> bool:
    return bool((z >= 0).all() and abs(z.sum() - 1.0) < 1e-9)


@settings(max_examples=200, deadline=None)
@given(f=vectors, seed=st.integers(0, 2**32 - 1))
def test_projection_is_the_closest_point_of_the_simplex(f: np.ndarray, seed: int) -> None:
    z = project_simplex(f)
    assert on_simplex(z)
    others = np.random.default_rng(seed).dirichlet(np.ones(f.size), size=50)  # random points of the simplex
    others = np.vstack([others, np.eye(f.size)])  # and its vertices
    assert np.sum((f - z) ** 2) <= np.min(np.sum((f - others) ** 2, axis=1)) + 1e-9
    # KKT: z = max(f - theta, 0) with one theta; every zeroed entry lies at or below theta.
    theta = np.mean((f - z)[z > 0])
    np.testing.assert_allclose((f - z)[z > 0], theta, atol=1e-9)
    assert np.all(f[z == 0] <= theta + 1e-9)


@settings(max_examples=200, deadline=None)
@given(f=vectors)
def test_norm_sub_is_consistent_and_keeps_negatives_at_zero(f: np.ndarray) -> None:
    z = norm_sub(f)
    assert on_simplex(z)
    if (f > 0).any():
        assert np.all(z[f <= 0] == 0)  # a non-positive estimate is never raised
        shift = (f - z)[z > 0]  # one common shift for every kept entry (Wang et al.'s Norm-Sub)
        np.testing.assert_allclose(shift, shift[0], atol=1e-9)
    if np.maximum(f, 0).sum() >= 1:
        np.testing.assert_allclose(z, project_simplex(np.maximum(f, 0)), atol=1e-12)


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), k=st.integers(1, 20))
def test_points_of_the_simplex_are_left_alone(seed: int, k: int) -> None:
    z = np.random.default_rng(seed).dirichlet(np.ones(k))
    np.testing.assert_allclose(project_simplex(z), z, atol=1e-12)
    np.testing.assert_allclose(norm_sub(z), z, atol=1e-12)


def test_worked_examples_and_rows() -> None:
    np.testing.assert_allclose(norm_sub([0.5, 0.3, -0.2]), [0.6, 0.4, 0.0])  # positive mass < 1: topped up
    np.testing.assert_allclose(project_simplex([0.5, 0.3, -0.2]), [0.6, 0.4, 0.0])
    np.testing.assert_allclose(norm_sub([0.2, 0.2, -0.05]), [0.5, 0.5, 0.0])  # projection would give -0.05 + ...
    np.testing.assert_allclose(project_simplex([0.2, 0.2, -0.05]), [0.4166666667, 0.4166666667, 0.1666666667])
    np.testing.assert_allclose(norm_sub([-1.0, -2.0]), [0.5, 0.5])  # nothing positive: uniform
    rows = np.array([[0.7, 0.5, -0.2], [0.5, 0.3, -0.2]])
    np.testing.assert_allclose(project_simplex(rows), [[0.6, 0.4, 0.0], [0.6, 0.4, 0.0]])
    np.testing.assert_allclose(norm_sub(rows), project_simplex(rows))


def test_bad_frequency_vectors_are_refused() -> None:
    for bad in ([], [np.nan, 0.5], [np.inf], 0.3):
        for fn in (norm_sub, project_simplex):
            with pytest.raises(LDPError):
                fn(bad)


@settings(max_examples=100, deadline=None)
@given(
    x=st.floats(allow_nan=False, allow_infinity=False, width=64),
    lo=st.floats(-1e6, 1e6),
    width=st.floats(1e-6, 1e6),
)
def test_clip_mean(x: float, lo: float, width: float) -> None:
    hi = lo + width
    y = float(clip_mean(x, lo, hi))
    assert lo <= y <= hi
    assert y == x or (x < lo and y == lo) or (x > hi and y == hi)


def test_clip_mean_refuses_an_empty_range() -> None:
    for lo, hi in ((1.0, 1.0), (2.0, 1.0), (np.nan, 1.0), (0.0, np.inf)):
        with pytest.raises(LDPError):
            clip_mean(0.5, lo, hi)
