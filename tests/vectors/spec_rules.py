"""The spec's rules, generated once from the Python contract (`rules.json`, and the TypeScript SDK's
`sdk/typescript/src/rules.ts`; see generate.py): the mechanisms a spec can name by family (from
`ldpstream.mechanisms.registry`), their spec parameters, the spec's limits, the policy's defaults and the protocol's
constants (docs/reference/protocol.md). Another SDK reads `rules.json`; the TypeScript SDK imports `rules.ts` instead of
copies; both are checked against what this module writes now (`tests/device/test_vectors.py`)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from ldpstream.contract import pointer, spec
from ldpstream.contract.auth import SCHEME
from ldpstream.contract.checks import REQUIRED, Record, rule_of
from ldpstream.contract.validation import MAX_FUTURE_SKEW_MS
from ldpstream.contract.wire import WIRE_VERSION
from ldpstream.device import edge_api, http, ledger, outbox
from ldpstream.device.perturb import MEMO_NAMING
from ldpstream.device.policy import EVERY_MECHANISM, PrivacyPolicy
from ldpstream.mechanisms import registry
from ldpstream.mechanisms.workload.names import WORKLOAD_NAMES


def mechanisms() -> dict[str, Any]:
    """Every name a spec's attribute can give as its mechanism, by family, with what a spec may set."""
    return {
        "numeric": sorted(registry.NUMERIC),
        "frequency": sorted(registry.FREQUENCY),
        "longitudinal": {name: {"kind": registry.longitudinal_class(name).kind,
                                "parameters": list(registry.longitudinal_parameters(name))}
                         for name in sorted(registry.LONGITUDINAL)},
        "distribution": {name: {"parameters": list(registry.distribution_class(name).parameter_names())}
                         for name in sorted(registry.DISTRIBUTION)},
        "keyvalue": list(registry.KEYVALUE),
        "heavy_hitters": list(registry.HEAVY_HITTERS),
        "factorization": spec.FACTORIZATION,
        "workloads": list(WORKLOAD_NAMES),
        "every": sorted(EVERY_MECHANISM),
    }


RECORDS: dict[str, type[Record]] = {
    "spec": spec.CollectionSpec, "privacy": spec.Privacy, "shuffle": spec.Shuffle,
    "numeric": spec.NumericAttribute, "categorical": spec.CategoricalAttribute, "keyvalue": spec.KeyValueAttribute,
    "string": spec.StringAttribute}


def fields() -> dict[str, dict[str, Any]]:
    """Each object of a spec (the spec, its privacy and shuffle blocks, each type of attribute): its fields with the
    rule each declares (type, bounds: gt/ge/lt/le, min_length/max_length, pattern, nullable) and its default."""
    def default(value: Any) -> dict[str, Any]:
        return {"required": True} if value is REQUIRED else {"default": value}
    return {kind: {name: {**rule_of(check), **default(value)} for name, (check, value) in record._fields.items()}
            for kind, record in RECORDS.items()}


BASE: dict[str, Any] = {"name": "diag", "version": 1, "epsilon": 2.0, "windows": ["1h"]}
ATTRIBUTES = {"numeric": {"name": "x", "type": "numeric", "range": [0, 1]},
              "categorical": {"name": "c", "type": "categorical", "values": ["a", "b", "c"]},
              "keyvalue": {"name": "kv", "type": "keyvalue", "keys": ["a", "b"], "range": [0, 1]},
              "string": {"name": "s", "type": "string", "max_length": 8}}


def with_field(kind: str, field: str, value: Any) -> dict[str, Any]:
    """A spec whose `kind` object has `field` = value, every other field as plain as can be."""
    if kind == "spec":
        return {**BASE, "attributes": [ATTRIBUTES["numeric"]], field: value}
    if kind == "privacy":
        privacy = {"per_report": 1.0, "lifetime": 4.0, field: value}  # lifetime >= per_report, whichever is set
        if field == "per_report" and isinstance(value, float | int) and value > 0:
            privacy["lifetime"] = 2.0 * value
        elif field == "lifetime" and isinstance(value, float | int) and value > 0:
            privacy["per_report"] = min(value / 2, 1.0)
        body = {**BASE, "attributes": [ATTRIBUTES["categorical"]], "privacy": privacy}
        del body["epsilon"]  # it is privacy.per_report
        return body
    if kind == "shuffle":
        return {**BASE, "attributes": [ATTRIBUTES["numeric"]],
                "shuffle": {"delta": 1e-8, "min_batch": 1000, "grace_s": 30, field: value}}
    attribute = {**ATTRIBUTES[kind], field: value}
    if field == "buckets":  # an open key domain: buckets, no keys
        del attribute["keys"]
    return {**BASE, "attributes": [attribute]}


def edges(rule: dict[str, Any]) -> list[Any]:
    """Values on each side of each bound the rule declares."""
    if rule.get("type") == "integer":
        return [v for b, step in (("ge", -1), ("le", 1)) if b in rule for v in (rule[b], rule[b] + step)]
    if rule.get("type") == "number":
        out = []
        for b, side in (("gt", 1), ("ge", -1), ("lt", -1), ("le", 1)):
            if b in rule:
                out += [rule[b], rule[b] + side * max(abs(rule[b]), 1.0) * 1e-6]
        return out
    if rule.get("type") == "string" and "pattern" not in rule:
        lengths = [n for b, step in (("min_length", -1), ("max_length", 1)) if b in rule
                   for n in (rule[b], rule[b] + step)]
        return ["x" * n for n in lengths if n >= 0]
    return []


def bound_cases() -> list[dict[str, Any]]:
    """A spec on each side of every bound a field declares, and whether the Python contract accepts it: an SDK that
    copied a bound wrong (or missed one) gives another verdict."""
    cases = []
    for kind, record in RECORDS.items():
        for field, (check, _) in record._fields.items():
            for value in edges(rule_of(check)):
                text = json.dumps(with_field(kind, field, value))
                try:
                    spec.parse_spec(text)
                    accepted = True
                except spec.SpecError:
                    accepted = False
                cases.append({"name": f"{kind}.{field} = {value!r}"[:80], "spec": text, "accepted": accepted})
    return cases


def rules() -> dict[str, Any]:
    """rules.json: the whole of it."""
    return {
        "protocol_version": 1,
        "memo_naming": MEMO_NAMING,
        "wire_version": WIRE_VERSION,
        "mechanisms": mechanisms(),
        "spec": {"name_pattern": spec.NAME, "max_spec_bytes": spec.MAX_SPEC_SIZE,
                 "max_window_seconds": spec.MAX_WINDOW_SECONDS, "max_grace_s": spec.MAX_GRACE_S,
                 "window_units_s": spec.UNIT_SECONDS, "sampling": list(spec.SAMPLING_NAMES),
                 "nominal_budgets": list(spec.NOMINAL_BUDGETS)},
        "policy_defaults": {f.name: f.default for f in dataclasses.fields(PrivacyPolicy)
                            if f.name != "allowed_mechanisms"},
        "clock": {"max_skew_ms": MAX_FUTURE_SKEW_MS, "pointer_period_ms": pointer.POINTER_PERIOD_MS,
                  "pointer_validity_ms": pointer.POINTER_VALIDITY_MS,
                  "max_pointer_validity_ms": pointer.MAX_POINTER_VALIDITY_MS},
        "limits": {"max_pointer_bytes": pointer.MAX_POINTER_BYTES,
                   "max_pointer_answer_bytes": edge_api.MAX_POINTER_BYTES,
                   "max_spec_answer_bytes": edge_api.MAX_SPEC_BYTES,
                   "max_strategy_answer_bytes": edge_api.MAX_STRATEGY_BYTES,
                   "max_answer_bytes": edge_api.MAX_ANSWER_BYTES, "max_json_depth": http.MAX_JSON_DEPTH},
        "delivery": {"timeout_s": http.DEFAULT_TIMEOUT_S, "flush_timeout_s": outbox.DEFAULT_FLUSH_TIMEOUT_S,
                     "retryable": sorted(outbox.RETRYABLE), "done": sorted(outbox.DONE),
                     "hopeless": sorted(outbox.HOPELESS), "verdicts": sorted(outbox.VERDICTS)},
        "ledger": {"format": ledger.FORMAT, "windows_kept": ledger.WINDOWS_KEPT, "days_kept": ledger.DAYS_KEPT},
        "auth_scheme": SCHEME,
        "fields": fields(),
        "bounds": bound_cases(),
    }


def camel(name: str) -> str:
    """max_epsilon_per_day as the TypeScript SDK spells it: maxEpsilonPerDay."""
    head, *rest = name.split("_")
    return head + "".join(w.title() for w in rest)


def typescript() -> str:
    """sdk/typescript/src/rules.ts: the rules the TypeScript SDK reads (the core's few constants; tree-shaken)."""
    r, m = rules(), mechanisms()
    constants: list[tuple[str, str, Any]] = [
        ("NUMERIC_NAMES", "readonly string[]", m["numeric"]),
        ("FREQUENCY_NAMES", "readonly string[]", m["frequency"]),
        ("LONGITUDINAL_KIND", 'Readonly<Record<string, "frequency" | "numeric">>',
         {n: v["kind"] for n, v in m["longitudinal"].items()}),
        ("LONGITUDINAL_PARAMETERS", "Readonly<Record<string, readonly string[]>>",
         {n: v["parameters"] for n, v in m["longitudinal"].items()}),
        ("DISTRIBUTION_PARAMETERS", "Readonly<Record<string, readonly string[]>>",
         {n: v["parameters"] for n, v in m["distribution"].items()}),
        ("KEYVALUE_NAMES", "readonly string[]", m["keyvalue"]),
        ("HEAVY_HITTER_NAMES", "readonly string[]", m["heavy_hitters"]),
        ("FACTORIZATION", "string", m["factorization"]),
        ("WORKLOAD_NAMES", "readonly string[]", m["workloads"]),
        ("EVERY_MECHANISM", "readonly string[]", m["every"]),
        ("MAX_SPEC_SIZE", "number", r["spec"]["max_spec_bytes"]),
        ("MAX_WINDOW_SECONDS", "number", r["spec"]["max_window_seconds"]),
        ("NOMINAL_BUDGETS", "readonly [number, number]", r["spec"]["nominal_budgets"]),
        ("POLICY_DEFAULTS", "", {camel(k): v for k, v in r["policy_defaults"].items()}),
        ("MAX_SKEW_MS", "number", r["clock"]["max_skew_ms"]),
        ("MAX_POINTER_VALIDITY_MS", "number", r["clock"]["max_pointer_validity_ms"]),
    ]
    lines = ["// Generated by tests/vectors/generate.py from the Python contract (tests/vectors/spec_rules.py): do not",
             "// edit. The spec's rules (tests/vectors/rules.json has them all): a test fails when this file is not",
             "// what the generator writes now; run `.venv/bin/python tests/vectors/generate.py` to rewrite it.", ""]
    for name, kind, value in constants:
        typed = f": {kind}" if kind else ""  # a record of known fields keeps its inferred type
        lines.append(f"export const {name}{typed} = {json.dumps(value, separators=(', ', ': '))};")
    return "\n".join(lines) + "\n"
