"""The shuffle itself: a uniform permutation, reports kept whole, canonical envelopes, the spill to disk."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from ldpstream.contract.wire import AttributeColumns, concatenate, decode_envelope, envelope_of
from ldpstream.shuffler.batch import Rows, WindowRows, merged, rows_of, shuffled, uniform_below, uniform_permutation


def reports(n: int, start: int = 0, seed: int = 0) -> Rows:
    """n reports of two attributes: every row has attribute 0 (value = its id), every third also attribute 1
    (two values per row, id and -id): a row's attributes must stay together through any shuffle."""
    ids = np.arange(start, start + n)
    third = ids[ids % 3 == 0]
    env = envelope_of("c", 1, np.zeros(n, dtype=np.uint64), np.zeros(n, dtype=np.int64), {
        0: AttributeColumns(np.arange(n), {"v": ids.astype(np.int64)}),
        1: AttributeColumns(np.flatnonzero(ids % 3 == 0), {"w": np.stack([third, -third], 1).reshape(-1)})})
    return rows_of(concatenate([env]))


def table(rows: Rows) -> list[tuple[int, ...]]:
    """Each row as (id, and its attribute 1 pair if it has one), in the rows' order."""
    out: list[list[int]] = [[] for _ in range(rows.n)]
    for r, v in zip(rows.attributes[0].rows.tolist(), rows.attributes[0].columns["v"].tolist(), strict=True):
        out[r].append(v)
    pairs = rows.attributes[1].columns["w"].reshape(-1, 2).tolist() if 1 in rows.attributes else []
    for r, (a, b) in zip(rows.attributes[1].rows.tolist() if 1 in rows.attributes else [], pairs, strict=True):
        out[r] += [a, b]
    return [tuple(row) for row in out]


def test_uniform_permutation_is_uniform() -> None:
    """All 24 orders of 4 equally likely: chi-square over 48,000 draws within its 1e-6 quantile (23 df: 70.5)."""
    n, draws = 4, 48_000
    counts = {p: 0 for p in itertools.permutations(range(n))}
    for _ in range(draws):
        counts[tuple(uniform_permutation(n).tolist())] += 1
    expected = draws / math.factorial(n)
    chi2 = sum((c - expected) ** 2 / expected for c in counts.values())
    assert chi2 < 70.5


def test_uniform_below_covers_its_range_evenly() -> None:
    draws = uniform_below(7, 70_000)
    counts = np.bincount(draws, minlength=7)
    assert draws.min() >= 0 and draws.max() < 7
    assert np.all(np.abs(counts - 10_000) < 6 * math.sqrt(10_000 * 6 / 7))


def test_shuffled_keeps_every_report_whole() -> None:
    rows = reports(1000)
    out = shuffled(rows)
    assert sorted(table(out)) == sorted(table(rows))
    assert table(out) != table(rows)  # the identity has probability 1/1000!


def test_envelopes_are_canonical_and_anonymous() -> None:
    out = shuffled(reports(2500))
    values = list(out.envelopes("c", 3, 7_200_000, per_message=1000))
    assert len(values) == 3
    envs = [decode_envelope(v) for v in values]
    assert [len(e.devices) // 8 for e in envs] == [1000, 1000, 500]
    for e in envs:
        assert e.collection == "c" and e.spec_version == 3
        assert not np.frombuffer(e.devices, dtype="<u8").any()
        assert set(np.frombuffer(e.timestamps, dtype="<i8").tolist()) == {7_200_000}
    assert table(rows_of(concatenate(envs))) == table(out)


def test_merged_renumbers_rows() -> None:
    parts = [reports(10), reports(5, start=10), reports(7, start=15)]
    assert table(merged(parts)) == [row for p in parts for row in table(p)]


@pytest.mark.parametrize("memory_rows", [10**9, 300])
def test_window_rows_in_memory_and_spilled(memory_rows: int, tmp_path) -> None:
    window = WindowRows(memory_rows, tmp_path, max_rows=2000)
    for k in range(4):
        window.add(reports(250, start=250 * k))
    assert (window.disk is not None) == (memory_rows < 1000)
    pieces = list(window.shuffled())
    assert all(p.n <= 2 * memory_rows for p in pieces)
    assert sorted(row for p in pieces for row in table(p)) == sorted(table(reports(1000)))
    window.discard()


def test_the_spilled_shuffle_is_uniform(tmp_path) -> None:
    """Where a given report lands among 10 after the two passes (7 bucket files): uniform (chi-square, 9 df, 1e-6
    quantile 44.8)."""
    n, draws = 10, 1000
    counts = np.zeros(n)
    for _ in range(draws):
        window = WindowRows(memory_rows=3, spill_dir=tmp_path, max_rows=10)
        window.add(reports(n))
        order = [row[0] for p in window.shuffled() for row in table(p)]
        counts[order.index(0)] += 1
        window.discard()
    expected = draws / n
    assert ((counts - expected) ** 2 / expected).sum() < 44.8
