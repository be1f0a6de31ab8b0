"""LDP SGD over the real Kafka and Redis: convergence, a killed coordinator, dead letters, and what the wire carries."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import cast

import msgspec
import numpy as np
import pytest
import yaml
from confluent_kafka import TopicPartition
from prometheus_client import REGISTRY
from typer.testing import CliRunner

from ldpstream.cli.commands import app
from ldpstream.contract.topics import DLQ_TOPIC, GRADIENTS_TOPIC, MODELS_TOPIC
from ldpstream.runtime.kafka import ReportProducer, consumer_client, read_to_end
from ldpstream.runtime.settings import Settings
from ldpstream.sgd.checkpoint import JobState, RedisCheckpoint, prefix
from ldpstream.sgd.coordinator import Coordinator, CoordinatorResult, ensure_sgd_topics, start_offsets
from ldpstream.sgd.devices import Fleet, Simulation, device_pseudonyms, perturb_gradients
from ldpstream.sgd.jobs import run_with_fleet
from ldpstream.sgd.training import Trainer, TrainingJob, gradient_mechanism
from ldpstream.sgd.wire import decode_gradients, decode_model, encode_gradients

pytestmark = pytest.mark.integration



@pytest.fixture
def checkpoint(live_services: Settings) -> Iterator[RedisCheckpoint]:
    store = RedisCheckpoint(live_services.redis)
    created: list[str] = []
    store.created = created  # type: ignore[attr-defined]
    yield store
    for job_id in created:
        store.delete(job_id)


def new_job(checkpoint: RedisCheckpoint, **fields: object) -> TrainingJob:
    job = TrainingJob(job_id=f"test-sgd-{uuid.uuid4().hex[:10]}", **fields)  # type: ignore[arg-type]
    checkpoint.created.append(job.job_id)  # type: ignore[attr-defined]
    return job


def wait_until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Poll `condition()` often (a version takes tens of milliseconds: a fault meant for version t must land
    there, not versions later) until it is true; AssertionError naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def models_of(bootstrap: str, job_id: str) -> list[tuple[int, np.ndarray, bool]]:
    """(t, params, done) of every version the job published, in order."""
    return [(m.t, m.params, m.done) for m in (decode_model(v) for k, v, _ in read_to_end(bootstrap, MODELS_TOPIC)
                                              if k == job_id.encode() and v)]


def gradients_of(bootstrap: str, job_id: str, since: dict[str, int]) -> list[bytes]:
    """Every gradient message of the job sent after `since` (applied offsets per partition at its creation), per
    partition in offset order."""
    consumer = consumer_client(bootstrap, "test-sgd-read")
    found: list[tuple[int, int, bytes]] = []
    try:
        ranges = {}
        for source, applied in since.items():
            partition = int(source.rsplit(":", 1)[1])
            end = consumer.get_watermark_offsets(TopicPartition(GRADIENTS_TOPIC, partition), timeout=10)[1]
            if end > applied + 1:
                ranges[partition] = (applied + 1, end)
        consumer.assign([TopicPartition(GRADIENTS_TOPIC, p, start) for p, (start, _) in ranges.items()])
        pending = set(ranges)  # every partition read at once: one by one, each waited for its first fetch
        while pending:
            msg = consumer.poll(5.0)
            assert msg is not None and msg.error() is None
            partition, offset = msg.partition(), msg.offset()
            if decode_gradients(msg.value()).job == job_id:  # type: ignore[arg-type]
                found.append((partition, offset, msg.value()))  # type: ignore[arg-type]
            if offset == ranges[partition][1] - 1:  # type: ignore[index]
                pending.discard(partition)  # type: ignore[arg-type]
    finally:
        consumer.close()
    return [value for _, _, value in sorted(found)]


def test_a_200k_device_logistic_job_converges_and_the_wire_carries_only_mechanism_output(
        live_services: Settings, checkpoint: RedisCheckpoint) -> None:
    # 100 versions of g = 2000: 200k accepted gradients; 5% more devices, for the fleet's top-up groups that a
    # slow round can turn into stale gradients on a busy machine
    job = new_job(checkpoint, model="logistic", dims=10, epsilon=2.0, mechanism="hm", batch_size=2000, gamma0=2.0,
                  expected_population=210_000, max_iterations=100)
    simulation = Simulation(devices=210_000, test_rows=20_000, seed=3)
    ensure_sgd_topics(live_services.bootstrap)
    since = start_offsets(live_services.bootstrap)
    run = run_with_fleet(job, simulation, live_services, checkpoint)
    state = run.result.state
    assert run.result.status == "done" and state.t == 100 and state.stop_reason == "max_iterations"
    trainer = state.trainer()
    held_out_loss = float(trainer.model.loss(trainer.beta, run.test.x, run.test.y).mean())
    # log 2 = 0.693 at beta = 0; non-private SGD with the same schedule reaches about 0.38, eps = 2 about 0.40
    assert held_out_loss < 0.45 and trainer.evaluate(run.test.x, run.test.y) < 0.2
    assert checkpoint.versions(job.job_id) == dict.fromkeys(range(100), 2000)
    assert checkpoint.outcomes(job.job_id)["accepted"] == 200_000 == len(checkpoint.participants(job.job_id))

    status = CliRunner().invoke(app, ["train", "status", job.job_id, "--json"])
    assert status.exit_code == 0, status.output
    shown = json.loads(status.output)
    assert shown["iteration"] == 100 and shown["accepted"] == 200_000 and shown["done"]
    assert shown["evaluation"]["loss"] == pytest.approx(held_out_loss)

    # Every message of the run holds only the mechanism's report columns, each row a possible output of HM
    # (one sampled attribute, a value within HM's range), never the device's clipped gradient itself.
    mechanism = gradient_mechanism(job)
    models = {t: params for t, params, _ in models_of(live_services.bootstrap, job.job_id)}
    row_of = {int(p): i for i, p in enumerate(device_pseudonyms(job.job_id, len(run.train.y)))}
    messages = gradients_of(live_services.bootstrap, job.job_id, since)
    assert sum(len(decode_gradients(m)) for m in messages) == run.fleet.sent >= 200_000  # type: ignore[union-attr]
    for message in messages:
        batch = decode_gradients(message)
        assert set(batch.columns) == {"index", "value"} and batch.columns["value"].dtype == np.float64
        reports = {"index": batch.columns["index"], "value": batch.columns["value"]}
        assert (mechanism.schema.violations(reports) == "").all()
        rows = np.array([row_of[int(d)] for d in batch.devices])
        clipped = Trainer(job, models[batch.model_version], batch.model_version).device_gradient(
            run.train.x[rows], run.train.y[rows])
        true_entry = clipped[np.arange(len(rows)), reports["index"]]
        assert not np.isin(reports["value"], [true_entry, true_entry * job.dims]).any()


def write_job_file(path: Path, job: TrainingJob, simulation: Simulation) -> Path:
    path.write_text(yaml.safe_dump({"job": job.model_dump(by_alias=True), "simulation": simulation.model_dump()}))
    return path


def test_a_killed_coordinator_resumes_at_its_version_and_no_device_takes_part_twice(
        live_services: Settings, checkpoint: RedisCheckpoint, tmp_path: Path) -> None:
    job = new_job(checkpoint, model="logistic", dims=5, epsilon=2.0, batch_size=500, gamma0=2.0,
                  max_iterations=40)
    simulation = Simulation(devices=30_000, test_rows=1000, seed=4)
    job_file = write_job_file(tmp_path / "job.yaml", job, simulation)
    ldp = [sys.executable, "-c", "from ldpstream.cli import main; main()", "train", "--job", str(job_file)]

    def coordinator() -> subprocess.Popen[bytes]:
        return subprocess.Popen(ldp + ["--json"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                env={**os.environ})

    train, _ = simulation.data(job)
    fleet = Fleet(job, train.x, train.y, live_services.bootstrap, seed=4, patience_s=0.3)
    stop = threading.Event()
    thread = threading.Thread(target=fleet.run, args=(stop,), daemon=True)
    ensure_sgd_topics(live_services.bootstrap)
    since = start_offsets(live_services.bootstrap)
    procs = [coordinator()]
    try:
        wait_until(lambda: checkpoint.load(job.job_id) is not None, 60, "the job's checkpoint")
        thread.start()
        wait_until(lambda: checkpoint.load(job.job_id).t >= 12, 60, "version 12")  # type: ignore[union-attr]
        procs[0].send_signal(signal.SIGKILL)
        procs[0].wait(10)
        killed_at = checkpoint.load(job.job_id)
        assert killed_at is not None and not killed_at.done
        time.sleep(1.0)  # the fleet tops version t up meanwhile: those gradients are surplus or stale later
        procs.append(coordinator())
        out, _ = procs[1].communicate(timeout=120)
    finally:
        stop.set()
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
        if thread.ident is not None:
            thread.join(30)
    assert procs[1].returncode == 0, out
    summary = json.loads(out)
    assert summary["iteration"] == 40 and summary["done"] and summary["stop_reason"] == "max_iterations"

    published = [t for t, _, _ in models_of(live_services.bootstrap, job.job_id)]
    assert published[0] == 0 and published[-1] == 40 and set(published) == set(range(41))
    assert all(b >= a for a, b in zip(published, published[1:], strict=False))  # never back to an older version
    assert published.count(killed_at.t) in (1, 2)  # re-published on restart (if it was before the kill)

    # Exactly g gradients per version, one per device over the whole job, and the counters agree; no replayed
    # batch reached the participants check (the offset guard skipped them all).
    participants = checkpoint.participants(job.job_id)
    outcomes = checkpoint.outcomes(job.job_id)
    assert checkpoint.versions(job.job_id) == dict.fromkeys(range(40), 500)
    assert len(participants) == 40 * 500 == outcomes["accepted"] and "rejected:duplicate" not in outcomes
    assert outcomes["dropped:stale"] > 0  # the fleet's top-ups while no coordinator ran: surplus for version t
    # ... and each device is counted for the version its gradient was computed at, as sent on the wire.
    sent_at = {int(d): batch.model_version for batch in map(decode_gradients, gradients_of(
        live_services.bootstrap, job.job_id, since)) for d in batch.devices}
    assert len(sent_at) == fleet.used and all(sent_at[d] == v for d, v in participants.items())


def job_keys(checkpoint: RedisCheckpoint, job_id: str) -> list[bytes]:
    """Every Redis key of a job."""
    pattern = prefix(job_id).replace("{", "[{]").replace("}", "[}]") + ":*"
    return list(checkpoint.redis.scan_iter(match=pattern, count=10_000))  # the shared Redis holds many keys


def snapshot(checkpoint: RedisCheckpoint, job_id: str) -> dict[bytes, bytes]:
    """Every key of the job, dumped in one transaction: the checkpoint as it is now."""
    keys = job_keys(checkpoint, job_id)
    with checkpoint.redis.pipeline(transaction=True) as pipe:
        for key in keys:
            pipe.dump(key)
        return dict(zip(keys, pipe.execute(), strict=True))


def restore(checkpoint: RedisCheckpoint, job_id: str, saved: dict[bytes, bytes]) -> None:
    """Put the job's keys back as they were in `saved`, in one transaction: the checkpoint goes back in time, as
    Redis restarted from an older append-only file or a failover to a lagging replica would leave it."""
    with checkpoint.redis.pipeline(transaction=True) as pipe:
        pipe.delete(*job_keys(checkpoint, job_id))
        for key, value in saved.items():
            pipe.restore(key, 0, value)
        pipe.execute()


def test_a_checkpoint_gone_back_in_time_is_noticed_and_every_device_still_counts_once(
        live_services: Settings, checkpoint: RedisCheckpoint, caplog: pytest.LogCaptureFixture) -> None:
    job = new_job(checkpoint, model="logistic", dims=5, epsilon=2.0, batch_size=500, gamma0=2.0,
                  max_iterations=30)
    train, _ = Simulation(devices=60_000, test_rows=1000, seed=6).data(job)
    bootstrap = live_services.bootstrap
    ensure_sgd_topics(bootstrap)
    since = start_offsets(bootstrap)
    coordinator = Coordinator(job, bootstrap, checkpoint)
    fleet = Fleet(job, train.x, train.y, bootstrap, seed=6, patience_s=0.3)
    stop = threading.Event()
    ended: list[object] = []
    saved: dict[bytes, bytes] = {}
    restored: list[int] = []

    def go_back_in_time(state: JobState, _evaluation: dict[str, float]) -> None:
        """Called by the coordinator after each version it publishes, between two of its micro-batches: the
        checkpoint as it was at version 5 is put back once version 12 is out. (A version takes milliseconds: from
        the test's thread, polling, the fault would land at no particular version, or after the job's end.)"""
        if state.t >= 5 and not saved:
            saved.update(snapshot(checkpoint, job.job_id))
        elif state.t >= 12 and not restored:
            restore(checkpoint, job.job_id, saved)
            restored.append(state.t)

    def coordinate() -> None:
        try:
            ended.append(coordinator.run(on_version=go_back_in_time, should_stop=stop.is_set))
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            ended.append(exc)

    threads = [threading.Thread(target=coordinate, daemon=True),
               threading.Thread(target=fleet.run, args=(stop,), daemon=True)]
    try:
        threads[0].start()
        wait_until(lambda: coordinator.state is not None, 60, "the coordinator's start")
        threads[1].start()
        wait_until(lambda: bool(ended), 180, "the job's end")
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
    (result,) = ended
    assert isinstance(result, CoordinatorResult), result
    assert result.status == "done" and result.state.t == 30 and restored
    assert "the checkpoint went back in time" in caplog.text
    published = [t for t, _, _ in models_of(bootstrap, job.job_id)]
    assert any(b < a for a, b in zip(published, published[1:], strict=False)), published  # the older one again

    # Exactly g gradients per version, each device at most once and counted for the version its gradient was
    # computed at, as sent on the wire.
    participants = checkpoint.participants(job.job_id)
    outcomes = checkpoint.outcomes(job.job_id)
    assert checkpoint.versions(job.job_id) == dict.fromkeys(range(30), 500)
    assert len(participants) == 30 * 500 == outcomes["accepted"] and "rejected:duplicate" not in outcomes
    sent_at = {int(d): batch.model_version for batch in map(decode_gradients, gradients_of(
        bootstrap, job.job_id, since)) for d in batch.devices}
    assert len(sent_at) == fleet.used and all(sent_at[d] == v for d, v in participants.items())


def test_bad_gradients_go_to_the_dead_letter_topic_with_their_reason_and_stale_ones_are_counted(
        live_services: Settings, checkpoint: RedisCheckpoint) -> None:
    job = new_job(checkpoint, model="logistic", dims=3, epsilon=1.0, batch_size=4, max_iterations=10)
    bootstrap = live_services.bootstrap
    ensure_sgd_topics(bootstrap)
    dlq_start = dlq_ends(bootstrap)
    coordinator = Coordinator(job, bootstrap, checkpoint)
    stop = threading.Event()
    thread = threading.Thread(target=coordinator.run, kwargs={"should_stop": stop.is_set}, daemon=True)
    thread.start()
    producer = ReportProducer(bootstrap, linger_ms=0)
    rng = np.random.default_rng(0)
    mechanism = gradient_mechanism(job)
    pseudonyms = device_pseudonyms(job.job_id, 100)

    def gradients(version: int, devices: list[int]) -> bytes:
        trainer = Trainer(job, np.zeros(3), version)
        x, y = rng.uniform(-1, 1, (len(devices), 3)), np.where(rng.random(len(devices)) < 0.5, 1.0, -1.0)
        return encode_gradients(perturb_gradients(trainer, mechanism, x, y, pseudonyms[devices], rng))

    def edited(message: bytes, edit: Callable[[list], None]) -> bytes:  # type: ignore[type-arg]
        envelope = msgspec.msgpack.decode(message)
        edit(envelope)
        return msgspec.msgpack.encode(envelope)

    try:
        wait_until(lambda: coordinator.state is not None, 60, "the coordinator's start")
        producer.produce(GRADIENTS_TOPIC, gradients(0, [0, 1, 2, 3]))
        producer.flush()
        wait_until(lambda: checkpoint.load(job.job_id).t == 1, 30, "version 1")  # type: ignore[union-attr]

        def out_of_range(e: list) -> None:  # type: ignore[type-arg]
            e[4][1][2] = (np.frombuffer(e[4][1][2], "<f8") * np.array([1.0, 1e6])).tobytes()

        bad = {
            "malformed": b"\x95\x01\xa3not a gradient",
            "out_of_range": edited(gradients(1, [4, 5]), out_of_range),
            "unknown_job": edited(gradients(1, [6]), lambda e: e.__setitem__(1, f"nope-{uuid.uuid4().hex}")),
            "wrong_shape": edited(gradients(1, [7]), lambda e: e.__setitem__(4, e[4][:1])),
            "future_version": gradients(7, [8]),
            "duplicate": gradients(1, [2]),
        }
        stale = gradients(0, [9, 10])
        for message in [*bad.values(), stale]:
            producer.produce(GRADIENTS_TOPIC, message)
        producer.flush()
        expected = {"accepted": 5, "dropped:stale": 2, "rejected:malformed": 1, "rejected:out_of_range": 1,
                    "rejected:unknown_job": 1, "rejected:wrong_shape": 1, "rejected:future_version": 1,
                    "rejected:duplicate": 1}
        wait_until(lambda: checkpoint.outcomes(job.job_id) == expected, 30, f"outcomes {expected}")
    finally:
        stop.set()
        thread.join(30)
    letters = dead_letters(bootstrap, dlq_start, set(bad.values()))
    assert {reason: value for value, reason, _ in letters} == bad
    rows = {reason: r for _, reason, r in letters}
    assert rows["out_of_range"] == "[1]" and rows["duplicate"] == "[0]" and rows["malformed"] is None
    state = checkpoint.load(job.job_id)
    assert state is not None and state.t == 1 and state.count == 1  # device 4 of the out-of-range message
    sample = REGISTRY.get_sample_value
    assert sample("ldp_sgd_iteration", {"job": job.job_id}) == 1
    assert sample("ldp_sgd_gradients_total", {"job": job.job_id, "outcome": "rejected", "reason": "malformed"}) == 1
    assert sample("ldp_sgd_gradients_total", {"job": job.job_id, "outcome": "dropped", "reason": "stale"}) == 2


def dlq_ends(bootstrap: str) -> dict[int, int]:
    consumer = consumer_client(bootstrap, "test-sgd-dlq")
    try:
        md = consumer.list_topics(DLQ_TOPIC, timeout=10).topics[DLQ_TOPIC]
        return {p: consumer.get_watermark_offsets(TopicPartition(DLQ_TOPIC, p), timeout=10)[1]
                for p in md.partitions}
    finally:
        consumer.close()


def dead_letters(bootstrap: str, start: dict[int, int], values: set[bytes]) -> list[tuple[bytes, str, str | None]]:
    """(value, reason, rows header) of the dead letters since `start` whose value is one of `values`."""
    ends = dlq_ends(bootstrap)
    consumer = consumer_client(bootstrap, "test-sgd-dlq")
    out = []
    try:
        consumer.assign([TopicPartition(DLQ_TOPIC, p, start.get(p, 0)) for p in ends if ends[p] > start.get(p, 0)])
        pending = {p for p in ends if ends[p] > start.get(p, 0)}
        while pending:
            msg = consumer.poll(5.0)
            assert msg is not None and msg.error() is None
            partition, offset = msg.partition() or 0, msg.offset() or 0
            if offset >= ends[partition] - 1:
                pending.discard(partition)
            headers = {k: v.decode() for k, v in cast(list[tuple[str, bytes]], msg.headers() or [])}
            if msg.value() in values:
                assert headers["source_topic"] == GRADIENTS_TOPIC
                out.append((msg.value(), headers["reason"], headers.get("rows")))
    finally:
        consumer.close()
    return out  # type: ignore[return-value]


def test_ldp_train_devices_runs_a_fleet_for_a_coordinator_elsewhere(
        live_services: Settings, checkpoint: RedisCheckpoint, tmp_path: Path) -> None:
    job = new_job(checkpoint, model="svm", dims=4, epsilon=4.0, mechanism="pm", batch_size=300, max_iterations=6)
    job_file = write_job_file(tmp_path / "job.yaml", job, Simulation(devices=5000, test_rows=500, seed=2))
    coordinator = Coordinator(job, live_services.bootstrap, checkpoint)
    thread = threading.Thread(target=coordinator.run, daemon=True)
    thread.start()
    wait_until(lambda: coordinator.state is not None, 60, "the coordinator's start")
    shown = CliRunner().invoke(app, ["train", "devices", "--job", str(job_file), "--timeout-s", "120"])
    thread.join(60)
    assert shown.exit_code == 0, shown.output
    sent = re.search(r"([\d,]+) devices sent their gradient", shown.output)
    assert sent and int(sent.group(1).replace(",", "")) >= 6 * 300 and "last version 6 (final)" in shown.output
    state = checkpoint.load(job.job_id)
    assert state is not None and state.done and state.t == 6 and not thread.is_alive()
