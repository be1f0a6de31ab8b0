"""A live stream of untrusted bytes: 20,000 mutated messages mixed into 100,000 valid devices' batched envelopes,
through real Kafka, a real worker process and real Redis. The worker never restarts, its lag drains, every valid
device is counted exactly once and every bad message is in ldp.dlq with a reason."""

from __future__ import annotations

import random
import time
from collections import Counter

import numpy as np
import pytest
from pipeline_support import Collection, dead_letters_of

from ldpstream.aggregator.processes import start_worker, stop_worker
from ldpstream.aggregator.processing import REASONS, PartitionProcessor
from ldpstream.contract.spec import CollectionSpec
from ldpstream.contract.wire import WireError, decode, encode
from ldpstream.device.perturb import single_reports
from ldpstream.runtime.dlq import Message
from ldpstream.runtime.kafka import end_offsets, producer_client
from ldpstream.simulator.simulator import chunk_messages, fleet
from tests.fuzzing import mutate

pytestmark = pytest.mark.integration

VALID_DEVICES = 100_000
BAD_MESSAGES = 20_000
BIG = 64 * 1024  # messages over this size are few (this machine's disk), and none over Kafka's limit
MAX_BIG = 20
MAX_BYTES = 950_000
JUDGE_AHEAD_MS = 10 * 60 * 1000  # a mutant must be rejected now and 10 minutes on (report times near the limits)


def valid_messages(spec: CollectionSpec, now: int) -> list[tuple[int, bytes]]:
    """The valid devices' reports as the simulator sends them: per chunk, one envelope per partition."""
    return [(partition, value) for index, (_, reports) in enumerate(fleet(spec, VALID_DEVICES, seed=1,
                                                                          clock_ms=lambda: now))
            for partition, _, value in chunk_messages(spec, reports, f"valid/{index}")]


def bad_messages(c: Collection, now: int, seed: int = 5) -> list[tuple[int, bytes]]:
    """`BAD_MESSAGES` mutations of other devices' single-device envelopes, each on a random partition, each rejected
    whole by the processor (a mutation that is still a valid report is drawn again); at most `MAX_BIG` over `BIG`,
    none over `MAX_BYTES`."""
    rng = random.Random(seed)
    bases = [encode(one) for _, reports in fleet(c.spec, BAD_MESSAGES, seed=7, clock_ms=lambda: now)
             for one in single_reports(reports)]
    plan = c.plan
    judges = [PartitionProcessor(lambda name, version, _: plan if (name, version) == (c.spec.name, c.spec.version)
                                 else None, lambda at=at: at) for at in (now, now + JUDGE_AHEAD_MS)]

    def rejected_whole(candidates: list[tuple[int, bytes]]) -> set[int]:
        """The indices of the candidates that every judge rejects whole (no row accepted)."""
        messages = [Message(i, value, partition=p) for i, (p, value) in enumerate(candidates)]
        whole = set(range(len(messages)))
        for processor in judges:
            rows: Counter[int] = Counter()
            for d in processor.process(c.spec.topic, messages).dead_letters:
                rows[d.offset] += _rows(d.value) if d.rows is None else len(d.rows)
            whole &= {m.offset for m in messages if rows[m.offset] >= _rows(m.value)}
        return whole

    big = 0
    out: list[tuple[int, bytes] | None] = [None] * BAD_MESSAGES
    pending = list(range(BAD_MESSAGES))
    while pending:
        drawn: list[tuple[int, bytes]] = []
        for i in pending:
            value = mutate(bases[i], rng)
            while len(value) > MAX_BYTES or (len(value) > BIG and big >= MAX_BIG):
                value = mutate(bases[i], rng)
            big += len(value) > BIG
            drawn.append((rng.randrange(c.spec.partitions), value))
        bad = rejected_whole(drawn)
        for j, i in enumerate(pending):
            if j in bad:
                out[i] = drawn[j]
            else:
                big -= len(drawn[j][1]) > BIG
        pending = [i for j, i in enumerate(pending) if j not in bad]
    return [m for m in out if m is not None]


def _rows(value: bytes) -> int:
    """The rows of a message as the processor counts them (1 for one it cannot decode)."""
    try:
        return len(decode(value))
    except WireError:
        return 1


def test_20k_mutated_messages_in_a_stream_of_100k_valid_devices(collection: Collection) -> None:
    c = collection
    now = int(time.time() * 1000)
    good = valid_messages(c.spec, now)
    bad = bad_messages(c, now)
    order = [(True, m) for m in good] + [(False, m) for m in bad]
    random.Random(11).shuffle(order)
    delivered: dict[int, tuple[int, int]] = {}  # index in `order` -> (partition, offset)
    failed: list[str] = []
    producer = producer_client(c.cfg.bootstrap, **{"linger.ms": 5, "batch.num.messages": 2000})
    for i, (_, (partition, value)) in enumerate(order):
        def on_delivery(err: object, msg: object, i: int = i) -> None:
            if err is not None:
                failed.append(str(err))
            else:
                delivered[i] = (msg.partition(), msg.offset())  # type: ignore[attr-defined]

        producer.produce(c.spec.topic, value, partition=partition, on_delivery=on_delivery)
        producer.poll(0)
    assert producer.flush(60) == 0 and not failed, failed[:3]
    expected_bad = {delivered[i] for i, (is_good, _) in enumerate(order) if not is_good}
    assert len(expected_bad) == BAD_MESSAGES
    ends = end_offsets(c.cfg.bootstrap, c.spec.topic, f"{c.group}-ends")
    worker = start_worker(c.group, log_file=c.cfg.state_dir / f"{c.group}.log")
    pid = worker.pid
    try:
        deadline = time.monotonic() + 120
        applied: dict[str, int] = {}
        while time.monotonic() < deadline and worker.poll() is None:
            applied = c.store.offsets(c.spec.name)
            if all(applied.get(f"{c.spec.topic}:{p}", -1) == end - 1 for p, end in ends.items()):
                break
            time.sleep(0.5)
        assert worker.poll() is None and worker.pid == pid, "the worker died on untrusted bytes"
        assert {p: applied.get(f"{c.spec.topic}:{p}", -1) + 1 for p in ends} == ends, "the lag did not drain"
    finally:
        stop_worker(worker)
    outcomes = c.store.outcomes(c.spec.name)
    assert outcomes.get("accepted") == VALID_DEVICES
    letters = dead_letters_of(c.cfg.bootstrap, c.spec.topic)
    assert set(letters) == expected_bad
    assert set(letters.values()) <= set(REASONS)
    assert sum(n for key, n in outcomes.items() if key.startswith("rejected:")) >= BAD_MESSAGES
    counted = np.unique(np.concatenate([decode(v).devices for good_one, (_, v) in order if good_one]))
    assert len(counted) == VALID_DEVICES  # the valid devices are distinct: accepted == 100k is each exactly once
