"""Mixed records with a lifetime budget (`ldpstream.mechanisms.mixed`, "over time"): memoized mechanisms, secrets,
fixed sampling,
unbiased per-window estimates, memo keys."""

from __future__ import annotations

import numpy as np
import pytest

from ldpstream.mechanisms.base import LDPError
from ldpstream.mechanisms.longitudinal.base import Longitudinal
from ldpstream.mechanisms.longitudinal.memo import draw_secrets
from ldpstream.mechanisms.mixed import CategoricalAttribute, MixedCollector, NumericAttribute

ATTRIBUTES = [CategoricalAttribute("os", 5, "auto"), NumericAttribute("load", 0.0, 10.0),
              CategoricalAttribute("app", 32, "l-osue")]


def records(rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    return {"os": rng.choice(5, n, p=[0.4, 0.3, 0.15, 0.1, 0.05]), "load": 10 * rng.beta(2, 5, n),
            "app": rng.integers(0, 32, n)}


def test_every_attribute_is_memoized_at_its_share() -> None:
    collector = MixedCollector(ATTRIBUTES, 2.0, k=2, epsilon_lifetime=6.0)
    for mech in collector.mechanisms.values():
        assert isinstance(mech, Longitudinal)
        assert mech.epsilon == pytest.approx(1.0, rel=1e-9) and mech.epsilon_lifetime == pytest.approx(3.0)
    assert collector.mechanisms["load"].name == "1bitmean" and collector.mechanisms["app"].name == "l-osue"


def test_secrets_go_with_a_lifetime_and_only_with_it() -> None:
    rng = np.random.default_rng(0)
    with pytest.raises(LDPError, match="needs every device's secret"):
        MixedCollector(ATTRIBUTES, 2.0, epsilon_lifetime=4.0).perturb(records(rng, 3), rng)
    with pytest.raises(LDPError, match="lifetime budget"):
        MixedCollector(ATTRIBUTES[1:2], 2.0).perturb(records(rng, 3), rng, draw_secrets(rng, 3))
    with pytest.raises(LDPError, match="needs a lifetime budget"):
        MixedCollector([CategoricalAttribute("os", 5, "l-grr")], 2.0)
    with pytest.raises(LDPError, match="memoized mechanism"):
        MixedCollector([CategoricalAttribute("os", 5, "oue")], 2.0, epsilon_lifetime=4.0)


def test_a_device_reports_the_same_attributes_every_window() -> None:
    collector = MixedCollector(ATTRIBUTES, 2.0, k=1, epsilon_lifetime=4.0)
    rng = np.random.default_rng(1)
    n = 30_000
    data, secrets = records(rng, n), draw_secrets(rng, n)
    first, second = collector.perturb(data, rng, secrets), collector.perturb(data, rng, secrets)
    for name in collector.mechanisms:
        assert np.array_equal(first.rows[name], second.rows[name])
        share = len(first.rows[name]) / n  # each attribute with probability k/d = 1/3 per device
        assert abs(share - 1 / 3) <= 4 * np.sqrt(2 / 9 / n)
    keys = collector.memo_keys(data, secrets)
    assert all(np.array_equal(keys[name][0], first.rows[name]) for name in collector.mechanisms)


def test_per_window_estimates_are_unbiased_with_their_standard_errors() -> None:
    collector = MixedCollector(ATTRIBUTES, 2.0, k=1, epsilon_lifetime=4.0)
    rng = np.random.default_rng(2)
    n = 150_000
    data, secrets = records(rng, n), draw_secrets(rng, n)
    for _ in range(2):  # two windows of the same devices and values: fresh noise, the same memos
        est = collector.estimate(collector.accumulate(collector.perturb(data, rng, secrets)))
        assert abs(float(est["load"].value) - data["load"].mean()) <= 4 * float(est["load"].stderr)
        for name, k in (("os", 5), ("app", 32)):
            true = np.bincount(data[name], minlength=k) / n
            assert (np.abs(est[name].value - true) <= 4 * est[name].stderr).all(), name


def test_memo_keys_need_a_lifetime() -> None:
    rng = np.random.default_rng(3)
    with pytest.raises(LDPError, match="lifetime budget"):
        MixedCollector(ATTRIBUTES[1:2], 2.0).memo_keys(records(rng, 2), draw_secrets(rng, 2))
