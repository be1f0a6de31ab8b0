"""The Python SDK against the shared test vectors (tests/vectors/, written by tests/vectors/generate.py): the same
verdicts and bytes every device SDK must give."""

from __future__ import annotations

import base64
import importlib.util
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ldpstream.contract.auth import authorization
from ldpstream.contract.pointer import parse_pointer
from ldpstream.contract.pseudonym import device_pseudonym
from ldpstream.contract.signatures import TrustedKeys
from ldpstream.contract.spec import parse_spec
from ldpstream.contract.wire import AttributeReports, encode, perturbed_batch
from ldpstream.device.policy import PrivacyPolicy, judge
from ldpstream.device.trust import Seen, TrustError, check_pointer, check_spec
from ldpstream.mechanisms.distribution import HierarchicalHistogram, SquareWave

VECTORS = Path(__file__).resolve().parents[1] / "vectors"


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((VECTORS / name).read_text())
    return data


def unb64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


def outcome(check: Any) -> dict[str, str]:
    try:
        check()
    except TrustError as exc:
        return {"verdict": "refuse", "code": exc.code}
    return {"verdict": "accept"}


TRUST = load("trust.json")
KEYS = TrustedKeys.from_json(TRUST["pinned_keys"])


@pytest.mark.parametrize("case", TRUST["pointers"], ids=lambda c: c["name"])
def test_pointer_verdicts(case: dict[str, Any]) -> None:
    body = unb64(case["pointer"])
    assert body is not None
    got = outcome(lambda: check_pointer(body, unb64(case["signature"]), KEYS, case["collection"],
                                        Seen(*case["seen"]), case["now_ms"]))
    assert got == case["expected"]


@pytest.mark.parametrize("case", TRUST["specs"], ids=lambda c: c["name"])
def test_spec_verdicts(case: dict[str, Any]) -> None:
    pointer, body = unb64(case["pointer"]), unb64(case["spec"])
    assert pointer is not None and body is not None
    got = outcome(lambda: check_spec(body, unb64(case["signature"]), KEYS, parse_pointer(pointer)))
    assert got == case["expected"]


POLICY = load("policy.json")


def test_the_default_policy_is_the_vectors_defaults() -> None:
    assert {k: v for k, v in PrivacyPolicy().to_dict().items() if k != "allowed_mechanisms"} == POLICY["defaults"]


@pytest.mark.parametrize("case", POLICY["cases"], ids=lambda c: c["name"])
def test_policy_verdicts(case: dict[str, Any]) -> None:
    policy = PrivacyPolicy() if case["policy"] is None else PrivacyPolicy.from_dict(case["policy"])
    verdict = judge(parse_spec(case["spec"]), policy, case["committed"])
    assert {"accepted": verdict.accepted, "code": verdict.code,
            "commitment": verdict.commitment} == case["expected"], verdict.reason


@pytest.mark.parametrize("case", load("wire.json")["cases"], ids=lambda c: c["name"])
def test_envelope_bytes(case: dict[str, Any]) -> None:
    attributes = tuple(AttributeReports(a["attribute"], np.array(a["rows"], dtype=np.uint32),
                                        {c["name"]: np.array(c["values"], dtype=c["dtype"]) for c in a["columns"]})
                       for a in case["attributes"])
    batch = perturbed_batch(case["collection"], case["spec_version"],
                            np.array([int(d) for d in case["devices"]], dtype=np.uint64),
                            np.array(case["timestamps_ms"], dtype=np.int64), attributes)
    assert encode(batch) == unb64(case["envelope"])


AUTH = load("auth.json")


@pytest.mark.parametrize("case", AUTH["signatures"], ids=lambda c: f"{c['method']} {c['path']}")
def test_request_signatures(case: dict[str, Any]) -> None:
    body = unb64(case["body"])
    assert body is not None
    assert authorization(case["device"], bytes.fromhex(case["key"]), case["method"], case["path"], body,
                         case["timestamp_ms"]) == case["authorization"]


@pytest.mark.parametrize("case", AUTH["pseudonyms"], ids=lambda c: c["device"])
def test_pseudonyms(case: dict[str, Any]) -> None:
    assert str(device_pseudonym(case["collection"], case["device"])) == case["pseudonym"]


DISTRIBUTION = load("distribution.json")


@pytest.mark.parametrize("case", DISTRIBUTION["square_wave"], ids=lambda c: f"eps{c['epsilon']}-t{c['t']}-u{c['u']}")
def test_square_wave_reports_from_uniforms(case: dict[str, Any]) -> None:
    mech = SquareWave(case["epsilon"])
    assert (mech.half_width, mech.p, mech.q, mech.scale) == pytest.approx(
        (case["half_width"], case["p"], case["q"], case["scale"]), rel=1e-12)
    report = mech.from_uniform(np.array([case["t"]]), np.array([case["u"]]))[0]
    assert report == pytest.approx(case["report"], rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("case", DISTRIBUTION["hierarchical_histogram"],
                         ids=lambda c: f"{c['bins']}-{c['fanout']}-t{c['t']}-{c['uniforms']}")
def test_hierarchical_histogram_reports_from_uniforms(case: dict[str, Any]) -> None:
    mech = HierarchicalHistogram(case["epsilon"], bins=case["bins"], fanout=case["fanout"])
    reports = mech.from_uniforms(np.array([case["t"]]), np.array(case["uniforms"])[:, None])
    assert {name: int(column[0]) for name, column in reports.items()} == case["report"]


def test_the_committed_vectors_are_what_the_generator_writes() -> None:
    spec = importlib.util.spec_from_file_location("vectors_generate", VECTORS / "generate.py")
    assert spec is not None and spec.loader is not None
    generate = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generate)
    for name in generate.VECTORS:
        assert (VECTORS / name).read_text() == generate.render(name), f"{name} drifted: run tests/vectors/generate.py"
