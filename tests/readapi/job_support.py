"""A training job with a known history, for the tests of what people see of it (`ldp train status`, the read API, the
console): a tiny job published to the real Kafka, its real coordinator (`JobCoordinator`, in a thread) reading
seven updates a stray writer put on the updates topic (the edge's checks: tests/integration/test_training_jobs.py):
two versions made, four updates accepted, three refused (closed_version, duplicate, not_finite), one device in two
versions. With `evaluated`, the coordinator evaluates each version on 200 synthetic held-out rows."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ldpstream.contract.topics import UPDATES_TOPIC
from ldpstream.contract.training import JobSpec, encode_update
from ldpstream.runtime.jobs import model_prefix, publish_job
from ldpstream.runtime.kafka import ReportProducer
from ldpstream.runtime.redis import redis_client
from ldpstream.runtime.settings import Settings
from ldpstream.runtime.signing import load_signing_key
from ldpstream.sgd.federated import evaluate
from ldpstream.sgd.images import LabelledSet
from ldpstream.sgd.jobfile import complete_job
from ldpstream.sgd.jobrun import JobCoordinator, RunState, state_key

HELD_OUT_ROWS = 200
VERSIONS = 2
ACCEPTED = 4
REFUSED = {"closed_version": 1, "duplicate": 1, "not_finite": 1}


def tiny_job(**fields: Any) -> JobSpec:
    """Softmax on 4 features and 3 classes, PrivUnitG at eps 4, B = 2, at most 3 rounds a device, 5 versions."""
    return complete_job({"job_id": f"view-{uuid.uuid4().hex[:8]}", "version": 1,
                         "model": {"architecture": "softmax", "dims": [4, 3]}, "mechanism": {"name": "privunitg"},
                         "clip": 1.0, "epsilon": 4.0, "max_rounds": 3, "batch_size": 2, "max_versions": 5, "lr": 0.5,
                         "momentum": 0.0, "max_examples": 10, "version_validity_s": 3600, **fields})


def held_out(spec: JobSpec) -> Any:
    """The coordinator's evaluator on HELD_OUT_ROWS synthetic rows (label: the largest of the first 3 features)."""
    from ldpstream.contract.networks import make_network

    rng = np.random.default_rng(3)
    x = rng.normal(size=(HELD_OUT_ROWS, 4)).astype(np.float32)
    rows = LabelledSet("synthetic", x, np.argmax(x[:, :3], axis=1), 3)
    net = make_network(spec.model.architecture, tuple(spec.model.dims))
    return lambda theta: {**asdict(evaluate(net, theta, rows)), "rows": HELD_OUT_ROWS}


def updates(spec: JobSpec) -> list[tuple[int, bytes]]:
    """(device, update bytes) in topic order; the outcomes are the module docstring's."""
    rng = np.random.default_rng(11)

    def update(version: int, finite: bool = True) -> bytes:
        value = rng.normal(size=(1, spec.parameters)).astype("<f4")
        if not finite:
            value[0, 0] = np.nan
        return encode_update(spec.job_id, spec.version, version, {"value": value})

    return [(1, update(0)), (2, update(0)),  # version 0 -> 1
            (1, update(0)),  # closed_version
            (1, update(1)), (1, update(1)),  # device 1 again (a second round), then a duplicate
            (5, update(1, finite=False)),  # not_finite
            (3, update(1))]  # version 1 -> 2


@dataclass(frozen=True)
class TrainedJob:
    spec: JobSpec
    cfg: Settings

    def state(self) -> RunState:
        return RunState.from_redis(redis_client(self.cfg.redis).hgetall(state_key(self.spec.job_id)))


@contextmanager
def trained_job(cfg: Settings, evaluated: bool = True) -> Iterator[TrainedJob]:
    """A tiny job run to version 2 by its coordinator (module docstring); its Redis keys deleted at the end."""
    spec = tiny_job()
    publish_job(spec, cfg.bootstrap)
    client = redis_client(cfg.redis)
    coordinator = JobCoordinator(spec, cfg.bootstrap, client, load_signing_key(cfg.pointer_signing_key),
                                 held_out(spec) if evaluated else None)
    coordinator.start()  # from the topic's ends: the updates below come after
    stop = threading.Event()
    thread = threading.Thread(target=coordinator.run, kwargs={"should_stop": stop.is_set}, daemon=True)
    thread.start()
    try:
        producer = ReportProducer(cfg.bootstrap, linger_ms=0)
        for device, body in updates(spec):
            producer.produce(UPDATES_TOPIC, body, device.to_bytes(8, "little"), partition=0)  # in this order
        producer.flush()
        job = TrainedJob(spec, cfg)
        deadline = time.monotonic() + 60
        while sum(job.state().outcomes.values()) < ACCEPTED + sum(REFUSED.values()):
            assert time.monotonic() < deadline and thread.is_alive(), job.state().outcomes
            time.sleep(0.05)
        yield job
    finally:
        stop.set()
        thread.join(30)
        keys = list(client.scan_iter(match=model_prefix(spec.job_id) + "*"))
        if keys:
            client.delete(*keys)
