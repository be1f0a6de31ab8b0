"""Benchmark of the device join protocol (prints JSON): enrolments per second of one edge process against Redis,
what verifying the spec costs a device, and the bytes a device downloads to join.

    python -m benchmarks.bench_join [--enrolments 5000] [--concurrency 64]

Needs the services of `ldp up`. One edge process (`python -m ldpstream.edge`, the per-address limit lifted: the load
comes from one address) answers `--enrolments` POST /v1/enroll requests with one token, `--concurrency` at a time
from an aiohttp client in this process; the edge's CPU per enrolment is its process's user + system time (from /proc)
over the run. Goal (issue 25): at least 1,000 enrolments a second per edge process (a fleet of 10 million devices
that enrols again yearly needs 0.3 a second on average).

Verification on the device, in process (`--repeat` times each, the best of 5 rounds): parsing the served spec alone
(what a device that verified nothing would do), then the pointer's and the spec's checks in full
(`ldpstream.device.trust`: two Ed25519 verifications, the pointer parsed, the spec hashed and parsed). The cost of
verifying is the difference.

Bytes to join: what one device receives and sends for its enrolment, the pointer and the spec (bodies and headers
as sent on the wire), counted from a real exchange with the edge.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import tempfile
import time
import timeit
import uuid
from pathlib import Path
from typing import Any

import aiohttp

from benchmarks.bench_edge import cpu_seconds
from ldpstream.contract.clock import now_ms
from ldpstream.contract.enrolment import mint, new_token
from ldpstream.contract.pointer import parse_pointer
from ldpstream.contract.signatures import TrustedKeys, block_from_header
from ldpstream.contract.spec import load_spec, parse_spec
from ldpstream.device.trust import Seen, check_pointer, check_spec
from ldpstream.edge.devices import edge_keys
from ldpstream.edge.processes import start_edge, stop_edge, wait_live
from ldpstream.runtime.join_keys import load_token_key, pinned_keys
from ldpstream.runtime.redis import redis_client
from ldpstream.runtime.settings import PROJECT_ROOT, Settings
from ldpstream.runtime.specs import publish_spec


async def enrol_all(url: str, token: str, collection: str, count: int, concurrency: int) -> dict[int, int]:
    """`count` enrolments with one token, `concurrency` at a time; the count of answers per status."""
    statuses: dict[int, int] = {}
    remaining = iter(range(count))
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as session:
        async def worker() -> None:
            for _ in remaining:
                async with session.post(f"{url}/v1/enroll", json={"token": token, "collection": collection}) as a:
                    await a.read()
                    statuses[a.status] = statuses.get(a.status, 0) + 1
        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return statuses


def wire_bytes(response: aiohttp.ClientResponse, body: bytes) -> int:
    """An answer's size on the wire: its status line, headers ("name: value" CRLF each), a blank line, its body."""
    status = len(f"HTTP/1.1 {response.status} {response.reason}\r\n")
    return status + sum(len(k) + len(v) + 4 for k, v in response.raw_headers) + 2 + len(body)


async def one_join(url: str, token: str, collection: str) -> dict[str, Any]:
    """One device's join, counted: bytes received and sent per request, and the served pointer and spec."""
    out: dict[str, Any] = {"received": {}, "sent_bodies": {}}
    async with aiohttp.ClientSession() as session:
        enrolment = json.dumps({"token": token, "collection": collection}).encode()
        async with session.post(f"{url}/v1/enroll", data=enrolment,
                                headers={"Content-Type": "application/json"}) as answer:
            out["received"]["enroll"] = wire_bytes(answer, await answer.read())
        out["sent_bodies"]["enroll"] = len(enrolment)
        async with session.get(f"{url}/v1/collections/{collection}") as answer:
            pointer = await answer.read()
            out["received"]["pointer"] = wire_bytes(answer, pointer)
            out["pointer"] = (pointer, block_from_header(answer.headers["LDP-Signature"]))
        version = parse_pointer(pointer).version
        async with session.get(f"{url}/v1/collections/{collection}/specs/{version}") as answer:
            spec = await answer.read()
            out["received"]["spec"] = wire_bytes(answer, spec)
            out["spec"] = (spec, block_from_header(answer.headers["LDP-Signature"]))
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def best_us(fn: Any, repeat: int) -> float:
    """The best of 5 rounds of `repeat` calls, in microseconds per call."""
    return min(timeit.repeat(fn, number=repeat, repeat=5)) / repeat * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--enrolments", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    cfg = Settings.from_env()
    spec = load_spec(PROJECT_ROOT / "examples" / "diagnostics.yaml").replace(name=f"bench-join-{uuid.uuid4().hex[:8]}")
    publish_spec(spec, cfg.bootstrap)
    now = now_ms()
    token = mint(load_token_key(cfg), new_token([spec.name], args.enrolments + 10, now, now + 3_600_000))
    port = free_port()
    with tempfile.TemporaryDirectory() as spool:
        edge = start_edge(port, Path(spool), "--enrol-per-address", str(10 * args.enrolments),
                          "--enrol-per-token", str(10 * args.enrolments))
        url = f"http://127.0.0.1:{port}"
        try:
            wait_live(url, edge, probe="/readyz")
            joined = asyncio.run(one_join(url, token, spec.name))
            cpu_before, started = cpu_seconds(edge.pid), time.perf_counter()
            statuses = asyncio.run(enrol_all(url, token, spec.name, args.enrolments, args.concurrency))
            seconds, cpu = time.perf_counter() - started, cpu_seconds(edge.pid) - cpu_before
        finally:
            stop_edge(edge)
            client = redis_client(cfg.redis)
            keys = list(client.scan_iter(edge_keys(spec.name), count=10_000))
            for lo in range(0, len(keys), 10_000):
                client.delete(*keys[lo:lo + 10_000])
    keys = TrustedKeys.from_json(pinned_keys(cfg))
    (pointer, pointer_block), (spec_bytes, spec_block) = joined["pointer"], joined["spec"]
    parsed = parse_pointer(pointer)
    parse_only = best_us(lambda: parse_spec(spec_bytes), args.repeat)
    verified = best_us(lambda: check_spec(spec_bytes, spec_block, keys, check_pointer(
        pointer, pointer_block, keys, spec.name, Seen(), now_ms())), args.repeat)
    print(json.dumps({
        "enrolments": args.enrolments, "concurrency": args.concurrency, "statuses": statuses,
        "enrolments_per_s": round(statuses.get(201, 0) / seconds), "edge_cpu_us_per_enrolment":
            round(cpu / max(1, statuses.get(201, 0)) * 1e6), "goal_per_s": 1000,
        "verify": {"parse_spec_only_us": round(parse_only, 1), "pointer_and_spec_checked_us": round(verified, 1),
                   "added_by_verification_us": round(verified - parse_only, 1), "version": parsed.version},
        "join_bytes": {"received": joined["received"], "sent_bodies": joined["sent_bodies"],
                       "received_total": sum(joined["received"].values())},
        "cpus": os.cpu_count()}))


if __name__ == "__main__":
    main()
