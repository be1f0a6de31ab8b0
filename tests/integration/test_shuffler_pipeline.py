"""Devices -> edge -> ldp.raw.* -> shuffler -> ldp.reports.* -> aggregator -> Redis, with the real services: counts
exact through a SIGKILL of the shuffler mid-window, through an aborted transaction and through one a crash left
open; estimates within 4 standard errors; nothing on the shuffled topic that links a report to its device."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from confluent_kafka import KafkaException
from edge_support import free_port, running_edge
from pipeline_support import Collection, RefusingCommits, assert_within_stderr, read_topic
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from ldpstream.aggregator.processes import start_worker, stop_worker
from ldpstream.aggregator.store import RedisStore
from ldpstream.contract.shuffled import DUE_FIELD, decode_figures, figures_key
from ldpstream.contract.spec import Shuffle, load_spec
from ldpstream.contract.wire import concatenate, decode_envelope, encode, encode_envelope
from ldpstream.edge.devices import DeviceRegistry, edge_keys
from ldpstream.edge.keyring import Keyring
from ldpstream.runtime.catalog import service
from ldpstream.runtime.kafka import ReportProducer, delete_topic
from ldpstream.runtime.redis import redis_client
from ldpstream.runtime.settings import PROJECT_ROOT, Settings
from ldpstream.runtime.specs import publish_spec
from ldpstream.runtime.supervisor import start
from ldpstream.shuffler.service import Shuffler, ShufflerConfig
from ldpstream.simulator.edge_client import send_fleet
from ldpstream.simulator.simulator import fleet

pytestmark = pytest.mark.integration
WINDOW_MS = 10_000


@contextmanager
def shuffled_collection(cfg: Settings, min_batch: int) -> Iterator[Collection]:
    """examples/shuffled.yaml under a unique name with 10 s windows and 60 s of grace (the fleet's reports are made at
    once, then sent: 3,000 requests take 10-40 s through the edge, by the machine's load), published; removed
    afterwards."""
    spec = load_spec(PROJECT_ROOT / "examples" / "shuffled.yaml")
    spec = spec.replace(
        name=f"it-{uuid.uuid4().hex[:10]}", windows=["10s"],
        shuffle=Shuffle(delta=1e-6, min_batch=min_batch, grace_s=60))
    publish_spec(spec, cfg.bootstrap)
    c = Collection(cfg, spec, RedisStore(cfg.redis), f"ldp-aggregator-it-{spec.name}")
    try:
        yield c
    finally:
        with suppress(Exception):
            RedisStore(cfg.redis, timeout_s=5.0).delete_collection(spec.name)
            redis_client(cfg.redis).delete(figures_key(spec.name))
        for topic in (spec.topic, spec.raw_topic):
            with suppress(Exception):
                delete_topic(cfg.bootstrap, topic)


def start_shuffler(log: Path, *args: str) -> subprocess.Popen[bytes]:
    """`ldp shuffle` as the catalog runs it, dying with the test."""
    return start(service("shuffler"), "--margin-s", "2", *args, log_file=log)


def scrape(port: int, collection: str) -> dict[str, float]:
    """The shuffler's /metrics samples of `collection`, by series name."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {sample.name: sample.value for family in text_string_to_metric_families(text)
            for sample in family.samples if sample.labels.get("collection") == collection}


def shuffled_rows(c: Collection) -> tuple[int, list[str]]:
    """The rows a read_committed reader finds on the collection's report topic, and what links any to a device."""
    rows, problems = 0, []
    for msg in read_topic(c.cfg.bootstrap, c.spec.topic):
        env = decode_envelope(msg.value())
        times = np.frombuffer(env.timestamps, dtype="<i8")
        rows += len(times)
        if msg.key() is not None or msg.headers():
            problems.append(f"key {msg.key()!r} or headers {msg.headers()!r}")
        if np.frombuffer(env.devices, dtype="<u8").any():
            problems.append("a device pseudonym")
        if (times % WINDOW_MS).any() or len(set(times.tolist())) != 1 or msg.timestamp()[1] != times[0]:
            problems.append(f"times {sorted(set(times.tolist()))[:3]}, message time {msg.timestamp()}")
    return rows, problems


def test_shuffled_collection_through_the_edge_exact_under_a_sigkill_mid_window(
        live_services: Settings, tmp_path: Path) -> None:
    devices = 3000
    with shuffled_collection(live_services, min_batch=200) as c:
        client = redis_client(live_services.redis)
        credentials = list(DeviceRegistry(client, Keyring.create(live_services.edge_key)).enroll(c.spec.name, devices))
        edge_run = running_edge(tmp_path)
        edge = next(edge_run)
        worker = start_worker(c.group)
        shuffler = start_shuffler(tmp_path / "shuffler-1.log")
        try:
            sent: list = []
            sender = threading.Thread(target=lambda: sent.append(
                send_fleet(c.spec, credentials, edge.url, seed=5, concurrency=16)), daemon=True)
            sender.start()
            time.sleep(2.0)  # some reports held in the open window
            shuffler.send_signal(signal.SIGKILL)
            shuffler.wait(10)
            metrics_port = free_port()
            scraped_from = time.time()
            shuffler = start_shuffler(tmp_path / "shuffler-2.log", "--metrics-port", str(metrics_port))
            sender.join(120)
            result, answers = sent[0]
            assert answers.statuses == {200: devices}, answers
            # the last window closes 10 s + 60 s + 2 s after it began; then the release, then the aggregator
            assert c.wait_accepted(devices, 150, lambda: worker.poll() is None) == devices, (
                (tmp_path / "shuffler-2.log").read_text()[-3000:])
            time.sleep(2.0)
            assert c.accepted() == devices
            rows, problems = shuffled_rows(c)
            assert rows == devices and problems == []
            figures = [decode_figures(v) for k, v in client.hgetall(figures_key(c.spec.name)).items()
                       if k not in (DUE_FIELD, DUE_FIELD.encode())]  # the hash also holds the next due close
            assert sum(f.reports for f in figures if f) == devices
            assert all(f is not None and f.epsilon < f.epsilon0 and f.reports >= 200 for f in figures)
            shown = c.estimates()["shuffle"]  # as `ldp estimate --json` and the read API show it
            assert sum(b["reports"] for b in shown["batches"]) == devices and shown["max_batch_epsilon"] < 4
            # its /metrics (the catalog's Prometheus job scrapes it): the first shuffler released nothing (killed
            # before any window closed), so the second read and released every report, in the batches published
            deadline = time.monotonic() + 10
            while (seen := scrape(metrics_port, c.spec.name)).get("ldp_shuffler_raw_lag_messages") != 0:
                assert time.monotonic() < deadline, seen
                time.sleep(0.5)
            assert seen["ldp_shuffler_released_reports_total"] == devices == seen["ldp_shuffler_read_reports_total"]
            assert seen["ldp_shuffler_released_batches_total"] == len(figures)
            assert seen["ldp_shuffler_held_reports"] == 0 == seen["ldp_shuffler_skipped_messages_total"]
            assert scraped_from <= seen["ldp_shuffler_last_release_timestamp_seconds"] <= time.time()
            assert 0 <= seen["ldp_shuffler_release_duration_seconds"] < 90
        finally:
            shuffler.send_signal(signal.SIGTERM)
            with suppress(subprocess.TimeoutExpired):
                shuffler.wait(20)
            shuffler.kill()
            stop_worker(worker)
            edge_run.close()
            keys = list(client.scan_iter(edge_keys(c.spec.name), count=10_000))
            if keys:
                client.delete(*keys)
        assert_within_stderr(c.estimates(), result.truth)


def produce_raw(c: Collection, devices: int, seed: int, window_ms: int) -> None:
    """What the edge would write for `devices` devices of the fleet `seed` in the window `window_ms`: anonymous."""
    producer = ReportProducer(c.cfg.bootstrap)
    for _, batch in fleet(c.spec, devices, seed=seed, chunk=250):
        env = decode_envelope(encode(batch))
        n = len(env.devices) // 8
        raw = env.__class__(env.version, env.collection, env.spec_version, bytes(8 * n),
                            np.full(n, window_ms, dtype="<i8").tobytes(), env.attributes)
        producer.produce(c.spec.raw_topic, encode_envelope(raw), partition=seed % c.spec.partitions)
    producer.flush()


def test_an_aborted_and_an_abandoned_transaction_release_nothing_twice(live_services: Settings,
                                                                         tmp_path: Path) -> None:
    """In process: a commit that fails aborts (nothing visible; the next shuffler releases the window once); a
    shuffler that dies inside its transaction (never committed nor aborted) is fenced by the next, which aborts it
    and releases those reports once."""
    with shuffled_collection(live_services, min_batch=100) as c:
        now = int(time.time() * 1000)
        cfg = ShufflerConfig(live_services.bootstrap, live_services.redis,
                             transactional_id=f"ldp-shuffler-it-{c.spec.name}",
                             group=f"ldp-shuffler-it-{c.spec.name}", margin_s=0)
        produce_raw(c, 500, seed=1, window_ms=now - now % WINDOW_MS)
        failing = Shuffler(cfg, clock=lambda: now + 86_400_000)
        failing.catch_up(failing.collections[c.spec.name])

        failing.producer = RefusingCommits(failing.producer)  # type: ignore[assignment]
        with pytest.raises(KafkaException):
            failing.tick()
        failing.close()
        assert shuffled_rows(c)[0] == 0

        def counted(name: str) -> float:  # this process's metric of the collection, as /metrics shows it
            return REGISTRY.get_sample_value(name, {"collection": c.spec.name}) or 0.0

        assert counted("ldp_shuffler_released_reports_total") == 0 == counted("ldp_shuffler_released_batches_total")
        first = Shuffler(cfg, clock=lambda: now + 86_400_000)
        assert [o.reports for o in first.tick()] == [500]
        first.close()
        assert shuffled_rows(c) == (500, [])
        assert counted("ldp_shuffler_released_reports_total") == 500  # the aborted release counted nothing
        assert counted("ldp_shuffler_released_batches_total") == 1
        assert counted("ldp_shuffler_read_reports_total") == 1000  # read by both: the first's were never released

        produce_raw(c, 300, seed=2, window_ms=now - now % WINDOW_MS + WINDOW_MS)
        abandoned = Shuffler(cfg, clock=lambda: now + 2 * 86_400_000)
        held = abandoned.collections[c.spec.name]
        abandoned.catch_up(held)
        abandoned.producer.begin_transaction()
        window = held.pending.held(c.spec.version, now + 2 * 86_400_000)
        abandoned._produce(c.spec, window[-1], held.pending.take(c.spec.version, window))
        abandoned.producer.flush(10)  # written, in a transaction never ended: as a SIGKILL leaves it
        last = Shuffler(cfg, clock=lambda: now + 2 * 86_400_000)  # fences the abandoned one, aborting its writes
        assert [o.reports for o in last.tick()] == [300]
        last.close()
        rows, problems = shuffled_rows(c)
        assert (rows, problems) == (800, [])
        joined = concatenate([decode_envelope(m.value()) for m in read_topic(c.cfg.bootstrap, c.spec.topic)])
        assert len(joined.devices) == 800


def test_a_collection_published_while_rows_are_held_does_not_hold_them_twice(live_services: Settings) -> None:
    """A shuffler holding a window's rows takes up a newly published shuffled collection (a new raw topic, a new
    assignment): the rows it held are not read again from their committed offset, so the window is released once
    with exactly its reports (make test once saw `ldp demo` release 1,200 of 600, its eps-16 copy published
    mid-window)."""
    with shuffled_collection(live_services, min_batch=100) as first:
        now = int(time.time() * 1000)
        cfg = ShufflerConfig(live_services.bootstrap, live_services.redis,
                             transactional_id=f"ldp-shuffler-it-{first.spec.name}",
                             group=f"ldp-shuffler-it-{first.spec.name}", margin_s=0)
        produce_raw(first, 400, seed=1, window_ms=now - now % WINDOW_MS)
        shuffler = Shuffler(cfg, clock=lambda: now + 86_400_000)
        try:
            shuffler.catch_up(shuffler.collections[first.spec.name])  # held in memory, nothing committed yet
            with shuffled_collection(live_services, min_batch=100) as second:
                produce_raw(second, 200, seed=2, window_ms=now - now % WINDOW_MS)
                shuffler.follow_specs()
                assert second.spec.name in shuffler.collections  # taken up: every partition assigned again
                for name in (first.spec.name, second.spec.name):
                    shuffler.catch_up(shuffler.collections[name])
                released = {o.collection: o.reports for o in shuffler.tick()}
                assert released[first.spec.name] == 400 and released[second.spec.name] == 200
                assert shuffled_rows(first) == (400, []) and shuffled_rows(second) == (200, [])
        finally:
            shuffler.close()


def test_a_version_published_after_the_shuffler_looked_is_held_not_skipped(live_services: Settings) -> None:
    """Raw reports of a version published after the shuffler last read the specs (well within its 10 s between
    looks) are held and released, not skipped as of no published version."""
    with shuffled_collection(live_services, min_batch=100) as c:
        now = int(time.time() * 1000)
        cfg = ShufflerConfig(live_services.bootstrap, live_services.redis,
                             transactional_id=f"ldp-shuffler-it-{c.spec.name}",
                             group=f"ldp-shuffler-it-{c.spec.name}", margin_s=0)
        shuffler = Shuffler(cfg, clock=lambda: now + 86_400_000)
        try:
            second = replace(c, spec=c.spec.replace(version=2))
            publish_spec(second.spec, live_services.bootstrap)
            produce_raw(second, 300, seed=3, window_ms=now - now % WINDOW_MS)
            shuffler.catch_up(shuffler.collections[c.spec.name])
            assert [(o.spec_version, o.reports) for o in shuffler.tick()] == [(2, 300)]
        finally:
            shuffler.close()


def test_the_shuffled_example_runs_in_the_demo(live_services: Settings) -> None:
    """`ldp demo --spec examples/shuffled.yaml`: joined devices, the edge, the shuffler, the aggregator, the API."""
    out = subprocess.run([sys.executable, "-m", "ldpstream", "demo", "--spec", "examples/shuffled.yaml", "--devices",
                          "600", "--train-devices", "0", "--json"], capture_output=True, text=True, timeout=300,
                         cwd=PROJECT_ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout)
    batches = result["estimates"]["shuffle"]["batches"]
    assert result["estimates"]["reports"] == 600 == sum(b["reports"] for b in batches)
    assert all(b["epsilon"] < b["epsilon0"] == 4.0 for b in batches) and "exceeds" in result["refusal"]
