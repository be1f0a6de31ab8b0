"""The analyst's client without its extra: a missing pandas or pyarrow says which install brings it, not a bare
"No module named 'pandas'"."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ldpstream.client import Client, series_frame


@pytest.mark.parametrize("module", ["pandas", "pyarrow"])
def test_a_missing_module_of_the_client_extra_names_the_install(module: str, monkeypatch: pytest.MonkeyPatch,
                                                                tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # as if not installed
    with pytest.raises(ModuleNotFoundError, match=r"pip install 'ldpstream\[client\]'") as raised:
        if module == "pandas":
            series_frame({"windows": []})
        else:
            Client("http://127.0.0.1:9", "token").save_series(tmp_path / "x.parquet", "c", "a")
    assert raised.value.name == module
