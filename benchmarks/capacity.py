"""Capacity of one worker core and one Redis shard, and the memory each device costs per dedupe window: the
measurements behind the README's capacity model, and the check of that model at the largest scale this machine
holds.

It drives the worker's real code path (`ldpstream.aggregator.processing.PartitionProcessor`: decode, validate,
deduplicate against `ldpstream.aggregator.dedupe.SeenDevices`, accumulate; then
`ldpstream.aggregator.store.RedisStore.apply`, the one Lua script per micro-batch) over `--devices` simulated devices of
a spec (default the 10-attribute diagnostics spec, one report per device per hour), against a redis-server of its own:
one shard on a free loopback port, append-only file with fsync every second as the project's. Kafka is left out on
purpose (it is measured by bench_producer.py): the simulator's envelopes are handed to the processor in micro-batches of
`--batch-messages` messages per partition, all 8 partitions in one store write, as a worker's consumer would.

Measured: the worker's CPU seconds per report (process time of processing + the client side of apply), the
shard's CPU seconds per report (redis-server's used_cpu_user + used_cpu_sys), the bytes sent to Redis per report,
the shard's memory (used_memory), the worker's dedupe tables (`SeenDevices.nbytes`) and its resident memory (the
simulator's included), sampled every `--checkpoint` devices. The model:
shard memory and worker memory linear in devices (8 bytes per device per window in the shard: the dedupe lists are
strings of 8-byte pseudonyms; the worker's DeviceSet hash tables at most half full: 16-32 bytes), shard CPU
linear in micro-batches and in bytes appended. The JSON reports the fitted per-device slopes and the largest
departure of any checkpoint from the straight line, so a super-linear cost (a table's growth, a string's
reallocation, a slow-down with size) shows.

Then the edge's side (`--edge-devices`): enrolled devices admitted once each through `ldpstream.edge.devices.Admission`
(its one script per turn of requests) on a fresh shard: the shard's CPU per request, its memory per enrolled device and
per admitted request (signature, rate and window-mark keys, kept until their TTLs: the marks two windows).

Prints JSON: {"devices", "reports", "spec", "seconds", "worker": {...}, "shard": {...}, "checkpoints": [...],
"model": {...}, "edge": {...}}.
Run: .venv/bin/python benchmarks/capacity.py [--devices 20000000] [--checkpoint 2000000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np

os.environ["LDP_SECURITY"] = "off"  # the benchmark's own Redis has no users: before any client reads the settings

from ldpstream.aggregator.dedupe import SeenDevices  # noqa: E402
from ldpstream.aggregator.plans import Plan  # noqa: E402
from ldpstream.aggregator.processing import PartitionProcessor  # noqa: E402
from ldpstream.aggregator.store import RedisStore  # noqa: E402
from ldpstream.contract.spec import load_spec  # noqa: E402
from ldpstream.edge.devices import EDGE_SLOTS, Admission, Admit, DeviceRegistry, edge_keys  # noqa: E402
from ldpstream.edge.keyring import Keyring  # noqa: E402
from ldpstream.runtime.dlq import Message  # noqa: E402
from ldpstream.runtime.redis import async_redis_client, redis_client  # noqa: E402
from ldpstream.simulator.simulator import chunk_messages, fleet  # noqa: E402

PAGE = os.sysconf("SC_PAGE_SIZE")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_shard(directory: Path) -> tuple[subprocess.Popen[bytes], str]:
    """A redis-server of the benchmark's own (append-only, fsync every second, no RDB snapshots) and its URL."""
    port = free_port()
    argv = [shutil.which("redis-server") or "redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir",
            str(directory), "--appendonly", "yes", "--appendfsync", "everysec", "--save", ""]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"redis://127.0.0.1:{port}/0"
    deadline = time.monotonic() + 30
    while True:
        try:
            if redis_client(url, 1.0).ping():
                return proc, url
        except Exception:  # noqa: BLE001 - not up yet
            if time.monotonic() > deadline:
                raise
        time.sleep(0.1)


def rss_bytes() -> int:
    """This process's resident memory now."""
    return int(Path("/proc/self/statm").read_text().split()[1]) * PAGE


def shard_counters(url: str) -> dict[str, float]:
    info = redis_client(url, 10.0).info()
    return {"cpu_s": float(info["used_cpu_user"]) + float(info["used_cpu_sys"]),
            "used_memory": float(info["used_memory"]), "net_input_bytes": float(info["total_net_input_bytes"])}


def micro_batches(spec_devices: Iterator[tuple[int, bytes]], per_partition: int,
                  partitions: int) -> Iterator[list[Message]]:
    """The simulator's messages as a worker's consumer hands them over: up to `per_partition` consecutive messages
    of each partition in one micro-batch, offsets consecutive per partition."""
    offsets = [0] * partitions
    pending: list[list[Message]] = [[] for _ in range(partitions)]
    for partition, value in spec_devices:
        pending[partition].append(Message(offsets[partition], value, partition=partition))
        offsets[partition] += 1
        if len(pending[partition]) >= per_partition:
            yield [m for part in pending for m in part]
            pending = [[] for _ in range(partitions)]
    if any(pending):
        yield [m for part in pending for m in part]


def fit(xs: list[float], ys: list[float]) -> tuple[float, float, float]:
    """Least-squares line y = a + b x; (a, b, largest |residual| / y at that point)."""
    x, y = np.asarray(xs), np.asarray(ys)
    b, a = np.polyfit(x, y, 1)
    return float(a), float(b), float(np.max(np.abs(y - (a + b * x)) / np.maximum(np.abs(y), 1.0)))


def run(spec_path: Path, devices: int, checkpoint: int, batch_messages: int, envelope: int) -> dict[str, object]:
    spec = load_spec(spec_path).replace(name=f"capacity-{uuid.uuid4().hex[:8]}")
    plan = Plan(spec, {})
    directory = Path(tempfile.mkdtemp(prefix="ldp-capacity-"))
    shard, url = start_shard(directory)
    try:
        store = RedisStore(url)
        seen = SeenDevices(store)
        processor = PartitionProcessor(lambda n, v, _: plan if (n, v) == (spec.name, spec.version) else None,
                                       lambda: int(time.time() * 1000))
        base_shard, base_rss = shard_counters(url), rss_bytes()
        worker_cpu = generate_s = 0.0
        reports = writes = 0
        checkpoints: list[dict[str, float]] = []
        next_checkpoint = checkpoint
        started = time.perf_counter()

        def messages() -> Iterator[tuple[int, bytes]]:
            nonlocal generate_s
            t = time.process_time()
            for i, (_, batch) in enumerate(fleet(spec, devices, seed=7, chunk=envelope * spec.partitions)):
                for partition, _key, value in chunk_messages(spec, batch, f"capacity/{i}"):
                    generate_s += time.process_time() - t
                    yield partition, value
                    t = time.process_time()

        for batch in micro_batches(messages(), batch_messages, spec.partitions):
            t = time.process_time()
            result = processor.process(spec.topic, batch, seen)
            assert result.update is not None and not result.dead_letters
            assert store.apply(result.update).status == "applied"
            seen.commit(spec.topic, result.update, int(time.time() * 1000))
            worker_cpu += time.process_time() - t
            reports += result.update.outcomes.get("accepted", 0)
            writes += 1
            if reports >= next_checkpoint or reports == devices:
                now = shard_counters(url)
                checkpoints.append({"devices": reports, "shard_memory_bytes": now["used_memory"] - base_shard[
                    "used_memory"], "shard_cpu_s": now["cpu_s"] - base_shard["cpu_s"],
                    "worker_rss_bytes": rss_bytes() - base_rss, "worker_dedupe_bytes": seen.nbytes(),
                    "worker_cpu_s": worker_cpu})
                next_checkpoint += checkpoint
        elapsed = time.perf_counter() - started
        end = shard_counters(url)
        assert store.outcomes(spec.name) == {"accepted": devices}, store.outcomes(spec.name)
        xs = [c["devices"] for c in checkpoints]
        shard_a, shard_b, shard_dev = fit(xs, [c["shard_memory_bytes"] for c in checkpoints])
        rss_a, rss_b, rss_dev = fit(xs, [c["worker_rss_bytes"] for c in checkpoints])
        table_a, table_b, table_dev = fit(xs, [c["worker_dedupe_bytes"] for c in checkpoints])
        cpu_a, cpu_b, cpu_dev = fit(xs, [c["shard_cpu_s"] for c in checkpoints])
        shard_cpu = end["cpu_s"] - base_shard["cpu_s"]
        return {
            "devices": devices, "reports": reports, "spec": str(spec_path), "attributes": len(spec.attributes),
            "seconds": round(elapsed, 1), "load_average": os.getloadavg(),
            "micro_batches": writes, "reports_per_micro_batch": round(reports / writes),
            "worker": {"cpu_s": round(worker_cpu, 2), "reports_per_cpu_s": round(reports / worker_cpu),
                       "simulator_cpu_s_excluded": round(generate_s, 2),
                       "rss_bytes_per_device": round(rss_b, 1), "dedupe_bytes_per_device": round(table_b, 1),
                       "peak_rss_mb": round(
                           resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)},
            "shard": {"cpu_s": round(shard_cpu, 2), "reports_per_cpu_s": round(reports / shard_cpu),
                      "micro_batches_per_cpu_s": round(writes / shard_cpu, 1),
                      "bytes_in_per_report": round((end["net_input_bytes"] - base_shard["net_input_bytes"]) / reports,
                                                   2),
                      "memory_bytes_per_device": round(shard_b, 2),
                      "memory_mb_total": round((end["used_memory"] - base_shard["used_memory"]) / 2**20, 1)},
            "checkpoints": checkpoints,
            "model": {"shard_memory": {"predicted_bytes_per_device": 8.0, "fitted": round(shard_b, 2),
                                       "intercept_mb": round(shard_a / 2**20, 2),
                                       "largest_departure_from_line": round(shard_dev, 4)},
                      "worker_dedupe_tables": {"predicted_bytes_per_device": "16-32", "fitted": round(table_b, 1),
                                               "largest_departure_from_line": round(table_dev, 4)},
                      "worker_rss": {"fitted": round(rss_b, 1), "largest_departure_from_line": round(rss_dev, 4)},
                      "shard_cpu": {"fitted_s_per_million_devices": round(cpu_b * 1e6, 3),
                                    "intercept_s": round(cpu_a, 3), "largest_departure_from_line": round(cpu_dev, 4)}},
        }
    finally:
        shard.terminate()
        shard.wait(30)
        shutil.rmtree(directory, ignore_errors=True)


def run_edge(devices: int, turn: int) -> dict[str, object]:
    """The edge's admission state on one shard: `devices` enrolled devices, each admitted once with one report
    (`ldpstream.edge.devices.Admission.admit`, one script per turn of `turn` requests, as the edge coalesces them); the
    shard's CPU per request and its memory per device (the enrolled-devices hash, then the signature, rate and
    window-mark keys a request leaves behind until their TTLs expire)."""
    directory = Path(tempfile.mkdtemp(prefix="ldp-capacity-edge-"))
    shard, url = start_shard(directory)
    try:
        keyring = Keyring.create(directory / "master.key")
        name = f"capacity-{uuid.uuid4().hex[:8]}"
        before = shard_counters(url)
        ids = [c.device for c in DeviceRegistry(redis_client(url, 30.0), keyring).enroll(name, devices)]
        enrolled = shard_counters(url)
        admission = Admission(async_redis_client(url, 30.0), keyring, rate_per_s=10)
        start_ms = 1_700_000_000_000

        async def admit_all() -> int:
            used = 0
            for lo in range(0, devices, turn):
                requests = [Admit(name, d, uuid.uuid4().hex, "1h", 1, (start_ms,)) for d in ids[lo:lo + turn]]
                used += sum(1 for answer in await admission.admit(requests) if answer != [])
            await admission.redis.aclose()
            return used

        t = time.perf_counter()
        refused = asyncio.run(admit_all())
        seconds = time.perf_counter() - t
        end = shard_counters(url)
        cpu = end["cpu_s"] - enrolled["cpu_s"]
        client = redis_client(url, 10.0)
        sample = {kind: next(client.scan_iter(match=f"{edge_keys(name)[:-1]}{kind}:*", count=1000))
                  for kind in ("sig", "rate", "seen")}
        return {"devices": devices, "turn": turn, "edge_slots": EDGE_SLOTS, "refused": refused,
                "seconds": round(seconds, 1),
                "key_bytes": {kind: client.memory_usage(key) for kind, key in sample.items()},
                "requests_per_shard_cpu_s": round(devices / cpu),
                "enrolled_bytes_per_device": round((enrolled["used_memory"] - before["used_memory"]) / devices, 1),
                "admitted_bytes_per_device": round((end["used_memory"] - enrolled["used_memory"]) / devices, 1)}
    finally:
        shard.terminate()
        shard.wait(30)
        shutil.rmtree(directory, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spec", type=Path, default=Path("examples/diagnostics.yaml"))
    parser.add_argument("--devices", type=int, default=20_000_000)
    parser.add_argument("--checkpoint", type=int, default=2_000_000, help="sample the memory every this many devices")
    parser.add_argument("--batch-messages", type=int, default=12,
                        help="messages per partition per micro-batch (12 x 8 partitions x 1000 reports of ~26 "
                             "bytes: ~2.5 MB, the worker's bound on one store write)")
    parser.add_argument("--envelope", type=int, default=1000, help="reports per message")
    parser.add_argument("--edge-devices", type=int, default=1_000_000, help="devices through the edge's admission")
    parser.add_argument("--edge-turn", type=int, default=200, help="requests per admission script")
    args = parser.parse_args()
    out = run(args.spec, args.devices, args.checkpoint, args.batch_messages, args.envelope)
    out["edge"] = run_edge(args.edge_devices, args.edge_turn) if args.edge_devices else None
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
