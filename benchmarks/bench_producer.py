"""Device-side throughput into the real Kafka: the fleet simulator batched and one report per message, next to
the raw confluent-kafka ceiling for messages of the same sizes (the same producer settings, no perturbation).

Prints JSON: {"spec", "load_average", "runs": [{"mode", "devices", "messages", "bytes_per_message",
"reports_per_s", "raw_ceiling_reports_per_s"}]}, each the best of `--repeats` runs to a fresh topic. Target
(issue 4): the simulator pushes >= 100k reports/s into Kafka. Needs the services (`ldp up`).
Run: .venv/bin/python benchmarks/bench_producer.py [--spec examples/diagnostics.yaml] [--devices 500000]
"""

from __future__ import annotations

import argparse
import json
import os
import time
import uuid
from pathlib import Path

from ldpstream.contract.spec import CollectionSpec, load_spec
from ldpstream.runtime.kafka import ReportProducer, delete_topic, ensure_topic
from ldpstream.runtime.settings import Settings
from ldpstream.simulator.simulator import simulate


def raw_ceiling(bootstrap: str, topic: str, messages: int, size: int) -> float:
    """Seconds to produce and acknowledge `messages` random payloads of `size` bytes, keyed, same settings."""
    producer = ReportProducer(bootstrap)
    payload, start = os.urandom(size), time.perf_counter()
    for i in range(messages):
        producer.produce(topic, payload, i.to_bytes(8, "little"))
    producer.flush(120)
    return time.perf_counter() - start


def run(spec: CollectionSpec, bootstrap: str, devices: int, single: bool, batch: int) -> dict[str, object]:
    bench = spec.replace(name=f"bench-producer-{uuid.uuid4().hex[:8]}")
    ensure_topic(bootstrap, bench.topic, bench.partitions)
    try:
        result = simulate(bench, devices, ReportProducer(bootstrap), batch=batch, single=single)
        size = result.bytes // result.messages
        raw_s = raw_ceiling(bootstrap, bench.topic, result.messages, size)
    finally:
        delete_topic(bootstrap, bench.topic)
    return {"mode": "single" if single else f"batch of {batch}", "devices": devices, "messages": result.messages,
            "bytes_per_message": size, "reports_per_s": round(result.reports_per_s),
            "raw_ceiling_reports_per_s": round(devices / raw_s)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--spec", type=Path, default=Path("examples/diagnostics.yaml"))
    parser.add_argument("--devices", type=int, default=500_000)
    parser.add_argument("--single-devices", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    spec, bootstrap = load_spec(args.spec), Settings.from_env().bootstrap
    runs = []
    for single, devices in ((False, args.devices), (True, args.single_devices)):
        tries = [run(spec, bootstrap, devices, single, args.batch) for _ in range(args.repeats)]
        runs.append(max(tries, key=lambda r: r["reports_per_s"]))  # type: ignore[arg-type, return-value]
    print(json.dumps({"spec": spec.key, "load_average": os.getloadavg()[0], "runs": runs}))


if __name__ == "__main__":
    main()
