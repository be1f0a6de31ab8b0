"""`ldp demo`'s greedy collection: the spec a compromised server would publish, valid for any example."""

from __future__ import annotations

from pathlib import Path

import pytest

from ldpstream.cli.demo import GREEDY_EPSILON, greedy_variant
from ldpstream.contract.spec import load_spec, parse_spec

EXAMPLES = sorted(p for p in Path(__file__).parents[2].joinpath("examples").glob("*.yaml")
                  if "\nattributes:" in p.read_text())  # collection specs, not the SGD job


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_the_greedy_variant_of_every_example_is_a_valid_spec_asking_more(path: Path) -> None:
    spec = load_spec(path)
    greedy = greedy_variant(spec)
    assert parse_spec(greedy.canonical_json()) == greedy  # what is published reads back as it is
    assert greedy.name == f"{spec.name}-greedy" and greedy.epsilon == GREEDY_EPSILON > spec.epsilon
    if spec.privacy is not None:
        assert greedy.privacy is not None and greedy.privacy.per_report == GREEDY_EPSILON
