"""A training job's status (`ldpstream.sgd.jobstatus.job_status`, what `ldp train status JOB --json` prints and the
read API serves) from its real coordinator's state in the real Redis (tests/readapi/job_support.py): an unknown job,
a job whose coordinator evaluates nothing, the curve one point per version, oldest first; the curve kept bounded."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from ldpstream.runtime.jobs import read_jobs
from ldpstream.runtime.redis import redis_client
from ldpstream.runtime.settings import Settings
from ldpstream.sgd.jobrun import MAX_CURVE, thinned
from ldpstream.sgd.jobstatus import job_status
from tests.readapi.job_support import ACCEPTED, HELD_OUT_ROWS, REFUSED, VERSIONS, TrainedJob, trained_job


@pytest.fixture(scope="module")
def evaluated(live_services: Settings) -> Iterator[TrainedJob]:
    with trained_job(live_services) as job:
        yield job


@pytest.fixture(scope="module")
def unevaluated(live_services: Settings) -> Iterator[TrainedJob]:
    with trained_job(live_services, evaluated=False) as job:
        yield job


def status_of(job: TrainedJob) -> dict[str, Any] | None:
    return job_status(redis_client(job.cfg.redis), lambda: read_jobs(job.cfg.bootstrap), job.spec.job_id)


def test_the_status_says_versions_updates_and_privacy(evaluated: TrainedJob) -> None:
    shown = status_of(evaluated)
    assert shown is not None
    spec = evaluated.spec
    assert (shown["job"], shown["job_version"], shown["version"], shown["done"]) == (spec.job_id, 1, VERSIONS, False)
    assert (shown["updates_accepted"], shown["refused"]) == (ACCEPTED, REFUSED)
    assert (shown["epsilon_per_report"], shown["max_participations"]) == (spec.epsilon, 2)  # device 1: two versions
    assert shown["lifetime_epsilon"] == 2 * spec.epsilon and shown["lifetime_epsilon_bound"] == 3 * spec.epsilon


def test_the_curve_has_one_point_per_version_oldest_first_with_what_was_measured(evaluated: TrainedJob) -> None:
    shown = status_of(evaluated)
    assert shown is not None
    curve = shown["curve"]
    assert [p["version"] for p in curve] == list(range(1, VERSIONS + 1))
    for point in curve:
        assert set(point) == {"version", "accuracy", "accuracy_stderr", "loss", "loss_stderr", "rows"}
        assert point["rows"] == HELD_OUT_ROWS and 0 <= point["accuracy"] <= 1 and point["loss"] > 0
    assert (shown["accuracy"], shown["loss"], shown["accuracy_stderr"]) == (
        curve[-1]["accuracy"], curve[-1]["loss"], curve[-1]["accuracy_stderr"])  # the current version's


def test_a_job_whose_coordinator_evaluates_nothing_has_no_accuracy_and_no_curve(unevaluated: TrainedJob) -> None:
    shown = status_of(unevaluated)
    assert shown is not None and shown["version"] == VERSIONS
    assert (shown["accuracy"], shown["loss"], shown["curve"]) == (None, None, [])


def test_an_unknown_job_or_an_unpublished_version_has_no_status(evaluated: TrainedJob) -> None:
    client = redis_client(evaluated.cfg.redis)

    def never() -> dict[str, Any]:
        raise AssertionError("the published jobs are read only for a job that has a state")

    assert job_status(client, never, "no-such-job") is None
    assert job_status(client, dict, evaluated.spec.job_id) is None  # its state's job version is not published


def test_the_curve_stays_bounded_and_spans_the_whole_job() -> None:
    curve: list[dict[str, float]] = []
    for version in range(1, 5001):
        curve = thinned([*curve, {"version": version}])
        assert len(curve) <= MAX_CURVE
    versions = [p["version"] for p in curve]
    assert versions[0] == 1 and versions[-1] == 5000 and versions == sorted(set(versions))
    short = [{"version": v} for v in range(1, MAX_CURVE + 1)]
    assert thinned(short) == short  # up to the cap, every version
