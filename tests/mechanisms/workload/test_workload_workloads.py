"""Workload matrices: closed-form Gram matrices, shapes, user-defined workloads, bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ldpstream.mechanisms.base import LDPError
from ldpstream.mechanisms.workload.workloads import (
    WORKLOAD_NAMES,
    Workload,
    load_workload,
    marginals,
    predicate_queries,
    range_queries,
    workload_by_name,
)


@pytest.mark.parametrize("name", WORKLOAD_NAMES)
@pytest.mark.parametrize("n", [8, 16, 32])
def test_closed_form_gram_equals_w_transpose_w(name: str, n: int) -> None:
    workload = workload_by_name(name, n)
    w = workload.matrix()
    assert w.shape == (workload.num_queries, n)
    np.testing.assert_allclose(workload.gram, w.T @ w, rtol=0, atol=1e-12)


def test_prefix_and_all_range_rows() -> None:
    np.testing.assert_array_equal(workload_by_name("prefix", 5).matrix(), np.tril(np.ones((5, 5))))
    rows = workload_by_name("all_range", 4).matrix()
    assert rows.shape == (10, 4)
    # every row is one contiguous block of ones, and all intervals are distinct
    starts, ends = rows.argmax(axis=1), 3 - rows[:, ::-1].argmax(axis=1)
    assert (rows.sum(axis=1) == ends - starts + 1).all()
    assert len({(int(a), int(b)) for a, b in zip(starts, ends, strict=True)}) == 10


def test_marginal_tables_partition_the_users() -> None:
    k, n = 5, 32
    all_marginals = workload_by_name("all_marginals", n).matrix()
    assert all_marginals.shape == (3**k, n)
    # each of the 2^k tables holds every user in exactly one cell
    np.testing.assert_array_equal(all_marginals.sum(axis=0), np.full(n, 2.0**k))
    three_way = workload_by_name("3way_marginals", n).matrix()
    assert three_way.shape == (math.comb(k, 3) * 8, n)
    np.testing.assert_array_equal(three_way.sum(axis=0), np.full(n, math.comb(k, 3)))
    # the cell of attributes {0, 1, 2} with values (1, 0, 1) holds exactly the users with those bits
    u = np.arange(n)
    row = ((u & 0b111) == 0b101).astype(float)
    assert any(np.array_equal(r, row) for r in three_way)


def test_parity_is_hadamard() -> None:
    w = workload_by_name("parity", 16).matrix()
    np.testing.assert_array_equal(w @ w.T, 16 * np.eye(16))
    assert set(np.unique(w)) == {-1.0, 1.0}
    np.testing.assert_array_equal(w[0], np.ones(16))


def test_user_defined_ranges_predicates_and_files(tmp_path) -> None:
    ranges = range_queries([(0, 2), (3, 3), (1, 4)], 5)
    np.testing.assert_array_equal(ranges.matrix(), [[1, 1, 1, 0, 0], [0, 0, 0, 1, 0], [0, 1, 1, 1, 1]])
    labels = ["low", "mid", "high", "mid"]
    preds = predicate_queries([lambda v: v == "mid", lambda v: v != "low"], labels)
    np.testing.assert_array_equal(preds.matrix(), [[0, 1, 0, 1], [0, 1, 1, 1]])
    w = np.arange(12.0).reshape(3, 4)
    np.save(tmp_path / "w.npy", w)
    np.savetxt(tmp_path / "w.csv", w, delimiter=",")
    for path in (tmp_path / "w.npy", tmp_path / "w.csv"):
        loaded = workload_by_name(str(path), 4)
        np.testing.assert_array_equal(loaded.matrix(), w)
        np.testing.assert_allclose(loaded.gram, w.T @ w)
    with pytest.raises(LDPError, match="columns"):
        load_workload(tmp_path / "w.npy", 5)


@pytest.mark.parametrize(
    "build",
    [
        lambda: workload_by_name("nope", 8),
        lambda: workload_by_name("all_marginals", 12),
        lambda: workload_by_name("3way_marginals", 4),
        lambda: workload_by_name("parity", 6),
        lambda: workload_by_name("histogram", 1),
        lambda: workload_by_name("prefix", 2.5),
        lambda: marginals(8, 4),
        lambda: range_queries([(2, 1)], 4),
        lambda: range_queries([(0, 4)], 4),
        lambda: predicate_queries([lambda v: v], [1, 2, 3]),
        lambda: Workload.from_matrix(np.zeros((2, 3))),
        lambda: Workload.from_matrix(np.array([[1.0, np.nan]])),
        lambda: load_workload("missing.npy"),
        lambda: load_workload("w.txt"),
    ],
)
def test_bad_input_is_a_clear_error(build) -> None:
    with pytest.raises(LDPError):
        build()
