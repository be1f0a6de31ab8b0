"""The vectors of training jobs (`training.json`, docs/reference/protocol.md section 13): a job spec and its spec-key
signature, a model descriptor and its online-key signature, a version's bytes, the clipped update vector of given
examples, updates made from scripted uniforms (exact bytes; values to 1e-9 relative to the largest), and updates
the edge refuses with their codes, and outside bytes near each rule of a job spec, a model descriptor and a version's
bytes with the verdict each SDK's decoder must reach (`mutations`). Keys come from the fixed seeds of generate.py."""

from __future__ import annotations

import base64
import hashlib
from typing import Any

import numpy as np

from ldpstream.contract.networks import make_network
from ldpstream.contract.signatures import PinnedKey, sign_block, spec_message
from ldpstream.contract.snapshot import Snapshot
from ldpstream.contract.training import (
    TrainingWireError,
    canonical,
    clipped_update_vector,
    decode_update,
    describe_version,
    descriptor_etag,
    encode_update,
    job_from_mapping,
    model_message,
    parse_job,
)
from ldpstream.mechanisms.gradients.device import (
    ScriptedUniforms,
    privunitg_report,
    projunit_report,
    uniforms_needed,
)
from ldpstream.mechanisms.gradients.privunit import optimal_cap

NOW = 1_795_788_000_000
SPEC_SEED, ONLINE_SEED = 0, 2  # generate.py's key(0) signs specs, key(2) pointers (and model versions)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def job_fields(mechanism: str, epsilon: float, dims: list[int], k: int | None = None) -> dict[str, Any]:
    n = make_network("softmax" if len(dims) == 2 else "mlp", tuple(dims)).size
    cap = optimal_cap("gaussian", epsilon, n if k is None else min(k, 1 << (n - 1).bit_length()))
    mech: dict[str, Any] = {"name": mechanism, "p": cap.p, "q": cap.q, **({} if k is None else {"k": k})}
    return {"job_id": "tiny", "version": 1, "model": {"architecture": "softmax" if len(dims) == 2 else "mlp",
            "dims": dims}, "parameters": n, "mechanism": mech, "clip": 0.5, "epsilon": epsilon, "max_rounds": 2,
            "batch_size": 4, "max_versions": 3, "lr": 1.0, "momentum": 0.5, "version_validity_s": 86400,
            "max_examples": 3, "expected_population": 100}


def spec_verdicts() -> list[dict[str, Any]]:
    """Job specs (unsigned canonical JSON) with a `shuffle` block (section 13.7) and each SDK's verdict: `accepted` or
    the refusal's code."""
    base = job_fields("privunitg", 4.0, [3, 2]) | {"batch_size": 200}
    cases = [("shuffled", {"delta": 1e-6, "min_batch": 100}),
             ("shuffled, min_batch = B", {"delta": 1e-8, "min_batch": 200}),
             ("min_batch above B", {"delta": 1e-6, "min_batch": 201}),
             ("min_batch below 100", {"delta": 1e-6, "min_batch": 99}),
             ("delta not below 0.001", {"delta": 1e-3, "min_batch": 100}),
             ("delta 0", {"delta": 0, "min_batch": 100}),
             ("min_batch not an integer", {"delta": 1e-6, "min_batch": 100.5}),
             ("no delta", {"min_batch": 100}),
             ("a window's grace", {"delta": 1e-6, "min_batch": 100, "grace_s": 60}),
             ("not an object", [1e-6, 100])]
    out = []
    for name, block in cases:
        data = canonical(base | {"shuffle": block})
        try:
            parse_job(data)
            code = "accepted"
        except TrainingWireError as exc:
            code = exc.code
        out.append({"name": name, "json": data.decode(), "code": code})
    return out


def uniforms(count: int, seed: int) -> list[float]:
    """Scripted uniforms on the 2^-53 grid (numpy's Generator.random of a fixed seed)."""
    return [float(u) for u in np.random.default_rng(seed).random(count)]


def training_vectors(key: Any) -> dict[str, Any]:
    """`key(seed)` is generate.py's fixed Ed25519 key of a seed."""
    spec_key, online_key = key(SPEC_SEED), key(ONLINE_SEED)
    spec = job_from_mapping(job_fields("privunitg", 4.0, [3, 2]))
    spec_bytes = spec.canonical_json()
    net = make_network("softmax", (3, 2))
    theta = np.linspace(-0.4, 0.3, net.size)
    model = Snapshot("softmax", (3, 2), 5, theta).encode("float64")
    descriptor = describe_version(spec, 5, model, NOW, False)
    descriptor_bytes = descriptor.canonical_json()
    x = np.array([[0.5, -1.0, 2.0], [0.0, 0.25, -0.5], [1.0, 1.0, 1.0], [9.0, 9.0, 9.0]])
    y = np.array([1, 0, 1, 0])
    clipped = clipped_update_vector(spec, theta, x, y)
    updates = []
    for name, dims, k, eps, seed in [("privunitg", [3, 2], None, 4.0, 11), ("privunitg", [4, 3, 2], None, 1.0, 12),
                                     ("projunit", [3, 2], 4, 8.0, 13), ("projunit", [4, 3, 2], 16, 2.0, 14)]:
        job = job_from_mapping({**job_fields(name, eps, dims, k)})
        n_params = job.parameters
        vec = np.random.default_rng(seed).normal(size=n_params)
        vec *= 0.8 / np.linalg.norm(vec)
        draws = uniforms(uniforms_needed(name, n_params, k), seed)
        words = [int(w) for w in np.random.default_rng(seed + 100).integers(0, 2**64, size=1, dtype=np.uint64)]
        source = ScriptedUniforms(draws, list(words))
        m = job.mechanism
        report = (privunitg_report(vec, m.p, m.q, source) if name == "privunitg"
                  else projunit_report(vec, k or 0, m.p, m.q, source))
        body = encode_update(job.job_id, job.version, 7, report)
        updates.append({"name": f"{name} {dims} eps {eps}", "job": job.canonical_json().decode(),
                        "vector": vec.tolist(), "uniforms": draws, "words": [str(w) for w in words],
                        "model_version": 7, "seed": str(int(report["seed"][0])) if "seed" in report else None,
                        "value": report["value"].reshape(-1).astype(float).tolist(), "body": b64(body)})
    ok = encode_update(spec.job_id, spec.version, 5, {"value": np.zeros((1, spec.parameters), dtype="<f4")})
    nan = np.zeros((1, spec.parameters), dtype="<f4")
    nan[0, 2] = np.nan
    inf = np.zeros((1, spec.parameters), dtype="<f4")
    inf[0, 0] = np.inf
    refused = [("NaN in the value", encode_update(spec.job_id, spec.version, 5, {"value": nan})),
               ("an infinity", encode_update(spec.job_id, spec.version, 5, {"value": inf})),
               ("one value short", encode_update(spec.job_id, spec.version, 5,
                                                 {"value": np.zeros((1, spec.parameters - 1), dtype="<f4")})),
               ("float64 values", encode_update(spec.job_id, spec.version, 5,
                                                {"value": np.zeros((1, spec.parameters))})),
               ("cut short", ok[:-1]),
               ("not msgpack", b"\xc1"),
               ("unknown wire version", b"\x95\x02" + ok[2:])]
    refusals = []
    for name, body in refused:
        try:
            decode_update(body, spec)
            code = "accepted"
        except TrainingWireError as exc:
            code = exc.code
        refusals.append({"name": name, "body": b64(body), "code": code})
    return {
        "mutations": mutations(spec_bytes, descriptor_bytes, model),
        "specs": spec_verdicts(),
        "keys": {"keys": [PinnedKey("spec", "current", spec_key.public_key()).to_json(),
                          PinnedKey("pointer", "current", online_key.public_key()).to_json()]},
        "now_ms": NOW,
        "job": {"bytes": b64(spec_bytes), "signed_key": spec.signed_key.decode(),
                "signature": b64(sign_block(spec_key, spec_message(spec.signed_key, spec_bytes))),
                "model_bytes": spec.model_bytes()},
        "model": {"descriptor": b64(descriptor_bytes),
                  "signature": b64(sign_block(online_key, model_message(descriptor_bytes))),
                  "etag": descriptor_etag(descriptor_bytes), "bytes": b64(model),
                  "sha256": hashlib.sha256(model).hexdigest(),
                  "theta": theta.tolist()},
        "clipped": {"examples": [{"features": row.tolist(), "label": int(label)}
                                 for row, label in zip(x, y, strict=True)],
                    "vector": clipped.tolist()},
        "updates": updates,
        "refusals": refusals,
    }


def _replaced(data: bytes, old: str, new: str) -> bytes:
    text = data.decode()
    assert text.count(old) == 1, old
    return text.replace(old, new).encode()


def mutations(spec: bytes, descriptor: bytes, model: bytes) -> list[dict[str, str]]:
    """Bytes near each rule of the decoders (section 13: `parseJob`, `parseDescriptor`, `decodeSnapshot`) and the
    verdict the protocol requires, declared case by case: "accepted", or the refusal code (`malformed_job`,
    `malformed_model`, `too_large`; a version's bytes that do not decode: `malformed_model`). JSON numbers are
    read by value where the field is a number, but an integer field takes only an integer literal (`1.0` is
    refused) of at most 2^53, which every SDK reads exactly."""
    job = "malformed_job"
    model_bad = "malformed_model"
    name_of = '"job_id":"tiny"'
    specs = [
        ("the spec", spec, "accepted"),
        ("job_id starting with a digit", _replaced(spec, name_of, '"job_id":"0tiny"'), job),
        ("job_id of 59 characters", _replaced(spec, name_of, f'"job_id":"{"t" * 59}"'), "accepted"),
        ("job_id of 60 characters", _replaced(spec, name_of, f'"job_id":"{"t" * 60}"'), job),
        ("job_id with a capital", _replaced(spec, name_of, '"job_id":"Tiny"'), job),
        ("version written 1.0", _replaced(spec, '"version":1,', '"version":1.0,'), job),
        ("version 1e0", _replaced(spec, '"version":1,', '"version":1e0,'), job),
        ("version 0", _replaced(spec, '"version":1,', '"version":0,'), job),
        ("version 2^53", _replaced(spec, '"version":1,', f'"version":{2**53},'), "accepted"),
        ("version 2^53 + 1", _replaced(spec, '"version":1,', f'"version":{2**53 + 1},'), job),
        ("version as a string", _replaced(spec, '"version":1,', '"version":"1",'), job),
        ("version repeated: the last counts", _replaced(spec, '"version":1,', '"version":1,"version":2,'),
         "accepted"),
        ("version repeated, the last 2.0", _replaced(spec, '"version":1,', '"version":1,"version":2.0,'), job),
        ("max_rounds true", _replaced(spec, '"max_rounds":2', '"max_rounds":true'), job),
        ("batch_size negative", _replaced(spec, '"batch_size":4', '"batch_size":-4'), job),
        ("epsilon 100", _replaced(spec, '"epsilon":4.0', '"epsilon":100'), "accepted"),
        ("epsilon 100.5", _replaced(spec, '"epsilon":4.0', '"epsilon":100.5'), job),
        ("epsilon 1e999", _replaced(spec, '"epsilon":4.0', '"epsilon":1e999'), job),
        ("clip 0", _replaced(spec, '"clip":0.5', '"clip":0'), job),
        ("clip 1 (an integer literal for a float)", _replaced(spec, '"clip":0.5', '"clip":1'), "accepted"),
        ("lr 1e999", _replaced(spec, '"lr":1.0', '"lr":1e999'), job),
        ("momentum 1", _replaced(spec, '"momentum":0.5', '"momentum":1'), job),
        ("momentum 0 (an integer literal)", _replaced(spec, '"momentum":0.5', '"momentum":0'), "accepted"),
        ("momentum null", _replaced(spec, '"momentum":0.5', '"momentum":null'), job),
        ("momentum absent", _replaced(spec, '"momentum":0.5,', ""), "accepted"),
        ("expected_population null", _replaced(spec, '"expected_population":100', '"expected_population":null'),
         "accepted"),
        ("expected_population 0", _replaced(spec, '"expected_population":100', '"expected_population":0'), job),
        ("lr absent", _replaced(spec, '"lr":1.0,', ""), job),
        ("an unknown field", _replaced(spec, '"lr":1.0,', '"lr":1.0,"extra":1,'), job),
        ("dims written 3.0", _replaced(spec, '"dims":[3,2]', '"dims":[3.0,2]'), job),
        ("dims [3, 1]", _replaced(spec, '"dims":[3,2]', '"dims":[3,1]'), job),
        ("softmax of three widths", _replaced(spec, '"dims":[3,2]', '"dims":[3,2,2]'), job),
        ("parameters 7", _replaced(spec, '"parameters":8', '"parameters":7'), job),
        ("privunitg past the edge's bytes", _replaced(_replaced(spec, '"dims":[3,2]', '"dims":[4096,5]'),
                                                      '"parameters":8', '"parameters":20485'), job),
        ("projunit without k", _replaced(spec, '"name":"privunitg"', '"name":"projunit"'), job),
        ("projunit with k", _replaced(spec, '"name":"privunitg"', '"k":4,"name":"projunit"'), "accepted"),
        ("projunit with k 4.0", _replaced(spec, '"name":"privunitg"', '"k":4.0,"name":"projunit"'), job),
        ("privunitg with k", _replaced(spec, '"name":"privunitg"', '"k":4,"name":"privunitg"'), job),
        ("a mechanism devices do not run", _replaced(spec, '"name":"privunitg"', '"name":"hm"'), job),
        ("cap p 1", _replaced(spec, '"p":0.8196129295344756', '"p":1'), job),
        ("a mechanism field unknown", _replaced(spec, '"name":"privunitg"', '"name":"privunitg","x":1'), job),
        ("not UTF-8", spec[:20] + b"\xff" + spec[21:], job),
        ("a JSON array", b"[" + spec + b"]", job),
        ("over 64 KiB", spec + b" " * (64 * 1024), "too_large"),
    ]
    sha = '"sha256":"' + hashlib.sha256(model).hexdigest() + '"'
    descriptors = [
        ("the descriptor", descriptor, "accepted"),
        ("version written 5.0", _replaced(descriptor, '"version":5', '"version":5.0'), model_bad),
        ("version -1", _replaced(descriptor, '"version":5', '"version":-1'), model_bad),
        ("version -0 (zero)", _replaced(descriptor, '"version":5', '"version":-0'), "accepted"),
        ("size 2^53", _replaced(descriptor, '"size":103', f'"size":{2**53}'), "accepted"),
        ("size 2^53 + 1", _replaced(descriptor, '"size":103', f'"size":{2**53 + 1}'), model_bad),
        ("size 1e3", _replaced(descriptor, '"size":103', '"size":1e3'), model_bad),
        ("dims written 3.0", _replaced(descriptor, '"dims":[3,2]', '"dims":[3.0,2]'), model_bad),
        ("dims holding true", _replaced(descriptor, '"dims":[3,2]', '"dims":[3,true]'), model_bad),
        ("a width of 2^20 + 1", _replaced(descriptor, '"dims":[3,2]', f'"dims":[3,{2**20 + 1}]'), model_bad),
        ("sha256 in capitals", _replaced(descriptor, sha, sha.upper().replace("SHA256", "sha256")), model_bad),
        ("done 0", _replaced(descriptor, '"done":false', '"done":0'), model_bad),
        ("job a number", _replaced(descriptor, '"job":"tiny"', '"job":5'), model_bad),
        ("an unknown field", _replaced(descriptor, '"done":false', '"done":false,"extra":1'), model_bad),
        ("a field absent", _replaced(descriptor, '"done":false,', ""), model_bad),
        ("nested 1,500 deep", b"[" * 1500 + b"]" * 1500, model_bad),
        ("over 4 KiB", descriptor + b" " * 4096, "too_large"),
    ]
    head = 4 + 3 + len("softmax")  # magic, format, dtype, name length, name
    count_at = head + 1 + 8 + 8
    nan = bytearray(model)
    nan[-8:] = b"\x00\x00\x00\x00\x00\x00\xf8\x7f"
    single = model[:5] + b"\x04" + model[6:count_at + 8] + np.frombuffer(model[count_at + 8:], "<f8").astype(
        "<f4").tobytes()
    snapshots = [
        ("the version's bytes", model, "accepted"),
        ("float32 parameters", single, "accepted"),
        ("one byte short", model[:-1], model_bad),
        ("one byte more", model + b"\x00", model_bad),
        ("another magic", b"LDPX" + model[4:], model_bad),
        ("format 2", model[:4] + b"\x02" + model[5:], model_bad),
        ("dtype 2", model[:5] + b"\x02" + model[6:], model_bad),
        ("an architecture not known", model[:7] + b"softmay" + model[14:], model_bad),
        ("one width", model[:head] + b"\x01" + model[head + 1:], model_bad),
        ("a width 0", model[:head + 1] + b"\x00\x00\x00\x00" + model[head + 5:], model_bad),
        ("a count of 2^64 - 1", model[:count_at] + b"\xff" * 8 + model[count_at + 8:], model_bad),
        ("a NaN parameter", bytes(nan), model_bad),
        ("empty", b"", model_bad),
    ]
    return [{"kind": kind, "name": name, "bytes": b64(data), "verdict": verdict}
            for kind, cases in [("job", specs), ("descriptor", descriptors), ("snapshot", snapshots)]
            for name, data, verdict in cases]
