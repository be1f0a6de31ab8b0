"""A shuffled training job (docs/reference/protocol.md section 13.7) with the real edge, Kafka, Redis, shuffler and
coordinator, and Python devices: the edge writes updates without a pseudonym, the shuffler releases exactly B per
model version once (through a commit refused and a restart), the coordinator takes them without pseudonym checks,
and the central epsilon shown is the bound's."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import msgspec
import numpy as np
import pytest
import yaml
from confluent_kafka import KafkaException
from edge_support import EdgeProcess
from pipeline_support import RefusingCommits, read_topic
from test_training_jobs import device, edge, examples, job_spec, start_job  # noqa: F401 - `edge` is a fixture
from typer.testing import CliRunner

from ldpstream.cli.commands import app
from ldpstream.contract.shuffled import decode_figures, figures_key
from ldpstream.contract.topics import SHUFFLED_UPDATES_TOPIC, job_raw_topic
from ldpstream.contract.training import decode_update
from ldpstream.device.training import TrainingDevice
from ldpstream.mechanisms.shuffle import window_bounds
from ldpstream.runtime.redis import redis_client
from ldpstream.runtime.settings import Settings
from ldpstream.shuffler.service import Shuffler, ShufflerConfig

pytestmark = pytest.mark.integration
# B + EXTRA devices send an update per version: the shuffler releases B, drops the rest (EXTRA >= min_batch / 10: a
# version holds more than any release threshold drawn, `ldpstream.shuffler.state.threshold`)
B, EXTRA = 100, 10


@contextmanager
def serving(cfg: ShufflerConfig) -> Iterator[Shuffler]:
    """A shuffler serving in a thread until the block ends (then stopped between ticks and closed)."""
    shuffler, stop = Shuffler(cfg), threading.Event()
    thread = threading.Thread(target=shuffler.serve, args=(stop,), daemon=True)
    thread.start()
    try:
        yield shuffler
    finally:
        stop.set()
        thread.join(30)
        shuffler.close()


def send(devices: list[TrainingDevice], seed: int) -> None:
    """Each device trains on its own examples at the current version and sends its update (8 at a time)."""
    def one(i: int) -> int:
        d = devices[i]
        assert d.train(examples(np.random.default_rng([seed, i]))) is not None
        return d.flush()

    with ThreadPoolExecutor(8) as pool:
        assert sum(pool.map(one, range(len(devices)))) == len(devices)


def test_a_shuffled_job_trains_on_b_anonymous_updates_per_version_released_once(
        live_services: Settings, edge: EdgeProcess, tmp_path: Path) -> None:  # noqa: F811 - the fixture
    spec = job_spec(epsilon=1.0, batch_size=B, max_versions=2, max_rounds=2, shuffle={"delta": 1e-6, "min_batch": B})
    bound = min(window_bounds(spec.epsilon, B, 1e-6).values())  # FMT21, the general eps0-LDP randomizer's bounds
    job_file = tmp_path / "job.yaml"
    job_file.write_text(yaml.safe_dump({"job": msgspec.to_builtins(spec)}))
    published = CliRunner().invoke(app, ["train", "publish", str(job_file), "--json"])
    assert published.exit_code == 0, published.output
    assert json.loads(published.output)["central_epsilon"] == bound < spec.epsilon
    running = start_job(live_services, spec)
    name = spec.job_id
    cfg = ShufflerConfig(live_services.bootstrap, live_services.redis, transactional_id=f"ldp-shuffler-it-{name}",
                         group=f"ldp-shuffler-it-{name}", tick_s=0.2)
    try:
        with ThreadPoolExecutor(8) as pool:
            devices = list(pool.map(lambda i: device(edge, running, tmp_path, i), range(B + EXTRA)))
        send(devices, 0)
        failing = Shuffler(cfg)  # holds version 0's updates; its commit is refused: nothing is released
        failing.producer = RefusingCommits(failing.producer)  # type: ignore[assignment]
        failing.catch_up(failing.collections[spec.key])
        with pytest.raises(KafkaException):
            failing.tick()
        failing.close()
        assert running.state().version == 0
        with serving(cfg):
            running.wait_version(1)
            send(devices[:50], 1)
        with serving(cfg) as second:  # restarted mid-version: what the first held is read again, released once
            send(devices[50:], 1)
            state = running.wait_version(2)
            assert second.outcomes[-1].reports == B and second.outcomes[-1].spec_version == spec.version
    finally:
        running.stop.set()
        running.thread.join(10)
    assert state.done and state.outcomes == {"accepted": 2 * B}
    released = [(m.key(), decode_update(m.value(), spec)) for m in read_topic(live_services.bootstrap,
                                                                               SHUFFLED_UPDATES_TOPIC)]
    mine = [(key, u) for key, u in released if u.job == name]
    assert {key for key, _ in mine} == {None} and Counter(u.model_version for _, u in mine) == {0: B, 1: B}
    raw = list(read_topic(live_services.bootstrap, job_raw_topic(name)))
    assert len(raw) == 2 * (B + EXTRA) and {m.key() for m in raw} == {None}  # the edge wrote no pseudonym
    shown = CliRunner().invoke(app, ["train", "status", name, "--json"])
    assert shown.exit_code == 0, shown.output
    assert {k: v for k, v in json.loads(shown.output).items() if k in (
        "central_epsilon", "delta", "version", "max_participations", "lifetime_epsilon", "updates_accepted")} == {
        "central_epsilon": bound, "delta": 1e-6, "version": 2, "max_participations": None, "lifetime_epsilon": 2.0,
        "updates_accepted": 2 * B}
    client = redis_client(live_services.redis)
    figures = [decode_figures(v) for v in client.hgetall(figures_key(spec.key)).values()]
    assert sorted((f.window_ms, f.reports, f.epsilon) for f in figures if f) == [(0, B, bound), (1, B, bound)]
