"""The Python SDK against tests/vectors/training.json (docs/reference/protocol.md section 13): the job spec and model
descriptor verify against the pinned keys, the clipped update vector of given examples, the updates made from scripted
uniforms (header bytes exact, values within the tolerance), the updates the edge refuses, and the verdicts on bytes
near each decoder's rules. The TypeScript SDK passes the same file."""

from __future__ import annotations

import base64
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ldpstream.contract.signatures import TrustedKeys
from ldpstream.contract.snapshot import SnapshotError, decode_snapshot
from ldpstream.contract.training import (
    TrainingWireError,
    clipped_update_vector,
    decode_update,
    descriptor_etag,
    encode_update,
    parse_descriptor,
    parse_job,
)
from ldpstream.device.policy import PrivacyPolicy, judge_job
from ldpstream.device.sdk import SpecRefused
from ldpstream.device.training import check_descriptor, check_job
from ldpstream.device.trust import Seen
from ldpstream.mechanisms.gradients.device import ScriptedUniforms, privunitg_report, projunit_report

VECTORS = Path(__file__).resolve().parents[1] / "vectors"
DATA: dict[str, Any] = json.loads((VECTORS / "training.json").read_text())
KEYS = TrustedKeys.from_json(DATA["keys"])


def unb64(text: str) -> bytes:
    return base64.b64decode(text)


def test_the_committed_file_is_what_the_generator_writes() -> None:
    sys.path.insert(0, str(VECTORS))
    import generate  # noqa: PLC0415 - the generator lives beside the vectors

    assert (VECTORS / "training.json").read_text() == generate.render("training.json")


def test_the_job_spec_and_the_model_descriptor_verify_and_agree() -> None:
    job = DATA["job"]
    spec = check_job(unb64(job["bytes"]), unb64(job["signature"]), KEYS, "tiny", Seen())
    assert spec.signed_key.decode() == job["signed_key"] and spec.model_bytes() == job["model_bytes"]
    model = DATA["model"]
    body = unb64(model["descriptor"])
    descriptor = check_descriptor(body, unb64(model["signature"]), KEYS, spec, Seen(1, 0), DATA["now_ms"])
    assert descriptor_etag(body) == model["etag"] and descriptor.sha256 == model["sha256"]
    data = unb64(model["bytes"])
    assert hashlib.sha256(data).hexdigest() == model["sha256"] and len(data) == descriptor.size
    assert decode_snapshot(data).params.tolist() == model["theta"]
    with pytest.raises(SpecRefused) as refused:  # the descriptor's signature is no job's
        check_job(unb64(job["bytes"]), unb64(model["signature"]), KEYS, "tiny", Seen())
    assert refused.value.code in ("bad_signature", "untrusted_key")
    with pytest.raises(SpecRefused) as refused:
        check_descriptor(body, unb64(model["signature"]), KEYS, spec, Seen(1, 6), DATA["now_ms"])
    assert refused.value.code == "rollback"


def test_the_clipped_update_vector_of_the_examples() -> None:
    spec = parse_job(unb64(DATA["job"]["bytes"]))
    rows = DATA["clipped"]["examples"]
    x = np.array([r["features"] for r in rows])
    y = np.array([r["label"] for r in rows])
    got = clipped_update_vector(spec, np.array(DATA["model"]["theta"]), x, y)
    assert np.allclose(got, DATA["clipped"]["vector"], rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("case", DATA["updates"], ids=lambda c: c["name"])
def test_updates_from_scripted_uniforms(case: dict[str, Any]) -> None:
    spec = parse_job(case["job"].encode())
    m = spec.mechanism
    source = ScriptedUniforms(case["uniforms"], [int(w) for w in case["words"]])
    vector = np.array(case["vector"])
    report = (privunitg_report(vector, m.p, m.q, source) if m.name == "privunitg"
              else projunit_report(vector, m.k or 0, m.p, m.q, source))
    assert source.at == len(case["uniforms"])  # every uniform used, none more
    assert (None if "seed" not in report else str(int(report["seed"][0]))) == case["seed"]
    body = encode_update(spec.job_id, spec.version, case["model_version"], report)
    assert_same_update(body, unb64(case["body"]), case["value"])
    decoded = decode_update(body, spec)
    assert decoded.model_version == case["model_version"]


def assert_same_update(body: bytes, expected: bytes, values: list[float]) -> None:
    """Protocol section 13.5's agreement: every byte before the value column's data (the envelope, the job, the
    versions, the seed, the column headers) exact; each float32 value within 1e-9 of the largest |value| of the
    vector's, plus one float32 ulp (a libm's last-ulp difference can round it to the neighbouring float32)."""
    width = 4 * len(values)
    assert len(body) == len(expected) and body[:-width] == expected[:-width]
    got = np.frombuffer(body[-width:], dtype="<f4").astype(float)
    want = np.asarray(values)
    assert np.array_equal(np.frombuffer(expected[-width:], dtype="<f4").astype(float), want)
    tolerance = 1e-9 * np.max(np.abs(want)) + np.spacing(np.abs(want).astype(np.float32)).astype(float)
    assert (np.abs(got - want) <= tolerance).all(), np.max(np.abs(got - want) / tolerance)


def test_an_update_agrees_by_its_header_bytes_and_its_values_within_the_tolerance() -> None:
    case = DATA["updates"][2]  # projunit: a seed column before the values
    body = unb64(case["body"])
    width = 4 * len(case["value"])
    values = np.frombuffer(body[-width:], dtype="<f4").copy()
    top = int(np.argmax(np.abs(values)))
    for ulps, agrees in [(1, True), (2, False)]:
        moved = values.copy()
        moved[top] = np.nextafter(moved[top], np.float32(np.inf)) if ulps == 1 else moved[top] * np.float32(1 + 1e-6)
        other = body[:-width] + moved.tobytes()
        if agrees:
            assert_same_update(other, body, case["value"])
        else:
            with pytest.raises(AssertionError):
                assert_same_update(other, body, case["value"])
    header_changed = bytearray(body)
    header_changed[-width - 10] ^= 1  # a byte of the header (the column name "value"): no tolerance there
    with pytest.raises(AssertionError):
        assert_same_update(bytes(header_changed), body, case["value"])


@pytest.mark.parametrize("case", DATA["mutations"], ids=lambda c: f"{c['kind']}: {c['name']}")
def test_bytes_near_each_rule_reach_the_declared_verdict(case: dict[str, Any]) -> None:
    data = unb64(case["bytes"])
    try:
        {"job": parse_job, "descriptor": parse_descriptor, "snapshot": decode_snapshot}[case["kind"]](data)
        verdict = "accepted"
    except TrainingWireError as exc:
        verdict = exc.code
    except SnapshotError:
        verdict = "malformed_model"
    assert verdict == case["verdict"]


@pytest.mark.parametrize("case", DATA["refusals"], ids=lambda c: c["name"])
def test_updates_the_edge_refuses(case: dict[str, Any]) -> None:
    spec = parse_job(unb64(DATA["job"]["bytes"]))
    with pytest.raises(TrainingWireError) as refused:
        decode_update(unb64(case["body"]), spec)
    assert refused.value.code == case["code"]


def test_the_policy_judges_a_job_with_the_collections_fields() -> None:
    spec = parse_job(unb64(DATA["job"]["bytes"]))  # eps 4, 2 rounds
    assert judge_job(spec, PrivacyPolicy(), {}).commitment == 8.0
    cases = [(PrivacyPolicy(max_epsilon_per_report=2.0), {}, "policy_epsilon_per_report"),
             (PrivacyPolicy(max_lifetime_per_collection=6.0), {}, "policy_lifetime_per_collection"),
             (PrivacyPolicy(allowed_mechanisms=frozenset({"grr"})), {}, "policy_mechanism"),
             (PrivacyPolicy(), {"diag": 30.0}, "policy_lifetime_per_device")]
    for policy, committed, code in cases:
        assert judge_job(spec, policy, committed).code == code
    greedy = spec.__class__(**{**{f: getattr(spec, f) for f in spec.__struct_fields__},
                               "mechanism": spec.mechanism.__class__("privunitg", 0.99, 0.001)})
    assert judge_job(greedy, PrivacyPolicy(), {}).code == "policy_unbuildable"  # its cap spends more than eps 4


@pytest.mark.parametrize("case", DATA["specs"], ids=lambda c: c["name"])
def test_a_shuffle_block_is_read_as_the_vectors_say(case: dict[str, Any]) -> None:
    """Section 13.7: a job's `shuffle` block (delta, min_batch <= batch_size); the device's update is the same."""
    if case["code"] == "accepted":
        spec = parse_job(case["json"].encode())
        assert spec.shuffle is not None and spec.canonical_json() == case["json"].encode()
    else:
        with pytest.raises(TrainingWireError) as refused:
            parse_job(case["json"].encode())
        assert refused.value.code == case["code"]
