"""The one atomic file write: the new content in place with its permissions, nothing left beside it; on a failure
the old file as it was and no temporary file."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from ldpstream.contract.files import write_atomically


def test_a_write_replaces_the_file_with_its_mode_and_leaves_nothing_beside_it(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_bytes(b"old")
    write_atomically(path, b"new", 0o640)
    assert path.read_bytes() == b"new"
    assert stat.S_IMODE(path.stat().st_mode) & 0o077 in (0o040, 0o000)  # at most what was asked (the umask applies)
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary_one(tmp_path: Path) -> None:
    path = tmp_path / "target"
    path.mkdir()  # a file cannot be renamed over a directory
    (path / "kept").write_bytes(b"old")
    with pytest.raises(OSError):
        write_atomically(path, b"new")
    assert (path / "kept").read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["target"]
