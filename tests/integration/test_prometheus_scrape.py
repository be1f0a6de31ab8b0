"""A real Prometheus (Debian's package, installed on first use when root) scrapes `ldp serve` and a worker.

A collection is published, 2,000 simulated devices report through Kafka to an aggregator worker into Redis,
and Prometheus, started on a free loopback port with a temporary config, must then hold the exact report total,
the estimates and the worker's batch-latency histogram. It scrapes the API with a `metrics` token from a
credentials file, as the compose config does; a job without the token must find the API down (401).

A training job's coordinator (`ldp train run JOB --metrics-port P`, scraped as the catalog's coordinator job) serves
its `ldp_job_*` metrics: Prometheus holds its model version, updates by outcome, held-out accuracy and participations
as `ldp train status --json` shows them, and every query of the dashboard's job panels answers for the job (its
`job` label kept as `exported_job`).
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from ldpstream.aggregator.store import RedisStore
from ldpstream.cli.commands import app as cli
from ldpstream.contract.spec import load_spec
from ldpstream.contract.topics import UPDATES_TOPIC
from ldpstream.runtime.catalog import service
from ldpstream.runtime.jobs import model_prefix
from ldpstream.runtime.kafka import ReportProducer, delete_topic
from ldpstream.runtime.process import stop_pid
from ldpstream.runtime.redis import redis_client
from ldpstream.runtime.settings import PROJECT_ROOT
from ldpstream.runtime.specs import publish_spec
from ldpstream.runtime.tokens import Scope
from ldpstream.services import ServiceError, Settings
from ldpstream.services.debian import debian_program
from ldpstream.sgd.jobrun import state_key
from ldpstream.simulator.simulator import simulate
from tests.deploy.test_grafana import load_generator
from tests.readapi.job_support import ACCEPTED, REFUSED, VERSIONS, tiny_job, updates
from tests.tokens import ApiTokens

pytestmark = pytest.mark.integration

DEVICES = 2000
WAIT_S = 60.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(what: str, value: Callable[[], Any], procs: list[subprocess.Popen[bytes]]) -> Any:
    """Poll `value` until it is truthy (bounded); fail if it never is or a process we started dies."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if result := value():
            return result
        for proc in procs:
            assert proc.poll() is None, f"process {proc.pid} exited with {proc.returncode} while waiting for {what}"
        time.sleep(0.25)
    pytest.fail(f"no {what} within {WAIT_S:g} s")


def get_json(url: str) -> Any:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return json.loads(resp.read())
    except (urllib.error.URLError, ConnectionError):
        return None


def start(argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


@pytest.fixture(scope="module")
def prometheus_program() -> str:
    try:
        return debian_program("prometheus", "prometheus")
    except ServiceError as exc:
        pytest.fail(str(exc))


def test_prometheus_scrapes_report_totals_estimates_and_worker_latency(
        live_services: Settings, prometheus_program: str, tmp_path: Path) -> None:
    name = f"it-prom-{uuid.uuid4().hex[:10]}"
    spec = load_spec(PROJECT_ROOT / "examples" / "diagnostics.yaml").replace(name=name)
    publish_spec(spec, live_services.bootstrap)
    store = RedisStore(live_services.redis)
    api_port, worker_port, prom_port = free_port(), free_port(), free_port()
    processes: list[subprocess.Popen[bytes]] = []
    tokens = ApiTokens(live_services.redis)
    credentials = tmp_path / "api_metrics_token"
    try:
        credentials.write_text(tokens.issue([Scope.METRICS], name="prometheus").token)
        simulate(spec, DEVICES, ReportProducer(live_services.bootstrap), seed=7)
        processes.append(start([sys.executable, "-m", "ldpstream.aggregator",
                                "--group", f"ldp-aggregator-it-prom-{name}",
                                "--metrics-port", str(worker_port)], tmp_path / "worker.log"))
        api = start([sys.executable, "-c", "from ldpstream.cli import main; main()", "serve", "--port", str(api_port)],
                    tmp_path / "api.log")
        processes.append(api)
        config = tmp_path / "prometheus.yml"
        config.write_text(json.dumps({  # JSON is YAML
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
            "scrape_configs": [
                {"job_name": "ldp-api", "static_configs": [{"targets": [f"127.0.0.1:{api_port}"]}],
                 "authorization": {"type": "Bearer", "credentials_file": str(credentials)}},
                {"job_name": "ldp-api-anonymous", "static_configs": [{"targets": [f"127.0.0.1:{api_port}"]}]},
                {"job_name": "ldp-aggregator", "static_configs": [{"targets": [f"127.0.0.1:{worker_port}"]}]},
            ]}))
        processes.append(start([prometheus_program, f"--config.file={config}",
                                f"--storage.tsdb.path={tmp_path / 'data'}",
                                f"--web.listen-address=127.0.0.1:{prom_port}"], tmp_path / "prometheus.log"))

        def query(promql: str) -> list[dict[str, Any]]:
            answer = get_json(f"http://127.0.0.1:{prom_port}/api/v1/query?"
                              + urllib.parse.urlencode({"query": promql}))
            return answer["data"]["result"] if answer and answer.get("status") == "success" else []

        try:
            wait_for("accepted reports in Redis",
                     lambda: store.outcomes(name).get("accepted", 0) >= DEVICES, processes)
            accepted = wait_for(f"ldp_reports_total of {name} in Prometheus", lambda: [
                r for r in query(f'ldp_reports_total{{collection="{name}",outcome="accepted",job="ldp-api"}}')
                if float(r["value"][1]) == DEVICES], processes)
            estimates = wait_for("estimates in Prometheus", lambda: query(
                f'ldp_estimate{{collection="{name}",window="all"}} and ldp_estimate_stderr'), processes)
            latency = wait_for("the worker's batch latency in Prometheus", lambda: query(
                'sum(ldp_worker_batch_duration_seconds_count{job="ldp-aggregator"}) > 0'), processes)
            anonymous = wait_for("a scrape without a token", lambda: query('up{job="ldp-api-anonymous"}'), processes)
        except BaseException:
            for log in sorted(tmp_path.glob("*.log")):
                print(f"--- {log.name}\n{log.read_text(errors='replace')[-3000:]}")
            raise
        assert "reason" not in accepted[0]["metric"]  # Prometheus stores an empty label as no label
        series = {(r["metric"]["attribute"], r["metric"].get("value", "")) for r in estimates}
        assert series == {(a.name, v) for a in spec.attributes for v in getattr(a, "values", [""])}
        assert float(latency[0]["value"][1]) > 0
        assert float(anonymous[0]["value"][1]) == 0  # the API refused it (401): the token is what opens /metrics
        api.send_signal(signal.SIGTERM)
        assert api.wait(15) == 0, "ldp serve did not stop cleanly on SIGTERM"
    finally:
        for proc in reversed(processes):
            if proc.poll() is None:
                stop_pid(proc.pid)
        store.delete_collection(name)
        delete_topic(live_services.bootstrap, spec.topic)
        tokens.clear()


def test_prometheus_scrapes_a_training_jobs_coordinator_as_the_dashboard_charts_it(
        live_services: Settings, prometheus_program: str, tmp_path: Path) -> None:
    spec = tiny_job(model={"architecture": "softmax", "dims": [784, 10]})
    job_file = tmp_path / "job.yaml"
    job_file.write_text(yaml.safe_dump({"job": json.loads(spec.canonical_json()),
                                        "evaluation": {"dataset": "fashion-mnist", "rows": 100}}))
    published = CliRunner().invoke(cli, ["train", "publish", str(job_file), "--json"])
    assert published.exit_code == 0, published.output
    client = redis_client(live_services.redis)
    metrics_port, prom_port = free_port(), free_port()
    scrape_job = service("coordinator").metrics.job  # type: ignore[union-attr]  # `ldp train run`'s
    processes = [start([sys.executable, "-m", "ldpstream", "train", "run", spec.job_id, "--metrics-port",
                        str(metrics_port)], tmp_path / "coordinator.log")]
    config = tmp_path / "prometheus.yml"
    config.write_text(json.dumps({"global": {"scrape_interval": "1s", "scrape_timeout": "1s"}, "scrape_configs": [
        {"job_name": scrape_job, "static_configs": [{"targets": [f"127.0.0.1:{metrics_port}"]}]}]}))
    processes.append(start([prometheus_program, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
                            f"--web.listen-address=127.0.0.1:{prom_port}"], tmp_path / "prometheus.log"))

    def query(promql: str) -> list[dict[str, Any]]:
        answer = get_json(f"http://127.0.0.1:{prom_port}/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
        return answer["data"]["result"] if answer and answer.get("status") == "success" else []

    def value(metric: str, **labels: str) -> float | None:
        matchers = ",".join(f'{k}="{v}"' for k, v in {"exported_job": spec.job_id, "job": scrape_job,
                                                         **labels}.items())
        found = query(f"{metric}{{{matchers}}}")
        return float(found[0]["value"][1]) if found else None

    try:
        try:
            wait_for("the coordinator's state", lambda: client.exists(state_key(spec.job_id)), processes)
            producer = ReportProducer(live_services.bootstrap, linger_ms=0)
            for device, body in updates(spec):
                producer.produce(UPDATES_TOPIC, body, device.to_bytes(8, "little"), partition=0)
            producer.flush()
            wait_for(f"version {VERSIONS} in Prometheus", lambda: value("ldp_job_model_version") == VERSIONS,
                     processes)
            wait_for("every update's outcome in Prometheus", lambda: value(
                "ldp_job_updates_total", outcome="refused:not_finite") is not None, processes)
        except BaseException:
            for log in sorted(tmp_path.glob("*.log")):
                print(f"--- {log.name}\n{log.read_text(errors='replace')[-3000:]}")
            raise
        shown = json.loads(CliRunner().invoke(cli, ["train", "status", spec.job_id, "--json"]).stdout)
        assert value("ldp_job_updates_total", outcome="accepted") == shown["updates_accepted"] == ACCEPTED
        assert {k: value("ldp_job_updates_total", outcome=f"refused:{k}") for k in REFUSED} == shown["refused"] \
            == REFUSED
        assert value("ldp_job_held_out_accuracy") == shown["accuracy"] and shown["curve"][-1]["rows"] == 100
        assert value("ldp_job_held_out_loss") == shown["loss"]
        assert value("ldp_job_max_participations") == shown["max_participations"] == 2
        panels = [p for row in load_generator().ROWS for p in row().panels
                  if any("ldp_job_" in q.expr for q in p.queries)]
        assert len(panels) >= 4
        for panel in panels:  # a rate needs two scrapes of the series: polled, not read once
            for q in panel.queries:
                wait_for(f"the job in {panel.title!r} ({q.expr})", lambda q=q: spec.job_id in {
                    r["metric"].get("exported_job") for r in query(q.expr.replace("$__rate_interval", "1m"))},
                    processes)
    finally:
        for proc in reversed(processes):
            if proc.poll() is None:
                stop_pid(proc.pid)
        keys = list(client.scan_iter(match=model_prefix(spec.job_id) + "*"))
        if keys:
            client.delete(*keys)


def test_the_compose_prometheus_config_is_valid_and_scrapes_the_api_with_a_token(prometheus_program: str,
                                                                                  tmp_path: Path) -> None:
    config = yaml.safe_load((PROJECT_ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    for name in ("ldp-api", "ldp-edge"):  # the API's and the edge's /metrics take the same metrics-scope token
        assert jobs[name]["authorization"] == {"type": "Bearer", "credentials_file": "/run/secrets/api_metrics_token"}
        jobs[name]["authorization"]["credentials_file"] = str(tmp_path / "api_metrics_token")  # promtool: it exists
    (tmp_path / "api_metrics_token").write_text("ldp_000000000000_" + "A" * 43)
    assert config["rule_files"] == ["/etc/prometheus/rules.yml"]  # mounted from deploy/prometheus/rules.yml
    config["rule_files"] = [str(PROJECT_ROOT / "deploy" / "prometheus" / "rules.yml")]
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    promtool = Path(prometheus_program).with_name("promtool")  # shipped in the same Debian package
    result = subprocess.run([str(promtool), "check", "config", str(tmp_path / "prometheus.yml")],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
