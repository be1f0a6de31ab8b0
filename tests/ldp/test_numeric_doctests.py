"""The seeded `Examples` in the numeric, multidimensional, mixed and audit modules run as tests."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "ldp.numeric.scaling",
    "ldp.numeric.laplace",
    "ldp.numeric.staircase",
    "ldp.numeric.duchi",
    "ldp.numeric.piecewise",
    "ldp.numeric.hybrid",
    "ldp.numeric.harmony",
    "ldp.multidim",
    "ldp.mixed",
    "ldp.audit",
]


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0
