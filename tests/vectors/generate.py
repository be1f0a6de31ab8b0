"""Writes the device protocol's test vectors (tests/vectors/*.json): the contract every device SDK passes.

    .venv/bin/python tests/vectors/generate.py        # rewrites the files; a test fails if they drift

Each file holds inputs and the outcome the protocol requires, declared here case by case (never read back from
the implementation): `tests/contract/test_vectors.py` holds the Python SDK to them and checks that the committed
files are what this script writes. Keys come from fixed seeds, times are fixed, so the files never change unless
the protocol does. Bytes are base64 (standard alphabet, padded); 64-bit integers are decimal strings.

- `trust.json`: the pinned keys (as `ldp spec keys --json` prints them), then pointers and specs with the device's
  verdict: "accept", or "refuse" with the rule's code (`ldpstream.device.trust`).
- `policy.json`: policies, specs and the lifetimes already committed, with the verdict and the commitment
  (`ldpstream.device.policy.judge`).
- `wire.json`: batches of mechanism output and the exact envelope bytes (`ldpstream.contract.wire.encode`).
- `auth.json`: request signatures (`ldpstream.contract.auth.authorization`) and device pseudonyms
  (`ldpstream.contract.pseudonym.device_pseudonym`).
- `delivery.json`: the device's delivery rules (docs/reference/protocol.md): which report times a device may stamp,
  the verdicts it reads from the edge's answers (null: the reports stay), the backoff's cap over Retry-After, how it
  reads Retry-After, and which JSON answers it parses (nesting bounded).
- `distribution.json`: the distribution mechanisms' reports from given uniforms (`SquareWave.from_uniform`,
  `HierarchicalHistogram.from_uniforms`), computed here from the formulas, scalar by scalar: a device SDK draws its
  own uniforms and must turn them into the same reports (to 1e-12 for Square Wave's float).

The deterministic parts of perturbation, which every SDK must compute bit for bit (its noise is its own, drawn from
the platform's cryptographic generator, and only its distribution must agree). Here the outcome is the reference
implementation's (the Python mechanisms define these functions), recorded for fixed inputs;
`tests/device/test_vectors_perturb.py` holds the Python SDK to them through its public paths:

- `memo.json`: the keyed 64-bit streams (`ldpstream.mechanisms.longitudinal.memo`), the attribute secrets, and every
  memoized mechanism's parameters, memo name prefix (protocol.md, "Memo naming": m1, for the attribute "battery"),
  repr (which named the ledger's memos before m1) and permanent responses for fixed secrets and
  values (L-GRR's code, unary and RAPPOR bits with the cohort, 1BitMean's rounding and bit, dBitFlip's buckets and
  bits).
- `collectors.json`: specs and how their collector resolves "auto", k and the budgets (`privacy_budgets`), each
  attribute's report columns (dtype, values per row, bounds, finite output set: `Mechanism.schema`), which k
  attributes a secret fixes, and the memos a record reads (`ldpstream.device.perturb.report_memos`), by their names and
  their legacy names.
- `hashes.json`: local hashing's buckets and exact q*, Hadamard bits, string fingerprints, salts and buckets, the
  heavy-hitter trees' levels and seeds, SFP's puzzle pieces and records, open-domain key codes, and a factorization
  strategy's .npz bytes (stored and deflated) with its content hash.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from ldpstream.contract.auth import authorization  # noqa: E402
from ldpstream.contract.pointer import Pointer  # noqa: E402
from ldpstream.contract.pseudonym import device_pseudonym  # noqa: E402
from ldpstream.contract.signatures import PinnedKey, pointer_message, sign_block, spec_message  # noqa: E402
from ldpstream.contract.spec import parse_spec  # noqa: E402
from ldpstream.contract.wire import AttributeReports, encode, perturbed_batch  # noqa: E402

HERE = Path(__file__).resolve().parent
NOW = 1_795_788_000_000  # the devices' clock in every trust case
HOUR = 3_600_000


def key(seed: int) -> Ed25519PrivateKey:
    return Ed25519PrivateKey.from_private_bytes(hashlib.sha256(f"ldpstream test vector key {seed}".encode()).digest())


SPEC_KEY, SPEC_NEXT, POINTER_KEY, POINTER_NEXT, STRANGER = (key(i) for i in range(5))


def b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def spec_text(name: str = "diag", version: int = 3, epsilon: float = 2.0, **extra: Any) -> bytes:
    """A spec's canonical JSON bytes (what is published and served)."""
    body = {"name": name, "version": version, "epsilon": epsilon, "windows": ["1h"],
            "attributes": [{"name": "battery", "type": "numeric", "range": [0, 100], "mechanism": "pm"},
                           {"name": "network", "type": "categorical", "values": ["wifi", "4g", "5g"],
                            "mechanism": "grr"}], **extra}
    return parse_spec(json.dumps(body)).canonical_json().encode()


def pointer_bytes(spec: bytes, version: int = 3, sequence: int = NOW // HOUR, collection: str = "diag",
                  issued: int | None = None, expires: int | None = None) -> bytes:
    issued = sequence * HOUR if issued is None else issued
    return Pointer(collection, version, hashlib.sha256(spec).hexdigest(), issued,
                   issued + 24 * HOUR if expires is None else expires, sequence).to_bytes()


def trust_vectors() -> dict[str, Any]:
    spec = spec_text()
    good_pointer = pointer_bytes(spec)
    signed_pointer = sign_block(POINTER_KEY, pointer_message(good_pointer))
    signed_spec = sign_block(SPEC_KEY, spec_message(b"diag@3", spec))
    flipped = bytearray(spec)
    flipped[len(flipped) // 2] ^= 0x01
    pointers = [
        ("a pointer signed by the current pointer key", good_pointer, signed_pointer, [0, -1], "accept"),
        ("a pointer signed by the next pointer key", good_pointer,
         sign_block(POINTER_NEXT, pointer_message(good_pointer)), [0, -1], "accept"),
        ("the same pointer again", good_pointer, signed_pointer, [3, NOW // HOUR], "accept"),
        ("no signature", good_pointer, None, [0, -1], "unsigned"),
        ("a signature block of 71 bytes", good_pointer, signed_pointer[:-1], [0, -1], "malformed_signature"),
        ("signed by a key nobody pinned", good_pointer, sign_block(STRANGER, pointer_message(good_pointer)),
         [0, -1], "untrusted_key"),
        ("signed by the spec key (a key of the wrong role)", good_pointer,
         sign_block(SPEC_KEY, pointer_message(good_pointer)), [0, -1], "untrusted_key"),
        ("one byte of the pointer changed", good_pointer.replace(b'"version":3', b'"version":4'), signed_pointer,
         [0, -1], "bad_signature"),
        ("a pointer for another collection", pointer_bytes(spec, collection="other"), None, [0, -1],
         "wrong_collection"),
        ("an older version than the device accepted", pointer_bytes(spec, version=2), None, [3, 1],
         "rollback"),
        ("an older sequence of the same version", pointer_bytes(spec, sequence=NOW // HOUR - 1), None,
         [3, NOW // HOUR], "rollback"),
        ("an expired pointer", pointer_bytes(spec, sequence=NOW // HOUR - 30), None, [0, -1], "expired"),
        ("issued six minutes after the device's clock (beyond the skew)",
         pointer_bytes(spec, issued=NOW + 6 * 60_000), None, [0, -1], "issued_in_future"),
        ("issued four minutes after the device's clock (within the skew)",
         pointer_bytes(spec, issued=NOW + 4 * 60_000), None, [0, -1], "accept"),
        ("issued in year 9999 with a sequence to match (it would pin the device)",
         pointer_bytes(spec, sequence=253_402_300_799_000 // HOUR), None, [0, -1], "issued_in_future"),
        ("valid until the end of time", pointer_bytes(spec, expires=2**53 - 1), None, [0, -1], "too_long"),
        ("valid for seven days exactly (the protocol's longest)", pointer_bytes(spec, expires=NOW + 7 * 24 * HOUR),
         None, [0, -1], "accept"),
        ("not JSON", b"not a pointer", None, [0, -1], "malformed_pointer"),
        ("a version that is a boolean", good_pointer.replace(b'"version":3', b'"version":true'), None, [0, -1],
         "malformed_pointer"),
    ]
    pointer_cases = []
    for name, body, block, seen, outcome in pointer_cases_signed(pointers):
        pointer_cases.append({"name": name, "collection": "diag", "seen": seen, "now_ms": NOW, "pointer": b64(body),
                              "signature": b64(block), "expected": verdict(outcome)})
    annotated = spec_text(attributes=[
        {"name": "battery", "type": "numeric", "range": [0, 100], "mechanism": "pm", "unit": "%",
         "description": "Charge left"},
        {"name": "network", "type": "categorical", "values": ["wifi", "4g", "5g"], "mechanism": "grr",
         "description": "Connection in use"}])
    bad_unit = annotated.replace(b'"unit":"%"', b'"unit":"%\\n"')
    specs = [
        ("the spec the pointer names, signed by the spec key", spec, signed_spec, good_pointer, "accept"),
        ("signed by the next spec key", spec, sign_block(SPEC_NEXT, spec_message(b"diag@3", spec)), good_pointer,
         "accept"),
        ("one byte flipped", bytes(flipped), signed_spec, good_pointer, "bad_signature"),
        ("signed by the pointer key (the wrong role)", spec, sign_block(POINTER_KEY, spec_message(b"diag@3", spec)),
         good_pointer, "untrusted_key"),
        ("signed by a key nobody pinned", spec, sign_block(STRANGER, spec_message(b"diag@3", spec)), good_pointer,
         "untrusted_key"),
        ("a signature for another version (diag@2)", spec, sign_block(SPEC_KEY, spec_message(b"diag@2", spec)),
         good_pointer, "bad_signature"),
        ("validly signed, but not the bytes the pointer names", spec_text(epsilon=2.5),
         sign_block(SPEC_KEY, spec_message(b"diag@3", spec_text(epsilon=2.5))), good_pointer, "hash_mismatch"),
        ("validly signed and named, but not a spec", b'{"name":"diag"}',
         sign_block(SPEC_KEY, spec_message(b"diag@3", b'{"name":"diag"}')), pointer_bytes(b'{"name":"diag"}'),
         "malformed_spec"),
        ("validly signed and named, but the spec is diag@4", spec_text(version=4),
         sign_block(SPEC_KEY, spec_message(b"diag@3", spec_text(version=4))), pointer_bytes(spec_text(version=4)),
         "wrong_version"),
        ("attributes with a description and a unit (for the analyst: a device takes them as any field)", annotated,
         sign_block(SPEC_KEY, spec_message(b"diag@3", annotated)), pointer_bytes(annotated), "accept"),
        ("a unit with a control character", bad_unit, sign_block(SPEC_KEY, spec_message(b"diag@3", bad_unit)),
         pointer_bytes(bad_unit), "malformed_spec"),
    ]
    spec_cases = [{"name": name, "pointer": b64(ptr), "spec": b64(body), "signature": b64(block),
                   "expected": verdict(outcome)} for name, body, block, ptr, outcome in specs]
    pinned = [PinnedKey("spec", "current", SPEC_KEY.public_key()), PinnedKey("spec", "next", SPEC_NEXT.public_key()),
              PinnedKey("pointer", "current", POINTER_KEY.public_key()),
              PinnedKey("pointer", "next", POINTER_NEXT.public_key())]
    return {"pinned_keys": {"keys": [k.to_json() for k in pinned]}, "pointers": pointer_cases, "specs": spec_cases}


def pointer_cases_signed(cases: list[tuple[str, bytes, bytes | None, list[int], str]]
                         ) -> list[tuple[str, bytes, bytes | None, list[int], str]]:
    """Cases whose signature is not what they test get a valid signature by the pointer key."""
    signature_rules = {"unsigned", "malformed_signature", "untrusted_key", "bad_signature"}
    return [(name, body, block if block is not None or outcome in signature_rules
             else sign_block(POINTER_KEY, pointer_message(body)), seen, outcome)
            for name, body, block, seen, outcome in cases]


def verdict(outcome: str) -> dict[str, str]:
    return {"verdict": "accept"} if outcome == "accept" else {"verdict": "refuse", "code": outcome}


def policy_vectors() -> dict[str, Any]:
    defaults = None
    lifetime = {"per_report": 1.0, "lifetime": 4.0, "values": 2}
    memoized = [{"name": "category", "type": "categorical", "values": ["a", "b", "c"], "mechanism": "auto"}]
    cases = [
        ("a modest spec under the defaults", defaults, spec_text(), {}, True, "", 8.0),
        ("epsilon 50, signed by the real key (the compromised-server case)", defaults, spec_text(epsilon=50.0), {},
         False, "policy_epsilon_per_report", 0.0),
        ("epsilon 8: the largest per-report budget the defaults allow", defaults, spec_text(epsilon=8.0), {}, True,
         "", 8.0),
        ("a shuffled spec: judged as any other (the device's budget is eps0)", defaults,
         spec_text(epsilon=4.0, shuffle={"delta": 1e-8, "min_batch": 1000, "grace_s": 30}), {}, True, "", 8.0),
        ("a spec with a lifetime budget commits it", defaults,
         spec_text(privacy=lifetime, attributes=memoized, epsilon=1.0), {}, True, "", 4.0),
        ("a lifetime budget above the per-collection cap", defaults,
         spec_text(privacy={**lifetime, "lifetime": 20.0}, attributes=memoized, epsilon=1.0), {}, False,
         "policy_lifetime_per_collection", 0.0),
        ("the fifth collection at the cap: over the device-wide cap", defaults, spec_text(name="copy5"),
         {"copy1": 8.0, "copy2": 8.0, "copy3": 8.0, "copy4": 8.0}, False, "policy_lifetime_per_device", 0.0),
        ("a new version of a collection the device accepted: no new commitment", defaults, spec_text(),
         {"diag": 8.0, "a": 8.0, "b": 8.0, "c": 8.0}, True, "", 8.0),
        ("a mechanism the app does not allow", {"allowed_mechanisms": ["grr", "oue"]}, spec_text(), {}, False,
         "policy_mechanism", 0.0),
        ("an app that caps a report at epsilon 1", {"max_epsilon_per_report": 1.0}, spec_text(), {}, False,
         "policy_epsilon_per_report", 0.0),
        ("an app whose day allows less than one report", {"max_epsilon_per_day": 1.5}, spec_text(), {}, False,
         "policy_epsilon_per_day", 0.0),
    ]
    return {"defaults": {"max_epsilon_per_report": 8.0, "max_epsilon_per_day": 16.0,
                         "max_lifetime_per_collection": 8.0, "max_lifetime_per_device": 32.0},
            "cases": [{"name": name, "policy": policy, "spec": body.decode(), "committed": committed,
                       "expected": {"accepted": accepted, "code": code, "commitment": commitment}}
                      for name, policy, body, committed, accepted, code, commitment in cases]}


def wire_vectors() -> dict[str, Any]:
    cases = []
    batches = [
        ("one device, one numeric report", [2**63 + 5], [NOW], [(0, [0], {"value": ("<f8", [0.25])})]),
        ("one device, a categorical and a numeric report", [17], [NOW + 1],
         [(0, [0], {"value": ("<f8", [-1.5])}), (1, [0], {"value": ("<i8", [2])})]),
        ("three devices, a unary-encoding report of bits", [1, 2, 3], [NOW, NOW, NOW],
         [(2, [0, 2], {"bits": ("|u1", [1, 0, 1, 0, 0, 1])})]),
    ]
    for name, devices, timestamps, blocks in batches:
        attributes = tuple(AttributeReports(a, np.array(rows, dtype=np.uint32),
                                            {col: np.array(values, dtype=dtype)
                                             for col, (dtype, values) in columns.items()})
                           for a, rows, columns in blocks)
        batch = perturbed_batch("diag", 3, np.array(devices, dtype=np.uint64), np.array(timestamps, dtype=np.int64),
                                attributes)
        cases.append({"name": name, "collection": "diag", "spec_version": 3,
                      "devices": [str(d) for d in devices], "timestamps_ms": timestamps,
                      "attributes": [{"attribute": a, "rows": rows,
                                      "columns": [{"name": col, "dtype": dtype, "values": values}
                                                  for col, (dtype, values) in sorted(columns.items())]}
                                     for a, rows, columns in blocks],
                      "envelope": b64(encode(batch))})
    return {"cases": cases}


def auth_vectors() -> dict[str, Any]:
    key_bytes = hashlib.sha256(b"ldpstream test vector device key").digest()
    requests = [("POST", "/v1/collections/diag/reports", b"\x93\x01\xa4diag\x03"),
                ("DELETE", "/v1/collections/diag/devices/5f1c0de2a9b3c4d5e6f70812", b""),
                ("POST", "/v1/collections/diag/reports", b"")]
    return {"signatures": [{"device": "5f1c0de2a9b3c4d5e6f70812", "key": key_bytes.hex(), "method": method,
                            "path": path, "timestamp_ms": NOW, "body": b64(body),
                            "authorization": authorization("5f1c0de2a9b3c4d5e6f70812", key_bytes, method, path, body,
                                                           NOW)}
                           for method, path, body in requests],
            "pseudonyms": [{"collection": c, "device": d, "pseudonym": str(device_pseudonym(c, d))}
                           for c, d in [("diag", "5f1c0de2a9b3c4d5e6f70812"),
                                        ("diagnostics", "k2.0a1b2c3d4e5f6a7b8c9d0e1f"), ("a", "x")]]}


def square_wave_report(epsilon: float, t: float, u: float) -> dict[str, float]:
    """Square Wave (Li et al. SIGMOD 2020, Sec. 4) on [-1, 1]: b, p, q, s = 2 b (p - q) and the report (2 y - 1) / s,
    y the inverse CDF of the output on [-b, 1 + b] at u (pieces of mass q v, 2 b p, q (1 - v))."""
    e = math.exp(epsilon)
    b = (epsilon * e - math.expm1(epsilon)) / (2 * e * (math.expm1(epsilon) - epsilon))
    p, q = e / (2 * b * e + 1), 1 / (2 * b * e + 1)
    s, v = 2 * b * (p - q), (t + 1) / 2
    if u < q * v:
        y = u / q - b
    elif u < q * v + 2 * b * p:
        y = v - b + (u - q * v) / p
    else:
        y = v + b + (u - q * v - 2 * b * p) / q
    return {"half_width": b, "p": p, "q": q, "scale": s, "report": (2 * min(max(y, -b), 1 + b) - 1) / s}


def hierarchy_report(epsilon: float, bins: int, fanout: int, t: float, u: tuple[float, float, float]) -> dict[str, int]:
    """Hierarchical histogram (Cormode et al. VLDB 2019) with HRR: level 1 + floor(u0 h), row floor(u1 m) (m the power
    of two >= bins), bit = 1 - parity(row & node) kept when u2 < e^eps / (e^eps + 1)."""
    height = round(math.log(bins, fanout))
    rows = 1 << (bins - 1).bit_length()
    leaf = min(math.floor((t + 1) / 2 * bins), bins - 1)
    level = 1 + min(math.floor(u[0] * height), height - 1)
    row = min(math.floor(u[1] * rows), rows - 1)
    node = leaf // fanout ** (height - level)
    bit = 1 - bin(row & node).count("1") % 2
    keep = u[2] < math.exp(epsilon) / (math.exp(epsilon) + 1)
    return {"level": level, "row": row, "bit": bit if keep else 1 - bit}


def distribution_vectors() -> dict[str, Any]:
    values = (-1.0, -0.7, 0.0, 0.3125, 1.0)
    uniforms = (0.0, 0.05, 0.31, 0.5, 0.77, 0.999)
    square_wave = [{"epsilon": eps, "t": t, "u": u, **square_wave_report(eps, t, u)}
                   for eps in (0.5, 1.0, 4.0) for t in values for u in uniforms]
    triples = ((0.0, 0.0, 0.0), (0.1, 0.42, 0.9), (0.55, 0.999, 0.3), (0.99, 0.25, 0.73))
    hierarchy = [{"epsilon": eps, "bins": bins, "fanout": fanout, "t": t, "uniforms": list(u),
                  "report": hierarchy_report(eps, bins, fanout, t, u)}
                 for eps, bins, fanout in ((1.0, 64, 4), (2.0, 27, 3)) for t in values for u in triples]
    return {"square_wave": square_wave, "hierarchical_histogram": hierarchy}


def delivery_vectors() -> dict[str, Any]:
    """The device's delivery rules (docs/reference/protocol.md, sections 6 to 8), as pure functions of their inputs."""
    skew = 5 * 60_000
    times = [("now", NOW, "accept"), ("the skew ahead", NOW + skew, "accept"), ("a millisecond beyond the skew",
             NOW + skew + 1, "refuse"), ("1 ms after 1970", 1, "accept"), ("1970 itself", 0, "refuse"),
             ("before 1970", -1, "refuse"), ("year 9999", 253_402_300_799_000, "refuse"),
             ("a day ago", NOW - 24 * HOUR, "accept")]
    verdicts = ["stale_timestamp", "admitted", "future_timestamp"]
    answers = [
        ("200 with a verdict per report", 200, {"accepted": 1, "verdicts": verdicts}, 3, verdicts),
        ("200 without verdicts (an older edge)", 200, {"accepted": 2}, 2, ["admitted"] * 2),
        ("202: in the edge's spool", 202, {"accepted": 1, "verdicts": ["admitted"]}, 1, ["admitted"]),
        ("409 without verdicts: every window used", 409, {"reason": "duplicate"}, 2, ["duplicate"] * 2),
        ("400 for a batch of one (no verdicts)", 400, {"reason": "future_timestamp"}, 1, ["future_timestamp"]),
        ("400 with verdicts: none admitted", 400, {"reason": "stale_timestamp",
                                                   "verdicts": ["stale_timestamp", "out_of_range"]}, 2,
         ["stale_timestamp", "out_of_range"]),
        ("400 whose body is not JSON", 400, "not json", 1, ["refused"]),
        ("413", 413, {"reason": "too_large"}, 2, ["too_large"] * 2),
        ("200 with verdicts of the wrong length: the status counts", 200, {"verdicts": ["admitted"]}, 2,
         ["admitted"] * 2),
        ("an unknown verdict is a refusal", 200, {"verdicts": ["admitted", "lol"]}, 2, ["admitted", "refused"]),
        ("500: the reports stay", 500, {"reason": "x"}, 1, None),
        ("429: retried, then the reports stay", 429, {"reason": "rate_limited"}, 1, None),
        ("401: the reports stay", 401, {"reason": "unauthorized"}, 1, None),
        ("200 nested too deep: the status counts", 200, "[" * 40 + "]" * 40, 1, ["admitted"]),
    ]
    backoff = [(1, 0.0, 0.2, 30.0, 0.5, 0.1), (10, 0.0, 0.2, 30.0, 1.0, 30.0), (1, 7.0, 0.2, 30.0, 0.5, 7.0),
               (1, 999_999_999.0, 0.2, 30.0, 0.5, 30.0), (2, 1e9, 0.2, 0.5, 0.0, 0.5)]
    retry_after = [("999999999", 999_999_999.0), ("2", 2.0), (" 3 ", 3.0), ("1.5", 1.5), ("", 0.0), ("-5", 0.0),
                   ("abc", 0.0), ("0x10", 0.0), ("1e400", 0.0), ("Infinity", 0.0), ("NaN", 0.0),
                   ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0)]
    json_bodies = [("flat", '{"reason":"x"}', "accept"), ("32 deep", "[" * 32 + "]" * 32, "accept"),
                   ("33 deep", "[" * 33 + "]" * 33, "refuse"),
                   ("3000 deep (a RecursionError once)", "[" * 3000, "refuse"),
                   ("brackets inside a string do not nest", json.dumps({"a": "[" * 100}), "accept"),
                   ("an escaped quote in a string", json.dumps({"a": '\"[[[' * 20}), "accept"),
                   ("not JSON", "nope", "refuse")]
    return {"skew_ms": skew, "max_json_depth": 32,
            "report_times": [{"name": n, "clock_ms": NOW, "timestamp_ms": t, "expected": e} for n, t, e in times],
            "answers": [{"name": n, "status": st, "body": b if isinstance(b, str) else json.dumps(b), "reports": k,
                         "verdicts": v} for n, st, b, k, v in answers],
            "backoff": [{"attempt": a, "retry_after_s": r, "base_s": b, "cap_s": c, "u": u, "wait_s": w}
                        for a, r, b, c, u, w in backoff],
            "retry_after": [{"header": h, "seconds": v} for h, v in retry_after],
            "json_bodies": [{"name": n, "body": b, "expected": e} for n, b, e in json_bodies]}


from perturb_vectors import collector_vectors, hash_vectors, memo_vectors  # noqa: E402
from spec_rules import rules, typescript  # noqa: E402
from training_vectors import training_vectors  # noqa: E402

VECTORS = {"trust.json": trust_vectors, "policy.json": policy_vectors, "wire.json": wire_vectors,
           "auth.json": auth_vectors, "memo.json": memo_vectors, "collectors.json": collector_vectors,
           "hashes.json": hash_vectors, "distribution.json": distribution_vectors, "delivery.json": delivery_vectors,
           "training.json": lambda: training_vectors(key), "rules.json": rules}
GENERATED = {"sdk/typescript/src/rules.ts": typescript}  # beside the vectors, relative to the repository


def render(name: str) -> str:
    return GENERATED[name]() if name in GENERATED else json.dumps(VECTORS[name](), indent=1) + "\n"


if __name__ == "__main__":
    for name in [*VECTORS, *GENERATED]:
        path = ROOT / name if name in GENERATED else HERE / name
        path.write_text(render(name))
        print(f"wrote {path}")
