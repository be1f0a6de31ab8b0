"""The device fleet simulator: N devices with a known population, perturbed in vectorised chunks, into Kafka.

Each chunk of B x P devices (P: the spec's partitions) (1) draws the devices' true records
(`ldpstream.simulator.population`, 000 Sec. VI) and adds them to the exact truth, (2) perturbs them in one vectorised
call (`ldpstream.device.perturb`) and (3) sends each device's report to its own partition
(`ldpstream.contract.pseudonym.device_partitions`): per partition one envelope of about B reports keyed by a batch id
(halved until each envelope fits in MAX_MESSAGE_BYTES), or with `single` one-report envelopes keyed by the device
pseudonym. Device i of a run has the integer id seed * 2^32 + i, so pseudonyms are unique within a run and across runs
with different seeds; report times come from `clock_ms`. A run reports once per device, so it needs no ledger. Runs with
the same seed are the same devices with the same true records: run them with `report_round` 0, 1, 2, ... and later times
(one per window) and the fleet reports every window, with fresh noise per round. For a spec with a privacy block each
device has a stable collection secret, `simulated_secrets` (derived from the seed and its index, vectorised), so its
memos are the same in every round, as a real device's are (`ldpstream.device.ledger`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from ldpstream.contract.clock import now_ms
from ldpstream.contract.collector import Strategies
from ldpstream.contract.pseudonym import device_partitions, integer_pseudonyms
from ldpstream.contract.spec import CollectionSpec
from ldpstream.contract.wire import PerturbedBatch, encode
from ldpstream.device.perturb import by_partition, perturb, row_range, single_reports
from ldpstream.mechanisms.longitudinal.memo import TAG_SIMULATED, keyed_words
from ldpstream.runtime.kafka import ReportProducer
from ldpstream.runtime.strategies import strategies_for
from ldpstream.simulator.population import Population, PopulationTruth, Records

MAX_DEVICES = 2**32
MAX_MESSAGE_BYTES = 1_000_000  # under Kafka's default message.max.bytes (1 MiB with the record overhead)
CHUNKS_PER_SECOND = 10  # with a rate limit, chunks shrink so that sending stays smooth


@dataclass(frozen=True)
class SimulationResult:
    """What a run sent: the exact truth, reports and messages acknowledged by Kafka, bytes, and the wall time."""

    truth: dict[str, object]
    reports: int
    messages: int
    bytes: int
    seconds: float

    @property
    def reports_per_s(self) -> float:
        return self.reports / self.seconds if self.seconds > 0 else float("inf")


def simulated_secrets(seed: int, first: int, n: int) -> np.ndarray:
    """The collection secrets (uint64) of devices first..first+n-1 of the run with `seed`: stable across runs."""
    return keyed_words(np.uint64(seed), TAG_SIMULATED, np.arange(first, first + n, dtype=np.uint64))


def fleet(spec: CollectionSpec, devices: int, *, seed: int = 0, chunk: int = 1000,
          clock_ms: Callable[[], int] = now_ms, strategies: Strategies | None = None,
          devices_of: Callable[[int, int], np.ndarray] | None = None,
          report_round: int = 0) -> Iterator[tuple[Records, PerturbedBatch]]:
    """The fleet's chunks, in order: the true records of up to `chunk` devices and their perturbed reports
    (`strategies`: those the spec pins; loaded with `ldpstream.runtime.strategies.strategies_for` when None;
    `devices_of(lo, n)`: the pseudonyms of devices lo..lo+n-1, default those of the run's integer ids;
    `report_round`: which of the fleet's rounds of reports, for fresh noise on the same records)."""
    if not 1 <= devices <= MAX_DEVICES or not 1 <= chunk <= MAX_DEVICES:
        raise ValueError(f"devices and the chunk size must lie in [1, 2^32], got {devices} and {chunk}")
    if not 0 <= seed < 2**31:
        raise ValueError(f"seed must lie in [0, 2^31), got {seed}")
    if not 0 <= report_round < 2**31:
        raise ValueError(f"report_round must lie in [0, 2^31), got {report_round}")
    population = Population(spec, seed)
    noise_seed = [seed, 2] if report_round == 0 else [seed, 2, report_round]  # round 0: the runs of before
    population_rng, noise_rng = np.random.default_rng([seed, 1]), np.random.default_rng(noise_seed)
    first_id = seed * MAX_DEVICES
    strategies = strategies_for(spec) if strategies is None else strategies
    for lo in range(0, devices, chunk):
        n = min(chunk, devices - lo)
        records = population.sample(n, population_rng)
        ids = (integer_pseudonyms(spec.name, np.arange(first_id + lo, first_id + lo + n, dtype=np.uint64))
               if devices_of is None else devices_of(lo, n))
        secrets = None if spec.privacy is None else simulated_secrets(seed, lo, n)
        yield records, perturb(spec, ids, np.full(n, clock_ms(), dtype=np.int64), records, noise_rng, strategies,
                               secrets)


def encode_within(batch: PerturbedBatch, limit: int) -> list[bytes]:
    """The batch encoded as one envelope, or as halves (recursively) while an envelope exceeds `limit` bytes."""
    message = encode(batch)
    if len(message) <= limit or len(batch) == 1:
        return [message]
    mid = len(batch) // 2
    return encode_within(row_range(batch, 0, mid), limit) + encode_within(row_range(batch, mid, len(batch)), limit)


def chunk_messages(spec: CollectionSpec, reports: PerturbedBatch, key_prefix: str,
                   single: bool = False) -> Iterator[tuple[int, bytes, bytes]]:
    """The Kafka messages (partition, key, value) of a chunk's reports, each on its devices' partition: an envelope
    per partition (keyed `key_prefix/partition/part`), or with `single` one per device (keyed by its pseudonym)."""
    if single:
        owners = device_partitions(reports.devices, spec.partitions).tolist()
        for owner, one in zip(owners, single_reports(reports), strict=True):
            yield owner, one.devices.astype("<u8", copy=False).tobytes(), encode(one)  # key = pseudonym_key
        return
    for owner, mine in by_partition(reports, spec.partitions):
        for part, message in enumerate(encode_within(mine, MAX_MESSAGE_BYTES)):
            yield owner, f"{key_prefix}/{owner}/{part}".encode(), message


def simulate(spec: CollectionSpec, devices: int, producer: ReportProducer, *, seed: int = 0, batch: int = 1000,
             rate: float | None = None, single: bool = False, clock_ms: Callable[[], int] = now_ms,
             on_progress: Callable[[int], None] | None = None, topic: str | None = None,
             report_round: int = 0) -> SimulationResult:
    """Send one report for each of `devices` simulated devices to `topic` (default: the spec's report topic).

    `batch`: reports per envelope (about); `rate` caps reports per second; `on_progress(k)` is told after each
    chunk that k more reports were queued; `report_round`: as in `fleet`.
    Returns once Kafka has acknowledged every message (DeliveryError otherwise).
    """
    if rate is not None and not rate > 0:
        raise ValueError(f"rate must be > 0 reports/s, got {rate}")
    chunk = batch * spec.partitions
    chunk = chunk if rate is None else max(1, min(chunk, int(rate / CHUNKS_PER_SECOND)))
    topic = topic or spec.topic
    truth = PopulationTruth(spec)
    sent = messages = size = 0
    start = time.perf_counter()
    for index, (records, reports) in enumerate(fleet(spec, devices, seed=seed, chunk=chunk, clock_ms=clock_ms,
                                                       report_round=report_round)):
        truth.add(records)
        for partition, key, message in chunk_messages(spec, reports, f"{spec.key}/{seed}/{index}", single):
            producer.produce(topic, message, key, partition)
            size += len(message)
            messages += 1
        sent += len(reports)
        if on_progress is not None:
            on_progress(len(reports))
        if rate is not None:
            ahead = sent / rate - (time.perf_counter() - start)
            if ahead > 0:
                time.sleep(ahead)
    producer.flush(timeout_s=60.0)
    return SimulationResult(truth.to_dict(), devices, messages, size, time.perf_counter() - start)
