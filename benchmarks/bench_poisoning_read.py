"""What a live read of a window's defence costs (issue 42): `window_defence` as `ldp estimate`, the read API and the
metrics call it, for a window with no audit record, whose chain of defended windows (`CHAIN_WINDOWS` before it, so
that the long block test has its lagged windows) is defended live, oldest first.

    python benchmarks/bench_poisoning_read.py [--windows 58] [--devices 2000] [--domain 1024] [--repeats 5]

A spec of four attributes (GRR, OUE and OLH over `--domain` values, PM on a number), `--windows` windows of 1m of
`--devices` devices per attribute each (a device reports one attribute: the spec samples one; over the policy's
1,000 reports an attribute, so every test runs) written through the worker's
processing into a memory store (Redis's read of the windows' sums is one pipelined call and is not timed here).
Timed, best of `--repeats`, in the same run:
- `estimate_s`: the window's live estimates alone (`Plan.estimate`): the read without any defence (the peer);
- `reference_only_s`: the defence with a chain of only the reference's four windows (CHAIN_WINDOWS set to 0: the
  defence before the tests over windows read their lagged windows);
- `chain_s`: the defence as shipped (CHAIN_WINDOWS + the reference's windows defended live);
- per attribute, the chain's time with only that attribute in the spec (`per_attribute_s`).
Prints one JSON object. Timings on a shared machine are noisy: the ratios, measured in one run, are what to quote.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from bench_mechanisms import best_seconds  # run as a script: benchmarks/ is on the path

from ldpstream.aggregator import poisoning
from ldpstream.aggregator.plans import Plan
from ldpstream.aggregator.processing import Message, PartitionProcessor
from ldpstream.aggregator.store import MemoryStore
from ldpstream.contract.spec import CollectionSpec, parse_spec
from ldpstream.contract.wire import encode
from ldpstream.simulator.simulator import fleet

MINUTE = 60_000
START = 1_700_000_040_000 // MINUTE * MINUTE


def spec_of(mechanisms: list[str], domain: int) -> CollectionSpec:
    """A spec of one attribute per mechanism: categorical over `domain` Zipf values, or PM on [0, 100]."""
    attributes: list[dict[str, Any]] = []
    for name in mechanisms:
        if name == "pm":
            attributes.append({"name": name, "type": "numeric", "mechanism": name, "range": [0, 100]})
        else:
            attributes.append({"name": name, "type": "categorical", "mechanism": name, "zipf_exponent": 1.0,
                               "values": [f"v{i}" for i in range(domain)]})
    return parse_spec(json.dumps({"name": "read-cost", "version": 1, "epsilon": 4.0, "sampling": 1, "partitions": 1,
                                  "windows": ["1m"], "attributes": attributes}))


def filled_store(spec: CollectionSpec, windows: int, devices: int) -> tuple[Plan, MemoryStore]:
    """`windows` consecutive 1m windows of the same population, fresh noise in each, through the worker's
    processing."""
    plan, store = Plan(spec), MemoryStore()
    last = START + (windows - 1) * MINUTE
    processor = PartitionProcessor(lambda n, v, _: plan if (n, v) == (spec.name, 1) else None, lambda: last)
    for w in range(windows):
        _, reports = next(fleet(spec, devices, seed=1, chunk=devices, clock_ms=lambda w=w: START + w * MINUTE,
                                report_round=w))
        result = processor.process(spec.topic, [Message(w, encode(reports))])
        if result.update is None or store.apply(result.update).status != "applied":
            raise SystemExit(f"window {w} was not counted")
    return plan, store


def read_cost(mechanisms: list[str], args: argparse.Namespace) -> dict[str, float]:
    """The three timings for a spec of `mechanisms`."""
    spec = spec_of(mechanisms, args.domain)
    plan, store = filled_store(spec, args.windows, args.devices * len(mechanisms))
    start = START + (args.windows - 1) * MINUTE
    stats = store.read_window(spec.name, 1, "1m", start, plan.sizes)

    def defence() -> object:
        return poisoning.window_defence(store, plan, "1m", start, stats)

    shipped = poisoning.CHAIN_WINDOWS
    chain_s = best_seconds(defence, args.repeats)
    poisoning.CHAIN_WINDOWS = 0
    try:
        reference_only_s = best_seconds(defence, args.repeats)
    finally:
        poisoning.CHAIN_WINDOWS = shipped
    tested = {f.status for d in poisoning.window_defence(store, plan, "1m", start, stats).attributes.values()
              for f in d.findings}
    if "too_few_reports" in tested:
        raise SystemExit("an attribute has too few reports for the tests: raise --devices")
    return {"estimate_s": best_seconds(lambda: plan.estimate(stats), args.repeats),
            "reference_only_s": reference_only_s, "chain_s": chain_s}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--windows", type=int, default=poisoning.CHAIN_WINDOWS + poisoning.REFERENCE_WINDOWS + 1)
    parser.add_argument("--devices", type=int, default=3000)
    parser.add_argument("--domain", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    mechanisms = ["grr", "oue", "olh", "pm"]
    whole = read_cost(mechanisms, args)
    out: dict[str, Any] = {"windows": args.windows, "chain_windows": poisoning.CHAIN_WINDOWS,
                           "devices_per_attribute": args.devices, "domain": args.domain, **whole,
                           "chain_over_estimate": whole["chain_s"] / whole["estimate_s"],
                           "chain_over_reference_only": whole["chain_s"] / whole["reference_only_s"],
                           "per_attribute_s": {}}
    for name in mechanisms:
        out["per_attribute_s"][name] = read_cost([name], args)["chain_s"]
        print(f"{name}: {out['per_attribute_s'][name]:.3f} s", file=sys.stderr)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
