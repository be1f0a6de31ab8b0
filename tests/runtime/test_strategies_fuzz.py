"""Factorization strategies come as .npz bytes from `ldp.strategies` (or the local cache): whatever the bytes, they
decode to the strategy of the pinned hash or raise SpecError, nothing else; only bytes that decode are cached."""

from __future__ import annotations

import io
import random
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ldpstream.contract.spec import SpecError
from ldpstream.mechanisms.workload.baselines import randomized_response
from ldpstream.mechanisms.workload.mechanism import FactorizationMechanism
from ldpstream.runtime.strategies import load_strategy, strategy_from_bytes
from tests.fuzzing import mutate

MECHANISMS = [FactorizationMechanism(randomized_response(n, eps), np.tril(np.ones((n, n))), eps)
              for n, eps in ((3, 1.0), (4, 2.0))]


def npz_bytes(mechanism: FactorizationMechanism) -> bytes:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "strategy.npz"
        mechanism.save(path)
        return path.read_bytes()


VALID = [npz_bytes(m) for m in MECHANISMS]


def npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=True)
    return buffer.getvalue()


def member_mutation(data: bytes, rng: random.Random) -> bytes:
    """A well-formed zip of the .npz members with one member replaced, dropped or added, or the zip's compression
    changed: arrays that are not a strategy (NaN, other shapes and dtypes, objects that need pickle, a header
    promising far more than it holds), or a member that is no .npy at all."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    name = rng.choice(sorted(members))
    replacement = rng.choice([
        npy_bytes(np.full((4, 4), np.nan)), npy_bytes(np.zeros((0, 3))), npy_bytes(np.array(["a", "b"])),
        npy_bytes(np.array([{"a": 1}], dtype=object)), npy_bytes(np.ones((2, 3, 4))), npy_bytes(np.array(1e308)),
        npy_bytes(np.eye(3)), npy_bytes(np.array("0" * 64)), npy_bytes(np.array(-1.0)), b"not an npy",
        npy_bytes(np.zeros(2))[:-8], npy_bytes(np.zeros(2)).replace(b"(2,)", b"(9999999999,)"), b""])
    action = rng.randrange(3)
    if action == 0:
        members[name] = replacement
    elif action == 1:
        del members[name]
    else:
        members[f"extra{rng.randrange(9)}.npy"] = replacement
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", rng.choice([zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])) as archive:
        for member, content in members.items():
            archive.writestr(member, content)
    return out.getvalue()


def untrusted_npz(index: int, rng: random.Random) -> bytes:
    """A valid strategy's bytes mutated as bytes (bit flips, cuts, garbage, ~1 MB, ...) or as a zip of members."""
    return member_mutation(VALID[index], rng) if rng.random() < 0.4 else mutate(VALID[index], rng)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, len(VALID) - 1), st.randoms(use_true_random=True), st.booleans())
def test_bytes_decode_to_the_pinned_strategy_or_raise_spec_error(index: int, rng: random.Random,
                                                                  other_hash: bool) -> None:
    data = untrusted_npz(index, rng)
    pinned = MECHANISMS[(index + other_hash) % len(MECHANISMS)].hash
    try:
        mechanism = strategy_from_bytes(data, pinned)
    except SpecError:
        return
    assert isinstance(mechanism, FactorizationMechanism) and mechanism.hash == pinned


@pytest.mark.parametrize("data", [b"", b"PK\x03\x04", b"\x93NUMPY", VALID[0][:len(VALID[0]) // 2], b"\0" * (1 << 20)])
def test_cut_and_foreign_bytes_are_spec_errors(data: bytes) -> None:
    with pytest.raises(SpecError, match="not a factorization strategy"):
        strategy_from_bytes(data, MECHANISMS[0].hash)


def test_a_bad_message_under_the_hash_is_skipped_and_a_damaged_cache_file_read_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LDP_STATE_DIR", str(tmp_path))
    target = MECHANISMS[1]
    key = target.hash.encode()
    topic = [(key, VALID[1][:100], ()), (key, VALID[0], ()), (b"other", VALID[1], ()), (key, VALID[1], ())]
    monkeypatch.setattr("ldpstream.runtime.strategies.ensure_topic", lambda *args, **kwargs: True)
    monkeypatch.setattr("ldpstream.runtime.strategies.read_to_end", lambda bootstrap, name: iter(topic))
    assert load_strategy(target.hash, "unused:0").hash == target.hash
    cached = tmp_path / "strategies" / f"{target.hash}.npz"
    assert cached.read_bytes() == VALID[1]
    cached.write_bytes(b"damaged")
    assert load_strategy(target.hash, "unused:0").hash == target.hash and cached.read_bytes() == VALID[1]
    topic[:] = topic[:3]
    cached.unlink()
    with pytest.raises(SpecError, match="skipped a message under its hash") as error:
        load_strategy(target.hash, "unused:0")
    assert "does not match its expected hash" in str(error.value)
    assert not cached.exists()
