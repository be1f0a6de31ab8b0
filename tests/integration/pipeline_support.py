"""Pipeline test support: a published collection, a fleet sending in the background, a reference run, checks."""

from __future__ import annotations

import subprocess
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from ldpstream.aggregator.dedupe import SeenDevices
from ldpstream.aggregator.estimates import collection_estimates
from ldpstream.aggregator.plans import Plan
from ldpstream.aggregator.processes import start_worker, stop_worker
from ldpstream.aggregator.processing import Message, PartitionProcessor
from ldpstream.aggregator.store import MemoryStore, RedisStore, StatsStore
from ldpstream.contract.spec import CollectionSpec, load_spec
from ldpstream.contract.topics import DLQ_TOPIC
from ldpstream.mechanisms.numeric.base import NumericMechanism
from ldpstream.runtime.kafka import ReportProducer, consumer_client, delete_topic, topic_partitions
from ldpstream.runtime.settings import PROJECT_ROOT, Settings
from ldpstream.runtime.specs import publish_spec
from ldpstream.simulator.simulator import SimulationResult, simulate


@dataclass
class Collection:
    """A collection published for one test, with its store and helpers."""

    cfg: Settings
    spec: CollectionSpec
    store: RedisStore
    group: str

    @property
    def plan(self) -> Plan:
        return Plan.load(self.spec, self.cfg.bootstrap)

    def accepted(self) -> int:
        return self.store.outcomes(self.spec.name).get("accepted", 0)

    def wait_accepted(self, target: int, timeout_s: float, alive: Callable[[], bool] = lambda: True) -> int:
        """Poll until `target` reports are accepted (or time runs out); the count reached."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and alive():
            if (n := self.accepted()) >= target:
                return n
            time.sleep(0.1)
        return self.accepted()

    def estimates(self, store: StatsStore | None = None) -> dict[str, Any]:
        return collection_estimates(store or self.store, self.plan)

    def start_worker(self, log_file: Path | None = None, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        """A `python -m ldpstream.aggregator` worker of the collection's group, on the collection's Kafka and Redis
        (`env`:
        more of the worker's environment, e.g. LDP_MAX_CLOCK_SKEW_S)."""
        return start_worker(self.group, log_file=log_file,
                            env={"KAFKA_BOOTSTRAP": self.cfg.bootstrap, "REDIS_URL": self.cfg.redis, **(env or {})})


@contextmanager
def published_collection(cfg: Settings, example: str = "diagnostics.yaml") -> Iterator[Collection]:
    """The spec `examples/<example>` published under a unique name on `cfg`'s Kafka, its statistics in `cfg`'s Redis;
    its Redis keys and topic are removed afterwards (where the services are still there)."""
    spec = load_spec(PROJECT_ROOT / "examples" / example).replace(name=f"it-{uuid.uuid4().hex[:10]}")
    publish_spec(spec, cfg.bootstrap)
    c = Collection(cfg, spec, RedisStore(cfg.redis), f"ldp-aggregator-it-{spec.name}")
    try:
        yield c
    finally:
        with suppress(Exception):  # cleanup only: a fault test may have taken the services away
            RedisStore(cfg.redis, timeout_s=5.0).delete_collection(spec.name)
        with suppress(Exception):
            delete_topic(cfg.bootstrap, spec.topic)


@dataclass
class Fleet:
    """A simulated fleet sending in a background thread."""

    thread: threading.Thread
    result: list[SimulationResult] = field(default_factory=list)
    error: list[BaseException] = field(default_factory=list)

    def join(self, timeout_s: float = 300) -> SimulationResult:
        self.thread.join(timeout_s)
        if self.error:
            raise self.error[0]
        assert self.result, "the fleet did not finish in time"
        return self.result[0]


def send_in_background(c: Collection, devices: int, rate: float | None = None, seed: int = 0,
                       producer_config: dict[str, Any] | None = None) -> Fleet:
    """Start a fleet of `devices` (one report each) sending to the collection's topic."""
    fleet = Fleet(threading.Thread())

    def run() -> None:
        try:
            producer = ReportProducer(c.cfg.bootstrap, **(producer_config or {}))
            fleet.result.append(simulate(c.spec, devices, producer, seed=seed, rate=rate))
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            fleet.error.append(exc)

    fleet.thread = threading.Thread(target=run, daemon=True)
    fleet.thread.start()
    return fleet


@contextmanager
def running_worker(c: Collection) -> Iterator[subprocess.Popen[bytes]]:
    """A worker of the collection's group, stopped cleanly (SIGTERM) on leaving."""
    worker = c.start_worker()
    try:
        yield worker
    finally:
        stop_worker(worker)


def fleet_through(c: Collection, worker: subprocess.Popen[bytes], devices: int, seed: int,
                  timeout_s: float = 240) -> SimulationResult:
    """A fleet sent while `worker` aggregates; the fleet's result once every report is accepted."""
    result = send_in_background(c, devices, seed=seed).join()
    assert c.wait_accepted(devices, timeout_s, lambda: worker.poll() is None) == devices
    return result


def aggregate_fleet(c: Collection, devices: int, seed: int, timeout_s: float = 240) -> SimulationResult:
    """One worker aggregating a fleet sent meanwhile; the fleet's result once every report is accepted."""
    with running_worker(c) as worker:
        return fleet_through(c, worker, devices, seed, timeout_s)


def read_topic(bootstrap: str, topic: str, timeout_s: float = 60.0) -> Iterator[Any]:
    """Every message of a topic as it stands now (confluent-kafka Message objects), per partition in offset order."""
    consumer = consumer_client(bootstrap, f"it-read-{uuid.uuid4().hex[:6]}", **{"enable.partition.eof": True})
    try:
        parts = range(topic_partitions(bootstrap, topic))
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts}
        pending = {p for p, end in ends.items() if end > 0}
        consumer.assign([TopicPartition(topic, p, 0) for p in pending])
        deadline = time.monotonic() + timeout_s
        while pending and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    pending.discard(msg.partition())
                continue
            yield msg
            if msg.offset() >= ends[msg.partition()] - 1:
                pending.discard(msg.partition())
    finally:
        consumer.close()


def dead_letters_of(bootstrap: str, topic: str) -> dict[tuple[int, int], str]:
    """(source partition, source offset) -> reason of every dead letter of `topic` in ldp.dlq."""
    out: dict[tuple[int, int], str] = {}
    for msg in read_topic(bootstrap, DLQ_TOPIC):
        headers = {k: v.decode() for k, v in (msg.headers() or [])}
        if headers.get("source_topic") == topic:
            out[(int(headers["source_partition"]), int(headers["source_offset"]))] = headers["reason"]
    return out


def topic_messages(bootstrap: str, topic: str) -> dict[int, list[Message]]:
    """Every message of a topic, per partition in offset order, as the processor sees them."""
    out: dict[int, list[Message]] = defaultdict(list)
    for msg in read_topic(bootstrap, topic):
        out[msg.partition()].append(Message(msg.offset(), msg.value(), partition=msg.partition()))
    return out


def reference_run(c: Collection, chunk: int = 40) -> MemoryStore:
    """An uninterrupted in-process aggregation of every message in the collection's topic."""
    store = MemoryStore()
    processor = PartitionProcessor(lambda n, v, _: c.plan if (n, v) == (c.spec.name, c.spec.version) else None,
                                   lambda: int(time.time() * 1000))
    seen = SeenDevices(store)
    for _, messages in sorted(topic_messages(c.cfg.bootstrap, c.spec.topic).items()):
        for i in range(0, len(messages), chunk):
            result = processor.process(c.spec.topic, messages[i:i + chunk], seen)
            assert result.update is not None and store.apply(result.update).status == "applied"
            seen.commit(c.spec.topic, result.update, int(time.time() * 1000))
    return store


def assert_estimates_equal(a: dict[str, Any], b: dict[str, Any], rtol: float = 1e-9) -> None:
    """Two estimate documents agree (floating-point summation order aside)."""
    assert a["reports"] == b["reports"]
    for name, entry in a["attributes"].items():
        other = b["attributes"][name]
        if "mean" in entry:
            np.testing.assert_allclose(entry["mean"], other["mean"], rtol=rtol, err_msg=name)
            np.testing.assert_allclose(entry["stderr"], other["stderr"], rtol=rtol, err_msg=name)
        else:
            for v, e in entry["frequencies"].items():
                np.testing.assert_allclose(e["estimate"], other["frequencies"][v]["estimate"], rtol=rtol,
                                           atol=1e-12, err_msg=f"{name}={v}")


def assert_within_stderr(estimates: dict[str, Any], truth: dict[str, Any], z: float = 4.0) -> None:
    """Every estimate within z standard errors of the population's true value."""
    for name, entry in estimates["attributes"].items():
        true = truth["attributes"][name]
        if "mean" in entry:
            assert abs(entry["mean"] - true["mean"]) <= z * entry["stderr"], (name, entry, true)
        else:
            for v, e in entry["frequencies"].items():
                assert abs(e["estimate"] - true["frequencies"][v]) <= z * e["stderr"], (name, v, e, true)


def assert_statistics_equal(c: Collection, reference: StatsStore) -> None:
    """The collection's windows hold the reference's statistics, up to the order of floating-point summation.

    Both sum the same per-report terms x_i, in another order (other micro-batches; numpy's pairwise sums within one,
    Redis's HINCRBYFLOAT between them, whose long double result is kept to 17 significant digits, finer than a
    double). Any order of summing n terms is within gamma_n * sum |x_i| of the exact sum (gamma_n = n u / (1 - n u),
    u the unit roundoff; Higham, Accuracy and Stability of Numerical Algorithms, Sec. 4.2), so two orders differ by
    at most 2 gamma_n sum |x_i|, plus u |value| for reading each back as a double. sum |x_i| is the field itself
    where no term is negative (counts, sums of squares), and at most sqrt(count * sum of squares) for a numeric
    mechanism's sum of reports (Cauchy-Schwarz). Estimates are functions of these statistics alone.
    """
    u = np.finfo(np.float64).eps / 2
    name, plan = c.spec.name, c.plan
    assert c.store.windows(name) == reference.windows(name)
    for version, window, start in reference.windows(name):
        got = c.store.read_window(name, version, window, start, plan.sizes)
        want = reference.read_window(name, version, window, start, plan.sizes)
        assert got.devices == want.devices, (window, start)
        n = want.devices
        gamma = n * u / (1 - n * u)
        for j, mechanism in enumerate(plan.mechanisms):
            magnitude = np.abs(want.stats[j])  # block: [devices that sampled it, the mechanism's statistics]
            if isinstance(mechanism, NumericMechanism):  # [.., count, sum, sum of squares]
                magnitude[2] = np.sqrt(want.stats[j][1] * want.stats[j][3])
            bound = 2 * gamma * magnitude + u * (np.abs(got.stats[j]) + np.abs(want.stats[j]))
            difference = np.abs(got.stats[j] - want.stats[j])
            assert (difference <= bound).all(), (window, start, plan.spec.attributes[j].name, difference, bound)


class RefusingCommits:
    """A transactional producer whose commits fail (as when the broker refuses one)."""

    def __init__(self, producer: object) -> None:
        self.producer = producer

    def __getattr__(self, name: str) -> object:
        return getattr(self.producer, name)

    def commit_transaction(self, *_: object) -> None:
        raise KafkaException("commit refused (test)")
