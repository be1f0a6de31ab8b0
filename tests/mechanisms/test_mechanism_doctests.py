"""The seeded `Examples` of every module of `ldpstream.mechanisms` run as
tests; every registered mechanism's class has some."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import ldpstream.mechanisms
from ldpstream.mechanisms import registry

MODULES = tuple(sorted(m.name for m in pkgutil.walk_packages(ldpstream.mechanisms.__path__,
                                                             prefix="ldpstream.mechanisms.")))


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0


@pytest.mark.parametrize("name", [*registry.NUMERIC, *registry.FREQUENCY, *registry.LONGITUDINAL, *registry.KEYVALUE,
                                  *registry.DISTRIBUTION])
def test_every_registered_mechanism_has_examples(name: str) -> None:
    """The class's own docstring carries a seeded example (and its module is in MODULES, so the example runs)."""
    cls: type = (registry.keyvalue_class(name) if name in registry.KEYVALUE
                 else registry.distribution_class(name) if name in registry.DISTRIBUTION
                 else registry.mechanism_class(name))
    assert cls.__module__ in MODULES
    assert any(test.examples for test in doctest.DocTestFinder(recurse=False).find(cls)), f"{cls.__name__}"
