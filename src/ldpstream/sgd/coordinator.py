"""The Kafka driver of LDP mini-batch SGD: one coordinator per training job.

The coordinator publishes model version t on the compacted topic `ldp.sgd.models` (keyed by job id) and reads
`ldp.sgd.gradients` in micro-batches. Per micro-batch of one partition, in offset order (`GradientGatherer`,
pure and vectorised over the batch's devices):
1. decode each message; a message that does not decode, or whose columns do not fit the job's vector mechanism's
   report schema, is rejected whole; a message for a job that no coordinator knows is rejected (`unknown_job`);
   messages of other known jobs are left to their coordinators;
2. reject each device whose report is outside the mechanism's declared range (not an output it can produce);
3. drop and count gradients computed at a version that is stale for t (`Trainer.is_stale`; by default any
   version but t), reject versions from the future;
4. reject devices that already took part in this job, or appear twice: each device at most once per job;
5. accept the first g - count of the rest, in offset order (the gradients version t still needs); later ones
   came too late for version t and are dropped as stale.
Messages are outside bytes, and no content of theirs makes the step raise: `decode_gradients` raises only
`WireError`, and should anything in steps 1-5 raise on some message all the same, that message alone is taken out
and dead-lettered as `malformed` with the exception (`ldpstream.runtime.dlq.isolating`).
The rejected ones go to `ldp.dlq` with their reason (and Kafka has them before the batch is applied); then one
atomic checkpoint write applies the batch (`ldpstream.sgd.checkpoint`, which defines what a crash at each point
does). Once g gradients of version t are in, `Trainer.apply_mean` of their mean gives version t + 1 (000 Sec. V;
001 Alg. 4 lines 13-14, reconstructing through the MGD-DR projection when the job has one), written in one atomic
step, then published. Training stops on the job's stop rules (`Trainer.stop_reason`) with a final, done version.

On start-up the coordinator seeks every partition to the offset after the one its checkpoint applied, never to Kafka's
committed offsets (or to where Kafka's log now starts, if retention deleted gradients never applied: they are reported,
`ldpstream.runtime.offsets`); a new job starts at the partitions' ends at creation (no device can have computed a
gradient for a model not yet published). While Redis or Kafka is unreachable it waits (bounded) and retries the step in
hand, which is safe because each step is atomic or idempotent. If the checkpoint goes back in time (a `gap`, or a stored
version or count older than the coordinator's: `ldpstream.sgd.checkpoint`), it does in process what a restart would do:
reload the job, finish a pending update, publish the version, and seek every partition back to its applied offset + 1.
(Unlike faust's, this consumer is assigned its partitions and keeps no buffer of its own: after `assign`, librdkafka
delivers nothing fetched before it.)
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

import numpy as np
from confluent_kafka import Consumer, TopicPartition

from ldpstream.contract.topics import DLQ_TOPIC, GRADIENTS_TOPIC, MODELS_TOPIC, source
from ldpstream.contract.wire import WireError
from ldpstream.mechanisms.base import LDPError
from ldpstream.mechanisms.multidim import VectorMechanism
from ldpstream.runtime import metrics
from ldpstream.runtime.dlq import DeadLetter, DeadLetterProducer, DeliveryTimeout, Message, isolating, lookup
from ldpstream.runtime.kafka import (
    ADMIN_TIMEOUT_S,
    DeliveryError,
    ReportProducer,
    consume_arrived,
    consumer_client,
    end_offsets,
    ensure_topic,
    topic_partitions,
)
from ldpstream.runtime.offsets import NOT_APPLIED, resume_offset
from ldpstream.runtime.redis import OUTAGES as REDIS_OUTAGES
from ldpstream.sgd.checkpoint import Checkpoint, GradientUpdate, JobState
from ldpstream.sgd.training import Trainer, TrainingJob, gradient_mechanism
from ldpstream.sgd.wire import (
    DecodedGradients,
    ModelVersion,
    decode_gradients,
    encode_model,
)

log = logging.getLogger(__name__)
T = TypeVar("T")

GRADIENTS_PARTITIONS = 4  # when this coordinator creates the topic; an existing one is used as it is

# Reason codes: a bounded set (metric labels). Rejected ones go to ldp.dlq; stale ones are only counted.
MALFORMED = "malformed"
UNKNOWN_VERSION = "unknown_wire_version"
UNKNOWN_JOB = "unknown_job"
WRONG_SHAPE = "wrong_shape"
OUT_OF_RANGE = "out_of_range"
FUTURE_VERSION = "future_version"
DUPLICATE = "duplicate"
STALE = "stale"
REJECT_REASONS = (MALFORMED, UNKNOWN_VERSION, UNKNOWN_JOB, WRONG_SHAPE, OUT_OF_RANGE, FUTURE_VERSION, DUPLICATE)
MAX_APPLY_ROUNDS = 8
OUTAGE_RETRY_S = 0.5
MAX_OUTAGE_S = 300.0


@dataclass
class Gathered:
    """The checkpoint update and the dead letters of one partition's micro-batch."""

    update: GradientUpdate
    dead_letters: list[DeadLetter] = field(default_factory=list)


@dataclass
class _Selected:
    """What steps 1-5 make of some messages: dead letters, outcome counts, the devices accepted and their sum."""

    letters: list[DeadLetter]
    outcomes: dict[str, int]
    devices: np.ndarray
    gradient_sum: np.ndarray


@dataclass
class _Candidates:
    """The rows of the batch's messages that passed steps 1-3, concatenated in offset order."""

    message: list[np.ndarray] = field(default_factory=list)
    row: list[np.ndarray] = field(default_factory=list)
    devices: list[np.ndarray] = field(default_factory=list)
    gradients: list[np.ndarray] = field(default_factory=list)


def _letter(message: Message, reason: str, detail: str, rows: np.ndarray | None = None) -> DeadLetter:
    return DeadLetter(message.offset, message.value, reason, detail,
                      None if rows is None else tuple(int(r) for r in rows), message.partition)


class GradientGatherer:
    """Steps 1-5 of the module docstring for one job. Pure: no Kafka, no Redis."""

    def __init__(self, job: TrainingJob, is_known_job: Callable[[str], bool]) -> None:
        self.job = job
        self.mechanism: VectorMechanism = gradient_mechanism(job)
        self.schema = self.mechanism.schema
        self.is_known_job = is_known_job

    def reports(self, batch: DecodedGradients) -> dict[str, np.ndarray]:
        """The batch's columns shaped as the mechanism's reports; WireError if they do not fit its schema."""
        n = len(batch)
        names = sorted(c.name for c in self.schema.columns)
        if sorted(batch.columns) != names:
            raise WireError(f"columns {sorted(batch.columns)} != the mechanism's {names}")
        out = {}
        for col in self.schema.columns:
            flat = batch.columns[col.name]
            if len(flat) != n * col.width:
                raise WireError(f"column {col.name!r}: {len(flat)} values for {n} devices of width {col.width}")
            out[col.name] = flat.reshape((n, *col.row_shape())).astype(col.dtype, copy=False)
        return out

    def row_violations(self, reports: dict[str, np.ndarray]) -> np.ndarray:
        """Per row, '' or why it is not an output of the mechanism: outside the declared range, or (sampling
        mechanisms) the same attribute sampled twice."""
        reasons = self.schema.violations(reports)
        index = reports.get("index")
        if index is not None and index.ndim == 2 and index.shape[1] > 1:
            ordered = np.sort(index, axis=1)
            repeated = (np.diff(ordered, axis=1) == 0).any(axis=1)
            reasons[repeated & (reasons == "")] = "index repeated within a report"
        return reasons

    def gather(self, state: JobState, source: str, messages: Sequence[Message],
               rejected: frozenset[int] = frozenset()) -> Gathered:
        """The update of consecutive messages of one partition at checkpointed state `state`.

        `rejected`: devices the checkpoint reported as having taken part already (step 4). Raises only what
        `is_known_job` raises (Redis), never for the messages' content (module docstring).
        """
        trainer = state.trainer()
        selected, isolated = isolating(lambda batch: self._selected(state, trainer, batch, rejected), messages,
                                       MALFORMED)
        outcomes = selected.outcomes
        if isolated:
            outcomes[f"rejected:{MALFORMED}"] = outcomes.get(f"rejected:{MALFORMED}", 0) + len(isolated)
        update = GradientUpdate(self.job.job_id, source, messages[0].offset, messages[-1].offset, state.t,
                                state.count, selected.devices, selected.gradient_sum, outcomes)
        return Gathered(update, selected.letters + isolated)

    def _selected(self, state: JobState, trainer: Trainer, messages: Sequence[Message],
                  rejected: frozenset[int]) -> _Selected:
        """Steps 1-5 for some messages of the batch (all of them, unless some had to be isolated)."""
        letters: list[DeadLetter] = []
        outcomes: dict[str, int] = {}
        candidates = _Candidates()

        def count(key: str, n: int) -> None:
            if n:
                outcomes[key] = outcomes.get(key, 0) + n

        def reject(message: Message, reason: str, detail: str, n: int, rows: np.ndarray | None = None) -> None:
            letters.append(_letter(message, reason, detail, rows))
            count(f"rejected:{reason}", n)

        for i, message in enumerate(messages):
            try:
                batch = decode_gradients(message.value)
            except WireError as exc:
                reject(message, UNKNOWN_VERSION if "unknown wire version" in str(exc) else MALFORMED, str(exc), 1)
                continue
            if batch.job != self.job.job_id:
                if not lookup(self.is_known_job, batch.job):
                    reject(message, UNKNOWN_JOB, f"no training job {batch.job!r}", len(batch))
                continue
            try:
                reports = self.reports(batch)
                reasons = self.row_violations(reports)
            except (WireError, LDPError) as exc:
                reject(message, WRONG_SHAPE, str(exc), len(batch))
                continue
            bad = np.flatnonzero(reasons != "")
            if len(bad):
                reject(message, OUT_OF_RANGE, str(reasons[bad[0]]), len(bad), bad)
            good = np.flatnonzero(reasons == "")
            if not len(good):
                continue
            if batch.model_version > trainer.t:
                reject(message, FUTURE_VERSION, f"version {batch.model_version} > current {trainer.t}", len(good),
                       good)
                continue
            if trainer.is_stale(batch.model_version):
                count(f"dropped:{STALE}", len(good))
                continue
            candidates.message.append(np.full(len(good), i))
            candidates.row.append(good)
            candidates.devices.append(batch.devices[good])
            candidates.gradients.append(self.mechanism.dense({k: v[good] for k, v in reports.items()}))
        return self._select(state, messages, candidates, rejected, letters, outcomes, count)

    def _select(self, state: JobState, messages: Sequence[Message], candidates: _Candidates,
                rejected: frozenset[int], letters: list[DeadLetter], outcomes: dict[str, int],
                count: Callable[[str, int], None]) -> _Selected:
        """Steps 4 and 5 over the concatenated candidates."""
        k = self.job.gradient_dims
        accepted_devices = np.zeros(0, dtype=np.uint64)
        total = np.zeros(k)
        if candidates.devices:
            message = np.concatenate(candidates.message)
            row = np.concatenate(candidates.row)
            devices = np.concatenate(candidates.devices).astype(np.uint64)
            gradients = np.concatenate(candidates.gradients)
            first = np.zeros(len(devices), dtype=bool)
            first[np.unique(devices, return_index=True)[1]] = True
            duplicate = ~first
            if rejected:
                duplicate |= np.isin(devices, np.fromiter(rejected, dtype=np.uint64, count=len(rejected)))
            for i in np.unique(message[duplicate]):
                rows = row[duplicate & (message == i)]
                letters.append(_letter(messages[i], DUPLICATE, "the device already took part in this job", rows))
            count(f"rejected:{DUPLICATE}", int(duplicate.sum()))
            eligible = np.flatnonzero(~duplicate)
            room = 0 if state.done else max(0, self.job.mini_batch_size - state.count)
            accepted = eligible[:room]
            count(f"dropped:{STALE}", len(eligible) - len(accepted))
            count("accepted", len(accepted))
            accepted_devices = devices[accepted]
            total = gradients[accepted].sum(axis=0)
        return _Selected(letters, outcomes, accepted_devices, total)


def went_back(stored: JobState, held: JobState) -> bool:
    """True if the checkpoint holds an older version of the job, or fewer of its gradients, than the coordinator
    saw stored before: it lost writes it had acknowledged (only the job's one coordinator moves it, and forward)."""
    return (stored.t, stored.count) < (held.t, held.count)


def start_offsets(bootstrap: str, topic: str = GRADIENTS_TOPIC) -> dict[str, int]:
    """The applied offset that makes a new job start at each partition's current end: "topic:p" -> end - 1."""
    return {source(topic, p): end - 1 for p, end in end_offsets(bootstrap, topic, "ldp-sgd-watermarks").items()}


class ModelPublisher:
    """Publishes model versions to the compacted `ldp.sgd.models`, keyed by job id, and waits for Kafka."""

    def __init__(self, bootstrap: str) -> None:
        self.producer = ReportProducer(bootstrap, linger_ms=0)

    def publish(self, state: JobState) -> None:
        model = ModelVersion(state.job, state.t, state.params, state.done, state.stop_reason)
        self.producer.produce(MODELS_TOPIC, encode_model(model), state.job.job_id.encode())
        self.producer.flush()


def ensure_sgd_topics(bootstrap: str) -> None:
    """The gradients, models and dead-letter topics (created if missing; existing ones used as they are)."""
    ensure_topic(bootstrap, GRADIENTS_TOPIC, GRADIENTS_PARTITIONS, exact=False)
    ensure_topic(bootstrap, MODELS_TOPIC, 1, compacted=True, exact=False)
    ensure_topic(bootstrap, DLQ_TOPIC, 1, exact=False)


Evaluator = Callable[[Trainer], dict[str, float]]
VersionCallback = Callable[[JobState, dict[str, float]], None]  # a published version and its held-out evaluation


@dataclass(frozen=True)
class CoordinatorResult:
    """How a run ended: the last checkpointed state, and 'done' or 'stopped' (`should_stop` said so; resumable)."""

    state: JobState
    status: str


class Coordinator:
    """One training job over Kafka (module docstring): checkpoint in `checkpoint`, models and gradients in Kafka."""

    def __init__(self, job: TrainingJob, bootstrap: str, checkpoint: Checkpoint, metadata: str = "",
                 evaluate: Evaluator | None = None, max_messages: int = 500) -> None:
        self.job = job
        self.bootstrap = bootstrap
        self.checkpoint = checkpoint
        self.metadata = metadata
        self.evaluate = evaluate
        self.max_messages = max_messages
        self.gatherer = GradientGatherer(job, self._is_known_job)
        self._known: set[str] = {job.job_id}
        self.state: JobState | None = None
        self.last_evaluation: dict[str, float] = {}
        self._dlq: DeadLetterProducer | None = None

    def _dead_letter_producer(self) -> DeadLetterProducer:
        if self._dlq is None:
            self._dlq = DeadLetterProducer(self.bootstrap)
        return self._dlq

    def _is_known_job(self, job_id: str) -> bool:
        if job_id not in self._known and self.checkpoint.load(job_id) is not None:
            self._known.add(job_id)
        return job_id in self._known

    def start(self) -> JobState:
        """Create or resume the job's checkpoint, finish a pending update, publish the current version."""
        ensure_sgd_topics(self.bootstrap)
        self.publisher = ModelPublisher(self.bootstrap)
        state = self.checkpoint.create(self.job, start_offsets(self.bootstrap), self.metadata)
        log.info("job %s at version %d (%d of %d gradients in)", self.job.job_id, state.t, state.count,
                 self.job.mini_batch_size)
        self.state = state
        self._step()
        self.publisher.publish(self.state)
        self._observe()
        return self.state

    def run(self, on_version: VersionCallback | None = None,
            should_stop: Callable[[], bool] = lambda: False) -> CoordinatorResult:
        """Train until the job is done or `should_stop()`; `on_version` is called with each published version."""
        state = self.start()
        if on_version:
            on_version(state, self.last_evaluation)
        if state.done:
            return CoordinatorResult(state, "done")
        consumer = consumer_client(self.bootstrap, f"ldp-sgd-{self.job.job_id}", **{"auto.offset.reset": "earliest"})
        try:
            self._assign(consumer)
            while not should_stop():
                batch = consume_arrived(consumer, self.max_messages, 0.2)
                by_partition: dict[int, list[Message]] = {}
                for msg in batch:
                    if msg.error() is not None:
                        log.warning("%s: %s", GRADIENTS_TOPIC, msg.error())
                        continue
                    by_partition.setdefault(msg.partition() or 0, []).append(
                        Message(msg.offset() or 0, msg.value() or b"", partition=msg.partition() or 0))
                before = self.state.t, self.state.done  # type: ignore[union-attr]
                reread = False
                for partition, messages in sorted(by_partition.items()):
                    if not self._waiting_out_outages(self.handle_partition, partition, messages):
                        reread = True
                        self._waiting_out_outages(self._reread, consumer)
                        break  # the rest of this batch is read again
                self._waiting_out_outages(self._step)
                assert self.state is not None
                if reread or (self.state.t, self.state.done) != before:  # a version recomputed may differ
                    self._waiting_out_outages(self.publisher.publish, self.state)
                    self._observe()
                    if on_version:
                        on_version(self.state, self.last_evaluation)
                if self.state.done:
                    return CoordinatorResult(self.state, "done")
            return CoordinatorResult(self.state, "stopped")  # type: ignore[arg-type]
        finally:
            consumer.close()

    def finish(self, stop_reason: str) -> JobState:
        """End the job at its current version (a driver that knows more than the job's stop rules, e.g. that its
        simulated population has no device left) and publish the final version."""
        state = self.checkpoint.load(self.job.job_id)
        if state is None:
            raise RuntimeError(f"job {self.job.job_id} has no checkpoint")
        if not state.done:
            self.checkpoint.finish(self.job.job_id, state.t, stop_reason)
        self.state = self.checkpoint.load(self.job.job_id)
        assert self.state is not None
        self._waiting_out_outages(self.publisher.publish, self.state)
        return self.state

    def _assign(self, consumer: Consumer) -> None:
        """Read every partition of the gradients topic from its applied offset + 1, or from where Kafka's log now
        starts if retention deleted gradients after it (skipped in the checkpoint and reported)."""
        applied = self.checkpoint.offsets(self.job.job_id)
        positions = []
        for p in range(topic_partitions(self.bootstrap, GRADIENTS_TOPIC)):
            name = source(GRADIENTS_TOPIC, p)
            log_start, _ = consumer.get_watermark_offsets(TopicPartition(GRADIENTS_TOPIC, p), timeout=ADMIN_TIMEOUT_S)
            positions.append(TopicPartition(GRADIENTS_TOPIC, p, resume_offset(
                GRADIENTS_TOPIC, p, applied.get(name, NOT_APPLIED), log_start,
                partial(self.checkpoint.skip_lost, self.job.job_id, name))))
        consumer.assign(positions)

    def _reread(self, consumer: Consumer) -> None:
        """The checkpoint went back in time: reload the job and read every partition again from its applied offset
        + 1 (the caller then finishes a pending update and publishes the version)."""
        self.state = self.checkpoint.load(self.job.job_id)
        assert self.state is not None
        log.warning("job %s: the checkpoint went back in time (it lost writes it had acknowledged) to version %d "
                    "with %d gradients; reading every partition again from its applied offset + 1", self.job.job_id,
                    self.state.t, self.state.count)
        self._assign(consumer)

    @staticmethod
    def _waiting_out_outages(step: Callable[..., T], *args: Any) -> T:
        """Run a step, retrying while Redis or Kafka is unreachable (bounded): every step is atomic or idempotent
        (a checkpoint script, dead letters sent before the batch is applied, a model version re-published)."""
        deadline = time.monotonic() + MAX_OUTAGE_S
        while True:
            try:
                return step(*args)
            except (*REDIS_OUTAGES, DeliveryTimeout, DeliveryError) as exc:
                if time.monotonic() > deadline:
                    raise
                log.warning("%s; retrying in %.1f s", exc, OUTAGE_RETRY_S)
                time.sleep(OUTAGE_RETRY_S)

    def handle_partition(self, partition: int, messages: list[Message]) -> bool:
        """Gather, dead-letter and checkpoint one partition's micro-batch (module docstring); False if nothing was
        written because the checkpoint went back in time (the caller reads every partition again: `_reread`)."""
        source_name = source(GRADIENTS_TOPIC, partition)
        rejected: frozenset[int] = frozenset()
        sent: set[tuple[int, str, tuple[int, ...] | None]] = set()
        for _ in range(MAX_APPLY_ROUNDS):
            state = self.checkpoint.load(self.job.job_id)
            assert state is not None
            if self.state is not None and went_back(state, self.state):
                return False
            applied = self.checkpoint.offsets(self.job.job_id).get(source_name, NOT_APPLIED)
            messages = [m for m in messages if m.offset > applied]
            if not messages:
                return True
            gathered = self.gatherer.gather(state, source_name, messages, rejected)
            new = [d for d in gathered.dead_letters if (d.offset, d.reason, d.rows) not in sent]
            if new:
                self._dead_letter_producer().send(GRADIENTS_TOPIC, new)
            sent.update((d.offset, d.reason, d.rows) for d in new)
            result = self.checkpoint.accumulate(gathered.update)
            if result.status == "applied":
                for key, n in gathered.update.outcomes.items():
                    outcome, _, reason = key.partition(":")
                    metrics.SGD_GRADIENTS.labels(self.job.job_id, outcome, reason).inc(n)
            if result.status in ("applied", "skipped"):
                self.state = self.checkpoint.load(self.job.job_id)
                return True
            if result.status == "gap":
                return False
            if result.status == "duplicates":
                rejected = rejected | frozenset(int(d) for d in result.duplicates.tolist())
        raise RuntimeError(f"{source_name}: batch not applied after {MAX_APPLY_ROUNDS} rounds")

    def devices_left(self, state: JobState) -> int | None:
        """Devices of the expected population that have not sent a gradient yet (None: population unknown)."""
        if self.job.expected_population is None:
            return None
        outcomes = self.checkpoint.outcomes(self.job.job_id)
        return self.job.expected_population - outcomes.get("accepted", 0) - outcomes.get(f"dropped:{STALE}", 0)

    def _step(self) -> None:
        """Advance if version t has its g gradients; finish if a stop rule holds (both checkpointed first)."""
        state = self.state
        assert state is not None
        if state.done:
            return
        g = self.job.mini_batch_size
        if state.count >= g:
            trainer = state.trainer().apply_mean(state.gradient_sum / state.count)
            left = self.devices_left(state)
            if not self.checkpoint.advance(self.job.job_id, state.t, trainer, trainer.stop_reason(left)):
                stored = self.checkpoint.load(self.job.job_id)
                if stored is not None and went_back(stored, state):
                    return  # the next micro-batch finds it so, and every partition is read again
                raise RuntimeError(f"job {self.job.job_id}: the checkpoint moved on under this coordinator")
        else:
            left = self.devices_left(state)
            reason = state.trainer().stop_reason(None if left is None else left + state.count)
            if reason is not None:
                self.checkpoint.finish(self.job.job_id, state.t, reason)
        self.state = self.checkpoint.load(self.job.job_id)

    def _observe(self) -> None:
        """Set the job's gauges: iteration, model norm and (simulations) the held-out evaluation."""
        state = self.state
        assert state is not None
        trainer = state.trainer()
        metrics.SGD_ITERATION.labels(self.job.job_id).set(state.t)
        metrics.SGD_MODEL_NORM.labels(self.job.job_id).set(float(np.linalg.norm(trainer.beta)))
        if self.evaluate is not None:
            self.last_evaluation = self.evaluate(trainer)
            metrics.SGD_HELD_OUT_LOSS.labels(self.job.job_id).set(self.last_evaluation["loss"])
            name = trainer.model.metric_name
            metrics.SGD_HELD_OUT_ERROR.labels(self.job.job_id, name).set(self.last_evaluation[name])
