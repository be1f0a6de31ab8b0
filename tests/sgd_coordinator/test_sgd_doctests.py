"""The `Examples` in the docstrings of sgd_coordinator run and hold."""

from __future__ import annotations

import doctest

import pytest

from sgd_coordinator import models, training


@pytest.mark.parametrize("module", [models, training])
def test_docstring_examples(module: object) -> None:
    result = doctest.testmod(module, raise_on_error=False)  # type: ignore[arg-type]
    assert result.attempted > 0 and result.failed == 0
