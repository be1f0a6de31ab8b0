"""End-to-end pipeline throughput and freshness (devices -> Kafka -> faust aggregator -> Redis) next to the raw
ceiling of this machine, all measured in one run against the running services (`ldp up`).

For each message size (batched envelopes of `--batch` reports, and one report per message), on a fresh collection:
1. raw ceiling: the pre-encoded messages are produced with the device producer's settings (confluent-kafka,
   idempotent, acks=all, lz4, linger 10 ms) into the empty report topic, timed to the last acknowledgement; the
   same messages are then read back by a bare confluent-kafka consumer (no processing) and by the do-nothing
   faust agent (`benchmarks/faust_probe.py`, which only counts messages into Redis);
2. for 1 and 2 aggregator worker processes (`python -m ldpstream.aggregator`, a fresh consumer group each):
   a. `preloaded`: the topic holds a new fleet's messages (one fleet per worker) before the workers start: the
      consumer side alone;
   b. `concurrent`: a new fleet is produced as fast as possible while the workers consume: end to end, with the
      producer on the same machine;
   c. `freshness`: a new fleet is produced at each of `--load-fractions` (default 0.1 and 0.5) of the maximum
      load, for `--freshness-seconds` each. The maximum is the lower of the preloaded rate and the concurrent
      phase's end-to-end rate (its reports over the time from the first send to the last report applied): what
      the machine sustains with the producer on it. The concurrent phase's consumer-side slope is reported too,
      but it is not sustainable (it includes catching up on what the producer queued ahead).
Every fleet has its own seed, so its devices are new and none is a duplicate; every phase checks that the store's
accepted count grows by exactly the fleet's reports and that nothing was rejected.

Rates. A poller samples the store every `--poll-ms` (the accepted count and every partition's applied offset,
through `RedisStore`); a phase's rate is the slope of the accepted count from its last sample below 10% of the
phase's reports to its first at or above 90%, using only samples taken once the consumer group is Stable with all
its members (with 2+ workers). That leaves out the workers' start-up, the group's rebalance and the uneven tail of
the last partitions. The probe's message rate follows the same rule on its Redis counter; the bare consumer's is
its messages over the time from its first fetch to its last message. Each phase notes the 1-minute load average
at its end: the machine is shared, and the rates scale with the CPU left to the run.

Freshness. Each message's send time is taken just before `produce`, and its partition and offset come from its delivery
report. The store records the last applied offset of every partition atomically with the statistics
(`ldpstream.aggregator.store`), so a message is visible from the first sample at which its partition's applied offset
has reached its offset. Its freshness is that sample's time (taken when the reply arrives: an upper bound, coarse by at
most one poll period) minus its send time; p50/p99 are over reports (a message weighs its reports). This is exact per
message: no order between partitions is assumed and stragglers count fully.

Targets, per worker process: >= 500k reports/s with batched envelopes, and within 10% of the 2.0M reports/s
(preloaded, one worker) measured before store writes were bounded; single-report messages at >= 80% of the
do-nothing faust agent's message rate; p99 freshness of batched envelopes <= 0.5 s at half and <= 0.25 s at 10% of
the maximum load.

Isolation. Each collection is published to a specs topic of its own (`ldp.collections.bench-<run>-<size>`) instead of
the shared `ldp.collections`, and the worker processes (`python -m ldpstream.aggregator` with `LDP_SPECS_TOPIC` set to
it) read that one: a worker follows every collection of its specs topic, so with the shared one other sessions' data
would mix into the measurement, and other sessions' workers would consume (and count) this run's topics. Everything the
run makes is removed at the end: the specs and report topics, the Redis keys (UNLINK: the dedupe lists are large), the
consumer groups, faust's assignor topics and state directories.

Run: .venv/bin/python benchmarks/bench_pipeline.py [--batched-reports 4000000] [--single-reports 25000] [--batch 1000]
Prints one JSON object; its `summary` holds the ratios the targets name.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import redis
from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, Message, Producer, TopicPartition

from ldpstream.aggregator.store import RedisStore
from ldpstream.aggregator.worker import DEFAULT_MAX_BATCH_BYTES, DEFAULT_MAX_MESSAGES
from ldpstream.contract.spec import CollectionSpec, load_spec, report_topic
from ldpstream.contract.topics import SPECS_TOPIC
from ldpstream.contract.wire import decode
from ldpstream.runtime.kafka import TopicError, admin_client, consumer_client, delete_topic, producer_client
from ldpstream.runtime.process import ServiceError, stop_pid
from ldpstream.runtime.redis import redis_client
from ldpstream.runtime.settings import Settings
from ldpstream.runtime.specs import publish_spec
from ldpstream.simulator.simulator import chunk_messages, fleet

# the device producer's settings (ldpstream.runtime.kafka.ReportProducer)
PRODUCER_CONFIG = {"enable.idempotence": True, "acks": "all", "linger.ms": 10, "batch.size": 1_000_000,
                   "compression.type": "lz4", "queue.buffering.max.messages": 1_000_000}
GROUP_CHECK_S = 0.5
SEND_SLICE_S = 0.005
STOP_TIMEOUT_S = 20.0


class BenchError(RuntimeError):
    """A phase could not run (a worker died, a service did not answer); the message says which and why."""


@contextmanager
def specs_topic(topic: str) -> Iterator[None]:
    """Publish and read collection specs on `topic` instead of `ldp.collections` (this run's private registry):
    `LDP_SPECS_TOPIC`, for this process and the workers it starts meanwhile."""
    shared = os.environ.get("LDP_SPECS_TOPIC")
    os.environ["LDP_SPECS_TOPIC"] = topic
    try:
        yield
    finally:
        if shared is None:
            del os.environ["LDP_SPECS_TOPIC"]
        else:
            os.environ["LDP_SPECS_TOPIC"] = shared


# ---------------------------------------------------------------------------------------------------------------
# fleets
@dataclass(frozen=True)
class Fleet:
    """Pre-encoded Kafka messages of one simulated fleet: partitions, keys, values and the reports in each."""

    partitions: list[int]
    keys: list[bytes]
    values: list[bytes]
    reports: np.ndarray

    @property
    def total(self) -> int:
        return int(self.reports.sum())

    @property
    def bytes_per_message(self) -> float:
        return sum(map(len, self.values)) / len(self.values)


def encode_fleet(spec: CollectionSpec, devices: int, seed: int, batch: int, single: bool) -> Fleet:
    """The messages `ldpstream.simulator.simulator.simulate` would send for this fleet (same partitions and keys),
    encoded
    ahead of time: envelopes of about `batch` reports, or one report each."""
    partitions, keys, values, reports = [], [], [], []
    for index, (_, perturbed) in enumerate(fleet(spec, devices, seed=seed, chunk=batch * spec.partitions)):
        for partition, key, value in chunk_messages(spec, perturbed, f"{spec.key}/{seed}/{index}", single):
            partitions.append(partition)
            keys.append(key)
            values.append(value)
            reports.append(1 if single else len(decode(value)))
    return Fleet(partitions, keys, values, np.asarray(reports, dtype=np.int64))


# ---------------------------------------------------------------------------------------------------------------
# sending
class Sending:
    """A fleet being produced, as fast as possible or at `rate` reports/s; per message its send time, partition
    and offset (-1 until its delivery report)."""

    def __init__(self, producer: Producer, topic: str, messages: Fleet, rate: float | None = None) -> None:
        self.producer, self.topic, self.fleet, self.rate = producer, topic, messages, rate
        n = len(messages.values)
        self.sent_at = np.full(n, np.nan)
        self.partition = np.full(n, -1, dtype=np.int64)
        self.offset = np.full(n, -1, dtype=np.int64)
        self.reports_before = np.concatenate([[0], np.cumsum(messages.reports)[:-1]])
        self.next = 0
        self.started: float | None = None
        self.errors: list[str] = []

    @property
    def done(self) -> bool:
        return self.next == len(self.fleet.values)

    @property
    def delivered(self) -> int:
        return int((self.offset >= 0).sum())

    def _on_delivery(self, index: int, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self.errors.append(str(err))
            return
        self.partition[index], self.offset[index] = msg.partition() or 0, msg.offset() or 0

    def next_due(self) -> float:
        """perf_counter time at which the next message is due (-inf: at once; inf: none left)."""
        if self.done:
            return float("inf")
        if self.rate is None or self.started is None:
            return -float("inf")
        return self.started + self.reports_before[self.next] / self.rate

    def send_due(self, budget_s: float = SEND_SLICE_S) -> None:
        """Produce the messages that are due, for at most `budget_s`."""
        now = time.perf_counter()
        if self.started is None:
            self.started = now
        stop = now + budget_s
        while not self.done and now < stop and self.next_due() <= now:
            i = self.next
            self.sent_at[i] = now
            while True:
                try:
                    self.producer.produce(self.topic, self.fleet.values[i], self.fleet.keys[i],
                                          self.fleet.partitions[i], on_delivery=functools.partial(self._on_delivery, i))
                    break
                except BufferError:
                    self.producer.poll(0.01)
            self.next += 1
            now = time.perf_counter()
        self.producer.poll(0)

    def finish(self, timeout_s: float) -> float:
        """Wait for every delivery report; the perf_counter time when the last arrived. BenchError on failures."""
        remaining = self.producer.flush(timeout_s)
        if remaining or self.errors or self.delivered != len(self.fleet.values):
            raise BenchError(f"{remaining} message(s) still queued, {len(self.errors)} failed: {self.errors[:3]}")
        return time.perf_counter()


def producer_for(bootstrap: str) -> Producer:
    return producer_client(bootstrap, **PRODUCER_CONFIG)


def produce_timed(bootstrap: str, topic: str, messages: Fleet, timeout_s: float) -> dict[str, float]:
    """Produce a whole fleet as fast as possible with nothing else running; its rate to the last acknowledgement."""
    sending = Sending(producer_for(bootstrap), topic, messages)
    start = time.perf_counter()
    deadline = start + timeout_s
    while not sending.done and time.perf_counter() < deadline:
        sending.send_due(budget_s=0.05)
    seconds = sending.finish(max(1.0, deadline - time.perf_counter())) - start
    return {"messages_per_s": len(messages.values) / seconds, "reports_per_s": messages.total / seconds}


# ---------------------------------------------------------------------------------------------------------------
# observing
class Counter(Protocol):
    def sample(self) -> tuple[int, np.ndarray | None]:
        """The count now, and the applied offset of every partition (-1: none yet) when the counter knows them."""


class StoreCounter:
    """Accepted reports and applied offsets of one collection, read through `RedisStore`."""

    def __init__(self, store: RedisStore, collection: str, partitions: int) -> None:
        self.store, self.collection, self.partitions = store, collection, partitions
        self.topic = report_topic(collection)

    def sample(self) -> tuple[int, np.ndarray | None]:
        # the count first: the offsets read after it cover at least every counted report (one atomic write each)
        accepted = self.store.outcomes(self.collection).get("accepted", 0)
        offsets = np.full(self.partitions, -1, dtype=np.int64)
        for source, offset in self.store.offsets(self.collection).items():
            topic, _, partition = source.rpartition(":")
            if topic == self.topic:
                offsets[int(partition)] = offset
        return accepted, offsets

    def rejected(self) -> dict[str, int]:
        return {k: v for k, v in self.store.outcomes(self.collection).items() if k != "accepted"}


class KeyCounter:
    """An integer Redis key (the probe's message count)."""

    def __init__(self, client: redis.Redis, key: str) -> None:
        self.client, self.key = client, key

    def sample(self) -> tuple[int, np.ndarray | None]:
        return int(self.client.get(self.key) or 0), None


@dataclass
class Trace:
    """Samples of a counter during one phase, and when its consumer group was first Stable with all members."""

    started: float = 0.0
    times: list[float] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)
    offsets: list[np.ndarray] = field(default_factory=list)
    stable_at: float | None = None
    timed_out: bool = False
    sample_errors: int = 0  # samples Redis did not answer

    def rate(self, start: int, total: int) -> float | None:
        """Slope of the count from its last sample below 10% of `total` to its first at or above 90% (only samples
        taken once the group was Stable count); None if the count did not get that far."""
        t, c = np.asarray(self.times), np.asarray(self.counts) - start
        ok = np.flatnonzero(t >= (self.stable_at if self.stable_at is not None else np.inf))
        if not len(ok):
            return None
        below, above = ok[c[ok] < 0.1 * total], ok[c[ok] >= 0.9 * total]
        i = below[-1] if len(below) else ok[0]
        if not len(above) or above[0] <= i:
            return None
        j = above[0]
        return float((c[j] - c[i]) / (t[j] - t[i]))

    def reached(self, target: int) -> float | None:
        """Time of the first sample at which the count reached `target`."""
        hit = np.flatnonzero(np.asarray(self.counts) >= target)
        return self.times[hit[0]] if len(hit) else None


class Observer:
    """Drives a phase: sends what is due, samples the counter every `poll_s`, watches the workers and the group."""

    def __init__(self, cfg: Settings, poll_s: float) -> None:
        self.admin = admin_client(cfg.bootstrap)
        self.poll_s = poll_s

    def run(self, counter: Counter, target: int, timeout_s: float, *, sending: Sending | None = None,
            processes: Sequence[subprocess.Popen[bytes]] = (), group: str = "", members: int = 1) -> Trace:
        """Until the count reaches `target` and everything is sent, or `timeout_s` passes (trace.timed_out)."""
        start = time.perf_counter()
        trace = Trace(started=start, stable_at=None if members > 1 else -np.inf)  # one member: no rebalance
        deadline, next_sample, next_group = start + timeout_s, start, start
        while True:
            now = time.perf_counter()
            if now >= deadline:
                trace.timed_out = True
                break
            if sending is not None and not sending.done:
                sending.send_due()
            if now >= next_sample:
                next_sample = now + self.poll_s
                try:
                    count, offsets = counter.sample()
                except redis.RedisError:  # Redis restarting (another session's test): the phase notes it
                    trace.sample_errors += 1
                    continue
                trace.times.append(time.perf_counter())
                trace.counts.append(count)
                if offsets is not None:
                    trace.offsets.append(offsets)
                if count >= target and (sending is None or sending.done):
                    break
            if trace.stable_at is None and now >= next_group:
                if self.group_stable(group, members):
                    trace.stable_at = time.perf_counter()
                next_group = now + GROUP_CHECK_S
            for p in processes:
                if p.poll() is not None:
                    raise BenchError(f"worker process {p.pid} exited with {p.returncode}")
            if sending is not None:
                sending.producer.poll(0)
            wake = min(next_sample, sending.next_due() if sending is not None else np.inf)
            time.sleep(max(0.0, min(wake - time.perf_counter(), self.poll_s)))
        return trace

    def group_stable(self, group: str, members: int) -> bool:
        try:
            desc = self.admin.describe_consumer_groups([group], request_timeout=5)[group].result()
        except KafkaException:
            return False
        return desc.state.name == "STABLE" and len(desc.members) == members


def freshness(sending: Sending, trace: Trace, dump: Path | None = None) -> dict[str, Any]:
    """p50/p99 (and max) seconds from each message's send to the first sample showing it applied, over reports
    (each message's send time, visibility time and reports saved to `dump`, an .npz, when given)."""
    if not trace.offsets:
        raise BenchError("no offsets were sampled")
    times, applied = np.asarray(trace.times), np.vstack(trace.offsets)
    seen_at = np.full(len(sending.offset), np.inf)
    for p in np.unique(sending.partition):
        mine = np.flatnonzero(sending.partition == p)
        # applied offsets only grow: the first sample at or past each message's offset
        j = np.searchsorted(np.maximum.accumulate(applied[:, p]), sending.offset[mine], side="left")
        seen = j < len(times)
        seen_at[mine[seen]] = times[j[seen]]
    latency = seen_at - sending.sent_at
    if dump is not None:
        np.savez(dump, sent=sending.sent_at, seen=seen_at, reports=sending.fleet.reports, partition=sending.partition)
    visible = np.isfinite(latency)
    out: dict[str, Any] = {"messages": len(latency), "not_visible": int((~visible).sum())}
    if visible.any():
        p50, p99 = weighted_quantiles(latency[visible], sending.fleet.reports[visible], [0.5, 0.99])
        out.update(p50_s=round(p50, 4), p99_s=round(p99, 4), max_s=round(float(latency[visible].max()), 4))
        # where the tail is: the seconds into the phase at which messages slower than p99 were sent (to 0.1 s)
        slow = visible & (latency > p99)
        out["slow_sent_at_s"] = sorted({round(float(t), 1) for t in sending.sent_at[slow] - np.nanmin(sending.sent_at)})
    return out


def weighted_quantiles(values: np.ndarray, weights: np.ndarray, qs: list[float]) -> list[float]:
    """The q-quantiles of values repeated `weights` times (the smallest value whose cumulative weight reaches q)."""
    order = np.argsort(values)
    cum = np.cumsum(weights[order]) / weights.sum()
    at = np.minimum(np.searchsorted(cum, qs, side="left"), len(values) - 1)
    return [float(v) for v in values[order][at]]


# ---------------------------------------------------------------------------------------------------------------
# processes
class Run:
    """One benchmark run: its services, unique names, and everything to remove at the end."""

    def __init__(self, cfg: Settings, args: argparse.Namespace) -> None:
        self.cfg, self.args = cfg, args
        self.id = uuid.uuid4().hex[:8]
        self.redis = redis_client(cfg.redis)
        self.store = RedisStore(cfg.redis)
        self.observer = Observer(cfg, args.poll_ms / 1000)
        self.logs = args.logs or Path(tempfile.mkdtemp(prefix=f"bench-pipeline-{self.id}-"))
        self.logs.mkdir(parents=True, exist_ok=True)
        self.seed = int.from_bytes(os.urandom(3), "little") * 64  # fleets' seeds: new devices every run
        self.topics: list[str] = []
        self.collections: list[str] = []
        self.groups: list[str] = []
        self.keys: list[str] = []

    def next_seed(self) -> int:
        self.seed += 1
        return self.seed

    def start(self, name: str, argv: list[str], group: str) -> subprocess.Popen[bytes]:
        self.groups.append(group)
        log = (self.logs / f"{name}.log").open("wb")
        return subprocess.Popen([sys.executable, *argv], stdout=subprocess.DEVNULL, stderr=log,
                                start_new_session=True)

    def workers(self, specs: str, group: str, n: int) -> list[subprocess.Popen[bytes]]:
        argv = ["-m", "ldpstream.aggregator", "--group", group, "--max-messages", str(self.args.max_messages),
                "--max-batch-bytes", str(self.args.max_batch_bytes), "--loglevel", self.args.worker_loglevel]
        with specs_topic(specs):
            return [self.start(f"{group}-{i}", argv, group) for i in range(n)]

    def worker_group(self, single: bool, workers: int) -> str:
        return f"ldp-aggregator-bench-{self.id}-{'single' if single else 'batched'}-w{workers}"

    def stop(self, processes: list[subprocess.Popen[bytes]]) -> None:
        for p in processes:
            try:
                stop_pid(p.pid, timeout_s=STOP_TIMEOUT_S)
            except ServiceError as exc:
                print(f"warning: {exc}", file=sys.stderr)

    def log_tail(self, group: str, lines: int = 20) -> str:
        """The last lines of the logs of a group's processes."""
        return "\n".join(f"{log.name}: " + "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
                         for log in sorted(self.logs.glob(f"{group}-*.log")) if log.stat().st_size)

    def cleanup(self) -> list[str]:
        """Remove everything the run made; what could not be removed, as warnings (the run's result still prints)."""
        warnings: list[str] = []
        admin = admin_client(self.cfg.bootstrap)
        for group in self.groups:
            try:
                admin.delete_consumer_groups([group], request_timeout=10)[group].result()
            except KafkaException:
                pass  # never formed, or already gone
            shutil.rmtree(self.cfg.state_dir / "faust" / group, ignore_errors=True)
        assignors = [f"{g}-__assignor-__leader" for g in self.groups]
        existing = admin.list_topics(timeout=30).topics
        for topic in [*self.topics, *assignors]:
            if topic in existing:
                try:
                    delete_topic(self.cfg.bootstrap, topic)
                except TopicError as exc:
                    if topic in admin.list_topics(timeout=30).topics:  # else it went meanwhile
                        warnings.append(str(exc))
        try:
            for collection in self.collections:
                self.store.delete_collection(collection)
            if self.keys:
                self.redis.unlink(*self.keys)
        except redis.RedisError as exc:
            warnings.append(f"redis keys of {self.collections} not removed: {exc}")
        if self.args.logs is None:
            shutil.rmtree(self.logs, ignore_errors=True)
        return warnings


def raw_consume(run: Run, topic: str, partitions: int, messages: int, timeout_s: float) -> dict[str, float]:
    """A bare confluent-kafka consumer reading `messages` from the start of the topic, no processing: its rate from
    the arrival of its first fetch to its last message (the connection and the first fetch's wait left out)."""
    consumer = consumer_client(run.cfg.bootstrap, f"bench-raw-{run.id}", **{"fetch.max.bytes": 64 * 1024 * 1024})
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        count = steady = size = 0
        first_at = 0.0
        per_call = max(1, min(500, messages // 20))  # the first call's messages are left out of the rate
        deadline = time.perf_counter() + timeout_s
        while count < messages and time.perf_counter() < deadline:
            batch = [m for m in consumer.consume(num_messages=per_call, timeout=0.5) if m.error() is None]
            if batch and not count:
                first_at = time.perf_counter()
            elif batch:
                steady += len(batch)
                size += sum(len(m.value() or b"") for m in batch)
            count += len(batch)
        seconds = time.perf_counter() - first_at
    finally:
        consumer.close()
    if count < messages or not steady:
        raise BenchError(f"the bare consumer read {count} of {messages} messages in {timeout_s:g} s")
    return {"messages_per_s": steady / seconds, "megabytes_per_s": size / seconds / 1e6}


def topic_size(bootstrap: str, topic: str, partitions: int) -> int:
    """The number of messages in a topic (the sum of its partitions' end offsets; nothing is ever deleted here)."""
    consumer = consumer_client(bootstrap, f"bench-size-{uuid.uuid4().hex[:8]}")
    try:
        return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions))
    finally:
        consumer.close()


def probe_rate(run: Run, topic: str, messages: int, processes: int = 1) -> dict[str, Any]:
    """The do-nothing faust agent (`faust_probe.py`) in `processes` processes of one group counting the topic's
    first `messages` messages into Redis: messages/s in all (with 2+, once the group is Stable)."""
    group = f"bench-probe-{run.id}-{topic.rsplit('-', 1)[-1]}-p{processes}"
    key = f"ldp:bench:probe:{run.id}:{topic}:p{processes}"
    run.keys.append(key)
    argv = [str(Path(__file__).with_name("faust_probe.py")), "--topic", topic, "--redis-key", key, "--group", group]
    probes = [run.start(f"{group}-{i}", argv, group) for i in range(processes)]
    try:
        trace = run.observer.run(KeyCounter(run.redis, key), messages, run.args.phase_timeout, processes=probes,
                                 group=group, members=processes)
    finally:
        run.stop(probes)
    return {"processes": processes, "messages_per_s": _round(trace.rate(0, messages)), "counted": trace.counts[-1],
            "timed_out": trace.timed_out, "load_average_1m": round(os.getloadavg()[0], 2)}


# ---------------------------------------------------------------------------------------------------------------
# phases
def consume_phase(run: Run, counter: StoreCounter, base: int, messages: Fleet, processes: list[subprocess.Popen[bytes]],
                  group: str, members: int, sending: Sending | None = None) -> tuple[dict[str, Any], Trace]:
    """Wait until the workers have applied `messages` (sending them meanwhile if `sending`); rates and checks."""
    trace = run.observer.run(counter, base + messages.total, run.args.phase_timeout, sending=sending,
                             processes=processes, group=group, members=members)
    accepted = trace.counts[-1] - base
    out: dict[str, Any] = {"reports": messages.total, "messages": len(messages.values), "accepted": accepted,
                           "reports_per_s": _round(trace.rate(base, messages.total)),
                           "timed_out": trace.timed_out, "load_average_1m": round(os.getloadavg()[0], 2)}
    if members > 1:  # a rate needs samples after the group is Stable: when it was, and how far the count had got
        stable_at = trace.stable_at
        out["group_stable_after_s"] = None if stable_at is None else round(stable_at - trace.started, 2)
        out["accepted_when_stable"] = None if stable_at is None else next(
            (c - base for t, c in zip(trace.times, trace.counts, strict=True) if t >= stable_at), None)
    if trace.sample_errors:
        out["redis_unanswered_samples"] = trace.sample_errors
    if sending is not None and sending.started is not None:
        done = trace.reached(base + messages.total)
        out["end_to_end_reports_per_s"] = _round(messages.total / (done - sending.started) if done else None)
    if accepted != messages.total:
        out["error"] = f"accepted {accepted} of {messages.total} reports"
    return out, trace


def worker_phases(run: Run, spec: CollectionSpec, specs: str, counter: StoreCounter, single: bool, devices: int,
                  workers: int, preloaded: Fleet | None) -> dict[str, Any]:
    """Preloaded, concurrent and rate-limited phases with `workers` worker processes in a fresh group.

    `preloaded`: a fleet already in the topic and not yet applied (else a new one is produced first).
    """
    args = run.args
    group = run.worker_group(single, workers)
    out: dict[str, Any] = {"workers": workers}
    base, _ = counter.sample()
    fleet_ = preloaded
    if fleet_ is None:  # more workers drain faster: a fleet per worker keeps the drain long after the group formed
        fleet_ = encode_fleet(spec, devices * workers, run.next_seed(), args.batch, single)
        produce_timed(run.cfg.bootstrap, spec.topic, fleet_, args.phase_timeout)
    processes = run.workers(specs, group, workers)
    # One producer for the sending phases, long-lived as a gateway's is: a new one's first messages wait for its
    # connection and idempotent producer id (up to 0.5 s here), which would count as the pipeline's freshness.
    producer = producer_for(run.cfg.bootstrap)
    try:
        out["preloaded"], _ = consume_phase(run, counter, base, fleet_, processes, group, workers)
        base += fleet_.total
        fleet_ = encode_fleet(spec, devices, run.next_seed(), args.batch, single)
        sending = Sending(producer, spec.topic, fleet_)
        out["concurrent"], _ = consume_phase(run, counter, base, fleet_, processes, group, workers, sending)
        sending.finish(args.phase_timeout)
        base += fleet_.total
        rates = [r for r in (out["preloaded"]["reports_per_s"], out["concurrent"].get("end_to_end_reports_per_s"))
                 if r]
        if not rates:
            out["freshness"] = [{"error": "no maximum rate was measured"}]
            return out
        out["freshness"] = []
        for fraction in args.load_fractions:
            rate = fraction * min(rates)
            reports = max(1, int(rate * args.freshness_seconds))
            fleet_ = encode_fleet(spec, reports, run.next_seed(), min(args.batch, reports), single)
            sending = Sending(producer, spec.topic, fleet_, rate=rate)
            phase, trace = consume_phase(run, counter, base, fleet_, processes, group, workers, sending)
            sending.finish(args.phase_timeout)
            base += fleet_.total
            dump = run.args.logs / f"{group}-freshness-{fraction}.npz" if run.args.logs else None
            phase.update(offered_reports_per_s=round(rate), load_fraction=fraction, **freshness(sending, trace, dump))
            out["freshness"].append(phase)
    finally:
        run.stop(processes)
    return out


def measure_size(run: Run, base_spec: CollectionSpec, single: bool) -> dict[str, Any]:
    """Raw ceiling and worker phases for one message size, on a collection of its own."""
    args = run.args
    label = "single" if single else "batched"
    devices = args.single_reports if single else args.batched_reports
    spec = base_spec.replace(name=f"bench-pipeline-{run.id}-{label}")
    specs = f"{SPECS_TOPIC}.bench-{run.id}-{label}"
    run.collections.append(spec.name)
    run.topics += [specs, spec.topic]
    with specs_topic(specs):
        publish_spec(spec, run.cfg.bootstrap)
    counter = StoreCounter(run.store, spec.name, spec.partitions)
    preloaded = encode_fleet(spec, devices, run.next_seed(), args.batch, single)
    out: dict[str, Any] = {"reports_per_message": 1 if single else args.batch,
                           "bytes_per_message": round(preloaded.bytes_per_message, 1)}
    produced = produce_timed(run.cfg.bootstrap, spec.topic, preloaded, args.phase_timeout)
    messages = len(preloaded.values)
    out["raw"] = {"messages": messages,
                  "produce": _rounded(produced),
                  "consume": _rounded(raw_consume(run, spec.topic, spec.partitions, messages, args.phase_timeout)),
                  "faust_do_nothing": probe_rate(run, spec.topic, messages)}
    rounds = []
    for i, workers in enumerate(args.workers):
        try:
            rounds.append(worker_phases(run, spec, specs, counter, single, devices, workers,
                                        preloaded if i == 0 else None))
        except (BenchError, KafkaException, redis.RedisError) as exc:
            log = run.log_tail(run.worker_group(single, workers))
            rounds.append({"workers": workers, "error": f"{type(exc).__name__}: {exc}", "log": log})
    out["aggregator"] = rounds
    # the do-nothing agent in as many processes as the workers, over everything the topic holds by now (the
    # group's start-up leaves out the first messages, so the whole topic keeps enough after it is Stable)
    total = topic_size(run.cfg.bootstrap, spec.topic, spec.partitions)
    out["raw"]["faust_do_nothing_processes"] = [probe_rate(run, spec.topic, total, n) for n in args.workers if n > 1]
    out["rejected"] = counter.rejected()
    return out


def summary(result: dict[str, Any]) -> dict[str, Any]:
    """The ratios the issue's targets name, per worker count, from the preloaded and the concurrent phases."""
    batched, single = (result.get(k) if "error" not in result.get(k, {}) else None for k in ("batched", "single"))
    out: dict[str, Any] = {}
    if batched:
        out["batched_reports_per_s_per_worker"] = per_worker(batched, 1.0)
        out["batched_target_reports_per_s_per_worker"] = 500_000
    if single and single["raw"]["faust_do_nothing"]["messages_per_s"]:
        probes = {p["processes"]: p["messages_per_s"]
                  for p in [single["raw"]["faust_do_nothing"], *single["raw"].get("faust_do_nothing_processes", [])]}
        out["single_rate_over_do_nothing_faust_in_as_many_processes"] = {
            f"w{r['workers']}": {phase: round(r[phase]["reports_per_s"] / probes[r["workers"]], 3)
                                 for phase in ("preloaded", "concurrent") if r.get(phase, {}).get("reports_per_s")}
            for r in single["aggregator"] if "error" not in r and probes.get(r["workers"])}
        out["single_rate_per_worker_over_one_do_nothing_faust_process"] = per_worker(
            single, single["raw"]["faust_do_nothing"]["messages_per_s"])
        out["single_target_fraction"] = 0.8
    for fraction, label, target in ((0.5, "half", 0.5), (0.1, "tenth", 0.25)):
        out[f"p99_freshness_s_at_{label}_load"] = {
            f"{size}_w{r['workers']}": f.get("p99_s") for size, res in (("batched", batched), ("single", single))
            if res for r in res["aggregator"] for f in r.get("freshness", []) if f.get("load_fraction") == fraction}
        out[f"p99_freshness_target_s_at_{label}_load"] = target  # batched envelopes
    return out


def per_worker(size: dict[str, Any], unit: float) -> dict[str, dict[str, float]]:
    """{"w<n>": {phase: reports/s per worker / unit}} for the preloaded and concurrent phases that measured a rate
    (the concurrent phase's consumer-side slope, and its end-to-end rate)."""
    digits = 3 if unit != 1.0 else None
    rates = (("preloaded", "preloaded", "reports_per_s"), ("concurrent", "concurrent", "reports_per_s"),
             ("concurrent_end_to_end", "concurrent", "end_to_end_reports_per_s"))
    return {f"w{r['workers']}": {label: round(r[phase][key] / r["workers"] / unit, digits)
                                 for label, phase, key in rates if r.get(phase, {}).get(key)}
            for r in size["aggregator"] if "error" not in r}


def _round(x: float | None) -> int | None:
    return None if x is None else round(x)


def _rounded(d: dict[str, float]) -> dict[str, float]:
    return {k: round(v, 1) for k, v in d.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spec", type=Path, default=Path("examples/diagnostics.yaml"))
    parser.add_argument("--batched-reports", type=int, default=4_000_000, help="reports per batched fleet")
    parser.add_argument("--single-reports", type=int, default=25_000, help="reports (= messages) per single fleet")
    parser.add_argument("--batch", type=int, default=1000,
                        help="reports per batched envelope (the target is stated for >= 500)")
    parser.add_argument("--workers", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2])
    parser.add_argument("--max-messages", type=int, default=DEFAULT_MAX_MESSAGES, help="the workers' micro-batch size")
    parser.add_argument("--max-batch-bytes", type=int, default=DEFAULT_MAX_BATCH_BYTES,
                        help="the workers' bound on the message bytes of one store write")
    parser.add_argument("--load-fractions", type=lambda v: [float(x) for x in v.split(",")], default=[0.1, 0.5],
                        help="freshness phases at these fractions of the measured maximum (e.g. 0.1,0.5)")
    parser.add_argument("--freshness-seconds", type=float, default=8.0)
    parser.add_argument("--poll-ms", type=float, default=10.0)
    parser.add_argument("--phase-timeout", type=float, default=90.0, help="seconds any one phase may take")
    parser.add_argument("--sizes", default="batched,single", help="which message sizes to run")
    parser.add_argument("--logs", type=Path, default=None, help="keep the worker processes' logs in this directory")
    parser.add_argument("--worker-loglevel", default="warn", help="the workers' --loglevel")
    args = parser.parse_args()
    cfg = Settings.from_env()
    run = Run(cfg, args)
    base_spec = load_spec(args.spec)
    started = time.perf_counter()
    result: dict[str, Any] = {"spec": base_spec.key, "run": run.id, "cpus": os.cpu_count(),
                              "load_average_before": os.getloadavg()}
    try:
        for size in args.sizes.split(","):
            try:
                result[size] = measure_size(run, base_spec, single=(size == "single"))
            except (BenchError, KafkaException, redis.RedisError) as exc:
                result[size] = {"error": f"{type(exc).__name__}: {exc}"}
    finally:
        result["cleanup_warnings"] = run.cleanup()
    result["load_average_after"] = os.getloadavg()
    result["seconds"] = round(time.perf_counter() - started, 1)
    result["summary"] = summary(result)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
