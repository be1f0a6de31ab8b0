"""`ldp demo`: the main job end to end against the running services."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid

import redis
import typer
from confluent_kafka import Producer
from rich.console import Console

from ldpstream.services import ServicesConfig
from ldpstream.services.process import stop_pid

console = Console()


def produce_messages(bootstrap: str, topic: str, count: int, size: int = 100) -> float:
    """Produce `count` messages of `size` bytes (idempotent, acks=all); return the seconds it took."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 5, "batch.num.messages": 10000, "queue.buffering.max.messages": 1000000})
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


def count_through_faust(cfg: ServicesConfig, count: int, timeout_s: float = 120.0) -> dict[str, float]:
    """Produce `count` messages to a fresh topic, let the faust probe agent count them into Redis, and measure."""
    run = uuid.uuid4().hex[:8]
    topic, key = f"ldp.probe.{run}", f"ldp:probe:{run}"
    store = redis.Redis.from_url(cfg.redis)
    worker = subprocess.Popen([sys.executable, "-m", "aggregator.probe", "--topic", topic, "--redis-key", key,
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


def _wait_for_count(store: redis.Redis, key: str, target: int, worker: subprocess.Popen[bytes], timeout_s: float) -> int:
    """Poll the Redis counter until it reaches `target`, the worker dies or time runs out; return the count."""
    counted = 0
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and counted < target:
        if worker.poll() is not None:
            raise RuntimeError(f"the faust worker exited: {worker.stderr.read().decode()[-2000:]}")  # type: ignore[union-attr]
        counted = int(store.get(key) or 0)
        time.sleep(0.02)
    return counted


def demo(messages: int = typer.Option(100_000, help="messages to send through Kafka -> faust -> Redis"),
         as_json: bool = typer.Option(False, "--json")) -> None:
    """Prove the path end to end: messages through Kafka, counted by a faust agent into Redis."""
    cfg = ServicesConfig.from_env()
    result = count_through_faust(cfg, messages)
    if as_json:
        typer.echo(json.dumps(result))
    else:
        console.print(f"produced {result['produced']:,} messages in {result['produce_s']:.2f} s; the faust agent "
                      f"counted [bold]{result['counted']:,}[/] into Redis; end to end "
                      f"{result['end_to_end_s']:.2f} s = {result['messages_per_s']:,.0f} messages/s")
    if result["counted"] != messages:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add `ldp demo` to the app."""
    app.command()(demo)
