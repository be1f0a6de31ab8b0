"""The `Examples` in the docstrings of every module above the mechanisms run and hold (`ldpstream.mechanisms` has
its own runner, which also requires examples in every mechanism module)."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

PACKAGES = tuple(f"ldpstream.{layer}" for layer in ("contract", "runtime", "device", "simulator", "aggregator", "sgd"))
MODULES = sorted(m.name for package in PACKAGES
                 for m in pkgutil.walk_packages(importlib.import_module(package).__path__, f"{package}.")
                 if not m.name.endswith("__main__"))


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0


def test_the_modules_carry_examples() -> None:
    examples = sum(doctest.testmod(importlib.import_module(name)).attempted for name in MODULES)
    assert examples >= 20
