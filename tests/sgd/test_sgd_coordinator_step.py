"""One implementation of the math, two drivers: the Kafka coordinator's gather-checkpoint-update path (here on the
memory checkpoint, no Kafka) gives the model the offline driver's `Trainer.apply` gives on the same reports. And
that path's offset guard: a checkpoint gone back in time, gradients Kafka's retention deleted."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from confluent_kafka import TopicPartition

import ldpstream.sgd.coordinator as coordinator_module
from ldpstream.aggregator.processing import Message
from ldpstream.sgd.checkpoint import MemoryCheckpoint
from ldpstream.sgd.coordinator import Coordinator
from ldpstream.sgd.datasets import synthetic
from ldpstream.sgd.devices import device_pseudonyms, perturb_gradients
from ldpstream.sgd.training import Trainer, TrainingJob, gradient_mechanism
from ldpstream.sgd.wire import decode_gradients, encode_gradients


def coordinator_for(job: TrainingJob) -> tuple[Coordinator, MemoryCheckpoint]:
    store = MemoryCheckpoint()
    coordinator = Coordinator(job, "unused:9092", store)
    coordinator.state = store.create(job, {})
    return coordinator, store


@pytest.mark.parametrize("job", [
    TrainingJob(job_id="same-math", model="logistic", dims=6, epsilon=2.0, mechanism="hm", batch_size=50,
                max_iterations=4),
    TrainingJob(job_id="same-math-dr", model="linear", dims=8, epsilon=1.0, mechanism="duchi", batch_size=40,
                reduced_dims=3, projection_seed=5, max_iterations=4),
])
def test_the_coordinator_path_equals_trainer_apply_on_the_same_reports(job: TrainingJob) -> None:
    data = synthetic(job.model, 400, job.dims, seed=1)
    coordinator, store = coordinator_for(job)
    mechanism = gradient_mechanism(job)
    pseudonyms = device_pseudonyms(job.job_id, 400)
    rng = np.random.default_rng(2)
    offline = Trainer.start(job)
    g, offset = job.mini_batch_size, 0
    for version in range(4):
        assert coordinator.state is not None and coordinator.state.t == version
        rows = np.arange(version * g, (version + 1) * g)
        sent = Trainer(job, coordinator.state.params, version)  # what the devices read from ldp.sgd.models
        messages = [encode_gradients(perturb_gradients(sent, mechanism, data.x[part], data.y[part], pseudonyms[part],
                                                       rng)) for part in np.array_split(rows, 3)]
        for message in messages:  # one micro-batch per message
            coordinator.handle_partition(0, [Message(offset, message)])
            offset += 1
        coordinator._step()
        dense = np.concatenate([mechanism.dense(coordinator.gatherer.reports(decode_gradients(m))) for m in messages])
        offline = offline.apply(dense)
        state = store.load(job.job_id)
        assert state is not None
        np.testing.assert_allclose(state.params, offline.params, rtol=1e-12, atol=1e-12)
    final = store.load(job.job_id)
    assert final is not None and final.done and final.stop_reason == "max_iterations" and final.t == 4
    assert store.versions(job.job_id) == dict.fromkeys(range(4), g)


def test_a_population_that_cannot_fill_the_version_finishes_the_job() -> None:
    job = TrainingJob(job_id="short", model="svm", dims=2, epsilon=1.0, batch_size=10, expected_population=25)
    coordinator, store = coordinator_for(job)
    mechanism = gradient_mechanism(job)
    rng = np.random.default_rng(0)
    data = synthetic("svm", 25, 2, seed=0)
    pseudonyms = device_pseudonyms(job.job_id, 25)
    for version, rows in enumerate((np.arange(10), np.arange(10, 20))):
        batch = perturb_gradients(Trainer(job, coordinator.state.params, version), mechanism,  # type: ignore[union-attr]
                                  data.x[rows], data.y[rows], pseudonyms[rows], rng)
        coordinator.handle_partition(0, [Message(version, encode_gradients(batch))])
        coordinator._step()
    state = store.load("short")
    assert state is not None and state.t == 2 and state.done and state.stop_reason == "population_exhausted"


def test_a_checkpoint_that_went_back_in_time_is_noticed_and_nothing_is_written() -> None:
    job = TrainingJob(job_id="back", model="linear", dims=2, epsilon=1.0, batch_size=10)
    coordinator, store = coordinator_for(job)
    data = synthetic("linear", 6, 2, seed=0)
    pseudonyms = device_pseudonyms(job.job_id, 6)
    rng = np.random.default_rng(0)
    trainer = Trainer.start(job)
    messages = [encode_gradients(perturb_gradients(trainer, gradient_mechanism(job), data.x[rows], data.y[rows],
                                                   pseudonyms[rows], rng)) for rows in ([0, 1], [2, 3], [4, 5])]
    assert coordinator.handle_partition(0, [Message(0, messages[0])])
    assert not coordinator.handle_partition(0, [Message(4, messages[1])])  # offsets 1-3 were never applied: a gap
    held = store.load(job.job_id)
    assert held is not None and held.count == 2
    coordinator.state = replace(held, count=3)  # the coordinator saw more gradients stored than there are now
    assert not coordinator.handle_partition(0, [Message(1, messages[2])])
    assert store.offsets(job.job_id) == {"ldp.sgd.gradients:0": 0} and len(store.participants(job.job_id)) == 2
    coordinator.state = held
    assert coordinator.handle_partition(0, [Message(1, messages[2])]) and store.versions(job.job_id) == {0: 4}


def test_gradients_deleted_by_retention_are_skipped_when_the_partitions_are_assigned(
        monkeypatch: pytest.MonkeyPatch) -> None:
    job = TrainingJob(job_id="retention", model="linear", dims=2, epsilon=1.0, batch_size=10)
    store = MemoryCheckpoint()
    coordinator = Coordinator(job, "unused:9092", store)
    store.create(job, {"ldp.sgd.gradients:0": 9, "ldp.sgd.gradients:1": 4})

    class Consumer:
        """Partition 0's log starts at 3 (nothing lost), partition 1's at 20 (15-19 deleted, never applied)."""

        assigned: list[TopicPartition] = []

        def get_watermark_offsets(self, tp: TopicPartition, timeout: float) -> tuple[int, int]:
            return (3, 50) if tp.partition == 0 else (20, 60)

        def assign(self, partitions: list[TopicPartition]) -> None:
            self.assigned = partitions

    consumer = Consumer()
    monkeypatch.setattr(coordinator_module, "topic_partitions", lambda bootstrap, topic: 2)
    coordinator._assign(consumer)  # type: ignore[arg-type]
    assert [(tp.partition, tp.offset) for tp in consumer.assigned] == [(0, 10), (1, 20)]
    assert store.offsets(job.job_id) == {"ldp.sgd.gradients:0": 9, "ldp.sgd.gradients:1": 19}
