"""The vectors of the deterministic parts of perturbation (`memo.json`, `collectors.json`, `hashes.json`; see
generate.py's docstring): fixed inputs, and what the reference mechanisms make of them. 64-bit integers are decimal
strings, bytes base64, floats as JSON numbers (an SDK compares the ones a libm computes within 1e-12 relative: exp
and log may differ by an ulp between platforms; everything a device decides from them must agree exactly)."""

from __future__ import annotations

import base64
import io
import json
import math
import zipfile
from typing import Any

import numpy as np

from ldpstream.contract.collector import collector_for, hash_seed, privacy_budgets
from ldpstream.contract.spec import KeyValueAttribute, parse_spec
from ldpstream.device.perturb import memo_prefix, report_memos
from ldpstream.mechanisms import registry
from ldpstream.mechanisms.frequency.hadamard import hadamard_bit
from ldpstream.mechanisms.frequency.local_hash import hash_buckets, other_support_probability
from ldpstream.mechanisms.hashing import mix64
from ldpstream.mechanisms.longitudinal.memo import (
    TAG_ALPHA,
    TAG_ATTRIBUTE_SAMPLE,
    TAG_PERMANENT,
    attribute_secrets,
    keyed_bits,
    keyed_uniform,
    keyed_words,
    name_key,
)
from ldpstream.mechanisms.numeric.duchi import duchi_bound_1d
from ldpstream.mechanisms.open_domain.sfp import SFP
from ldpstream.mechanisms.open_domain.strings import StringDomain, buckets, hash_salts, prefix_fingerprints
from ldpstream.mechanisms.open_domain.tree import PEM, HCMSTree
from ldpstream.mechanisms.workload.baselines import randomized_response
from ldpstream.mechanisms.workload.mechanism import FactorizationMechanism

SECRETS = [0, 1, 7, 2**63 + 12345, 2**64 - 1, 0x0123456789ABCDEF]


def u64(values: Any) -> list[str]:
    return [str(int(v)) for v in np.atleast_1d(values)]


def memo_vectors() -> dict[str, Any]:
    cases: list[dict[str, Any]] = []
    secrets = np.array(SECRETS, dtype=np.uint64)
    cases.append({"name": "splitmix64's finalizer", "kind": "mix64", "inputs": u64(secrets),
                  "outputs": u64(mix64(secrets))})
    for tag, keys in [(TAG_PERMANENT, [3]), (TAG_ALPHA, []), (TAG_ATTRIBUTE_SAMPLE, [name_key("battery")]),
                      (0x51, [5, 2])]:
        words = keyed_words(secrets, tag, *[np.uint64(k) for k in keys])
        cases.append({"name": f"keyed words, tag {tag:#x}, {len(keys)} key(s)", "kind": "keyed_words", "tag": tag,
                      "keys": u64(keys) if keys else [], "secrets": u64(secrets), "words": u64(words),
                      "uniforms": [float(u) for u in keyed_uniform(secrets, tag, *[np.uint64(k) for k in keys])]})
    for name in ("battery", "network_type", "a", "x" * 63):
        cases.append({"name": f"name key and attribute secrets of {name[:20]!r}", "kind": "attribute_secret",
                      "attribute": name, "name_key": str(name_key(name)), "secrets": u64(secrets),
                      "attribute_secrets": u64(attribute_secrets(secrets, name))})
    for width, prob in [(8, 0.25), (13, 0.5), (64, 1 / 3), (3, 0.0), (5, 0.99609375)]:
        codes = np.array([0, 1, 2, 3, 4, 5], dtype=np.int64)
        bits, tail = keyed_bits(secrets, codes, width, prob, uniforms=2)
        cases.append({"name": f"keyed bits, width {width}, p {prob:g}", "kind": "keyed_bits", "width": width,
                      "prob": prob, "secrets": u64(secrets), "codes": codes.tolist(),
                      "bits": bits.astype(int).tolist(), "tail": tail.tolist()})
    mechanisms = [("l-grr", 2.0, 1.0, 4, {}), ("l-grr", 3.0, 0.5, 10, {}), ("l-oue", 2.0, 1.0, 8, {}),
                  ("l-osue", 2.0, 1.0, 8, {}), ("l-sue", 4.0, 1.5, 5, {}),
                  ("rappor", 2.0, 1.0, 16, {}), ("rappor", 4.0, 2.0, 6, {"hashes": 4, "bloom_bits": 16, "cohorts": 4}),
                  ("1bitmean", 2.0, 1.0, None, {}), ("1bitmean", 1.0, 1.0, None, {"buckets": 3}),
                  ("dbitflip", 2.0, 1.0, 8, {}), ("dbitflip", 3.0, 1.0, 12, {"sampled": 3})]
    for name, lifetime, first, domain, parameters in mechanisms:
        mech = registry.make_longitudinal(name, lifetime, first, domain, **parameters)
        values = ([0.0, -1.0, 1.0, 0.3, -0.55, 0.999] if domain is None
                  else [i % domain for i in (0, 1, 2, 3, domain - 1, 2)])
        case: dict[str, Any] = {"name": f"{name} at ({lifetime:g}, {first:g}), domain {domain}, {parameters}",
                                "kind": "longitudinal", "mechanism": name, "lifetime": lifetime, "first": first,
                                "domain": domain, "parameters": parameters, "repr": repr(mech),
                                "memo_prefix": memo_prefix("battery", mech),
                                "epsilon": float(mech.epsilon), "epsilon_lifetime": float(mech.epsilon_lifetime),
                                "mechanism_parameters": {k: float(v) for k, v in mech.parameters().items()},
                                "secrets": u64(secrets), "values": values,
                                "memo_keys": mech.memo_keys(np.array(values), secrets).tolist()}
        if name == "l-grr":
            case["permanent"] = mech.permanent_response(values, secrets)["value"].tolist()
        elif name in ("l-oue", "l-osue", "l-sue"):
            case["permanent"] = mech.permanent_response(values, secrets)["bits"].astype(int).tolist()
        elif name == "rappor":
            prr = mech.permanent_response(values, secrets)
            case["cohorts"] = prr["cohort"].tolist()
            case["permanent"] = prr["bits"].astype(int).tolist()
            case["positions"] = [[mech.positions[c, v].tolist() for v in range(domain)]
                                 for c in range(min(3, mech.cohorts))]
        elif name == "1bitmean":
            grid = mech.rounded(values, secrets)
            keep = 0.5 + 0.5 * (grid * (2.0 / mech.buckets) - 1.0) / duchi_bound_1d(mech.epsilon_lifetime)
            case["permanent"] = (keyed_uniform(secrets, TAG_PERMANENT, grid) < keep).astype(int).tolist()
            case["bound"] = float(mech.bound)
        else:
            chosen = mech.sampled_buckets(secrets)
            codes = np.array(values)
            own = chosen == codes[:, None]
            case["buckets"] = chosen.tolist()
            memo = keyed_bits(secrets, codes, mech.sampled, 1 - mech.memo_own)[0]
            case["permanent"] = (memo ^ own).astype(int).tolist()
        cases.append(case)
    return {"cases": cases}


def spec_json(**fields: Any) -> str:
    body = {"name": "diag", "version": 1, "epsilon": 2.0, "windows": ["1h"], **fields}
    return parse_spec(json.dumps(body)).canonical_json()


NUMERIC = {"name": "battery", "type": "numeric", "range": [0, 100]}
CATEGORICAL = {"name": "network", "type": "categorical", "values": ["wifi", "4g", "5g", "none"]}
WIDE = {"name": "app", "type": "categorical", "values": [f"app{i}" for i in range(40)]}
KEYVALUE = {"name": "minutes", "type": "keyvalue", "keys": ["chat", "video", "maps"], "range": [0, 600], "padding": 2}
OPEN_KEYVALUE = {"name": "usage", "type": "keyvalue", "buckets": 64, "range": [0, 1]}
STRING = {"name": "domain", "type": "string", "max_length": 6, "alphabet": "abcdefgh."}
RECORDS = [{"battery": 71.0, "network": "wifi", "app": "app3"}, {"battery": 0.0, "network": "5g", "app": "app39"},
           {"battery": 100.0, "network": "none", "app": "app0"}, {"battery": 33.3, "network": "4g", "app": "app17"}]


def collector_vectors() -> dict[str, Any]:
    specs: list[tuple[str, str]] = []
    for eps in (0.3, 0.61, 1.0, 2.0, 5.0, 8.0, 12.0):
        specs.append((f"auto at eps {eps:g}: numeric, categorical of 4 and of 40, key-value, strings",
                      spec_json(epsilon=eps, attributes=[{**NUMERIC, "mechanism": "auto"},
                                                         {**CATEGORICAL, "mechanism": "auto"},
                                                         {**WIDE, "mechanism": "auto"},
                                                         {**KEYVALUE, "mechanism": "auto"},
                                                         {**OPEN_KEYVALUE, "mechanism": "auto"},
                                                         {**STRING, "mechanism": "auto"}])))
    for sampling in ("one", "split", 2):
        specs.append((f"sampling {sampling}", spec_json(epsilon=4.0, sampling=sampling,
                                                        attributes=[NUMERIC, CATEGORICAL, WIDE])))
    # One spec per mechanism of each family the registry lists (a new mechanism gets its case without a line here).
    for name in (*registry.NUMERIC, *registry.DISTRIBUTION):
        specs.append((f"numeric {name}", spec_json(attributes=[{**NUMERIC, "mechanism": name}])))
    for name in registry.FREQUENCY:
        specs.append((f"categorical {name}", spec_json(attributes=[{**CATEGORICAL, "mechanism": name}])))
    for name in registry.KEYVALUE:
        specs.append((f"key-value {name}", spec_json(attributes=[{**KEYVALUE, "mechanism": name}])))
    for name in registry.HEAVY_HITTERS:
        specs.append((f"strings {name}", spec_json(epsilon=4.0, attributes=[{**STRING, "mechanism": name}])))
    memoized = [
        ("auto", [{**NUMERIC, "mechanism": "auto"}, {**CATEGORICAL, "mechanism": "auto"},
                  {**WIDE, "mechanism": "auto"}],
         {"per_report": 1.0, "lifetime": 4.0, "values": 2}),
        ("named", [{**NUMERIC, "mechanism": "1bitmean", "parameters": {"buckets": 4}},
                   {**CATEGORICAL, "mechanism": "rappor",
                    "parameters": {"hashes": 2, "bloom_bits": 16, "cohorts": 8}}],
         {"per_report": 1.0, "lifetime": 3.0}),
        ("dbitflip and l-sue", [{**NUMERIC, "mechanism": "1bitmean"},
                                {**CATEGORICAL, "mechanism": "dbitflip", "parameters": {"sampled": 2}}],
         {"per_report": 2.0, "lifetime": 6.0}),
        ("every attribute sampled", [{**NUMERIC, "mechanism": "auto"}, {**CATEGORICAL, "mechanism": "l-sue"}],
         {"per_report": 5.0, "lifetime": 10.0}),
    ]
    for label, attributes, privacy in memoized:
        specs.append((f"lifetime budget: {label}", spec_json(attributes=attributes, privacy=privacy,
                                                             epsilon=privacy["per_report"])))
    cases = []
    secrets = np.array(SECRETS, dtype=np.uint64)
    for label, text in specs:
        spec = parse_spec(text)
        collector = collector_for(spec)
        budgets = privacy_budgets(spec)
        case: dict[str, Any] = {
            "name": label, "spec": text, "k": collector.k,
            "mechanisms": {name: mech.name for name, mech in collector.mechanisms.items()},
            "report_columns": {name: report_columns(mech) for name, mech in collector.mechanisms.items()},
            "budgets": {"per_report": budgets["per_report"], "lifetime": budgets["lifetime"],
                        "values": budgets["values"],
                        "attributes": {n: {"mechanism": a["mechanism"], "one_report": float(a["one_report"]),
                                           "per_value": None if a["per_value"] is None else float(a["per_value"])}
                                       for n, a in budgets["attributes"].items()}}}
        if spec.privacy is not None:
            names = [a.name for a in spec.attributes]
            records = [{n: r[n] for n in names} for r in RECORDS]
            memos, legacy = [], []
            for secret in secrets:
                for record in records:
                    columns = {n: np.array([v]) for n, v in record.items()}
                    read = report_memos(spec, columns, np.array([secret]))[0]
                    memos.append([m.key for m in read])
                    legacy.append([m.legacy for m in read])
            case["secrets"] = u64(secrets)
            case["records"] = records
            case["memos"] = memos  # per secret, then per record: the memo names (m1)
            case["legacy_memos"] = legacy  # the same memos' names before m1, which a ledger may still hold
        cases.append(case)
    return {"cases": cases}


def report_columns(mech: Any) -> list[dict[str, Any]]:
    """The wire columns of `mech`'s report (`Mechanism.schema`): name, dtype, values per row, the inclusive bounds of
    each value (null: unbounded) and, for a finite output set, its values; the edge refuses a row outside them."""
    def bound(x: float) -> float | None:
        return float(x) if math.isfinite(x) else None
    return [{"name": c.name, "dtype": c.dtype, "width": c.width, "low": bound(c.low), "high": bound(c.high),
             "allowed": None if c.allowed is None else [float(v) for v in c.allowed]} for c in mech.schema.columns]


def npz_bytes(mech: FactorizationMechanism, compression: int) -> bytes:
    """The strategy as `FactorizationMechanism.save` writes it, in a zip with fixed timestamps (stable bytes)."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=compression) as archive:
        for name, value in (("q", mech.q), ("w", mech.w), ("epsilon", np.asarray(mech.epsilon)),
                            ("hash", np.asarray(mech.hash)), ("labels", np.array([]))):
            member = io.BytesIO()
            np.lib.format.write_array(member, np.asanyarray(value), allow_pickle=False)
            archive.writestr(zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0)), member.getvalue(),
                             compress_type=compression)
    return out.getvalue()


def hash_vectors() -> dict[str, Any]:
    cases: list[dict[str, Any]] = []
    a = np.array([1, 2, 12345, 16777212, 777, 16000000], dtype=np.int64)
    b = np.array([0, 16777212, 99, 5, 8388608, 1], dtype=np.int64)
    codes = np.array([0, 1, 17, 1048575, 3, 999], dtype=np.int64)
    for g in (2, 4, 8, 21, 1097):
        cases.append({"name": f"local hashing into {g} buckets", "kind": "local_hash", "g": g, "a": a.tolist(),
                      "b": b.tolist(), "codes": codes.tolist(), "buckets": hash_buckets(a, b, codes, g).tolist()})
    for keep, g in ((0.7310585786300049, 2), (0.4753667139, 4), (0.95, 21), (0.3, 1097)):
        cases.append({"name": f"q* at p {keep:g}, g {g}", "kind": "other_support", "keep": keep, "g": g,
                      "q": other_support_probability(keep, g)})
    rows = np.array([0, 1, 5, 7, 1023, 4095], dtype=np.uint32)
    cases.append({"name": "Hadamard bits", "kind": "hadamard", "rows": rows.tolist(), "codes": [0, 3, 5, 6, 1000, 4095],
                  "bits": hadamard_bit(rows, np.array([0, 3, 5, 6, 1000, 4095])).tolist()})
    domain = StringDomain(12, None)
    strings = ["a", "example.org", "\u00e9t\u00e9", "zzzzzzzzzzzz", "x.y"]
    padded = domain.encode(strings)
    for length, seed in ((1, 0), (3, 17), (8, 2**63 + 1), (12, 2**64 - 1)):
        salts = hash_salts(seed, 4)
        prints = prefix_fingerprints(padded, length, seed)
        cases.append({"name": f"fingerprints of {length}-byte prefixes, seed {seed}", "kind": "strings",
                      "strings": strings, "max_length": 12, "length": length, "seed": str(seed),
                      "fingerprints": u64(prints), "salts": u64(salts),
                      "buckets": [[int(x) for x in buckets(p, salts, w)] for p, w in zip(prints, (2, 256, 1024, 56, 7),
                                                                                          strict=True)]})
    for name, attribute in (("diag", "domain"), ("a", "b"), ("x" * 63, "y" * 63)):
        cases.append({"name": f"hash seed of {name[:8]}/{attribute[:8]}", "kind": "hash_seed", "collection": name,
                      "attribute": attribute, "seed": str(hash_seed(name, attribute))})
    for eps, max_length, alphabet, tree in ((4.0, 6, "abc", "pem"), (1.0, 10, None, "hcms_tree"),
                                            (2.0, 20, "abcdefghijklmnopqrstuvwxyz0123456789.-", "pem")):
        d = StringDomain(max_length, alphabet)
        mech = (PEM if tree == "pem" else HCMSTree)(eps, d, seed=hash_seed("diag", "domain"), top=5)
        cases.append({"name": f"{tree} at eps {eps:g} over {max_length} bytes", "kind": "tree", "tree": tree,
                      "epsilon": eps, "max_length": max_length, "alphabet": alphabet, "top": 5,
                      "seed": str(hash_seed("diag", "domain")), "lengths": list(mech.lengths),
                      "oracle_seeds": [str(o.seed) for o in mech.oracles], "widths": [o.width for o in mech.oracles],
                      "hashes": [o.hashes for o in mech.oracles]})
    for eps, max_length, alphabet in ((6.0, 4, "abc"), (2.0, 9, None)):
        d = StringDomain(max_length, alphabet)
        sfp = SFP(eps, d, seed=12345, top=3)
        words = ["abca", "cab", "b"] if alphabet else ["hello", "x", "ninebytes"]
        rows_ = d.encode(words)
        cases.append({"name": f"SFP at eps {eps:g} over {max_length} bytes", "kind": "sfp", "epsilon": eps,
                      "max_length": max_length, "alphabet": alphabet, "seed": "12345", "strings": words,
                      "positions": list(sfp.positions), "pieces": sfp.pieces(rows_).tolist(),
                      "records": [[sfp.records(rows_, np.full(len(words), t)).tolist()] for t in
                                  range(len(sfp.positions))],
                      "fragment_seeds": [str(o.seed) for o in sfp.fragments], "word_seed": str(sfp.word.seed),
                      "width": sfp.word.width, "hashes": sfp.word.hashes})
    keyvalue = KeyValueAttribute(name="usage", type="keyvalue", buckets=64, range=(0, 1))
    keys = ["chat", "video", "", "\u00fcber", "x" * 100]
    cases.append({"name": "open-domain key codes", "kind": "key_codes", "attribute": "usage", "buckets": 64,
                  "keys": keys, "codes": [keyvalue.code_of(k) for k in keys]})
    for eps in (0.5, 1.0, 2.0, 7.5):
        cases.append({"name": f"Duchi's bound at eps {eps:g}", "kind": "duchi_bound", "epsilon": eps,
                      "bound": duchi_bound_1d(eps)})
    mech = FactorizationMechanism(randomized_response(4, 1.0), np.tril(np.ones((4, 4))), 1.0)
    for compression, label in ((zipfile.ZIP_STORED, "stored"), (zipfile.ZIP_DEFLATED, "deflated")):
        data = npz_bytes(mech, compression)
        tampered = bytearray(data)
        tampered[200] ^= 0x10  # inside the first member (q): its bytes, or its deflated stream
        cases.append({"name": f"a factorization strategy, {label}", "kind": "strategy",
                      "npz": base64.b64encode(data).decode(),
                      "hash": mech.hash, "outputs": mech.outputs, "types": mech.n,
                      "q": mech.q.tolist(), "tampered": base64.b64encode(bytes(tampered)).decode()})
    return {"cases": cases}
