"""Simulated devices for the Kafka driver: each holds one private (x, y) and takes part in a job at most once.

The fleet follows the job's model versions on `ldp.sgd.models`. When version t appears, devices that have not
taken part come online in groups of random size (in a random order of the population) until about g of them have
computed their gradient at t (`Trainer.device_gradient`: regularised loss gradient, projected under MGD-DR,
clipped to [-1, 1]^k), perturbed it with the job's vector mechanism (`perturb`: the wire carries the mechanism's
own reports, e.g. one sampled attribute per device for HM) and sent it to `ldp.sgd.gradients` with job, version
and pseudonym. If a version does not move for `patience_s` (gradients lost, stale, or rejected), another group
comes online. The pacing keeps a demo's population from being spent on versions the coordinator already closed.

Raw features and labels never leave this module: the only thing it can send is a `GradientBatch`, which only
`perturb_gradients` makes, from mechanism output.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np
from confluent_kafka import OFFSET_BEGINNING, TopicPartition
from pydantic import BaseModel, ConfigDict, Field

from ldpstream.contract.pseudonym import integer_pseudonyms
from ldpstream.contract.topics import GRADIENTS_TOPIC, MODELS_TOPIC
from ldpstream.contract.wire import WireError
from ldpstream.mechanisms.multidim import VectorMechanism
from ldpstream.runtime.access import GATEWAY
from ldpstream.runtime.kafka import ReportProducer, consume_arrived, consumer_client
from ldpstream.sgd.datasets import Dataset, adult, synthetic
from ldpstream.sgd.models import TrainingError
from ldpstream.sgd.training import Trainer, TrainingJob, gradient_mechanism
from ldpstream.sgd.wire import (
    GradientBatch,
    ModelVersion,
    decode_model,
    encode_gradients,
    gradient_batch,
)

MAX_MESSAGE_BYTES = 900_000  # under Kafka's default message.max.bytes


class Simulation(BaseModel):
    """Where a simulated job's devices get their private rows: a synthetic set with a known model (seeded) or
    the UCI Adult data, split into the devices' rows and held-out rows for evaluation."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    dataset: Literal["synthetic", "adult"] = "synthetic"
    devices: int = Field(default=100_000, ge=1)
    test_rows: int = Field(default=10_000, ge=1)
    seed: int = Field(default=0, ge=0, lt=2**31)

    def data(self, job: TrainingJob) -> tuple[Dataset, Dataset]:
        """(devices' rows, held-out rows); TrainingError if they do not have the job's d features."""
        if self.dataset == "synthetic":
            full = synthetic(job.model, self.devices + self.test_rows, job.dims, self.seed)
        else:
            full = adult(job.model)
        train, test = full.split(self.test_rows, self.seed)
        if train.dims != job.dims:
            raise TrainingError(f"the {self.dataset} data has {train.dims} features, the job {job.dims}")
        return (train if len(train.y) <= self.devices else train.split(len(train.y) - self.devices, self.seed)[0],
                test)


def perturb_gradients(trainer: Trainer, mechanism: VectorMechanism, x: np.ndarray, y: np.ndarray,
                      pseudonyms: np.ndarray, rng: np.random.Generator) -> GradientBatch:
    """The perturbed gradients of the devices holding rows (x, y) at model version `trainer.t`."""
    reports = mechanism.perturb(trainer.device_gradient(x, y), rng)
    return gradient_batch(trainer.job.job_id, trainer.t, np.asarray(pseudonyms, dtype=np.uint64), reports)


def device_pseudonyms(job_id: str, n: int) -> np.ndarray:
    """The pseudonyms of devices 0..n-1 of a job's simulated population (distinct; keyed by the job id)."""
    return integer_pseudonyms(f"sgd:{job_id}", np.arange(n, dtype=np.uint64))


class ModelFollower:
    """The current version of one job on `ldp.sgd.models`: the last one its coordinator published (read from the
    beginning of the compacted topic). Usually the newest; an older one after the coordinator's checkpoint went back
    in time and it published that version again.

    The topic's messages are outside bytes: a message under the job's key that is not a model of this very job
    (undecodable, or another job spec under the same id) is skipped and counted in `skipped`.
    """

    def __init__(self, bootstrap: str, job: TrainingJob, topic: str = MODELS_TOPIC) -> None:
        self.job = job
        self.key = job.job_id.encode()
        self.latest: ModelVersion | None = None
        self.skipped = 0
        self.consumer = consumer_client(bootstrap, "ldp-sgd-devices", GATEWAY)
        self.consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])

    def poll(self, timeout_s: float) -> ModelVersion | None:
        """Read what has arrived (waiting up to `timeout_s` for the first message); the current version."""
        for msg in consume_arrived(self.consumer, 1000, timeout_s):
            if msg.error() is not None or msg.key() != self.key or not msg.value():
                continue
            try:
                model = decode_model(msg.value())  # type: ignore[arg-type]  # WireError only, whatever the bytes
            except WireError:
                self.skipped += 1
                continue
            if model.job != self.job:
                self.skipped += 1
            else:
                self.latest = model
        return self.latest

    def close(self) -> None:
        self.consumer.close()


@dataclass(frozen=True)
class FleetResult:
    """What the fleet sent: gradients (one per device that took part), messages, and the last version seen."""

    sent: int
    messages: int
    last_version: int
    done: bool


class Fleet:
    """The devices of one job, each with one private row of (x, y), sending through Kafka (module docstring)."""

    def __init__(self, job: TrainingJob, x: np.ndarray, y: np.ndarray, bootstrap: str, *, seed: int = 0,
                 group: int = 500, patience_s: float = 1.0, gradients_topic: str = GRADIENTS_TOPIC,
                 models_topic: str = MODELS_TOPIC) -> None:
        self.job = job
        self._x = np.asarray(x, dtype=np.float64)
        self._y = np.asarray(y, dtype=np.float64)
        if self._x.ndim != 2 or self._y.shape != (self._x.shape[0],) or self._x.shape[1] != job.dims:
            raise TrainingError(f"devices' rows must be x (n, {job.dims}) and y (n,), got {self._x.shape}, "
                                f"{self._y.shape}")
        self.bootstrap = bootstrap
        self.group = group
        self.patience_s = patience_s
        self.gradients_topic = gradients_topic
        self.models_topic = models_topic
        order_seed, size_seed, noise_seed = np.random.SeedSequence([seed, 5]).spawn(3)
        self.order = np.random.default_rng(order_seed).permutation(len(self._y))  # who comes online when
        self._sizes = np.random.default_rng(size_seed)
        self._noise = np.random.default_rng(noise_seed)
        self.pseudonyms = device_pseudonyms(job.job_id, len(self._y))
        self.mechanism = gradient_mechanism(job)
        row_bytes = 8 + sum(np.dtype(c.dtype).itemsize * c.width for c in self.mechanism.schema.columns)
        self.max_rows_per_message = max(1, MAX_MESSAGE_BYTES // row_bytes)
        self.used = 0  # devices order[:used] have taken part

    def _send(self, producer: ReportProducer, trainer: Trainer, n: int) -> int:
        """Devices order[used:used+n] compute, perturb and send at `trainer`; the number of messages."""
        messages = 0
        for lo in range(self.used, self.used + n, self.max_rows_per_message):
            rows = self.order[lo:min(lo + self.max_rows_per_message, self.used + n)]
            batch = perturb_gradients(trainer, self.mechanism, self._x[rows], self._y[rows], self.pseudonyms[rows],
                                      self._noise)
            producer.produce(self.gradients_topic, encode_gradients(batch))
            messages += 1
        self.used += n
        return messages

    def run(self, stop: threading.Event | None = None, timeout_s: float = 600.0,
            on_sent: Callable[[int], None] | None = None) -> FleetResult:
        """Take part until the job's final version, the population runs out, `stop` is set or the timeout."""
        stop = stop or threading.Event()
        follower = ModelFollower(self.bootstrap, self.job, self.models_topic)
        producer = ReportProducer(self.bootstrap, linger_ms=2, principal=GATEWAY)
        g = self.job.mini_batch_size
        version, sent_for_version, last_send, messages = -1, 0, 0.0, 0
        model: ModelVersion | None = None
        deadline = time.monotonic() + timeout_s
        try:
            while not stop.is_set() and time.monotonic() < deadline:
                model = follower.poll(0.02)
                if model is None:
                    continue
                if model.done or self.used >= len(self.order):
                    break
                if model.t != version:
                    version, sent_for_version = model.t, 0
                    trainer = Trainer(self.job, model.params, model.t)
                if sent_for_version >= g and time.monotonic() - last_send < self.patience_s:
                    continue
                wanted = g - sent_for_version if sent_for_version < g else self.group  # a top-up group
                n = min(wanted, self._group_size(), len(self.order) - self.used)
                messages += self._send(producer, trainer, n)
                sent_for_version += n
                last_send = time.monotonic()
                producer.poll(0)
                if on_sent:
                    on_sent(n)
            producer.flush()
        finally:
            follower.close()
        return FleetResult(self.used, messages, model.t if model else -1, bool(model and model.done))

    def _group_size(self) -> int:
        """The size of the next group of devices coming online: Poisson with mean `group`, at least 1."""
        return max(1, int(self._sizes.poisson(self.group)))
