"""The read API's training jobs on a real socket: `GET /jobs` and `GET /jobs/{job}` over a job published to the real
Kafka and run by its real coordinator into the real Redis (tests/readapi/job_support.py). A job's answer is the JSON
`ldp train status JOB --json` prints, byte for byte the same figures; an unknown job, and one no coordinator ran yet,
are 404 with a clear error; the routes need the `read` scope; every answer is the documented one (openapi.json)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from typer.testing import CliRunner

from ldpstream.aggregator.plans import PlanRegistry
from ldpstream.aggregator.store import MemoryStore
from ldpstream.cli.commands import app as cli
from ldpstream.readapi.api import Jobs, PublishedPlans, create_app
from ldpstream.runtime.jobs import PublishedJobs, publish_job, read_jobs
from ldpstream.runtime.redis import redis_client
from ldpstream.runtime.settings import Settings
from ldpstream.runtime.tokens import Scope
from ldpstream.sgd.jobstatus import job_status
from tests.readapi.job_support import ACCEPTED, REFUSED, VERSIONS, TrainedJob, tiny_job, trained_job
from tests.readapi.test_api import http_get, serving, token_verifier
from tests.readapi.test_api_openapi import check_answer
from tests.tokens import api_tokens


@dataclass(frozen=True)
class JobsApi:
    url: str
    trained: TrainedJob
    idle: str  # a job published that no coordinator ran
    tokens: dict[str, str]  # scope name -> token

    def get(self, path: str, scope: str | None = "read") -> tuple[int, str, str]:
        return http_get(self.url + path, None if scope is None else self.tokens[scope])

    def json(self, path: str, status: int = 200) -> Any:
        code, content_type, body = self.get(path)
        assert (code, content_type) == (status, "application/json"), body
        return json.loads(body)


@pytest.fixture(scope="module")
def api(live_services: Settings) -> Iterator[JobsApi]:
    idle = tiny_job()
    publish_job(idle, live_services.bootstrap)
    with trained_job(live_services) as trained, api_tokens(live_services.redis) as tokens:
        app = create_app(MemoryStore(), PublishedPlans(PlanRegistry(live_services.bootstrap)), lambda topics: {}, {},
                         tokens=token_verifier(live_services),
                         jobs=Jobs(PublishedJobs(live_services.bootstrap), redis_client(live_services.redis)))
        with serving(app) as url:
            yield JobsApi(url, trained, idle.job_id, {"read": tokens.issue([Scope.READ]).token,
                                                      "metrics": tokens.issue([Scope.METRICS]).token})


def test_a_job_is_the_status_ldp_train_status_prints(api: JobsApi) -> None:
    job = api.trained.spec.job_id
    served = api.json(f"/jobs/{job}")
    printed = CliRunner().invoke(cli, ["train", "status", job, "--json"])
    assert printed.exit_code == 0, printed.output
    assert served == json.loads(printed.stdout)
    cfg = api.trained.cfg
    assert served == job_status(redis_client(cfg.redis), lambda: read_jobs(cfg.bootstrap), job)
    assert (served["version"], served["updates_accepted"], served["refused"]) == (VERSIONS, ACCEPTED, REFUSED)
    assert [p["version"] for p in served["curve"]] == list(range(1, VERSIONS + 1))
    for key in ("version", "accuracy", "updates_accepted", "epsilon_per_report", "max_participations"):
        assert key in served  # the issue's contract


def test_jobs_lists_every_published_job_with_its_status(api: JobsApi) -> None:
    listed = {j["job"]: j for j in api.json("/jobs")["jobs"]}
    trained = listed[api.trained.spec.job_id]
    spec = api.trained.spec
    assert trained["status"] == api.json(f"/jobs/{spec.job_id}")
    assert (trained["job_version"], trained["versions"], trained["epsilon_per_report"], trained["mechanism"]) == (
        1, [1], spec.epsilon, "privunitg")
    assert trained["lifetime_epsilon_bound"] == spec.epsilon * spec.max_rounds
    assert listed[api.idle]["status"] is None  # published, no coordinator yet
    names = [j["job"] for j in api.json("/jobs")["jobs"]]
    assert names == sorted(names)


@pytest.mark.parametrize("path, message", [
    ("/jobs/no-such-job", "no published training job 'no-such-job'"),
    ("/jobs/{idle}", "is published (version 1) but no coordinator has run it yet: `ldp train run {idle}`"),
])
def test_unknown_and_idle_jobs_are_404_with_a_clear_error(api: JobsApi, path: str, message: str) -> None:
    assert message.format(idle=api.idle) in api.json(path.format(idle=api.idle), status=404)["error"]


@pytest.mark.parametrize("path", ["/jobs", "/jobs/{job}"])
def test_the_job_routes_need_the_read_scope(api: JobsApi, path: str) -> None:
    path = path.format(job=api.trained.spec.job_id)
    assert api.get(path, None)[0] == 401
    assert api.get(path, "metrics")[0] == 403


def test_the_answers_are_the_documented_ones(api: JobsApi) -> None:
    job = api.trained.spec.job_id
    for template, path, scope in [("/jobs", "/jobs", "read"), ("/jobs", "/jobs", None), ("/jobs", "/jobs", "metrics"),
                                  ("/jobs/{job}", f"/jobs/{job}", "read"), ("/jobs/{job}", f"/jobs/{api.idle}", "read"),
                                  ("/jobs/{job}", "/jobs/nowhere", "read"), ("/jobs/{job}", f"/jobs/{job}", None),
                                  ("/console/job", f"/console/job?name={job}", None)]:
        check_answer(template, *api.get(path, scope))
