"""Collection specs are read from a topic: whatever the text or bytes, `parse_spec` returns a valid spec (one that
survives its own canonical JSON) or raises SpecError, nothing else."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ldpstream.contract.spec import MAX_SPEC_SIZE, CollectionSpec, SpecError, parse_spec
from ldpstream.runtime.settings import PROJECT_ROOT
from tests.fuzzing import ABOUT_1MB, mutated, tree_paths

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
EXAMPLES = [p.read_text() for p in sorted((PROJECT_ROOT / "examples").glob("*.yaml")) if "sgd" not in p.name]
CANONICAL = [parse_spec(text).canonical_json() for text in EXAMPLES]
TEXTS = [*EXAMPLES, *CANONICAL]


def spec_or_none(text: str | bytes) -> CollectionSpec | None:
    """parse_spec(text), or None if it raises SpecError (anything else fails the test); a spec it returns is
    valid: its canonical JSON parses back to it."""
    try:
        spec = parse_spec(text, "fuzz")
    except SpecError:
        return None
    assert isinstance(spec, CollectionSpec) and parse_spec(spec.canonical_json()) == spec
    return spec


def hostile(rng: random.Random) -> Any:
    """A value YAML or JSON can carry that a spec does not expect where it is put."""
    return rng.choice([
        None, True, -1, 0, 2**70, 1e308, float("nan"), float("inf"), "", "é" * 1000, "a" * 70, "1w", "99999999999d",
        "2001-13-45", [], [[[[[]]]]], {}, {"name": []}, list(range(1000)), ["all", "all"], {"type": "numeric"},
    ])


# YAML that yaml itself turns into exceptions other than YAMLError, or into structures that are not a tree
HOSTILE_YAML = ["2001-13-45", "2001-02-30 10:00:00", "!!int 0x", "!!float x", "!!binary ===", "!!set {a, b}",
                "!!timestamp 2001-12-14t21:59:43.10-99:99", "[" * 2000 + "]" * 2000, "{a: " * 2000 + "1" + "}" * 2000,
                "&a [*a]", "*undefined", "!!python/name:os.system", "9" * 5000, "1e999", ".nan", "{? [a]: b}"]
PLACEHOLDER = "hostile-placeholder"


def tree_mutation(text: str, rng: random.Random) -> str:
    """A valid spec with one node replaced by a hostile value, as JSON or YAML, or by hostile raw YAML."""
    tree = yaml.safe_load(text)
    raw = rng.random() < 0.5
    value = PLACEHOLDER if raw else hostile(rng)
    path = rng.choice(tree_paths(tree))
    if not path:
        tree = value
    else:
        parent = tree
        for key in path[:-1]:
            parent = parent[key]
        parent[path[-1]] = value
    if raw:
        return yaml.safe_dump(tree).replace(PLACEHOLDER, rng.choice(HOSTILE_YAML))
    return json.dumps(tree) if rng.random() < 0.5 else yaml.safe_dump(tree)


TEXT = st.sampled_from(TEXTS)


@FUZZ
@given(st.one_of(mutated(TEXT.map(str.encode)), st.binary(max_size=256)))
def test_bytes_give_a_valid_spec_or_spec_error(data: bytes) -> None:
    spec_or_none(data)


@FUZZ
@given(st.one_of(mutated(TEXT.map(str.encode)).map(lambda b: b.decode(errors="replace")), st.text(max_size=256),
                 st.builds(tree_mutation, TEXT, st.randoms(use_true_random=True))))
def test_text_gives_a_valid_spec_or_spec_error(text: str) -> None:
    spec_or_none(text)


BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True))


@pytest.mark.parametrize("text", [
    "[" * 100_000, "{a: " * 10_000, "a: 2001-13-45", "a: 2001-02-30 10:00:00", "a: !!int 0x", "a: !!float x",
    "a: !!timestamp 2001-12-14t21:59:43.10-99:99", "a: !!binary ===", "a: !!set {a, b}", "? [a]\n: b",
    "x: !!python/object/apply:os.system [ls]", "a: &a [*a]", BOMB, "\x00", "\ufeff", "\t", "name: x\n\tversion: 1",
    "epsilon: " + "9" * 5000, "version: 1e999", "epsilon: .nan", "epsilon: .inf",
    EXAMPLES[0].replace("windows: [1h]", "windows: [" + "9" * 5000 + "h]"),
    EXAMPLES[0].replace("windows: [1h]", "windows: [99999999999999999999d]"),
    EXAMPLES[0] + "\n" + " " * MAX_SPEC_SIZE, "a: " + "x" * ABOUT_1MB, b"\xff\xfe" + EXAMPLES[0].encode("utf-16-le"),
    EXAMPLES[0].encode()[:-3] + b"\xc3\x28",
])
def test_hostile_yaml_is_a_spec_error(text: str | bytes) -> None:
    assert spec_or_none(text) is None


def test_valid_specs_parse_from_text_and_bytes() -> None:
    for text in TEXTS:
        assert spec_or_none(text) == spec_or_none(text.encode()) is not None
