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
