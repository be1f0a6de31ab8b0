"""Every decoder of the join protocol takes hostile bytes: a pointer, a spec and their signatures from the network,
a token at the edge, pinned keys and a policy from the app, the device's own state files from a disk that may be
damaged. Whatever they get, each returns its result or raises its one error, nothing else."""

from __future__ import annotations

import base64
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ldpstream.contract.enrolment import TokenError, mint, new_token, read_token
from ldpstream.contract.pointer import PointerError, parse_pointer
from ldpstream.contract.signatures import SignatureError, TrustedKeys, key_id
from ldpstream.device.ledger import PrivacyLedger
from ldpstream.device.policy import PolicyError, PrivacyPolicy
from ldpstream.device.state import DeviceState, StateError
from ldpstream.device.trust import Seen, TrustError, check_pointer, check_spec
from ldpstream.edge.intake import Refusal
from ldpstream.edge.join import _enrolment
from tests.fuzzing import mutate, untrusted

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                        HealthCheck.function_scoped_fixture])
VECTORS = Path(__file__).resolve().parents[1] / "vectors"
TRUST = json.loads((VECTORS / "trust.json").read_text())
KEYS = TrustedKeys.from_json(TRUST["pinned_keys"])
GOOD_POINTER = next(c for c in TRUST["pointers"] if c["expected"]["verdict"] == "accept")
GOOD_SPEC = next(c for c in TRUST["specs"] if c["expected"]["verdict"] == "accept")
T = TypeVar("T")
HOSTILE_JSON: list[Any] = [None, True, False, 0, -1, 2**64, 1e308, -0.0, "", "x" * 100_000, [], {}, [[[[[]]]]],
                           {"a": [1, {"b": None}]}, "\u0000", "é" * 10]


def json_mutate(data: bytes, rng: random.Random) -> bytes:
    """A JSON document with one node replaced by a hostile value (or, for text that is not JSON, a byte mutation)."""
    try:
        tree = json.loads(data)
    except ValueError:
        return mutate(data, rng)
    nodes: list[tuple[Any, Any]] = []

    def walk(node: Any) -> None:
        children = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, child in children:
            nodes.append((node, key))
            walk(child)
    walk(tree)
    if not nodes:
        return json.dumps(rng.choice(HOSTILE_JSON)).encode()
    parent, key = rng.choice(nodes)
    parent[key] = rng.choice(HOSTILE_JSON)
    return json.dumps(tree).encode()


def hostile(valid: bytes) -> st.SearchStrategy[bytes]:
    """Byte mutations of a valid document, JSON-aware ones, and arbitrary bytes."""
    return st.one_of(untrusted(st.just(valid)), st.builds(json_mutate, st.just(valid), st.randoms()))


def returns_or_raises(fn: Callable[[], T], error: type[Exception]) -> T | None:
    """fn(), or None if it raised `error` (anything else fails the test)."""
    try:
        return fn()
    except error:
        return None


@FUZZ
@given(hostile(base64.b64decode(GOOD_POINTER["pointer"])))
def test_a_pointer_parses_or_is_a_pointer_error(data: bytes) -> None:
    returns_or_raises(lambda: parse_pointer(data), PointerError)


@FUZZ
@given(hostile(base64.b64decode(GOOD_POINTER["pointer"])), untrusted(st.just(base64.b64decode(
    GOOD_POINTER["signature"]))))
def test_a_pointer_and_signature_verify_or_are_a_trust_error(data: bytes, block: bytes) -> None:
    returns_or_raises(lambda: check_pointer(data, block, KEYS, "diag", Seen(), GOOD_POINTER["now_ms"]), TrustError)


@FUZZ
@given(hostile(base64.b64decode(GOOD_SPEC["spec"])), untrusted(st.just(base64.b64decode(GOOD_SPEC["signature"]))))
def test_a_spec_and_signature_verify_or_are_a_trust_error(data: bytes, block: bytes) -> None:
    pointer = parse_pointer(base64.b64decode(GOOD_SPEC["pointer"]))
    returns_or_raises(lambda: check_spec(data, block, KEYS, pointer), TrustError)


@FUZZ
@given(hostile(json.dumps(TRUST["pinned_keys"]).encode()))
def test_pinned_keys_load_or_are_a_signature_error(data: bytes) -> None:
    value = returns_or_raises(lambda: json.loads(data), ValueError)  # what an app read from its file
    returns_or_raises(lambda: TrustedKeys.from_json(value), SignatureError)


def _token_key() -> tuple[Any, str]:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    private = Ed25519PrivateKey.from_private_bytes(bytes(32))
    return private, mint(private, new_token(["diag"], 3, 0, 2**50))


TOKEN_KEY, TOKEN = _token_key()


@FUZZ
@given(st.one_of(hostile(TOKEN.encode()).map(lambda b: b.decode(errors="replace")), st.text(max_size=300)))
def test_a_token_reads_or_is_a_token_error(text: str) -> None:
    keys = {key_id(TOKEN_KEY.public_key()): TOKEN_KEY.public_key()}
    returns_or_raises(lambda: read_token(text, keys, "diag", 1), TokenError)


@FUZZ
@given(hostile(b'{"token": "ldpet1.abc.def", "collection": "diag"}'))
def test_an_enrolment_body_parses_or_is_a_400(body: bytes) -> None:
    try:
        _enrolment(body)
    except Refusal as refusal:
        assert refusal.status == 400


@FUZZ
@given(hostile(json.dumps({"max_epsilon_per_report": 4, "allowed_mechanisms": ["grr"]}).encode()))
def test_a_policy_loads_or_is_a_policy_error(data: bytes) -> None:
    value = returns_or_raises(lambda: json.loads(data), ValueError)
    returns_or_raises(lambda: PrivacyPolicy.from_dict(value), PolicyError)


def _state_files(directory: Path) -> tuple[bytes, bytes]:
    """A device's state and ledger as a device that joined once would have written them."""
    from ldpstream.contract.auth import Credential
    from ldpstream.contract.spec import parse_spec

    state = DeviceState.open(directory)
    mine = state.of("diag")
    mine.credential = Credential("diag", "5f1c0de2a9b3c4d5e6f70812", bytes(32))
    mine.pointer, mine.spec = base64.b64decode(GOOD_SPEC["pointer"]), base64.b64decode(GOOD_SPEC["spec"])
    mine.verdict = {"accepted": True, "code": "", "reason": ""}
    state.save()
    ledger = PrivacyLedger.open(state.ledger_path)
    ledger.commit("diag", 8.0)
    ledger.charge(parse_spec(base64.b64decode(GOOD_SPEC["spec"])), 1_795_788_000_000)
    return (directory / "device.json").read_bytes(), state.ledger_path.read_bytes()


@FUZZ
@given(data=st.data())
def test_damaged_state_files_are_a_state_error(tmp_path_factory: Any, data: st.DataObject) -> None:
    directory = tmp_path_factory.mktemp("device")
    state, ledger = _state_files(directory)
    (directory / "device.json").write_bytes(data.draw(hostile(state)))
    returns_or_raises(lambda: DeviceState.open(directory), StateError)
    returns_or_raises(lambda: PrivacyLedger.from_json(data.draw(hostile(ledger)).decode(errors="replace")),
                      ValueError)
