"""The coordinator's pure micro-batch step: validation reasons, staleness, once per device, exactly g."""

from __future__ import annotations

import msgspec
import numpy as np
import pytest

from ldpstream.aggregator.processing import Message
from ldpstream.sgd.checkpoint import JobState, MemoryCheckpoint
from ldpstream.sgd.coordinator import GradientGatherer
from ldpstream.sgd.devices import perturb_gradients
from ldpstream.sgd.training import Trainer, TrainingJob, gradient_mechanism
from ldpstream.sgd.wire import encode_gradients

JOB = TrainingJob(job_id="gather", model="logistic", dims=3, epsilon=2.0, batch_size=5)
RNG = np.random.default_rng(11)


def gradients_message(offset: int, devices: list[int], t: int = 0, job: TrainingJob = JOB) -> Message:
    trainer = Trainer.start(job) if t == 0 else Trainer(job, np.zeros(job.gradient_dims), t)
    x = RNG.uniform(-1, 1, size=(len(devices), job.dims))
    y = np.where(RNG.random(len(devices)) < 0.5, 1.0, -1.0)
    batch = perturb_gradients(trainer, gradient_mechanism(job), x, y, np.asarray(devices, np.uint64), RNG)
    return Message(offset, encode_gradients(batch))


def tampered(message: Message, edit: object) -> Message:
    envelope = msgspec.msgpack.decode(message.value)
    edit(envelope)  # type: ignore[operator]
    return Message(message.offset, msgspec.msgpack.encode(envelope))


def state(t: int = 0, count: int = 0) -> JobState:
    fresh = MemoryCheckpoint().create(JOB, {})
    return JobState(JOB, t, fresh.params, fresh.last_step, count, fresh.gradient_sum)


GATHERER = GradientGatherer(JOB, lambda job: job in ("gather", "other-known"))


def test_valid_gradients_are_accepted_with_the_sum_of_their_unbiased_vectors() -> None:
    messages = [gradients_message(7, [1, 2]), gradients_message(8, [3])]
    out = GATHERER.gather(state(), "g:0", messages)
    assert out.dead_letters == [] and out.update.outcomes == {"accepted": 3}
    assert out.update.devices.tolist() == [1, 2, 3] and (out.update.first_offset, out.update.last_offset) == (7, 8)
    mech = gradient_mechanism(JOB)
    from ldpstream.sgd.wire import decode_gradients

    dense = [mech.dense({k: v for k, v in decode_gradients(m.value).columns.items()}) for m in messages]
    np.testing.assert_allclose(out.update.gradient_sum, np.concatenate(dense).sum(axis=0))


def test_only_the_g_that_version_t_still_needs_are_taken_the_rest_are_stale() -> None:
    out = GATHERER.gather(state(count=3), "g:0", [gradients_message(1, [1, 2, 3]), gradients_message(2, [4, 5])])
    assert out.update.devices.tolist() == [1, 2] and out.update.outcomes == {"accepted": 2, "dropped:stale": 3}
    done = GATHERER.gather(JobState(JOB, 0, np.zeros(3), 1.0, 0, np.zeros(3), done=True), "g:0",
                           [gradients_message(1, [1])])
    assert done.update.outcomes == {"dropped:stale": 1}


def test_old_versions_are_stale_and_future_ones_rejected() -> None:
    out = GATHERER.gather(state(t=4), "g:0", [gradients_message(1, [1, 2], t=3), gradients_message(2, [3], t=5),
                                              gradients_message(3, [4], t=4)])
    assert out.update.devices.tolist() == [4]
    assert out.update.outcomes == {"accepted": 1, "dropped:stale": 2, "rejected:future_version": 1}
    assert [(d.offset, d.reason, d.rows) for d in out.dead_letters] == [(2, "future_version", (0,))]


def test_with_max_staleness_older_versions_count_toward_the_current_one() -> None:
    job = JOB.model_copy(update={"max_staleness": 1})
    gatherer = GradientGatherer(job, lambda j: True)
    current = JobState(job, 4, np.zeros(3), 1.0, 0, np.zeros(3))
    out = gatherer.gather(current, "g:0", [gradients_message(1, [1], t=3, job=job), gradients_message(2, [2], t=2,
                                                                                                     job=job)])
    assert out.update.outcomes == {"accepted": 1, "dropped:stale": 1}


def test_a_device_twice_in_a_batch_or_already_a_participant_is_rejected() -> None:
    messages = [gradients_message(1, [1, 2, 1]), gradients_message(2, [2, 9, 3])]
    out = GATHERER.gather(state(), "g:0", messages, rejected=frozenset({3}))
    assert out.update.devices.tolist() == [1, 2, 9]
    assert out.update.outcomes == {"accepted": 3, "rejected:duplicate": 3}
    assert sorted((d.offset, d.reason, d.rows) for d in out.dead_letters) == [(1, "duplicate", (2,)),
                                                                              (2, "duplicate", (0, 2))]


@pytest.mark.parametrize(("edit", "reason"), [
    (lambda e: e.__setitem__(0, 9), "unknown_wire_version"),
    (lambda e: e.__setitem__(4, []), "wrong_shape"),
    (lambda e: e[4][0].__setitem__(2, e[4][0][2][:8]), "wrong_shape"),
    (lambda e: e[4][1].__setitem__(0, "gradient"), "wrong_shape"),
    (lambda e: e.__setitem__(1, "nobody"), "unknown_job"),
])
def test_bad_messages_are_rejected_whole_with_their_reason(edit: object, reason: str) -> None:
    good = gradients_message(5, [1, 2])
    out = GATHERER.gather(state(), "g:0", [tampered(good, edit), gradients_message(6, [3])])
    assert [(d.offset, d.reason, d.rows) for d in out.dead_letters] == [(5, reason, None)]
    assert out.dead_letters[0].value != good.value and out.update.devices.tolist() == [3]


def test_undecodable_bytes_and_other_known_jobs() -> None:
    out = GATHERER.gather(state(), "g:0", [Message(1, b"\xc1junk"), gradients_message(2, [1], job=JOB.model_copy(
        update={"job_id": "other-known"}))])
    assert [(d.reason, d.rows) for d in out.dead_letters] == [("malformed", None)]
    assert out.update.outcomes == {"rejected:malformed": 1}  # the other job's gradient is its coordinator's


def test_reports_outside_the_mechanisms_range_are_rejected_per_device() -> None:
    bound = gradient_mechanism(JOB).schema.columns[1].high

    def edit(envelope: list) -> None:  # type: ignore[type-arg]
        values = np.frombuffer(envelope[4][1][2], dtype="<f8").copy()
        values[1] = bound * 1.01
        values[2] = np.nan
        envelope[4][1][2] = values.tobytes()
        index = np.frombuffer(envelope[4][0][2], dtype="<i8").copy()
        index[3] = 3  # attribute 3 of a 3-dimensional gradient
        envelope[4][0][2] = index.tobytes()

    out = GATHERER.gather(state(), "g:0", [tampered(gradients_message(1, [1, 2, 3, 4, 5]), edit)])
    assert [(d.reason, d.rows) for d in out.dead_letters] == [("out_of_range", (1, 2, 3))]
    assert out.update.devices.tolist() == [1, 5] and out.update.outcomes["rejected:out_of_range"] == 3


def test_repeated_sampled_attributes_are_not_a_mechanism_output() -> None:
    job = TrainingJob(job_id="gather", model="linear", dims=4, epsilon=6.0, batch_size=5)  # k = 2 attributes
    gatherer = GradientGatherer(job, lambda j: True)

    def edit(envelope: list) -> None:  # type: ignore[type-arg]
        index = np.frombuffer(envelope[4][0][2], dtype="<i8").copy().reshape(-1, 2)
        index[0] = [1, 1]
        envelope[4][0][2] = index.tobytes()

    fresh = JobState(job, 0, np.zeros(4), 1.0, 0, np.zeros(4))
    out = gatherer.gather(fresh, "g:0", [tampered(gradients_message(1, [1, 2], job=job), edit)])
    assert [(d.reason, d.rows) for d in out.dead_letters] == [("out_of_range", (0,))]
