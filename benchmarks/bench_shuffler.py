"""Benchmark of the shuffler (prints JSON): reports per second per core through the transactional consume, permute,
produce path, and the delay it adds after a window closes, beside a pass-through ceiling measured in the same run.

    python -m benchmarks.bench_shuffler [--reports 1000000] [--per-message 1000]

Needs the services of `ldp up`. A shuffled collection (examples/shuffled.yaml: GRR over 8 categories) is published
under a fresh name and `--reports` reports of a simulated fleet are written to its raw topic as the edge writes
them (anonymous envelopes of `--per-message` rows, round robin over its partitions). Then, in this process:

- `shuffler`: a `Shuffler` reads the window while it is open (its clock before the close), then its clock passes
  the close and one `tick` releases it: the shuffled batch, the state and the offsets in one transaction. CPU is this
  process's user + system time (librdkafka's threads included) over both; `close_seconds` is the tick's wall time,
  the delay the shuffler adds after the window's close (beside its margin and tick, stated).
- `passthrough` (the ceiling): the same raw messages consumed and produced unchanged to another topic in one
  transaction with the consumer's offsets: Kafka's share of the path, no decoding or permuting.

Goals (issue 27): at least 200,000 reports a second per core; a window of 1e6 reports released within 30 s of its
close.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import uuid
from typing import Any

import numpy as np
from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from ldpstream.contract.spec import CollectionSpec, load_spec
from ldpstream.contract.wire import decode_envelope, encode, encode_envelope
from ldpstream.runtime.kafka import ReportProducer, consumer_client, delete_topic, ensure_topic, producer_client
from ldpstream.runtime.settings import PROJECT_ROOT, Settings
from ldpstream.runtime.specs import publish_spec
from ldpstream.shuffler.service import Shuffler, ShufflerConfig
from ldpstream.simulator.simulator import fleet

HOUR_MS = 3_600_000


def cpu() -> float:
    times = os.times()
    return times.user + times.system


def write_raw(spec: CollectionSpec, bootstrap: str, reports: int, per_message: int, window_ms: int) -> int:
    """The fleet's reports on the raw topic as the edge writes them; the messages written."""
    producer = ReportProducer(bootstrap, linger_ms=20)
    messages = 0
    for _, batch in fleet(spec, reports, seed=7, chunk=per_message):
        env = decode_envelope(encode(batch))
        n = len(env.devices) // 8
        raw = env.__class__(env.version, env.collection, env.spec_version, bytes(8 * n),
                            np.full(n, window_ms, dtype="<i8").tobytes(), env.attributes)
        producer.produce(spec.raw_topic, encode_envelope(raw), partition=messages % spec.partitions)
        messages += 1
    producer.flush(120)
    return messages


def shuffler_run(cfg: Settings, spec: CollectionSpec, reports: int, window_ms: int, run: str) -> dict[str, Any]:
    config = ShufflerConfig(cfg.bootstrap, cfg.redis, transactional_id=f"ldp-shuffler-bench-{run}",
                            group=f"ldp-shuffler-bench-{run}", margin_s=5.0, tick_s=1.0)
    now = [window_ms]
    shuffler = Shuffler(config, clock=lambda: now[0])
    try:
        collection = shuffler.collections[spec.name]
        started_cpu, started = cpu(), time.perf_counter()
        shuffler.catch_up(collection, timeout_s=600)
        read_s, read_cpu = time.perf_counter() - started, cpu() - started_cpu
        now[0] = window_ms + 2 * HOUR_MS  # the window has closed
        close_cpu, close_started = cpu(), time.perf_counter()
        outcomes = shuffler.tick()
        close_s, close_cpu = time.perf_counter() - close_started, cpu() - close_cpu
    finally:
        shuffler.close()
    released = sum(o.reports for o in outcomes)
    return {"released": released, "read_seconds": round(read_s, 3), "close_seconds": round(close_s, 3),
            "cpu_seconds": round(read_cpu + close_cpu, 3),
            "reports_per_cpu_second": round(reports / (read_cpu + close_cpu)),
            "delay_after_close_s": round(config.margin_s + config.tick_s + close_s, 3),
            "delay_parts": {"margin_s": config.margin_s, "tick_s": config.tick_s, "close_s": round(close_s, 3)}}


def passthrough_run(cfg: Settings, spec: CollectionSpec, messages: int, run: str) -> dict[str, Any]:
    """The raw messages consumed and produced unchanged in one transaction with the offsets (the ceiling)."""
    out_topic = f"ldp.bench.passthrough.{run}"
    ensure_topic(cfg.bootstrap, out_topic, spec.partitions)
    producer = producer_client(cfg.bootstrap, **{"transactional.id": f"ldp-shuffler-pass-{run}", "linger.ms": 5,
                                                  "compression.type": "lz4",
                                                  "queue.buffering.max.messages": 1_000_000})
    producer.init_transactions(60)
    consumer = consumer_client(cfg.bootstrap, f"ldp-shuffler-pass-{run}", **{"isolation.level": "read_committed"})
    consumer.assign([TopicPartition(spec.raw_topic, p, OFFSET_BEGINNING) for p in range(spec.partitions)])
    started_cpu, started = cpu(), time.perf_counter()
    producer.begin_transaction()
    seen, positions = 0, {}
    deadline = time.monotonic() + 600
    while seen < messages and time.monotonic() < deadline:
        for m in consumer.consume(2000, 1.0):
            if m.error() is not None:
                continue
            while True:
                try:
                    producer.produce(out_topic, m.value(), partition=m.partition())
                    break
                except BufferError:
                    producer.poll(0.05)
            positions[m.partition()] = m.offset() + 1
            seen += 1
    producer.send_offsets_to_transaction([TopicPartition(spec.raw_topic, p, o) for p, o in positions.items()],
                                         consumer.consumer_group_metadata(), 30)
    producer.commit_transaction(120)
    elapsed, spent = time.perf_counter() - started, cpu() - started_cpu
    consumer.close()
    delete_topic(cfg.bootstrap, out_topic)
    return {"messages": seen, "seconds": round(elapsed, 3), "cpu_seconds": round(spent, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--reports", type=int, default=1_000_000)
    parser.add_argument("--per-message", type=int, default=1000)
    args = parser.parse_args()
    cfg = Settings.from_env()
    run = uuid.uuid4().hex[:8]
    spec = load_spec(PROJECT_ROOT / "examples" / "shuffled.yaml").replace(name=f"bench-{run}")
    publish_spec(spec, cfg.bootstrap)
    window_ms = (int(time.time() * 1000) // HOUR_MS) * HOUR_MS
    try:
        written = time.perf_counter()
        messages = write_raw(spec, cfg.bootstrap, args.reports, args.per_message, window_ms)
        written = time.perf_counter() - written
        shuffled = shuffler_run(cfg, spec, args.reports, window_ms, run)
        ceiling = passthrough_run(cfg, spec, messages, run)
    finally:
        for topic in (spec.raw_topic, spec.topic):
            try:
                delete_topic(cfg.bootstrap, topic)
            except Exception:  # noqa: BLE001 - cleanup only
                pass
    ceiling_rate = args.reports / ceiling["cpu_seconds"]
    print(json.dumps({
        "reports": args.reports, "raw_messages": messages, "write_seconds": round(written, 3),
        "shuffler": shuffled,
        "passthrough": {**ceiling, "reports_per_cpu_second": round(ceiling_rate)},
        "shuffler_vs_passthrough_cpu": round(shuffled["reports_per_cpu_second"] / ceiling_rate, 3),
        "goals": {"reports_per_cpu_second": 200_000, "delay_after_close_s": 30},
    }, indent=2))


if __name__ == "__main__":
    main()
