"""The Python SDK against tests/vectors/training.json (docs/reference/protocol.md section 13): the job spec and model
descriptor verify against the pinned keys, the clipped update vector of given examples, the update bytes made from
scripted uniforms, and the updates the edge refuses. The TypeScript SDK passes the same file."""

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
from ldpstream.contract.snapshot import decode_snapshot
from ldpstream.contract.training import (
    TrainingWireError,
    clipped_update_vector,
    decode_update,
    descriptor_etag,
    encode_update,
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
    values = report["value"].reshape(-1).astype(float)
    assert np.max(np.abs(values - case["value"])) <= 1e-9 * np.max(np.abs(case["value"]))
    assert (None if "seed" not in report else str(int(report["seed"][0]))) == case["seed"]
    body = encode_update(spec.job_id, spec.version, case["model_version"], report)
    assert body == unb64(case["body"])
    decoded = decode_update(body, spec)
    assert decoded.model_version == case["model_version"]


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
