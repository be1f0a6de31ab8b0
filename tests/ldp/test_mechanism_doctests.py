"""The seeded `Examples` in the mechanism modules run as tests (each module must have at least one)."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "ldp.numeric.scaling", "ldp.numeric.laplace", "ldp.numeric.staircase", "ldp.numeric.duchi",
    "ldp.numeric.piecewise", "ldp.numeric.hybrid", "ldp.numeric.harmony", "ldp.multidim", "ldp.mixed", "ldp.audit",
    "ldp.frequency.grr", "ldp.frequency.unary", "ldp.frequency.local_hash", "ldp.frequency.hadamard",
    "ldp.frequency.auto", "ldp.postprocess",
]


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
