"""The edge's per-turn pieces timed in process (prints JSON), each next to what it replaced or a ceiling, same run:

- `join`: one message of N checked single-report envelopes (`ldpstream.contract.wire.join_envelopes`, from their bytes)
  against decoding every column, concatenating and encoding again (`envelope_of` of `concatenate`), N = 1, 5, 20;
- `checks`: `ldpstream.edge.intake.check_many` over turns of T requests, per request, T = 10, 40, 160;
- `admission` (needs the Redis of `ldp up`): the edge process's CPU per request of `Admission.admit` over turns of T
  requests (one script call per turn), T = 1, 10, 40, 160, next to the Redis round trip of a PING per turn;
- `request_path` (needs the Kafka and Redis of `ldp up`): a real `Edge` (published spec, enrolled devices, Redis
  admission, Kafka forwarder) answering signed single-report requests through `Edge.accept`, steps 2-5 of
  `ldpstream.edge.app` without an HTTP server, in turns of T = 10, 40, 160 requests: its CPU per request (all its
  threads) and the requests per second one core could answer at that cost, the edge's ceiling before any HTTP work;
- `wake`: the CPU of waking alone, a bare uvloop that sleeps S and wakes, per wake, S = 1 and 5 ms (what each of a
  turn's wakes costs on top of its work on a machine where idling is not free).

    python -m benchmarks.bench_edge_parts [--no-services]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import uvloop

from ldpstream.contract.auth import authorization
from ldpstream.contract.clock import now_ms
from ldpstream.contract.collector import collector_for
from ldpstream.contract.spec import load_spec
from ldpstream.contract.wire import concatenate, decode_envelope, encode, encode_envelope, envelope_of, join_envelopes
from ldpstream.device.perturb import perturb
from ldpstream.edge.app import Edge, EdgeConfig
from ldpstream.edge.devices import Admission, Admit, DeviceRegistry, edge_keys
from ldpstream.edge.intake import Checked, check_many
from ldpstream.edge.keyring import Keyring
from ldpstream.edge.plans import EdgePlan
from ldpstream.runtime.access import ADMIN
from ldpstream.runtime.kafka import delete_topic
from ldpstream.runtime.redis import async_redis_client, redis_client
from ldpstream.runtime.settings import PROJECT_ROOT, Settings
from ldpstream.runtime.specs import publish_spec
from ldpstream.simulator.population import Population

REQUESTS = 2000
LOOPS = 500  # joins timed per run


def best_us(run: Callable[[], object], per: int, repeats: int = 5) -> float:
    """The best of `repeats` wall times of `run`, in microseconds per item (`per` items a run)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return round(min(times) / per * 1e6, 2)


def checked_requests() -> tuple[EdgePlan, list[Checked], list[Any]]:
    """REQUESTS single-report requests of the diagnostics example (a device each), parsed and checked."""
    spec = load_spec(PROJECT_ROOT / "examples" / "diagnostics.yaml").replace(
        name="bench-parts", one_report_per_window=False)
    collector = collector_for(spec)
    plan = EdgePlan(spec, tuple(collector.mechanisms[a.name].schema for a in spec.attributes), collector.k)
    rng, now = np.random.default_rng(0), now_ms()
    records = Population(spec, 1).sample(REQUESTS, rng)
    envelopes = [decode_envelope(encode(perturb(spec, np.zeros(1, np.uint64), np.full(1, now, np.int64),
                                                {k: v[i:i + 1] for k, v in records.items()}, rng)))
                 for i in range(REQUESTS)]
    items = [(env, plan, i + 1) for i, env in enumerate(envelopes)]
    checked = [c for c in check_many(items, now) if isinstance(c, Checked)]
    return plan, checked, items


def bench_join(checked: list[Checked]) -> list[dict[str, Any]]:
    rows = []
    for n in (1, 5, 20):
        some = [c.envelope for c in checked[:n]]

        def generic(some: list[Any] = some) -> bytes:
            joined = concatenate(some)
            return encode_envelope(envelope_of(some[0].collection, some[0].spec_version, joined.devices,
                                               joined.timestamps_ms, joined.attributes))

        assert encode_envelope(join_envelopes(some)) == generic()
        rows.append({"envelopes": n,
                     "join_envelopes_us": best_us(lambda s=some: [encode_envelope(join_envelopes(s))
                                                                  for _ in range(LOOPS)], LOOPS),
                     "decode_concatenate_encode_us": best_us(lambda g=generic: [g() for _ in range(LOOPS)], LOOPS)})
    return rows


def bench_checks(items: list[Any]) -> list[dict[str, Any]]:
    now = now_ms()
    rows = []
    for turn in (10, 40, 160):
        def turns(turn: int = turn) -> None:
            for lo in range(0, len(items), turn):
                check_many(items[lo:lo + turn], now)
        rows.append({"turn": turn, "check_many_us_per_request": best_us(turns, len(items), repeats=3)})
    return rows


async def bench_admission(cfg: Settings) -> list[dict[str, Any]]:
    name = f"bench-parts-{uuid.uuid4().hex[:6]}"
    keyring = Keyring.create(cfg.edge_key)
    admin = redis_client(cfg.redis, principal=ADMIN)
    devices = [c.device for c in DeviceRegistry(admin, keyring).enroll(name, 4000)]
    client = async_redis_client(cfg.redis, 10.0, principal="edge")
    admission = Admission(client, keyring, rate_per_s=10**6)
    rows = []
    try:
        for turn in (1, 10, 40, 160):
            batches = [[Admit(name, d, uuid.uuid4().hex * 2, "1h", 1, (0,)) for d in devices[lo:lo + turn]]
                       for lo in range(0, len(devices), turn)][: max(1, 1600 // turn)]
            requests = sum(len(b) for b in batches)
            cpu, wall = time.process_time(), time.perf_counter()
            for batch in batches:
                await admission.admit(batch)
            cpu_us = (time.process_time() - cpu) / requests * 1e6
            wall_us = (time.perf_counter() - wall) / requests * 1e6
            ping = time.process_time()
            for _ in batches:
                await client.ping()
            rows.append({"turn": turn, "client_cpu_us_per_request": round(cpu_us, 1),
                         "wall_us_per_request": round(wall_us, 1),
                         "ping_per_turn_cpu_us_per_request": round((time.process_time() - ping) / requests * 1e6, 1)})
    finally:
        await client.aclose()
        keys = list(admin.scan_iter(edge_keys(name), count=10_000))
        for lo in range(0, len(keys), 10_000):
            admin.delete(*keys[lo:lo + 10_000])
    return rows


async def bench_request_path(cfg: Settings, spool: Path) -> list[dict[str, Any]]:
    spec = load_spec(PROJECT_ROOT / "examples" / "diagnostics.yaml").replace(
        name=f"bench-parts-{uuid.uuid4().hex[:6]}", one_report_per_window=False)
    publish_spec(spec, cfg.bootstrap)
    admin = redis_client(cfg.redis, principal=ADMIN)
    credentials = DeviceRegistry(admin, Keyring.create(cfg.edge_key)).enroll(spec.name, REQUESTS)
    rng, path = np.random.default_rng(0), f"/v1/collections/{spec.name}/reports"
    records = Population(spec, 1).sample(REQUESTS, rng)
    edge = Edge(EdgeConfig(cfg.bootstrap, cfg.redis, cfg.edge_key, spool, rate_per_s=10**6))
    await edge.start()
    rows = []
    try:
        deadline = time.monotonic() + 60
        while not edge.plans.loaded or edge.plans.cached(spec.name, spec.version) is None:  # loaded off the loop
            if time.monotonic() > deadline:
                raise RuntimeError(f"the edge did not load the spec {spec.name}@{spec.version} within 60 s")
            await asyncio.sleep(0.05)
        for turn in (10, 40, 160):
            now = now_ms()
            bodies = [encode(perturb(spec, np.zeros(1, np.uint64), np.full(1, now, np.int64),
                                     {k: v[i:i + 1] for k, v in records.items()}, rng)) for i in range(REQUESTS)]
            signed = [(authorization(c.device, c.key, "POST", path, body, now), body)
                      for c, body in zip(credentials, bodies, strict=True)]
            cpu, wall = time.process_time(), time.perf_counter()
            for lo in range(0, REQUESTS, turn):
                await asyncio.gather(*(edge.accept(spec.name, "POST", path, header, None, "application/msgpack",
                                                   body) for header, body in signed[lo:lo + turn]))
            cpu_us = (time.process_time() - cpu) / REQUESTS * 1e6
            rows.append({"turn": turn, "edge_cpu_us_per_request": round(cpu_us, 1),
                         "wall_us_per_request": round((time.perf_counter() - wall) / REQUESTS * 1e6, 1),
                         "requests_per_s_per_core": round(1e6 / cpu_us)})
    finally:
        await edge.stop()
        delete_topic(cfg.bootstrap, spec.topic)
        keys = list(admin.scan_iter(edge_keys(spec.name), count=10_000))
        for lo in range(0, len(keys), 10_000):
            admin.delete(*keys[lo:lo + 10_000])
    return rows


async def bench_wake() -> list[dict[str, Any]]:
    rows = []
    for sleep_ms, wakes in ((1, 3000), (5, 1000)):
        cpu = time.process_time()
        for _ in range(wakes):
            await asyncio.sleep(sleep_ms / 1000)
        rows.append({"asleep_ms": sleep_ms, "cpu_us_per_wake": round((time.process_time() - cpu) / wakes * 1e6, 1)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--no-services", action="store_true", help="skip the parts that need Kafka and Redis")
    args = parser.parse_args()
    _, checked, items = checked_requests()
    result: dict[str, Any] = {"join": bench_join(checked), "checks": bench_checks(items),
                              "wake": uvloop.run(bench_wake())}
    if not args.no_services:
        cfg = Settings.from_env()
        result["admission"] = asyncio.run(bench_admission(cfg))
        with tempfile.TemporaryDirectory() as spool:
            result["request_path"] = uvloop.run(bench_request_path(cfg, Path(spool)))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
