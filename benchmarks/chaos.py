"""Chaos: a device fleet streams through Kafka into the aggregator while workers, Redis and the Kafka broker are
killed at random and poison messages are mixed in; at the end every device must be counted exactly once.

The run has its own Kafka broker and Redis server (free loopback ports, a temporary state dir; the shared ones
are not touched) and runs `ldp aggregate --workers W` (the supervisor restarts a worker that dies). Meanwhile:
- a fleet of `--devices` devices sends one report each (batched envelopes, `--rate` reports/s, the idempotent
  producer retrying through outages), and a second producer sends `--poison` invalid messages (truncated, with
  garbage appended, random bytes, invalid UTF-8 in a string, empty, ~600 KB) at random times to random partitions;
- `--faults` faults fire one after the other, 2-6 s apart, each chosen at random among: SIGKILL of a worker;
  SIGKILL of Redis, the tail of its append-only file cut (acknowledged writes lost, as after a power cut with
  appendfsync everysec), restart; SIGKILL of the Kafka broker, restart.
Then the run waits until every partition's applied offset in Redis reaches its end offset, and compares: reports
accepted = devices sent (exactly), rejected = the poison sent (all as `malformed`), every estimate within 4
standard errors of the population's truth. One JSON object: the faults survived, the counts, the verdict.

Run: .venv/bin/python benchmarks/chaos.py [--devices 1000000] [--rate 25000] [--faults 9] [--seed 0]
     (bounded: the stream lasts devices / rate seconds; the whole run gives up after --max-seconds)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ldpstream.aggregator.estimates import collection_estimates
from ldpstream.aggregator.health import worker_id
from ldpstream.aggregator.plans import Plan
from ldpstream.aggregator.store import RedisStore
from ldpstream.contract.spec import CollectionSpec, load_spec
from ldpstream.contract.topics import source
from ldpstream.contract.wire import encode
from ldpstream.runtime.kafka import ReportProducer, end_offsets, producer_client
from ldpstream.runtime.process import read_pid, stop_pid
from ldpstream.runtime.settings import PROJECT_ROOT, Settings
from ldpstream.runtime.signing import ensure_signing_keys
from ldpstream.runtime.specs import publish_spec
from ldpstream.services import KafkaService, RedisService
from ldpstream.simulator.simulator import fleet, simulate

RETRYING_PRODUCER = {"message.timeout.ms": 600_000, "retry.backoff.ms": 200}  # rides out a broker restart
FAULTS = ("worker_kill", "redis_kill_tail_cut", "broker_kill")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Services:
    """The run's own broker and Redis, and the environment that points processes at them."""

    env: dict[str, str]
    cfg: Settings
    kafka: KafkaService
    redis: RedisService

    @classmethod
    def start(cls, state: Path) -> Services:
        env = {"LDP_STATE_DIR": str(state), "KAFKA_PORT": str(free_port()), "KAFKA_CONTROLLER_PORT": str(free_port()),
               "REDIS_PORT": str(free_port()), "KAFKA_HEAP": "768m"}
        ours = Settings.from_env()
        shared_jars = ours.state_dir / "kafka" / f"lib-{ours.kafka_version}"
        os.environ.update(env)  # this process's own clients too: they find the run's credentials in its state dir
        cfg = Settings.from_env()
        if (shared_jars / ".complete").exists():  # reuse the jars `ldp up` fetched instead of copying them again
            (state / "kafka").mkdir(parents=True, exist_ok=True)
            os.symlink(shared_jars, state / "kafka" / shared_jars.name)
        ensure_signing_keys(cfg.spec_signing_key, cfg.spec_trusted_keys)  # as `ldp up` makes them
        services = cls(env, cfg, KafkaService(cfg), RedisService(cfg))
        services.kafka.start()
        services.redis.start()
        return services

    def kill(self, service: KafkaService | RedisService) -> None:
        pid = read_pid(service.pidfile)
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
            while read_pid(service.pidfile) is not None:
                time.sleep(0.05)

    def cut_redis_tail(self, rng: random.Random) -> int:
        """Drop the last writes of Redis's append-only file (a random share of its newest tenth, at most 2 MB), as
        a power cut loses what `appendfsync everysec` had not synced; the bytes cut."""
        incr = max((self.redis.data / "appendonlydir").glob("*.incr.aof"), key=lambda p: p.stat().st_mtime)
        size = incr.stat().st_size
        cut = min(int(size * rng.uniform(0.02, 0.1)), 2_000_000)
        with open(incr, "r+b") as f:
            f.truncate(size - cut)
        manifest = next((self.redis.data / "appendonlydir").glob("*.manifest"))
        subprocess.run([shutil.which("redis-check-aof") or "redis-check-aof", "--fix", str(manifest)],
                       input=b"y\n", capture_output=True, check=False)  # drops the command cut in half
        return cut

    def stop(self) -> None:
        for service in (self.redis, self.kafka):
            try:
                service.stop()
            except Exception as exc:  # noqa: BLE001 - best effort at the end of a run
                print(f"stopping {service.name}: {exc}", file=sys.stderr)


def invalid_copy(valid: bytes, rng: random.Random) -> tuple[str, bytes]:
    """A message the aggregator must reject whole (never a valid envelope), and how it was made."""
    kind = rng.choice(["truncated", "garbage_appended", "random_bytes", "invalid_utf8", "empty", "huge"])
    if kind == "truncated":
        return kind, valid[:rng.randrange(1, len(valid))]
    if kind == "garbage_appended":
        return kind, valid + rng.randbytes(rng.randrange(1, 64))
    if kind == "random_bytes":
        return kind, rng.randbytes(rng.randrange(1, 4096))
    if kind == "invalid_utf8":  # [array header, version, str header, collection name...]: break the name's first byte
        return kind, valid[:3] + b"\xff" + valid[4:]
    if kind == "empty":
        return kind, b""
    return kind, rng.randbytes(600_000)


@dataclass
class Run:
    """What happened during the stream."""

    faults: list[dict[str, Any]] = field(default_factory=list)
    poison: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


def pool_workers(pool: subprocess.Popen[bytes]) -> list[int]:
    """The pids of the supervisor's worker processes (its children)."""
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pool.pid and fields[0] != "Z":
            children.append(int(stat.parent.name))
    return children


def fire(fault: str, services: Services, pool: subprocess.Popen[bytes], rng: random.Random,
         applied: Callable[[], dict[str, int]]) -> dict[str, Any]:
    """One fault; what was done (for Redis: how many partitions' applied offsets went back, `applied` giving them)."""
    started = time.monotonic()
    if fault == "worker_kill":
        workers = pool_workers(pool)
        if not workers:
            return {"fault": fault, "skipped": "no worker running"}
        victim = rng.choice(workers)
        os.kill(victim, signal.SIGKILL)
        return {"fault": fault, "pid": victim, "worker": worker_id(victim)}
    if fault == "redis_kill_tail_cut":
        before = applied()
        services.kill(services.redis)
        cut = services.cut_redis_tail(rng)
        time.sleep(rng.uniform(0.5, 3.0))
        services.redis.start()
        after = applied()
        back = sum(after.get(name, -1) < offset for name, offset in before.items())
        return {"fault": fault, "aof_bytes_cut": cut, "partitions_gone_back": back,
                "down_s": round(time.monotonic() - started, 2)}
    services.kill(services.kafka)
    time.sleep(rng.uniform(0.5, 3.0))
    services.kafka.start()
    return {"fault": fault, "down_s": round(time.monotonic() - started, 2)}


def send_poison(spec: CollectionSpec, cfg: Settings, valid: bytes, count: int, seconds: float, rng: random.Random,
                run: Run) -> None:
    """`count` invalid messages at random times over `seconds`, to random partitions."""
    producer = producer_client(cfg.bootstrap, **RETRYING_PRODUCER)
    times = sorted(rng.uniform(0, seconds) for _ in range(count))
    start = time.monotonic()
    for at in times:
        time.sleep(max(0.0, at - (time.monotonic() - start)))
        kind, value = invalid_copy(valid, rng)
        producer.produce(spec.topic, value, partition=rng.randrange(spec.partitions))
        run.poison[kind] = run.poison.get(kind, 0) + 1
        producer.poll(0)
    if producer.flush(600):
        run.errors.append("poison producer: messages not delivered")


def wait_drained(store: RedisStore, spec: CollectionSpec, cfg: Settings, deadline: float) -> bool:
    """Until every partition's applied offset reaches its end offset (or the deadline)."""
    while time.monotonic() < deadline:
        try:
            ends = end_offsets(cfg.bootstrap, spec.topic, "chaos-watermarks", timeout_s=10)
            applied = store.offsets(spec.name)
            if all(applied.get(source(spec.topic, p), -1) + 1 >= end for p, end in ends.items()):
                return True
        except Exception as exc:  # noqa: BLE001 - services may be restarting
            print(f"waiting: {exc}", file=sys.stderr)
        time.sleep(1.0)
    return False


def verdict(store: RedisStore, spec: CollectionSpec, truth: dict[str, Any], devices: int,
            poison: int) -> dict[str, Any]:
    outcomes = store.outcomes(spec.name)
    estimates = collection_estimates(store, Plan(spec))
    worst = 0.0
    for name, entry in estimates["attributes"].items():
        pairs = ([(entry["mean"], entry["stderr"], truth["attributes"][name]["mean"])] if "mean" in entry else
                 [(e["estimate"], e["stderr"], truth["attributes"][name]["frequencies"][v])
                  for v, e in entry["frequencies"].items()])
        worst = max([worst, *(abs(x - t) / s for x, s, t in pairs if s)])
    rejected = {k.partition(":")[2]: n for k, n in outcomes.items() if k.startswith("rejected:")}
    return {"accepted": outcomes.get("accepted", 0), "devices_sent": devices, "rejected": rejected,
            "poison_sent": poison, "max_abs_error_over_stderr": round(worst, 3),
            "exact": outcomes.get("accepted", 0) == devices and sum(rejected.values()) == poison,
            "within_4_stderr": worst <= 4.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devices", type=int, default=1_000_000)
    parser.add_argument("--rate", type=float, default=25_000, help="reports per second")
    parser.add_argument("--faults", type=int, default=9)
    parser.add_argument("--kinds", default=",".join(FAULTS), help=f"faults to draw from (of {', '.join(FAULTS)})")
    parser.add_argument("--poison", type=int, default=300)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-seconds", type=float, default=900)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    kinds = [k for k in args.kinds.split(",") if k]
    if not kinds or set(kinds) - set(FAULTS):
        parser.error(f"--kinds: choose among {', '.join(FAULTS)}")
    started = time.monotonic()
    deadline = started + args.max_seconds
    state = Path(tempfile.mkdtemp(prefix="ldp-chaos-"))
    services = Services.start(state)
    pool: subprocess.Popen[bytes] | None = None
    run = Run()
    try:
        cfg = services.cfg
        spec = load_spec(PROJECT_ROOT / "examples" / "diagnostics.yaml").replace(name="chaos")
        publish_spec(spec, cfg.bootstrap)
        env = {**os.environ, **services.env, "LDP_HEALTH_STALL_S": "30"}
        log = open(state / "aggregate.log", "ab")  # noqa: SIM115 (the child keeps it)
        pool = subprocess.Popen([sys.executable, "-m", "ldpstream", "aggregate", "--workers", str(args.workers),
                                 "--group", "ldp-aggregator-chaos"], env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        stream_s = args.devices / args.rate
        result: list[Any] = []

        def send_fleet() -> None:
            try:
                producer = ReportProducer(cfg.bootstrap, extra=RETRYING_PRODUCER)
                result.append(simulate(spec, args.devices, producer, seed=args.seed, rate=args.rate))
            except Exception as exc:  # noqa: BLE001 - reported in the output
                run.errors.append(f"fleet: {exc!r}")

        sender = threading.Thread(target=send_fleet, daemon=True)
        sender.start()
        valid = sample_envelope(spec)
        poisoner = threading.Thread(target=send_poison, args=(spec, cfg, valid, args.poison, stream_s,
                                                              random.Random(args.seed + 1), run), daemon=True)
        poisoner.start()
        store = RedisStore(cfg.redis)
        t0 = time.monotonic()
        for _ in range(args.faults):  # one after the other, a few seconds of recovery between them
            time.sleep(rng.uniform(2.0, 6.0))
            fault = rng.choice(kinds)
            try:
                run.faults.append({"t_s": round(time.monotonic() - t0, 1),
                                   **fire(fault, services, pool, rng, lambda: store.offsets(spec.name))})
            except Exception as exc:  # noqa: BLE001 - a fault that could not be fired is reported
                run.errors.append(f"{fault}: {exc!r}")
        sender.join(max(1.0, deadline - time.monotonic()))
        poisoner.join(max(1.0, deadline - time.monotonic()))
        drained = wait_drained(store, spec, cfg, deadline)
        logged = (state / "aggregate.log").read_text(errors="replace")
        counts = verdict(store, spec, result[0].truth, args.devices, sum(run.poison.values())) if result else {}
        survived = {f: sum(1 for x in run.faults if x["fault"] == f and "skipped" not in x) for f in FAULTS}
        print(json.dumps({"devices": args.devices, "rate": args.rate, "workers": args.workers, "seed": args.seed,
                          "faults_survived": survived, "faults": run.faults, "poison": run.poison,
                          "regressions_detected": logged.count("the store went back in time"),
                          "worker_exits": logged.count(" exited with "), "drained": drained, **counts,
                          "errors": run.errors,
                          "seconds": round(time.monotonic() - started, 1), "state_dir": str(state)}))
    finally:
        if pool is not None and pool.poll() is None:
            stop_pid(pool.pid, timeout_s=60)
        services.stop()


def sample_envelope(spec: CollectionSpec) -> bytes:
    """One valid envelope of the collection (the poison is made from it)."""
    return encode(next(fleet(spec, 50, seed=2**30, chunk=50))[1])


if __name__ == "__main__":
    main()
