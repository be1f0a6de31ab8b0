"""The coordinator's checkpoint contract, run on both backends (Redis needs the running local Redis)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import numpy as np
import pytest

from ldpstream.runtime.settings import Settings
from ldpstream.sgd.checkpoint import Checkpoint, CheckpointError, GradientUpdate, MemoryCheckpoint, RedisCheckpoint
from ldpstream.sgd.training import TrainingJob

START = {"g:0": 9, "g:1": 10}  # the applied offsets a job starts from: the partitions' ends at its creation


def make_job(job_id: str, **changes: object) -> TrainingJob:
    fields: dict[str, object] = {"model": "linear", "dims": 3, "epsilon": 1.0, "batch_size": 4, **changes}
    return TrainingJob(job_id=job_id, **fields)  # type: ignore[arg-type]


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.integration)])
def store(request: pytest.FixtureRequest) -> Iterator[tuple[Checkpoint, TrainingJob]]:
    job = make_job(f"test-{uuid.uuid4().hex[:10]}")
    if request.param == "memory":
        yield MemoryCheckpoint(), job
        return
    cfg: Settings = request.getfixturevalue("live_services")
    s = RedisCheckpoint(cfg.redis)
    yield s, job
    s.delete(job.job_id)


def update(job: TrainingJob, offset: int, devices: list[int], t: int = 0, count: int = 0, source: str = "g:0",
           outcomes: dict[str, int] | None = None) -> GradientUpdate:
    d = np.asarray(devices, dtype=np.uint64)
    return GradientUpdate(job.job_id, source, offset, offset, t, count, d, np.array([1.0, -0.5, 0.25]) * len(d),
                          {"accepted": len(d), **(outcomes or {})})


def test_create_starts_at_version_zero_and_is_idempotent(store: tuple[Checkpoint, TrainingJob]) -> None:
    s, job = store
    state = s.create(job, {"g:0": 41, "g:1": -1}, metadata='{"devices": 10}')
    assert (state.t, state.count, state.done, state.metadata) == (0, 0, False, '{"devices": 10}')
    assert state.params.tolist() == [0.0, 0.0, 0.0] and state.last_step == float("inf")
    assert s.offsets(job.job_id) == {"g:0": 41, "g:1": -1}
    s.accumulate(update(job, 42, [1]))
    again = s.create(job, {"g:0": 99})
    assert again.count == 1 and s.offsets(job.job_id)["g:0"] == 42
    with pytest.raises(CheckpointError, match="different spec"):
        s.create(make_job(job.job_id, epsilon=2.0), {})
    assert s.load("no-such-job") is None


def test_accumulate_adds_gradients_participants_counters_and_the_offset(
        store: tuple[Checkpoint, TrainingJob]) -> None:
    s, job = store
    s.create(job, START)
    assert s.accumulate(update(job, 10, [1, 2], outcomes={"dropped:stale": 3})).status == "applied"
    assert s.accumulate(update(job, 11, [2**64 - 1], count=2, source="g:1")).status == "applied"
    state = s.load(job.job_id)
    assert state is not None and state.count == 3
    np.testing.assert_allclose(state.gradient_sum, [3.0, -1.5, 0.75])
    assert s.participants(job.job_id) == {1: 0, 2: 0, 2**64 - 1: 0}
    assert s.versions(job.job_id) == {0: 3}
    assert s.outcomes(job.job_id) == {"accepted": 3, "dropped:stale": 3}
    assert s.offsets(job.job_id) == {"g:0": 10, "g:1": 11}


def test_a_replay_is_skipped_and_an_overlap_writes_nothing(store: tuple[Checkpoint, TrainingJob]) -> None:
    s, job = store
    s.create(job, START)
    s.accumulate(update(job, 10, [1, 2]))
    assert s.accumulate(update(job, 10, [3], count=2)).status == "skipped"
    assert s.accumulate(update(job, 4, [3], count=2)).status == "skipped"
    overlapping = GradientUpdate(job.job_id, "g:0", 9, 12, 0, 2, np.array([3], np.uint64), np.ones(3), {})
    assert s.accumulate(overlapping).status == "overlap"
    state = s.load(job.job_id)
    assert state is not None and state.count == 2 and s.outcomes(job.job_id) == {"accepted": 2}


def test_a_batch_beyond_the_applied_offset_is_a_gap_and_writes_nothing(
        store: tuple[Checkpoint, TrainingJob]) -> None:
    s, job = store
    s.create(job, START)
    assert s.accumulate(update(job, 10, [1, 2])).status == "applied"
    assert s.accumulate(update(job, 15, [3], count=2)).status == "gap"  # 11-14 never applied: went back in time
    assert s.accumulate(update(job, 4, [4], count=2, source="g:7")).status == "gap"  # no offset: it starts at 0
    state = s.load(job.job_id)
    assert state is not None and state.count == 2 and s.offsets(job.job_id) == {"g:0": 10, "g:1": 10}
    assert sorted(s.participants(job.job_id)) == [1, 2] and s.outcomes(job.job_id) == {"accepted": 2}
    assert s.accumulate(update(job, 11, [3], count=2)).status == "applied"  # read again from applied + 1
    assert s.accumulate(update(job, 0, [4], count=3, source="g:7")).status == "applied"


def test_gradients_kafka_no_longer_has_are_skipped_once(store: tuple[Checkpoint, TrainingJob]) -> None:
    s, job = store
    s.create(job, START)
    assert s.skip_lost(job.job_id, "g:0", 9, 30)  # retention deleted 10-29 before they were applied
    assert not s.skip_lost(job.job_id, "g:0", 9, 30)  # the offset has moved: nothing happens
    assert s.skip_lost(job.job_id, "g:7", -1, 5)  # a partition without an offset
    assert s.offsets(job.job_id) == {"g:0": 29, "g:1": 10, "g:7": 4}
    assert s.accumulate(update(job, 30, [1])).status == "applied"
    assert s.accumulate(update(job, 5, [2], count=1, source="g:7")).status == "applied"


def test_a_device_takes_part_once_per_job(store: tuple[Checkpoint, TrainingJob]) -> None:
    s, job = store
    s.create(job, START)
    s.accumulate(update(job, 10, [1, 2]))
    result = s.accumulate(update(job, 11, [3, 2, 2**63 + 256], count=2))
    assert result.status == "duplicates" and result.duplicates.tolist() == [2]
    state = s.load(job.job_id)
    assert state is not None and state.count == 2 and s.offsets(job.job_id)["g:0"] == 10
    assert s.accumulate(update(job, 11, [3, 2**63 + 256], count=2)).status == "applied"
    assert sorted(s.participants(job.job_id)) == [1, 2, 3, 2**63 + 256]


def test_a_stale_view_of_the_version_or_count_is_a_conflict(store: tuple[Checkpoint, TrainingJob]) -> None:
    s, job = store
    s.create(job, START)
    s.accumulate(update(job, 10, [1]))
    assert s.accumulate(update(job, 11, [2], count=0)).status == "conflict"
    assert s.accumulate(update(job, 11, [2], t=1, count=1)).status == "conflict"
    assert s.accumulate(update(job, 11, [], count=0, outcomes={"dropped:stale": 1})).status == "applied"


def test_advance_needs_g_gradients_and_restarts_the_sum(store: tuple[Checkpoint, TrainingJob]) -> None:
    s, job = store
    s.create(job, START)
    s.accumulate(update(job, 10, [1, 2, 3]))
    state = s.load(job.job_id)
    assert state is not None
    new = state.trainer().apply_mean(state.gradient_sum / 4)
    assert not s.advance(job.job_id, 0, new, None)  # 3 of g = 4
    s.accumulate(update(job, 11, [4], count=3))
    state = s.load(job.job_id)
    assert state is not None
    new = state.trainer().apply_mean(state.gradient_sum / state.count)
    assert s.advance(job.job_id, 0, new, None)
    assert not s.advance(job.job_id, 0, new, None)  # already at version 1
    after = s.load(job.job_id)
    assert after is not None and (after.t, after.count, after.done) == (1, 0, False)
    np.testing.assert_array_equal(after.params, new.params)
    assert after.last_step == new.last_step and after.gradient_sum.tolist() == [0.0, 0.0, 0.0]
    assert s.accumulate(update(job, 12, [5], t=1)).status == "applied"
    assert s.participants(job.job_id)[5] == 1 and s.versions(job.job_id) == {0: 4, 1: 1}


def test_advance_and_finish_set_the_final_version(store: tuple[Checkpoint, TrainingJob]) -> None:
    s, job = store
    s.create(job, START)
    s.accumulate(update(job, 10, [1, 2, 3, 4]))
    state = s.load(job.job_id)
    assert state is not None
    assert s.advance(job.job_id, 0, state.trainer().apply_mean(state.gradient_sum / 4), "max_iterations")
    done = s.load(job.job_id)
    assert done is not None and done.done and done.stop_reason == "max_iterations" and done.t == 1
    assert s.accumulate(update(job, 11, [7], t=1)).status == "conflict"  # nothing is accepted once done
    assert not s.finish(job.job_id, 1, "converged")


def test_finish_keeps_the_parameters(store: tuple[Checkpoint, TrainingJob]) -> None:
    s, job = store
    s.create(job, START)
    s.accumulate(update(job, 10, [1]))
    assert not s.finish(job.job_id, 3, "population_exhausted")
    assert s.finish(job.job_id, 0, "population_exhausted")
    state = s.load(job.job_id)
    assert state is not None and state.done and state.count == 1 and state.stop_reason == "population_exhausted"


def test_large_batches_cross_the_script_chunks(store: tuple[Checkpoint, TrainingJob]) -> None:
    s, job = store
    s.create(job, START)
    devices = np.arange(1, 5001, dtype=np.uint64) * np.uint64(2**40)
    assert s.accumulate(update(job, 10, devices.tolist())).status == "applied"
    again = s.accumulate(update(job, 11, [7, *devices[4000:4003].tolist()], count=5000))
    assert again.status == "duplicates" and sorted(again.duplicates.tolist()) == devices[4000:4003].tolist()
    assert len(s.participants(job.job_id)) == 5000
