"""A shuffled job's updates in the shuffler, without Kafka (`ldpstream.shuffler.jobs`), and its central epsilon:
exactly B of a version's updates go out, each one of those held, re-encoded as the device's; a release marks a
re-read version's updates taken; the epsilon shown is the general bound's at n = B."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ldpstream.contract.training import (
    JobSpec,
    TrainingWireError,
    central_fields,
    decode_update,
    encode_update,
    job_central,
)
from ldpstream.mechanisms.shuffle import window_bounds
from ldpstream.sgd.jobfile import complete_job
from ldpstream.shuffler.accounting import job_figures
from ldpstream.shuffler.batch import WindowRows, rows_of
from ldpstream.shuffler.jobs import as_rows, decoded, release_size, released_messages
from ldpstream.shuffler.state import Pending, Release, ShufflerState


def spec(**fields: Any) -> JobSpec:
    base = {"job_id": "tiny", "version": 2, "model": {"architecture": "softmax", "dims": [3, 2]},
            "mechanism": {"name": "projunit", "k": 4}, "clip": 1.0, "epsilon": 1.0, "max_rounds": 3,
            "batch_size": 100, "max_versions": 5, "lr": 0.5, "max_examples": 4, "version_validity_s": 60,
            "shuffle": {"delta": 1e-6, "min_batch": 100}}
    return complete_job({**base, **fields})


def updates(job: JobSpec, n: int, model_version: int) -> list[bytes]:
    """n updates whose seed column is their index (each tells which it was): projunit's k = 4 values of P = 8."""
    return [encode_update(job.job_id, job.version, model_version,
                          {"seed": np.array([i], dtype="<u8"), "value": np.full((1, 4), i / 7, dtype="<f4")})
            for i in range(n)]


def test_exactly_b_of_a_version_go_out_each_one_held_re_encoded_as_sent() -> None:
    job = spec()
    sent = updates(job, 130, 3)
    pending = Pending()
    held = pending.add(ShufflerState(), job.version, as_rows([decoded(b, {job.version: job}) for b in sent]),
                       np.zeros(130, dtype=np.int64), np.arange(130))
    assert held == 130 and pending.held(job.version, 2**62) == [3]
    out = list(released_messages(job, 3, pending.take(job.version, [3])))
    assert len(out) == 100 and set(out) <= set(sent) and len(set(out)) == 100  # B of them, none twice
    assert {decode_update(b, job).model_version for b in out} == {3} and pending.total == 0


def test_a_version_spilled_to_disk_goes_out_the_same(tmp_path: Path) -> None:
    job = spec()
    sent = updates(job, 130, 1)
    rows = WindowRows(memory_rows=40, spill_dir=tmp_path, max_rows=200)  # 10 bucket files
    for part in (sent[:60], sent[60:]):
        rows.add(rows_of(as_rows([decoded(b, {job.version: job}) for b in part])))
    assert rows.disk is not None
    out = list(released_messages(job, 1, rows))
    assert len(set(out)) == 100 and set(out) <= set(sent) and not any(tmp_path.iterdir())


def test_a_release_marks_the_updates_of_its_version_read_before_it() -> None:
    job = spec()
    rows = as_rows([decoded(b, {job.version: job}) for b in updates(job, 10, 0) + updates(job, 10, 1)])
    state = ShufflerState([Release(job.version, 0, {0: 15})], {job.version: 0})
    pending = Pending()
    held = pending.add(state, job.version, rows, np.zeros(20, dtype=np.int64), np.arange(20))
    # offsets 0-9 (version 0, read before the release): taken; 10-19 (version 1): held
    assert held == 10 and pending.held(job.version, 2**62) == [1]


def test_an_update_of_no_published_version_is_refused() -> None:
    job = spec()
    with pytest.raises(TrainingWireError):
        decoded(updates(job, 1, 0)[0], {3: spec(version=3)})
    with pytest.raises(TrainingWireError):
        decoded(b"\x93\x01\x02", {job.version: job})


def test_the_central_epsilon_is_the_general_bound_at_b_and_the_release_waits_for_b() -> None:
    job = spec()
    bound = min(window_bounds(1.0, 100, 1e-6).values())
    assert job_central(job) == (bound, 1e-6, "fmt21_numerical") and bound < 0.7  # 0.644 at eps 1, n 100
    assert central_fields(job) == {"central_epsilon": bound, "delta": 1e-6}
    assert central_fields(spec(shuffle=None)) == {"central_epsilon": None, "delta": None}
    figures = job_figures(job, 4, 123)
    assert (figures.spec_version, figures.window_ms, figures.reports, figures.epsilon) == (2, 4, 100, bound)
    assert all(100 <= release_size(job) <= 110 for _ in range(50))
    assert release_size(spec(batch_size=500)) == 500
