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
from ldpstream.device.http import MAX_JSON_DEPTH, Answer, EdgeError, json_of
from ldpstream.device.outbox import backoff_s, retry_after_s, verdicts_of
from ldpstream.device.policy import PrivacyPolicy, judge
from ldpstream.device.sdk import check_report_time
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
    for name in generate.GENERATED:  # the TypeScript SDK's copy of the spec's rules
        assert (generate.ROOT / name).read_text() == generate.render(name), (
            f"{name} differs from the Python contract: run `.venv/bin/python tests/vectors/generate.py`")


DELIVERY = load("delivery.json")


@pytest.mark.parametrize("case", DELIVERY["report_times"], ids=lambda c: c["name"])
def test_report_times(case: dict[str, Any]) -> None:
    try:
        check_report_time(case["timestamp_ms"], case["clock_ms"])
        got = "accept"
    except ValueError:
        got = "refuse"
    assert got == case["expected"]


@pytest.mark.parametrize("case", DELIVERY["answers"], ids=lambda c: c["name"])
def test_verdicts_read_from_answers(case: dict[str, Any]) -> None:
    answer = Answer(case["status"], {}, case["body"].encode())
    assert verdicts_of(answer, case["reports"]) == case["verdicts"]


@pytest.mark.parametrize("case", DELIVERY["backoff"], ids=lambda c: f"{c['attempt']}-{c['retry_after_s']}")
def test_the_backoff_caps_retry_after(case: dict[str, Any]) -> None:
    got = backoff_s(case["attempt"], case["retry_after_s"], case["base_s"], case["cap_s"], case["u"])
    assert got == pytest.approx(case["wait_s"], rel=1e-12)


@pytest.mark.parametrize("case", DELIVERY["retry_after"], ids=lambda c: repr(c["header"]))
def test_retry_after_headers(case: dict[str, Any]) -> None:
    assert retry_after_s(case["header"]) == case["seconds"]


@pytest.mark.parametrize("case", DELIVERY["json_bodies"], ids=lambda c: c["name"])
def test_json_answers_nest_boundedly(case: dict[str, Any]) -> None:
    try:
        json_of(case["body"].encode(), 200, "an answer")
        got = "accept"
    except EdgeError as exc:
        assert exc.reason == "bad_answer"
        got = "refuse"
    assert got == case["expected"] and DELIVERY["max_json_depth"] == MAX_JSON_DEPTH
