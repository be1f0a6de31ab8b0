"""The split of the integration modules into lanes (tests/lanes.py): every module in exactly one lane, balanced."""

from __future__ import annotations

import json

import pytest

from tests.lanes import OWN_SERVICES_S, WEIGHTS, lane_option, split_into_lanes


@pytest.mark.parametrize("lanes", [1, 2, 3, 5])
def test_every_module_lands_in_exactly_one_lane_and_the_lanes_balance(lanes: int) -> None:
    weights = {f"tests/m{i}.py": float(w) for i, w in enumerate([130, 100, 93, 92, 79, 40, 33, 20, 12, 9, 5, 1])}
    modules = [*weights, "tests/new_module.py"]
    split = split_into_lanes(modules, weights, lanes)
    assert sorted(m for lane in split for m in lane) == sorted(modules)
    assert split == split_into_lanes(list(reversed(modules)), weights, lanes)  # the same split in every process
    totals = [sum(weights.get(m, 10.0) for m in lane) + (OWN_SERVICES_S if i else 0.0) for i, lane in enumerate(split)]
    assert max(totals) - min(totals) <= max(weights.values())  # greedy: within one module of each other


def test_the_weights_file_names_test_modules_with_their_seconds() -> None:
    weights = json.loads(WEIGHTS.read_text())
    assert weights and all(m.startswith("tests/") and m.endswith(".py") and s >= 0 for m, s in weights.items())


@pytest.mark.parametrize("text", ["0/2", "3/2", "1", "a/b", "1/0", "-1/2"])
def test_a_lane_outside_1_to_n_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="K/N"):
        lane_option(text)
    assert lane_option("2/3") == (2, 3)
