"""The coordinator of a training job devices join through the edge (`ldp train run JOB`; protocol section 13.6).

It reads only what the edge admitted (`ldp.jobs.updates`, keyed by device pseudonym), in micro-batches, every
partition from the offset after the one its state applied. Per update, in offset order: another job's (or another
spec version's) is skipped; one that does not decode against the job's mechanism is refused under its code
(`malformed`, `wrong_shape`, `not_finite`: the edge checks the same, a modified edge or a stray writer would not); one
for a version other than the current one, or after the job ended, is `closed_version`; a device's second update for
the version is `duplicate`; a device past the job's `max_rounds` is `round_limit`. The first B updates that pass are
the version's; their decoded reports (PrivUnitG: the value; ProjUnit: `ProjUnit.decode`, the seeded projection
undone) are averaged and multiplied by the clip C (the unbiased mean of the devices' clipped gradients), and the
server's optimizer (`ServerOptimizer`: SGD with momentum, as the offline trainer `ldpstream.sgd.federated`) makes
version t + 1, signed (an online, pointer-role key) and published for the edge. After `max_versions` versions the
last is published `done`.

Exactly once: a micro-batch's outcome (offsets, the version's running sum and members, the model, participations,
counts) is one Redis transaction, made only if the state is still the one it was computed from (WATCH): a crash
before it re-reads the batch, after it never does; a second coordinator of the same job loses the race and reloads
(and one re-publishes the version it loaded only if no other stepped meanwhile: the edge never serves an older
version than it served).
A shuffled job (section 13.7) reads what the shuffler released (`ldp.jobs.shuffled`, no key, read_committed: its
batches are transactions), exactly B updates per model version: the edge kept one update per device per version and
each device's rounds (the updates carry no pseudonym here), so the coordinator checks neither `duplicate` nor
`round_limit`, and records no participations.

Everything done with the reports is post-processing: privacy is each device's eps per update, at most `max_rounds`
updates (`ldpstream.sgd.accounting.job_privacy`).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import redis
from confluent_kafka import Consumer, TopicPartition
from prometheus_client import Counter, Gauge

from ldpstream.contract.clock import now_ms
from ldpstream.contract.networks import make_network
from ldpstream.contract.signatures import sign_block
from ldpstream.contract.snapshot import Snapshot
from ldpstream.contract.training import (
    JobSpec,
    TrainingWireError,
    central_fields,
    coordinator_topic,
    decode_update,
    describe_version,
    model_message,
)
from ldpstream.mechanisms.gradients.projunit import ProjUnit
from ldpstream.runtime.jobs import KEEP_VERSIONS, UPDATES_PARTITIONS, model_prefix
from ldpstream.runtime.kafka import consume_arrived, consumer_client, ensure_topic, topic_partitions
from ldpstream.runtime.redis import SyncRedis
from ldpstream.sgd.accounting import job_privacy
from ldpstream.sgd.server_optimizer import ServerOptimizer, ServerState

log = logging.getLogger(__name__)
BATCH_MESSAGES = 1000
POLL_S = 0.5
COORDINATOR_GROUP = "ldp-sgd-jobs"  # never joined or committed: partitions are assigned, offsets are in Redis
MAX_CURVE = 512  # evaluations a state keeps (`thinned`): the state is rewritten at every micro-batch

JOB_UPDATES = Counter("ldp_job_updates", "Training updates the coordinator read, by job and outcome (accepted, or "
                      "refused:<reason>)", ["job", "outcome"])
JOB_VERSION = Gauge("ldp_job_model_version", "The current model version of a training job", ["job"])
JOB_ACCURACY = Gauge("ldp_job_held_out_accuracy", "The current model's held-out accuracy", ["job"])
JOB_LOSS = Gauge("ldp_job_held_out_loss", "The current model's held-out mean cross-entropy", ["job"])
JOB_PARTICIPATIONS = Gauge("ldp_job_max_participations", "The most versions any device sent an update for",
                           ["job"])


def initial_rng(spec: JobSpec) -> np.random.Generator:
    """The randomness of a job version's model version 0 (`Network.init`: He-uniform hidden weights; a softmax's is all
    zeros): seeded by the job and its version, so every coordinator of the job makes the same version 0."""
    digest = hashlib.sha256(f"{spec.job_id}@{spec.version}".encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


@dataclass
class RunState:
    """A job's coordinator state (one Redis hash): the current version, its running sum and members, offsets."""

    job_version: int
    version: int
    theta: np.ndarray
    velocity: np.ndarray
    total: np.ndarray
    members: list[int]
    offsets: dict[int, int]
    done: bool = False
    seq: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    max_participations: int = 0
    evaluations: list[dict[str, float]] = field(default_factory=list)

    def to_redis(self) -> dict[str, bytes | str | int]:
        return {"job_version": self.job_version, "version": self.version, "theta": self.theta.astype("<f8").tobytes(),
                "velocity": self.velocity.astype("<f8").tobytes(), "total": self.total.astype("<f8").tobytes(),
                "members": np.array(self.members, dtype="<u8").tobytes(), "offsets": json.dumps(self.offsets),
                "done": int(self.done), "seq": self.seq, "outcomes": json.dumps(self.outcomes),
                "max_participations": self.max_participations, "evaluations": json.dumps(self.evaluations)}

    @classmethod
    def from_redis(cls, raw: dict[Any, Any]) -> RunState:
        def f64(name: str) -> np.ndarray:
            return np.frombuffer(raw[name.encode()], dtype="<f8").copy()

        return cls(int(raw[b"job_version"]), int(raw[b"version"]), f64("theta"), f64("velocity"), f64("total"),
                   np.frombuffer(raw[b"members"], dtype="<u8").tolist(),
                   {int(k): v for k, v in json.loads(raw[b"offsets"]).items()}, bool(int(raw[b"done"])),
                   int(raw[b"seq"]), json.loads(raw[b"outcomes"]), int(raw[b"max_participations"]),
                   json.loads(raw[b"evaluations"]))


Evaluator = Callable[[np.ndarray], dict[str, float]]


def state_key(job_id: str) -> str:
    return model_prefix(job_id) + "state"


def participations_key(job_id: str, job_version: int) -> str:
    return f"{model_prefix(job_id)}participations:{job_version}"


def thinned(curve: list[dict[str, float]], cap: int = MAX_CURVE) -> list[dict[str, float]]:
    """The evaluations, oldest first, at most `cap` of them: past the cap every second one but the newest is dropped,
    so the curve still spans the whole job, sparser where it is older (each point names its version)."""
    return curve if len(curve) <= cap else curve[:-1][::2] + curve[-1:]


class JobCoordinator:
    """Runs one job's versions (module docstring) until it is done or `should_stop()`."""

    def __init__(self, spec: JobSpec, bootstrap: str, client: SyncRedis, signer: Any,
                 evaluator: Evaluator | None = None, clock: Callable[[], int] = now_ms) -> None:
        self.spec, self.bootstrap, self.redis, self.signer = spec, bootstrap, client, signer
        self.evaluator, self.clock = evaluator, clock
        self.net = make_network(spec.model.architecture, tuple(spec.model.dims))
        # devices compute their gradients at the published iterate, so a job serves it (no EMA: `ema=0`)
        self.optimizer = ServerOptimizer(spec.lr, spec.momentum, ema=0.0)
        m = spec.mechanism
        self.projection = ProjUnit(spec.parameters, spec.epsilon, k=m.k) if m.name == "projunit" else None
        self.state: RunState | None = None
        self.topic = coordinator_topic(spec)
        self.shuffled = spec.shuffle is not None

    # -- state ----------------------------------------------------------------------------------------------------
    def start(self) -> RunState:
        """The stored state of this job version, or a fresh one at version 0 (published), starting at the updates
        topic's ends (no device can have sent an update for a version not yet published)."""
        ensure_topic(self.bootstrap, self.topic, UPDATES_PARTITIONS, exact=False)
        raw = self.redis.hgetall(state_key(self.spec.job_id))
        if raw and int(raw[b"job_version"]) == self.spec.version:
            self.state = RunState.from_redis(raw)
            if not self._publish_current():  # another coordinator moved the state meanwhile: read it again
                return self.start()
            return self.state
        consumer = consumer_client(self.bootstrap, COORDINATOR_GROUP)
        try:
            ends = {p: consumer.get_watermark_offsets(TopicPartition(self.topic, p), timeout=30)[1]
                    for p in range(topic_partitions(self.bootstrap, self.topic))}
        finally:
            consumer.close()
        zero = np.zeros(self.net.size)
        fresh = RunState(self.spec.version, 0, self.net.init(initial_rng(self.spec)), zero, zero.copy(), [], ends)
        if not self._write(fresh, None, {}, True):  # another coordinator made it first
            return self.start()
        self.state = fresh
        return fresh

    def _write(self, new: RunState, expected_seq: int | None, rounds: dict[int, int], publish: bool) -> bool:
        """One transaction: the state, the devices' participations, and (`publish`) the state's model version, its
        bytes and its signed descriptor; False, nothing written, if the stored state is not the one expected
        (`expected_seq`; None: no state of this job version yet)."""
        key = state_key(self.spec.job_id)
        prefix = model_prefix(self.spec.job_id)
        with self.redis.pipeline(transaction=True) as pipe:
            try:
                pipe.watch(key)
                seq, job_version = pipe.hmget(key, "seq", "job_version")
                ours = job_version is not None and int(job_version) == self.spec.version
                if (expected_seq is None and ours) or (expected_seq is not None and (
                        not ours or seq is None or int(seq) != expected_seq)):
                    pipe.unwatch()
                    return False
                new.seq = (expected_seq or 0) + 1
                pipe.multi()
                pipe.delete(key)
                pipe.hset(key, mapping=new.to_redis())  # type: ignore[arg-type]
                part = participations_key(self.spec.job_id, self.spec.version)
                for device, n in rounds.items():
                    pipe.hincrby(part, str(device), n)
                if publish:
                    data, body, block = self._published(new)
                    pipe.set(f"{prefix}bytes:{new.version}", data)
                    old = [f"{prefix}bytes:{v}" for v in range(max(0, new.version - 2 * KEEP_VERSIONS),
                                                                 new.version - KEEP_VERSIONS + 1)]
                    if old:
                        pipe.delete(*old)
                    pipe.hset(prefix + "model", mapping={"descriptor": body, "signature": block,
                                                         "version": new.version})
                pipe.execute()
            except redis.WatchError:
                return False
        return True

    def _published(self, state: RunState) -> tuple[bytes, bytes, bytes]:
        """The state's version: its bytes, its descriptor (issued now) and the descriptor's signature block."""
        data = Snapshot(self.spec.model.architecture, tuple(self.spec.model.dims), state.version,
                        state.theta).encode("float64")
        body = describe_version(self.spec, state.version, data, self.clock(), state.done).canonical_json()
        return data, body, sign_block(self.signer, model_message(body))

    def _publish_current(self) -> bool:
        """Publish the stored state's version again (after a restart: issued now, so it is not expired), in one
        transaction made only while the stored state is still this one (its `seq`): a coordinator that read the
        state before another one stepped never serves the older version over the newer (a rollback devices
        refuse); False, nothing written, if the state moved."""
        assert self.state is not None
        prefix = model_prefix(self.spec.job_id)
        data, body, block = self._published(self.state)
        with self.redis.pipeline(transaction=True) as pipe:
            try:
                pipe.watch(state_key(self.spec.job_id))
                seq, job_version = pipe.hmget(state_key(self.spec.job_id), "seq", "job_version")
                if (seq is None or job_version is None or int(seq) != self.state.seq
                        or int(job_version) != self.spec.version):
                    pipe.unwatch()
                    return False
                pipe.multi()
                pipe.set(f"{prefix}bytes:{self.state.version}", data)
                pipe.hset(prefix + "model", mapping={"descriptor": body, "signature": block,
                                                     "version": self.state.version})
                pipe.execute()
            except redis.WatchError:
                return False
        return True

    # -- the loop -------------------------------------------------------------------------------------------------
    def run(self, should_stop: Callable[[], bool] = lambda: False,
            on_version: Callable[[RunState], None] | None = None) -> RunState:
        """Read and apply updates until the job is done or `should_stop()`; the last state."""
        state = self.start()
        consumer = consumer_client(self.bootstrap, COORDINATOR_GROUP, None, **{"enable.auto.commit": False,
                                                                               "isolation.level": "read_committed"})
        try:
            self._assign(consumer, state)
            while not state.done and not should_stop():
                messages = consume_arrived(consumer, BATCH_MESSAGES, POLL_S)
                if not messages:
                    continue
                before = state.version
                applied = self.apply(messages)
                if applied is None:  # another coordinator moved the state: start over from it
                    state = self.start()
                    self._assign(consumer, state)
                    continue
                state = applied
                if on_version is not None and state.version != before:
                    on_version(state)
        finally:
            consumer.close()
        return state

    def _assign(self, consumer: Consumer, state: RunState) -> None:
        consumer.assign([TopicPartition(self.topic, p, o) for p, o in sorted(state.offsets.items())])

    def apply(self, messages: list[Any]) -> RunState | None:
        """One micro-batch (module docstring); the new state, or None if the stored state moved (nothing done)."""
        assert self.state is not None
        old = self.state
        new = RunState(old.job_version, old.version, old.theta, old.velocity, old.total.copy(), list(old.members),
                       dict(old.offsets), old.done, old.seq, dict(old.outcomes), old.max_participations,
                       list(old.evaluations))
        devices = [] if self.shuffled else [int.from_bytes(m.key()[:8], "little") for m in messages
                                            if m.error() is None and m.key()]
        stored = self.redis.hmget(participations_key(self.spec.job_id, self.spec.version), [str(d) for d in devices]) \
            if devices else []
        seen_rounds = {d: int(n or 0) for d, n in zip(devices, stored, strict=True)}
        rounds: dict[int, int] = {}
        members = set(new.members)
        versions: list[int] = []  # the versions made in this micro-batch (the last one is published)

        def count(outcome: str) -> None:
            new.outcomes[outcome] = new.outcomes.get(outcome, 0) + 1

        for msg in messages:
            if msg.error() is not None:
                continue
            new.offsets[msg.partition()] = msg.offset() + 1
            key = msg.key() or b""
            try:
                if len(key) != (0 if self.shuffled else 8):
                    raise TrainingWireError("an update's key is the device's 8-byte pseudonym (none if shuffled)",
                                            "malformed")
                update = decode_update(msg.value() or b"", self.spec)
            except TrainingWireError as exc:
                count(f"refused:{exc.code}")
                continue
            if update.job != self.spec.job_id or update.job_version != self.spec.version:
                continue  # another job's
            device = int.from_bytes(key, "little")  # 0 for a shuffled job's: the edge checked its device
            if new.done or update.model_version != new.version:
                count("refused:closed_version")
            elif not self.shuffled and device in members:
                count("refused:duplicate")
            elif not self.shuffled and seen_rounds.get(device, 0) + rounds.get(device, 0) >= self.spec.max_rounds:
                count("refused:round_limit")
            else:
                new.total = new.total + self._decode(update.columns)
                new.members.append(device)
                if not self.shuffled:
                    members.add(device)
                    rounds[device] = rounds.get(device, 0) + 1
                    new.max_participations = max(new.max_participations, seen_rounds.get(device, 0) + rounds[device])
                count("accepted")
                if len(new.members) == self.spec.batch_size:
                    self._step(new)
                    versions.append(new.version)
                    members.clear()
        if not self._write(new, old.seq, rounds, bool(versions)):
            return None
        for outcome, n in new.outcomes.items():
            JOB_UPDATES.labels(self.spec.job_id, outcome).inc(n - old.outcomes.get(outcome, 0))
        JOB_VERSION.labels(self.spec.job_id).set(new.version)
        JOB_PARTICIPATIONS.labels(self.spec.job_id).set(new.max_participations)
        if new.evaluations:
            JOB_ACCURACY.labels(self.spec.job_id).set(new.evaluations[-1]["accuracy"])
            JOB_LOSS.labels(self.spec.job_id).set(new.evaluations[-1]["loss"])
        self.state = new
        return new

    def _decode(self, columns: dict[str, np.ndarray]) -> np.ndarray:
        """The unbiased P-vector one update stands for (section 13.5; the device divided by the cap's scale)."""
        if self.projection is None:
            return columns["value"].reshape(-1).astype(np.float64)
        return self.projection.decode({"seed": columns["seed"].reshape(-1), "value": columns["value"]})[0]

    def _step(self, state: RunState) -> None:
        gradient = state.total / self.spec.batch_size * self.spec.clip
        stepped = self.optimizer.step(ServerState(state.theta, state.velocity, state.theta, 0), gradient)
        state.theta, state.velocity = stepped.theta, stepped.velocity
        if not np.isfinite(state.theta).all():
            raise RuntimeError("the model diverged (non-finite parameters): lower the job's lr or momentum")
        state.version += 1
        state.total = np.zeros(self.net.size)
        state.members = []
        state.done = state.version >= self.spec.max_versions
        if self.evaluator is not None:
            state.evaluations = thinned([*state.evaluations, {"version": state.version,
                                                              **self.evaluator(state.theta)}])


def status(spec: JobSpec, raw: dict[Any, Any]) -> dict[str, Any]:
    """What `ldp train status JOB --json` shows of a device job's coordinator state (a shuffled job's updates name no
    device: its participations are the edge's bound, `max_rounds`, and `max_participations` is null)."""
    state = RunState.from_redis(raw)
    rounds = spec.max_rounds if spec.shuffle is not None else state.max_participations
    last = state.evaluations[-1] if state.evaluations else {}
    refused = {k.partition(":")[2]: n for k, n in sorted(state.outcomes.items()) if k.startswith("refused:")}
    privacy = job_privacy(spec.epsilon, max(rounds, 1), None if spec.expected_population is None
                          else min(1.0, spec.batch_size / spec.expected_population))
    return {"job": spec.job_id, "job_version": spec.version, "version": state.version, "done": state.done,
            "batch_size": spec.batch_size, "updates_in_version": len(state.members),
            "updates_accepted": state.outcomes.get("accepted", 0), "refused": refused,
            "accuracy": last.get("accuracy"), "accuracy_stderr": last.get("accuracy_stderr"),
            "loss": last.get("loss"), "loss_stderr": last.get("loss_stderr"),
            "epsilon_per_report": spec.epsilon,
            "max_participations": None if spec.shuffle is not None else state.max_participations,
            "max_rounds": spec.max_rounds, "lifetime_epsilon": spec.epsilon * rounds,
            "lifetime_epsilon_bound": spec.epsilon * spec.max_rounds, "privacy": privacy,
            "mechanism": spec.mechanism.name, "model": {"architecture": spec.model.architecture,
                                                        "dims": spec.model.dims},
            "curve": state.evaluations, **central_fields(spec)}
