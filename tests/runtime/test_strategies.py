"""Spec rules for factorization attributes, and the strategies they pin (offline: no Kafka)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ldpstream.contract.collector import collector_for
from ldpstream.contract.spec import SpecError, parse_spec
from ldpstream.runtime.strategies import strategies_for, with_strategies

BASE = """
name: cdf
version: 1
epsilon: 2
sampling: one
attributes:
  - {name: level, type: categorical, values: [a, b, c, d, e, f, g, h], ATTR}
  - {name: x, type: numeric, range: [0, 1]}
"""


def spec_with(attr: str):  # type: ignore[no-untyped-def]
    return parse_spec(BASE.replace("ATTR", attr))


@pytest.mark.parametrize("attr, problem", [
    ("mechanism: factorization", "a workload goes with mechanism 'factorization'"),
    ("mechanism: oue, workload: prefix", "a workload goes with mechanism 'factorization'"),
    ("mechanism: factorization, workload: cdf", "unknown workload 'cdf'"),
    ("mechanism: oue, strategy: '" + "0" * 64 + "'", "a strategy goes with mechanism 'factorization' only"),
    ("mechanism: factorization, workload: prefix, strategy: xyz", "strategy"),
])
def test_bad_factorization_attributes_are_clear_errors(attr: str, problem: str) -> None:
    with pytest.raises(SpecError, match=problem):
        spec_with(attr)


def test_strategies_are_deterministic_and_pinned_by_hash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LDP_STATE_DIR", str(tmp_path))
    spec = spec_with("mechanism: factorization, workload: prefix")
    first = with_strategies(spec, 2.0, bootstrap=None)
    second = with_strategies(spec, 2.0, bootstrap=None)
    pinned = first.attributes[0].strategy  # type: ignore[union-attr]
    assert pinned is not None and pinned == second.attributes[0].strategy  # type: ignore[union-attr]
    assert (tmp_path / "strategies" / f"{pinned}.npz").exists()
    assert collector_for(first, strategies_for(first)).mechanisms["level"].hash == pinned  # type: ignore[attr-defined]


def test_the_collector_is_pure_it_builds_only_from_the_strategies_given(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LDP_STATE_DIR", str(tmp_path))
    spec = spec_with("mechanism: factorization, workload: prefix")
    with pytest.raises(SpecError, match="pins no strategy"):
        collector_for(spec)  # unpublished: nothing is optimised behind the caller's back
    pinned = with_strategies(spec, 2.0, bootstrap=None)
    with pytest.raises(SpecError, match="not loaded"):
        collector_for(pinned)
    assert collector_for(pinned, strategies_for(pinned)) is collector_for(pinned, strategies_for(pinned))


def test_a_collector_answers_the_workload_unbiasedly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LDP_STATE_DIR", str(tmp_path))
    spec = with_strategies(spec_with("mechanism: factorization, workload: prefix"), 2.0, bootstrap=None)
    collector = collector_for(spec, strategies_for(spec))
    rng = np.random.default_rng(3)
    n = 200_000
    codes = rng.choice(8, n, p=np.arange(1, 9) / 36)
    estimate = collector.estimate(collector.accumulate(collector.perturb({"level": codes, "x": rng.uniform(0, 1, n)},
                                                                         rng)))["level"]
    truth = np.cumsum(np.bincount(codes, minlength=8)) / n
    assert estimate.value.shape == (8,)
    assert np.all(np.abs(estimate.value - truth) <= 4 * estimate.stderr)
