"""`type: string` in a collection spec: what it takes, what it refuses, and the collector it builds."""

from __future__ import annotations

import numpy as np
import pytest

from ldpstream.contract.collector import collector_for, hash_seed
from ldpstream.contract.spec import SpecError, parse_spec
from ldpstream.mechanisms.open_domain import PEM, SFP, HCMSTree

BASE = """
name: words
version: 1
epsilon: 4
attributes:
  - {name: word, type: string, max_length: 8, alphabet: abcdefgh, top: 7, mechanism: MECH}
  - {name: load, type: numeric, range: [0, 1]}
"""


@pytest.mark.parametrize(("mechanism", "cls"), [("auto", PEM), ("pem", PEM), ("hcms_tree", HCMSTree),
                                                  ("sfp", SFP)])
def test_a_string_attribute_builds_its_tree(mechanism: str, cls: type) -> None:
    spec = parse_spec(BASE.replace("MECH", mechanism))
    tree = collector_for(spec).mechanisms["word"]
    assert isinstance(tree, cls) and tree.top == 7 and tree.domain.max_length == 8
    assert tree.seed == hash_seed("words", "word") != hash_seed("words", "other")
    again = parse_spec(BASE.replace("MECH", mechanism).replace("version: 1", "version: 2"))
    assert collector_for(again).mechanisms["word"].seed == tree.seed  # every version hashes alike


@pytest.mark.parametrize(("change", "reason"), [
    (("MECH", "olh"), "unknown heavy-hitter mechanism"),
    (("max_length: 8", "max_length: 65"), "max_length"),
    (("top: 7", "top: 0"), "top"),
    (("epsilon: 4", "privacy: {per_report: 1, lifetime: 4}"), "no memoized mechanism"),
])
def test_a_bad_string_attribute_is_refused(change: tuple[str, str], reason: str) -> None:
    text = BASE.replace(*change).replace("MECH", "auto")
    with pytest.raises(SpecError, match=reason):
        parse_spec(text)


@pytest.mark.parametrize("mechanism", ["pem", "sfp"])
def test_the_collector_scales_a_sampled_string_attribute(mechanism: str) -> None:
    """k = 1 of 2 attributes: the tree sees about half the devices; its frequencies are scaled back to all."""
    spec = parse_spec(BASE.replace("MECH", mechanism).replace("epsilon: 4", "epsilon: 4\nsampling: one"))
    collector = collector_for(spec)
    rng = np.random.default_rng(3)
    words = np.array(["abc", "hhh", "defgh"])[rng.choice(3, size=200_000, p=[0.6, 0.3, 0.1])]
    batch = collector.perturb({"word": words, "load": rng.random(200_000)}, rng)
    found = collector.estimate(collector.accumulate(batch))["word"]
    truth = {"abc": np.mean(words == "abc"), "hhh": np.mean(words == "hhh"), "defgh": np.mean(words == "defgh")}
    assert list(found.items[:3]) == ["abc", "hhh", "defgh"]
    for item, value, se in zip(found.items[:3], found.value[:3], found.stderr[:3], strict=True):
        assert abs(value - truth[item]) <= 4 * se, (item, value, truth[item], se)
