"""The seeded `Examples` in the frequency-oracle and post-processing modules run as tests."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "ldp.frequency.grr",
    "ldp.frequency.unary",
    "ldp.frequency.local_hash",
    "ldp.frequency.hadamard",
    "ldp.frequency.auto",
    "ldp.postprocess",
]


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
