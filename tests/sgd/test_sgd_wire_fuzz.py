"""The SGD wire formats and their consumers on untrusted bytes: the gradient and model decoders return a valid
object or raise WireError, nothing else; the coordinator's gather step never raises and accounts for every
message; the devices' model follower skips what is not a model of its job."""

from __future__ import annotations

import functools
import random
from collections import Counter
from typing import Any
from unittest import mock

import msgspec
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ldpstream.contract.wire import WireError
from ldpstream.runtime.dlq import Message
from ldpstream.sgd import GRADIENT_MECHANISMS, devices
from ldpstream.sgd.checkpoint import JobState, MemoryCheckpoint
from ldpstream.sgd.coordinator import MALFORMED, REJECT_REASONS, Gathered, GradientGatherer
from ldpstream.sgd.devices import ModelFollower, perturb_gradients
from ldpstream.sgd.training import Trainer, TrainingJob, gradient_mechanism
from ldpstream.sgd.wire import ModelVersion, decode_gradients, decode_model, encode_gradients, encode_model
from tests.fuzzing import isolations, mutate, untrusted

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
JOBS = [TrainingJob(job_id=f"fuzz-{mechanism}", model="logistic", dims=dims, epsilon=2.0, batch_size=10_000,
                    mechanism=mechanism, reduced_dims=reduced)
        for mechanism, dims, reduced in zip(GRADIENT_MECHANISMS, [3, 5, 2, 4, 6], [None, 3, None, None, 2],
                                            strict=True)]
mechanism_of = functools.cache(gradient_mechanism)
OTHER_KNOWN = "other-known"


def gradients_value(job: TrainingJob, devices_: np.ndarray, t: int, rng: np.random.Generator) -> bytes:
    """The perturbed gradients of these devices at version t (random rows of x, y)."""
    trainer = Trainer(job, np.zeros(job.gradient_dims), t) if t else Trainer.start(job)
    x = rng.uniform(-1, 1, (len(devices_), job.dims))
    y = np.where(rng.random(len(devices_)) < 0.5, 1.0, -1.0)
    return encode_gradients(perturb_gradients(trainer, mechanism_of(job), x, y, devices_.astype(np.uint64), rng))


def model_value(seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    job = JOBS[int(rng.integers(len(JOBS)))]
    return encode_model(ModelVersion(job, int(rng.integers(0, 50)), rng.normal(size=job.gradient_dims),
                                     bool(rng.random() < 0.2), "max_iterations" if rng.random() < 0.2 else ""))


def gradients_of_seed(seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    job = JOBS[int(rng.integers(len(JOBS)))]
    return gradients_value(job, rng.integers(0, 2**63, int(rng.integers(1, 5)), dtype=np.uint64),
                           int(rng.integers(0, 3)), rng)


def result_or_none(fn: Any, data: bytes) -> Any:
    """fn(data), or None if it raises WireError (anything else fails the test)."""
    try:
        return fn(data)
    except WireError:
        return None


@FUZZ
@given(untrusted(st.integers(0, 2**32 - 1).map(gradients_of_seed)))
def test_decode_gradients_returns_gradients_or_raises_wire_error(data: bytes) -> None:
    batch = result_or_none(decode_gradients, data)
    if batch is not None:
        assert len(batch) >= 1 and batch.devices.dtype == np.dtype("<u8") and isinstance(batch.job, str)
        assert all(isinstance(v, np.ndarray) for v in batch.columns.values())


@FUZZ
@given(untrusted(st.integers(0, 2**32 - 1).map(model_value)))
def test_decode_model_returns_a_model_or_raises_wire_error(data: bytes) -> None:
    model = result_or_none(decode_model, data)
    if model is not None:
        assert isinstance(model.job, TrainingJob) and model.t >= 0
        assert model.params.shape == (model.job.gradient_dims,) and np.isfinite(model.params).all()


JOB = JOBS[1]  # PM over 3 of 5 dimensions (MGD-DR): a sampling mechanism with an index and a value column
GATHERER = GradientGatherer(JOB, lambda job: job in (JOB.job_id, OTHER_KNOWN))
T = 2


def state() -> JobState:
    fresh = MemoryCheckpoint().create(JOB, {})
    return JobState(JOB, T, fresh.params, fresh.last_step, 0, fresh.gradient_sum)


def mixed_gradients(seed: int, valid: int, bad: int) -> tuple[list[Message], np.ndarray]:
    """`valid` messages of 1-3 fresh devices at version T, and `bad` mutations of them or arbitrary bytes, mixed."""
    rng = np.random.default_rng(seed)
    mutator = random.Random(seed)
    fresh = rng.permutation(10_000).astype(np.uint64) + 1
    sizes = rng.integers(1, 4, valid)
    groups = np.split(fresh[:int(sizes.sum())], np.cumsum(sizes)[:-1]) if valid else []
    values = [gradients_value(JOB, group, T, rng) for group in groups]
    originals = values or [gradients_value(JOB, np.array([1], dtype=np.uint64), T, rng)]
    for _ in range(bad):
        bad_value = (mutate(mutator.choice(originals), mutator) if mutator.random() < 0.9
                     else mutator.randbytes(mutator.randint(0, 64)))
        values.insert(mutator.randint(0, len(values)), bad_value)
    valid_devices = np.concatenate(groups) if valid else np.zeros(0, dtype=np.uint64)
    return [Message(offset, value) for offset, value in enumerate(values)], valid_devices


def rows_of(value: bytes) -> int:
    try:
        return len(decode_gradients(value))
    except WireError:
        return 0


def assert_accounted(messages: list[Message], valid_devices: np.ndarray, out: Gathered) -> None:
    """Every message not of another known job is counted in the outcomes or dead-lettered; every valid device is
    accepted exactly once."""
    by_offset = {m.offset: m for m in messages}
    others = {m.offset for m in messages if _job_of(m.value) == OTHER_KNOWN}
    whole = Counter(d.offset for d in out.dead_letters if d.rows is None)
    assert max(whole.values(), default=1) == 1 and not set(whole) & others
    row_rejects = 0
    for d in out.dead_letters:
        assert d.reason in REJECT_REASONS and d.value == by_offset[d.offset].value
        if d.rows is not None:
            assert d.offset not in whole and len(d.rows) == len(set(d.rows))
            row_rejects += len(d.rows)
    counted = {o: rows_of(m.value) for o, m in by_offset.items() if o not in whole and o not in others}
    outcomes = out.update.outcomes
    assert outcomes.get("accepted", 0) + outcomes.get("dropped:stale", 0) == sum(counted.values()) - row_rejects
    rejected = sum(n for key, n in outcomes.items() if key.startswith("rejected:"))
    assert len(whole) + row_rejects <= rejected <= sum(max(1, rows_of(by_offset[o].value)) for o in whole) + row_rejects
    accepted = out.update.devices
    assert len(accepted) == len(np.unique(accepted)) == outcomes.get("accepted", 0)
    assert np.isin(valid_devices, accepted).all()
    assert (out.update.first_offset, out.update.last_offset) == (messages[0].offset, messages[-1].offset)


def _job_of(value: bytes) -> str | None:
    try:
        return decode_gradients(value).job
    except WireError:
        return None


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32 - 1), st.integers(0, 8), st.integers(1, 12))
def test_gather_never_raises_and_every_message_is_accounted_for(seed: int, valid: int, bad: int) -> None:
    messages, valid_devices = mixed_gradients(seed, valid, bad)
    with isolations("ldpstream.sgd.coordinator") as isolated:
        out = GATHERER.gather(state(), "g:0", messages)
    assert_accounted(messages, valid_devices, out)
    assert not isolated, [d.detail for d in isolated]


def test_a_gradient_message_with_a_job_name_that_is_not_utf8_is_malformed() -> None:
    bad = msgspec.msgpack.encode([1, msgspec.Raw(b"\xa1\xff"), T, b"\0" * 8, []])
    out = GATHERER.gather(state(), "g:0", [Message(0, bad)])
    assert [(d.reason, d.rows) for d in out.dead_letters] == [(MALFORMED, None)]
    assert "UnicodeDecodeError" in out.dead_letters[0].detail


def test_a_failing_lookup_of_known_jobs_is_raised_not_blamed_on_messages() -> None:
    def down(job: str) -> bool:
        raise ConnectionError("redis is down")

    other = gradients_value(JOB.model_copy(update={"job_id": "someone-else"}), np.array([1], np.uint64), T,
                            np.random.default_rng(0))
    with pytest.raises(ConnectionError, match="redis is down"):
        GradientGatherer(JOB, down).gather(state(), "g:0", [Message(0, other)])


class FakeConsumer:
    """What `ModelFollower` reads of a confluent consumer: `consume` hands out the messages once."""

    def __init__(self, messages: list[Any]) -> None:
        self.messages = messages

    def assign(self, partitions: list[Any]) -> None:
        pass

    def consume(self, n: int, timeout: float) -> list[Any]:
        out, self.messages = self.messages, []
        return out


class FakeMessage:
    def __init__(self, key: bytes | None, value: bytes | None) -> None:
        self._key, self._value = key, value

    def error(self) -> None:
        return None

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(untrusted(st.integers(0, 2**32 - 1).map(model_value)), max_size=8), st.randoms())
def test_the_model_follower_keeps_the_last_model_of_its_job_and_skips_the_rest(
        bad: list[bytes], rng: random.Random) -> None:
    job = JOBS[0]
    good = [ModelVersion(job, t, np.full(job.gradient_dims, float(t))) for t in (0, 1, 2)]
    impostor = ModelVersion(job.model_copy(update={"dims": job.dims + 1}), 9, np.zeros(job.dims + 1))
    messages = [FakeMessage(job.job_id.encode(), v) for v in [*bad, encode_model(impostor)]]
    messages += [FakeMessage(job.job_id.encode(), None), FakeMessage(b"other", encode_model(good[0]))]
    rng.shuffle(messages)
    places = sorted(rng.sample(range(len(messages) + len(good)), len(good)))
    for place, m in zip(places, good, strict=True):  # the coordinator's versions, in the order it published them
        messages.insert(place, FakeMessage(job.job_id.encode(), encode_model(m)))
    with mock.patch.object(devices, "consumer_client", lambda *args, **kwargs: FakeConsumer(messages)):
        follower = ModelFollower("unused:0", job)
    latest = follower.poll(0.0)
    expected = [model for m in messages if m.key() == job.job_id.encode() and (model := decoded(m.value())) is not None
                and model.job == job][-1]
    assert latest is not None and latest.t == expected.t and latest.job == job
    assert follower.skipped >= 1  # the impostor at least


def decoded(value: bytes | None) -> ModelVersion | None:
    """The model in a message's value, or None."""
    try:
        return decode_model(value) if value else None
    except WireError:
        return None

