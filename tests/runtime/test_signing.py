"""Spec signatures without Kafka: what verifies, what is refused (whatever the headers hold), and the key files."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from unittest import mock

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from hypothesis import given, settings
from hypothesis import strategies as st

from ldpstream.contract.signatures import SPEC_DOMAIN, spec_message
from ldpstream.contract.spec import SpecError
from ldpstream.runtime.kafka import Headers
from ldpstream.runtime.settings import Settings
from ldpstream.runtime.signing import (
    SIGNATURE_HEADER,
    SigningError,
    ensure_signing_keys,
    key_id,
    load_signing_key,
    load_trusted_keys,
    new_private_key,
    public_line,
    retain_only,
    sign,
    trust,
    verify,
)
from ldpstream.runtime.specs import read_specs
from tests.fuzzing import untrusted

ADMIN, OTHER = new_private_key(), new_private_key()
TRUSTED = {key_id(ADMIN.public_key()): ADMIN.public_key()}
KEY, VALUE = b"app@1", b'{"name":"app","version":1}'
GOOD = sign(ADMIN, KEY, VALUE)


def refusal(headers: Headers | None, key: bytes = KEY, value: bytes = VALUE) -> str:
    with pytest.raises(SpecError) as error:
        verify(TRUSTED, key, value, headers, "specs[app@1]")
    return str(error.value)


def test_a_signature_holds_for_its_key_value_and_signer_only() -> None:
    verify(TRUSTED, KEY, VALUE, (("other", b"x"), (SIGNATURE_HEADER, GOOD)), "specs[app@1]")
    assert "bad signature by key" in refusal(((SIGNATURE_HEADER, GOOD),), value=VALUE.replace(b"1", b"2"))
    assert "bad signature by key" in refusal(((SIGNATURE_HEADER, GOOD),), key=b"app@2")  # moved to another key
    forged = GOOD[:8] + os.urandom(64)  # a trusted key's id, random signature bytes
    assert "bad signature by key" in refusal(((SIGNATURE_HEADER, forged),))
    by_other = sign(OTHER, KEY, VALUE)
    reason = refusal(((SIGNATURE_HEADER, by_other),))
    assert f"signed by key {key_id(OTHER.public_key()).hex()}, which is not trusted" in reason
    assert key_id(ADMIN.public_key()).hex() in reason
    verify({**TRUSTED, key_id(OTHER.public_key()): OTHER.public_key()}, KEY, VALUE,
           ((SIGNATURE_HEADER, by_other),), "specs[app@1]")


@pytest.mark.parametrize(("headers", "reason"), [
    (None, "headers cannot be read"),
    ((), "unsigned (no ldp-sig header)"),
    ((("LDP-SIG", GOOD),), "unsigned"),
    (((SIGNATURE_HEADER, GOOD), (SIGNATURE_HEADER, GOOD)), "2 ldp-sig headers"),
    (((SIGNATURE_HEADER, None),), "malformed signature (0 bytes"),
    (((SIGNATURE_HEADER, GOOD[:-1]),), "malformed signature (71 bytes"),
    (((SIGNATURE_HEADER, GOOD + b"\0"),), "malformed signature (73 bytes"),
])
def test_headers_without_exactly_one_well_formed_signature_are_refused(headers: Headers | None, reason: str) -> None:
    assert reason in refusal(headers)
    assert refusal(headers).startswith("specs[app@1]: ")


def test_what_is_signed_is_domain_separated_and_the_key_length_prefixed() -> None:
    assert spec_message(b"a@1", b"2x").startswith(SPEC_DOMAIN)
    assert spec_message(b"a@1", b"2x") != spec_message(b"a@12", b"x")
    assert "bad signature" in refusal(((SIGNATURE_HEADER, sign(ADMIN, b"app@", b"1" + VALUE)),))


NAMES = st.one_of(st.sampled_from([SIGNATURE_HEADER, "LDP-SIG", f"{SIGNATURE_HEADER} ", ""]), st.text(max_size=12))
SIGNATURES = st.one_of(st.none(), st.just(GOOD), untrusted(st.just(GOOD)), st.binary(min_size=72, max_size=72),
                       st.binary(max_size=64).map(lambda b: GOOD[:8] + b.ljust(64, b"\0")),
                       st.just(sign(OTHER, KEY, VALUE)), st.just(sign(ADMIN, b"app@2", VALUE)))
HEADERS = st.one_of(st.none(), st.lists(st.tuples(NAMES, SIGNATURES), max_size=4).map(tuple))


@settings(max_examples=300, deadline=None)
@given(HEADERS, st.sampled_from([KEY, b"app@2", b"", b"\xff@1"]), st.sampled_from([VALUE, b"", VALUE + b" "]))
def test_any_headers_verify_exactly_when_they_hold_the_one_valid_signature(
        headers: Headers | None, key: bytes, value: bytes) -> None:
    valid = [v for n, v in headers or () if n == SIGNATURE_HEADER] == [sign(ADMIN, key, value)]  # Ed25519: one
    try:
        verify(TRUSTED, key, value, headers, "specs[x]")
    except SpecError as exc:
        assert not valid and str(exc).startswith("specs[x]: ")
    else:
        assert valid


def test_ensure_signing_keys_makes_a_0600_pair_once_and_trusts_it(tmp_path: Path) -> None:
    private, public = tmp_path / "secrets" / "spec-signing.key", tmp_path / "secrets" / "spec-signing.pub"
    line = ensure_signing_keys(private, public)
    admin = load_signing_key(private)
    assert f"key {key_id(admin.public_key()).hex()} (made now)" in line and "added to the trusted keys" in line
    assert stat.S_IMODE(private.stat().st_mode) == stat.S_IMODE(public.stat().st_mode) == 0o600
    assert stat.S_IMODE(private.parent.stat().st_mode) == 0o700
    assert list(load_trusted_keys(public)) == [key_id(admin.public_key())]
    before = private.read_bytes()
    assert "(kept)" in ensure_signing_keys(private, public) and "already in" in ensure_signing_keys(private, public)
    assert private.read_bytes() == before and len(load_trusted_keys(public)) == 1
    public.write_text(public_line(OTHER.public_key()))  # a trusted file without the admin's key: it is added
    assert "added to" in ensure_signing_keys(private, public)
    assert set(load_trusted_keys(public)) == {key_id(OTHER.public_key()), key_id(admin.public_key())}


def test_the_trusted_keys_file_one_key_a_line(tmp_path: Path) -> None:
    path = tmp_path / "trusted.pub"
    path.write_text(f"# rotation in progress\n\n{public_line(ADMIN.public_key())}  {public_line(OTHER.public_key())}")
    assert set(load_trusted_keys(path)) == {key_id(ADMIN.public_key()), key_id(OTHER.public_key())}
    assert not trust(path, ADMIN.public_key())
    assert retain_only(path, OTHER.public_key()) == [key_id(ADMIN.public_key())]
    assert list(load_trusted_keys(path)) == [key_id(OTHER.public_key())]
    path.write_text(public_line(ADMIN.public_key()) + "not-base64!\n")
    with pytest.raises(SigningError, match=r"trusted.pub:2: not a base64 Ed25519 public key"):
        load_trusted_keys(path)
    path.write_text("AAAA\n")  # base64, but 3 bytes
    with pytest.raises(SigningError, match=r"trusted.pub:1: not a base64 Ed25519 public key"):
        load_trusted_keys(path)
    path.write_text("# nothing\n")
    with pytest.raises(SigningError, match="holds no trusted spec-signing key"):
        load_trusted_keys(path)
    with pytest.raises(SigningError, match="no trusted spec-signing keys at .*missing.pub"):
        load_trusted_keys(tmp_path / "missing.pub")


def test_a_signing_key_file_that_is_not_an_ed25519_key_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "spec-signing.key"
    with pytest.raises(SigningError, match="no spec-signing key at .*`ldp up`"):
        load_signing_key(path)
    path.write_bytes(b"garbage")
    with pytest.raises(SigningError, match="not a PEM private key"):
        load_signing_key(path)
    path.write_bytes(ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    with pytest.raises(SigningError, match="not an Ed25519 private key"):
        load_signing_key(path)


def test_key_files_are_in_the_secrets_dir_unless_the_environment_names_them(tmp_path: Path) -> None:
    cfg = Settings.from_env({"LDP_STATE_DIR": str(tmp_path)})
    assert cfg.spec_signing_key == tmp_path.resolve() / "secrets" / "spec-signing.key"
    assert cfg.spec_trusted_keys == tmp_path.resolve() / "secrets" / "spec-signing.pub"
    cfg = Settings.from_env({"LDP_STATE_DIR": str(tmp_path), "LDP_SPEC_SIGNING_KEY": str(tmp_path / "a.key"),
                             "LDP_SPEC_TRUSTED_KEYS": str(tmp_path / "t.pub")})
    assert (cfg.spec_signing_key, cfg.spec_trusted_keys) == (tmp_path.resolve() / "a.key", tmp_path.resolve() / "t.pub")


def test_a_reader_without_trusted_keys_refuses_every_spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LDP_SPEC_TRUSTED_KEYS", str(tmp_path / "missing.pub"))
    with mock.patch("ldpstream.runtime.specs.ensure_topic") as ensure, \
            mock.patch("ldpstream.runtime.specs.read_to_end") as read, \
            pytest.raises(SigningError, match="every published spec is refused"):
        read_specs("unused:0")
    ensure.assert_not_called()
    read.assert_not_called()
