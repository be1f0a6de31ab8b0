"""The edge's master keys by generation: ids name their generation, rotation keeps old devices, retiring refuses
them, and no device can move itself to another generation."""

from __future__ import annotations

from pathlib import Path

import pytest

from ldpstream.contract.auth import AuthError, device_key
from ldpstream.edge.keyring import Keyring, generation_of, new_device_id


def test_a_device_id_names_its_generation() -> None:
    assert generation_of(new_device_id(0)) == 0
    assert generation_of(new_device_id(7)) == 7
    assert len(new_device_id(0)) == 24 and new_device_id(0) != new_device_id(0)
    for not_a_generation in ("k0.abc", "k.abc", "kx.abc", "abc", "k12", "K3.abc", "k0012.x"):
        assert generation_of(not_a_generation) == 0


def test_rotation_keeps_old_devices_and_retiring_refuses_them(tmp_path: Path) -> None:
    keyring = Keyring.create(tmp_path / "master.key")
    keyring.reload_s = 0.0
    old = new_device_id(keyring.current)
    old_key = keyring.device_key("c", old)
    assert keyring.rotate() == 1 and keyring.current == 1
    assert (tmp_path / "master.key.1").stat().st_mode & 0o777 == 0o600
    new = new_device_id(keyring.current)
    assert generation_of(new) == 1
    assert keyring.device_key("c", old) == old_key  # still in service
    elsewhere = Keyring(tmp_path / "master.key", reload_s=0.0)  # another edge process sees both
    assert elsewhere.device_key("c", new) == keyring.device_key("c", new) != old_key
    with pytest.raises(ValueError, match="current"):
        keyring.retire(1)
    keyring.retire(0)
    assert keyring.generations == [1]
    with pytest.raises(AuthError, match="generation 0"):
        elsewhere.device_key("c", old)  # re-read: retired everywhere
    assert elsewhere.device_key("c", new) == keyring.device_key("c", new)


def test_a_device_cannot_claim_another_generation(tmp_path: Path) -> None:
    keyring = Keyring.create(tmp_path / "master.key")
    keyring.rotate()
    random_part = new_device_id(0)
    # the same random part under generation 1 is another device id with a key from another master
    assert keyring.device_key("c", f"k1.{random_part}") != keyring.device_key("c", random_part)
    with pytest.raises(AuthError):
        keyring.device_key("c", f"k9.{random_part}")  # no such generation


def test_a_generation_zero_file_is_the_master_key_as_before(tmp_path: Path) -> None:
    master = bytes(range(32))
    (tmp_path / "master.key").write_bytes(master)
    assert Keyring(tmp_path / "master.key").device_key("c", "abc") == device_key(master, "c", "abc")
    (tmp_path / "short.key").write_bytes(b"short")
    with pytest.raises(ValueError, match="at least 32"):
        Keyring(tmp_path / "short.key")
    with pytest.raises(FileNotFoundError):
        _ = Keyring(tmp_path / "absent.key").current


def test_an_edge_knows_a_new_generation_at_its_first_device(tmp_path: Path) -> None:
    """A running edge's keyring, read just now, verifies a device of a generation made after that read at once."""
    edge = Keyring.create(tmp_path / "master.key")  # reload_s 1 s: no periodic re-read within this test
    admin = Keyring(tmp_path / "master.key")
    admin.rotate()
    device = new_device_id(admin.current)
    assert edge.device_key("c", device) == admin.device_key("c", device)
