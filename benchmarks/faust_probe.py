"""A faust agent that counts the messages of a topic into a Redis key and does nothing else.

It is the smallest end-to-end proof of the path Kafka -> faust -> Redis (`count_through_faust`, the integration
test of the foundation) and the do-nothing baseline of the pipeline benchmark. Run as
`python benchmarks/faust_probe.py --topic T --redis-key K [--group G]`.
"""

from __future__ import annotations

import argparse
import logging
import subprocess
import sys
import time
import uuid

import faust
import redis

from ldpstream.aggregator.worker import broker_credentials
from ldpstream.runtime.kafka import producer_client
from ldpstream.runtime.process import stop_pid
from ldpstream.runtime.redis import redis_client
from ldpstream.runtime.settings import Settings


def build_app(topic: str, redis_key: str, group: str, cfg: Settings, batch: int = 2000) -> faust.App:
    """A faust app whose one agent adds the size of every micro-batch of `topic` to `redis_key`."""
    (cfg.state_dir / "faust").mkdir(parents=True, exist_ok=True)
    app = faust.App(group, broker=f"kafka://{cfg.bootstrap}", store="memory://", web_enabled=False,
                    broker_credentials=broker_credentials(cfg),
                    datadir=str(cfg.state_dir / "faust" / group),
                    topic_partitions=8, consumer_auto_offset_reset="earliest", producer_acks=-1)
    source = app.topic(topic, value_type=bytes, value_serializer="raw", key_serializer="raw")
    store = redis_client(cfg.redis)

    @app.agent(source)
    async def count(stream: faust.StreamT) -> None:  # type: ignore[type-arg]
        async for values in stream.take(batch, within=0.2):
            store.incrby(redis_key, len(values))

    return app


def produce_messages(bootstrap: str, topic: str, count: int, size: int = 100) -> float:
    """Produce `count` messages of `size` bytes (idempotent, acks=all); return the seconds it took."""
    producer = producer_client(bootstrap, **{"linger.ms": 5, "batch.num.messages": 10000,
                                             "queue.buffering.max.messages": 1000000})
    failures: list[str] = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            failures.append(str(err))

    payload = b"x" * size
    start = time.perf_counter()
    for i in range(count):
        producer.produce(topic, payload, on_delivery=on_delivery)
        if i % 10000 == 0:
            producer.poll(0)
    remaining = producer.flush(60)
    if remaining or failures:
        raise RuntimeError(f"{remaining} messages not delivered, {len(failures)} failed: {failures[:3]}")
    return time.perf_counter() - start


def count_through_faust(cfg: Settings, count: int, timeout_s: float = 120.0) -> dict[str, float]:
    """Produce `count` messages to a fresh topic, let the faust probe agent count them into Redis, and measure."""
    run = uuid.uuid4().hex[:8]
    topic, key = f"ldp.probe.{run}", f"ldp:probe:{run}"
    store = redis_client(cfg.redis)
    worker = subprocess.Popen([sys.executable, __file__, "--topic", topic, "--redis-key", key,
                               "--group", f"ldp-probe-{run}"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              start_new_session=True)
    try:
        produce_messages(cfg.bootstrap, topic, 1)  # warm-up: the agent has joined its group once this is counted
        _wait_for_count(store, key, 1, worker, timeout_s)
        start = time.perf_counter()
        produce_s = produce_messages(cfg.bootstrap, topic, count)
        counted = _wait_for_count(store, key, count + 1, worker, timeout_s) - 1
        total_s = time.perf_counter() - start
    finally:
        stop_pid(worker.pid)
        store.delete(key)
    return {"produced": count, "counted": counted, "produce_s": produce_s, "end_to_end_s": total_s,
            "messages_per_s": count / total_s}


def _wait_for_count(store: redis.Redis, key: str, target: int, worker: subprocess.Popen[bytes],
                    timeout_s: float) -> int:
    """Poll the Redis counter until it reaches `target`, the worker dies or time runs out; return the count."""
    counted = 0
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and counted < target:
        if worker.poll() is not None:
            raise RuntimeError(f"the faust worker exited: {worker.stderr.read().decode()[-2000:]}")  # type: ignore[union-attr]
        counted = int(store.get(key) or 0)
        time.sleep(0.02)
    return counted


def main(argv: list[str] | None = None) -> None:
    """Run the counting worker in the foreground until interrupted."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--redis-key", required=True)
    parser.add_argument("--group", default="ldp-probe")
    args = parser.parse_args(argv)
    cfg = Settings.from_env()
    logging.basicConfig(level=logging.WARNING)
    app = build_app(args.topic, args.redis_key, args.group, cfg)
    sys.argv = [sys.argv[0], "worker", "--loglevel", "warn", "--without-web"]
    app.main()


if __name__ == "__main__":
    main()
