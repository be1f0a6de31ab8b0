"""Benchmark of one edge process (prints JSON): requests/s and reports/s for 1 report per request and outboxes of
50, p50/p99 latency at half the measured load, next to a do-nothing handler on the same HTTP server (aiohttp's
low-level server on uvloop, the edge's; also waiting like the edge for a batched acknowledgement, one 5 ms timer
per batch) and on three others (an aiohttp Application; uvicorn with httptools; granian's Rust server, RSGI), the
edge on asyncio's loop, and raw produce (the same reports as 1000-report envelopes straight into Kafka), in one
run. Each full-load step also gives the server's CPU microseconds per request (its processes' user + system time
from /proc): on a machine whose speed moves from run to run, CPU per request compares steps better than
requests/s.

    python -m benchmarks.bench_edge [--seconds 8] [--concurrency 256]

The load generator is `benchmarks/loadgen` (Go, built on first use; requests signed ahead of time), on the same
machine: it takes a fraction of the server's CPU, where a Python client took about as much as the server.
The collection is the diagnostics example with one_report_per_window off (an outbox of 50 reports of one device
would otherwise need 50 windows), so Redis marks no windows; authentication, replay and rate checks still run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import uvloop
from aiohttp import web

from ldpstream.contract.auth import authorization
from ldpstream.contract.clock import now_ms
from ldpstream.contract.spec import CollectionSpec, load_spec
from ldpstream.contract.wire import encode
from ldpstream.device.perturb import perturb, row_range
from ldpstream.edge.devices import DeviceRegistry, edge_keys
from ldpstream.edge.keyring import Keyring
from ldpstream.edge.processes import start_edge, stop_edge, wait_live
from ldpstream.runtime.kafka import ReportProducer, delete_topic
from ldpstream.runtime.redis import redis_client
from ldpstream.runtime.settings import PROJECT_ROOT, Settings
from ldpstream.runtime.specs import publish_spec
from ldpstream.simulator.population import Population

NULL_SERVERS = ("aiohttp-lowlevel", "aiohttp-lowlevel-waiting", "aiohttp-application", "uvicorn", "granian")
ACK_LINGER_S = 0.005  # the waiting handler's batches: the edge forwarder's default linger


async def rsgi_null(scope: Any, protocol: Any) -> None:
    """The do-nothing handler as an RSGI app (granian's own interface: HTTP parsed and written by its Rust runtime)."""
    if scope.proto == "http":
        await protocol()
        protocol.response_bytes(200, [("content-type", "application/json")], b'{"accepted": 1}')


def null_server(port: int, kind: str) -> None:
    """A do-nothing handler (read the body, answer a small JSON), on uvloop: on aiohttp's low-level server (the
    edge's; "-waiting": answering once its batch is acknowledged, after ACK_LINGER_S), on an aiohttp Application
    (router and middleware layer), on uvicorn (httptools, a raw ASGI app), or on granian (one worker, one Rust
    runtime thread, RSGI)."""
    if kind == "granian":
        from granian import Granian
        from granian.constants import Interfaces, Loops

        Granian("benchmarks.bench_edge:rsgi_null", address="127.0.0.1", port=port, interface=Interfaces.RSGI,
                workers=1, runtime_threads=1, loop=Loops.uvloop, log_enabled=False).serve()
        return
    if kind == "uvicorn":
        import uvicorn

        async def asgi(scope: dict, receive: Callable, send: Callable) -> None:  # type: ignore[type-arg]
            if scope["type"] != "http":
                return
            while (await receive()).get("more_body", False):
                pass
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"application/json")]})
            await send({"type": "http.response.body", "body": b'{"accepted": 1}'})

        uvicorn.run(asgi, host="127.0.0.1", port=port, log_level="warning", access_log=False, http="httptools",
                    loop="uvloop")
        return

    async def handle(request: web.BaseRequest) -> web.Response:
        await request.read()
        return web.Response(body=b'{"accepted": 1}', content_type="application/json")

    waiting: list[asyncio.Future[None]] = []

    def acknowledge() -> None:
        batch = list(waiting)
        waiting.clear()
        for future in batch:
            future.set_result(None)

    async def handle_after_ack(request: web.BaseRequest) -> web.Response:
        """The do-nothing handler that also waits, like the edge, for an acknowledgement of its batch."""
        await request.read()
        loop = asyncio.get_running_loop()
        waiting.append(loop.create_future())
        if len(waiting) == 1:
            loop.call_later(ACK_LINGER_S, acknowledge)
        await waiting[-1]
        return web.Response(body=b'{"accepted": 1}', content_type="application/json")

    async def lowlevel(handler: Callable[[web.BaseRequest], Any]) -> None:
        runner = web.ServerRunner(web.Server(handler), access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        await asyncio.Event().wait()

    if kind.startswith("aiohttp-lowlevel"):
        uvloop.run(lowlevel(handle_after_ack if kind == "aiohttp-lowlevel-waiting" else handle))
        return
    app = web.Application()
    app.router.add_post("/v1/collections/{name}/reports", handle)
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None, loop=uvloop.new_event_loop())


LOADGEN = PROJECT_ROOT / ".local" / "bin" / "ldp-loadgen"


def loadgen() -> Path:
    """The Go load generator (`benchmarks/loadgen`), built on first use (Go is a prerequisite of this benchmark)."""
    if not LOADGEN.exists():
        subprocess.run(["go", "build", "-o", str(LOADGEN), "."], cwd=PROJECT_ROOT / "benchmarks" / "loadgen",
                       check=True)
    return LOADGEN


def process_tree(pid: int) -> tuple[set[int], dict[int, float]]:
    """A process and its descendants (Linux /proc), and the CPU seconds (user + system) of every process so far."""
    parents, times = {}, {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # a process that ended meanwhile
        proc = int(stat.parent.name)
        parents[proc] = int(fields[1])
        times[proc] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    tree, grown = {pid}, True
    while grown:
        more = {p for p, parent in parents.items() if parent in tree} - tree
        tree, grown = tree | more, bool(more)
    return tree, times


def cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) of a process and its descendants so far, e.g. a server and its workers."""
    tree, times = process_tree(pid)
    return sum(times.get(p, 0.0) for p in tree)


def load(url: str, requests: Path, seconds: float, concurrency: int, rate: float | None = None,
         server_pid: int | None = None) -> dict[str, Any]:
    """Replay the requests file for `seconds` (`concurrency` in flight; at most `rate` per second); with the
    server's pid, also the server's CPU microseconds per answered request."""
    command = [str(loadgen()), "-url", url, "-file", str(requests), "-seconds", str(seconds),
               "-concurrency", str(concurrency), "-rate", str(rate or 0)]
    cpu_before = None if server_pid is None else cpu_seconds(server_pid)
    out = json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)
    result = {"requests_per_s": round(out["requests_per_s"]), "p50_ms": round(out["p50_ms"], 2),
              "p99_ms": round(out["p99_ms"], 2), "statuses": out["statuses"], "errors": out["errors"],
              "exhausted_early": out["exhausted"]}
    if server_pid is not None and cpu_before is not None and out["requests_per_s"]:
        answered = out["requests_per_s"] * seconds
        result["server_cpu_us_per_request"] = round((cpu_seconds(server_pid) - cpu_before) / answered * 1e6, 1)
    return result


def _chunk(data: bytes) -> bytes:
    return struct.pack("<I", len(data)) + data


def write_requests(path: Path, spec: CollectionSpec, credentials: list[tuple[str, bytes]], per_request: int,
                   count: int, seed: int) -> Path:
    """`count` signed requests in loadgen's file format: request i is device i mod n signing one of 200 envelopes
    of `per_request` reports (devices column 0: the edge sets the authenticated device's pseudonym) at now + i // n
    ms, so no signature repeats."""
    rng = np.random.default_rng(seed)
    now = now_ms()
    zeros = np.zeros(per_request, dtype=np.uint64)
    bodies = [encode(perturb(spec, zeros, np.full(per_request, now, dtype=np.int64),
                             Population(spec, seed).sample(per_request, rng), rng)) for _ in range(200)]
    url_path = f"/v1/collections/{spec.name}/reports"
    with path.open("wb") as out:
        for i in range(count):
            device, key = credentials[i % len(credentials)]
            body = bodies[i % len(bodies)]
            signed = authorization(device, key, "POST", url_path, body, now + i // len(credentials))
            out.write(_chunk(url_path.encode()) + struct.pack("<I", 2)
                      + _chunk(b"Content-Type") + _chunk(b"application/msgpack")
                      + _chunk(b"Authorization") + _chunk(signed.encode()) + _chunk(body))
    return path


def raw_produce(cfg: Settings, spec: CollectionSpec, reports: int) -> float:
    """Reports/s of producing envelopes of 1000 reports straight to Kafka (the edge's ceiling)."""
    rng = np.random.default_rng(0)
    ids = np.arange(reports, dtype=np.uint64)
    batch = perturb(spec, ids, np.full(reports, now_ms(), dtype=np.int64), Population(spec, 0).sample(reports, rng),
                    rng)
    messages = [encode(row_range(batch, lo, min(lo + 1000, reports))) for lo in range(0, reports, 1000)]
    producer = ReportProducer(cfg.bootstrap)
    start = time.perf_counter()
    for i, message in enumerate(messages):
        producer.produce(spec.topic, message, partition=i % spec.partitions)
    producer.flush()
    return reports / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--concurrency", type=int, default=256, help="requests in flight (devices at once)")
    parser.add_argument("--devices", type=int, default=20_000)
    parser.add_argument("--max-rate", type=float, default=30_000,
                        help="requests/s the signed request files can sustain for --seconds")
    parser.add_argument("--null-server", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--null-kind", choices=NULL_SERVERS, default=NULL_SERVERS[0], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.null_server is not None:
        null_server(args.null_server, args.null_kind)
        return
    cfg = Settings.from_env()
    spec = load_spec(PROJECT_ROOT / "examples" / "diagnostics.yaml").replace(
        name=f"bench-edge-{uuid.uuid4().hex[:6]}", one_report_per_window=False)
    publish_spec(spec, cfg.bootstrap)
    client = redis_client(cfg.redis)
    registry = DeviceRegistry(client, Keyring.create(cfg.edge_key))
    credentials = [(c.device, c.key) for c in registry.enroll(spec.name, args.devices)]
    count = int(args.max_rate * args.seconds)
    results: dict[str, object] = {"seconds_per_step": args.seconds, "concurrency": args.concurrency,
                                  "server": f"aiohttp {aiohttp.__version__} (low-level), uvloop {uvloop.__version__}",
                                  "client": "benchmarks/loadgen (Go net/http), requests signed ahead of time"}
    with tempfile.TemporaryDirectory() as tmp:
        def fresh(per_request: int, seed: int) -> Path:  # signatures are single-use: a new file per step
            return write_requests(Path(tmp) / "requests", spec, credentials, per_request,
                                  count if per_request == 1 else count // 3, seed)

        do_nothing = {}
        for kind in NULL_SERVERS:
            null = subprocess.Popen([sys.executable, "-m", "benchmarks.bench_edge", "--null-server", "18931",
                                     "--null-kind", kind])
            try:
                requests = fresh(1, 0)
                time.sleep(2.0)
                do_nothing[kind] = load("http://127.0.0.1:18931", requests, args.seconds, args.concurrency,
                                        server_pid=null.pid)
            finally:
                null.terminate()
                null.wait()
        results["do_nothing_handler"] = do_nothing
        for loop in ("asyncio", "uvloop"):
            edge = start_edge(18932, Path(tmp) / "spool", "--rate", "1000000", "--loop", loop)
            try:
                wait_live("http://127.0.0.1:18932", edge, probe="/readyz")
                if loop == "asyncio":
                    results["single_asyncio_loop"] = load("http://127.0.0.1:18932", fresh(1, 1), args.seconds,
                                                          args.concurrency, server_pid=edge.pid)
                    continue
                runs = {}
                for name, size in (("single", 1), ("outbox_50", 50)):
                    full = load("http://127.0.0.1:18932", fresh(size, 2), args.seconds, args.concurrency,
                                server_pid=edge.pid)
                    half = load("http://127.0.0.1:18932", fresh(size, 3), args.seconds, args.concurrency,
                                rate=full["requests_per_s"] / 2)
                    runs[name] = {**full, "reports_per_s": full["requests_per_s"] * size,
                                  "half_load": {k: half[k] for k in ("requests_per_s", "p50_ms", "p99_ms")}}
                results.update(runs)
                results["single_vs_do_nothing"] = round(runs["single"]["requests_per_s"]
                                                        / do_nothing["aiohttp-lowlevel"]["requests_per_s"], 3)
                results["raw_produce_reports_per_s"] = round(raw_produce(cfg, spec, 200_000))
            finally:
                stop_edge(edge)
        delete_topic(cfg.bootstrap, spec.topic)
        keys = list(client.scan_iter(edge_keys(spec.name), count=10_000))
        for lo in range(0, len(keys), 10_000):
            client.delete(*keys[lo:lo + 10_000])
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
