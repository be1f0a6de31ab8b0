"""A real Prometheus, started as `ldp up --prometheus` starts it, over a live stack under load: every dashboard
expression returns data, every service's /metrics passes `promtool check metrics`, and each alert fires when its
fault is made and clears after.

The stack, on its own state dir (the targets it announces): `ldp serve`, `ldp edge`, `ldp aggregate`, `ldp shuffle`
and a small `ldp train` job, each started as a user would, each found by Prometheus through the file it announces.
Load: a plain collection fed through Kafka, a shuffled one through the edge (enrolled devices), a poisoned one
(three one-minute windows, 5% fakes in the last), refused requests at the edge. Prometheus scrapes every second and
its rules are the shipped ones with every `for:` set to 0 s (the expressions unchanged). Faults: the first Kafka
offset of a partition deleted before the worker reads it (LdpLostMessages), the poisoned window
(LdpSuspectedPoisoning); then, together, the aggregator stopped while reports arrive (LdpAggregatorLagging) and the
shuffler frozen with SIGSTOP (LdpShuffleWindowOverdue). Each clears once its cause is gone: the aggregator and the
shuffler back, an honest window after the poisoned one. (LdpLostMessages clears 10 minutes after a loss: that part
is in deploy/prometheus/rules.test.yml.)
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from confluent_kafka import TopicPartition
from edge_support import free_port
from pipeline_support import Collection, published_collection
from test_poisoning_pipeline import MINUTE, TARGETS, produce

from ldpstream.aggregator.plans import Plan
from ldpstream.aggregator.store import RedisStore
from ldpstream.contract.clock import now_ms
from ldpstream.contract.shuffled import DUE_FIELD, figures_key
from ldpstream.contract.spec import Shuffle, load_spec, parse_spec
from ldpstream.edge.devices import DeviceRegistry, edge_keys
from ldpstream.edge.keyring import Keyring
from ldpstream.mechanisms.frequency.base import FrequencyOracle
from ldpstream.runtime.catalog import SERVICES, TOKEN
from ldpstream.runtime.kafka import ReportProducer, admin_client, delete_topic, producer_client
from ldpstream.runtime.process import stop_pid
from ldpstream.runtime.redis import redis_client
from ldpstream.runtime.settings import PROJECT_ROOT, Settings
from ldpstream.runtime.specs import publish_spec
from ldpstream.runtime.targets import announced
from ldpstream.services.debian import debian_program
from ldpstream.services.prometheus import PrometheusService
from ldpstream.sgd.checkpoint import RedisCheckpoint
from ldpstream.simulator.edge_client import send_fleet
from ldpstream.simulator.poisoning import fake_frequency_reports
from ldpstream.simulator.population import zipf_probabilities
from ldpstream.simulator.simulator import simulate

pytestmark = pytest.mark.integration
DASHBOARD = PROJECT_ROOT / "deploy" / "grafana" / "dashboards" / "ldpstream.json"
JOBS = {svc.metrics.job for svc in SERVICES if svc.metrics is not None}  # the catalog's
TOKEN_JOBS = {svc.metrics.job for svc in SERVICES if svc.metrics is not None and svc.metrics.access == TOKEN}
D, N, M = 32, 8000, 800  # the poisoned collection: values, honest reports a window, fakes in the attacked one
WAIT_S = 90.0
LDP = [sys.executable, "-c", "from ldpstream.cli import main; main()"]


@dataclass
class Stack:
    """The running stack: its settings (own state dir), its processes by name, Prometheus, the collections."""

    cfg: Settings
    env: dict[str, str]
    logs: Path
    procs: dict[str, subprocess.Popen[bytes]]
    prometheus: PrometheusService
    plain: Collection
    poisoned: Collection
    shuffled: Collection
    started_s: float
    aggregator_port: int = 0
    first_ms: int = 0  # the poisoned collection's first window

    def start(self, name: str, *args: str) -> None:
        with open(self.logs / f"{name}.log", "ab") as out:
            self.procs[name] = subprocess.Popen([*LDP, *args], stdout=out, stderr=subprocess.STDOUT, env=self.env,
                                                start_new_session=True)

    def stop(self, name: str) -> None:
        proc = self.procs.pop(name)
        if proc.poll() is None:
            stop_pid(proc.pid, timeout_s=20)

    def query(self, promql: str, start_s: float | None = None) -> list[dict[str, Any]]:
        """An instant query now, or a range query from `start_s` to now (1 s steps)."""
        if start_s is None:
            path, params = "query", {"query": promql}
        else:
            path, params = "query_range", {"query": promql, "start": f"{start_s:.3f}", "end": f"{time.time():.3f}",
                                           "step": "1"}
        try:
            with urllib.request.urlopen(f"{self.prometheus.address}/api/v1/{path}?{urllib.parse.urlencode(params)}",
                                        timeout=10) as resp:
                answer = json.loads(resp.read())
        except (urllib.error.URLError, OSError):
            return []
        assert answer["status"] == "success", answer
        return answer["data"]["result"]  # type: ignore[no-any-return]

    def firing(self, alert: str) -> list[dict[str, str]]:
        return [r["metric"] for r in self.query(f'ALERTS{{alertname="{alert}",alertstate="firing"}}')]

    def wait(self, what: str, check: Callable[[], Any], timeout_s: float = WAIT_S,
             detail: Callable[[], Any] = lambda: "") -> Any:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if result := check():
                return result
            for name, proc in self.procs.items():
                if name != "train" and proc.poll() is not None:
                    self.dump()
                    pytest.fail(f"{name} exited with {proc.returncode} while waiting for {what}")
            time.sleep(0.5)
        self.dump()
        pytest.fail(f"no {what} within {timeout_s:g} s {detail()}")

    def dump(self) -> None:
        for log in sorted(self.logs.glob("*.log")):
            print(f"--- {log.name}\n{log.read_text(errors='replace')[-2500:]}")


def poisoned_spec() -> Any:
    return parse_spec(json.dumps({
        "name": f"it-alert-poison-{uuid.uuid4().hex[:8]}", "version": 1, "epsilon": 2.0, "sampling": 1,
        "partitions": 2, "windows": ["1m"],
        "attributes": [{"name": "item", "type": "categorical", "values": [f"v{i}" for i in range(D)],
                        "mechanism": "oue"}]}))


def poison_window(c: Collection, w: int, first_ms: int, attacked: bool) -> None:
    """One one-minute window of honest reports (and `M` maximal-gain fakes if `attacked`) straight to Kafka."""
    oracle = Plan.load(c.spec, c.cfg.bootstrap).mechanisms[0]
    assert isinstance(oracle, FrequencyOracle)
    rng = np.random.default_rng(w)
    reports = oracle.perturb(rng.choice(D, size=N - (M if attacked else 0), p=zipf_probabilities(D, 1.0)), rng)
    if attacked:
        fakes = fake_frequency_reports(oracle, "maximal_gain", TARGETS, M, rng)
        reports = {k: np.concatenate([reports[k], fakes[k].astype(reports[k].dtype)]) for k in reports}
    produce(c, reports, np.arange(1, N + 1, dtype=np.uint64) + w * 10 * N, first_ms + w * MINUTE + 500)


TRAIN_DEVICES = 300_000  # 1,500 versions: about 11 s of a coordinator alive on a quiet machine, so that Prometheus
# discovers it (its discovery passes targets on every 5 s) and scrapes it twice, which the rate() of its panels needs
# (30 versions, 1.5 s, left the SGD panel empty once)


def job_file(path: Path, job_id: str) -> Path:
    path.write_text(yaml.safe_dump({
        "job": {"job_id": job_id, "model": "logistic", "dims": 3, "epsilon": 2.0, "mechanism": "hm",
                "batch_size": 200, "gamma0": 2.0, "max_iterations": TRAIN_DEVICES // 200},
        "simulation": {"dataset": "synthetic", "devices": TRAIN_DEVICES, "test_rows": 1000, "seed": 1}}))
    return path


@pytest.fixture(scope="module")
def stack(live_services: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    state, logs = tmp_path_factory.mktemp("prom-state"), tmp_path_factory.mktemp("prom-logs")
    env = {**os.environ, "LDP_STATE_DIR": str(state), "LDP_EDGE_KEY_FILE": str(live_services.edge_key),
           "PROMETHEUS_PORT": str(free_port())}
    cfg = Settings.from_env(env)
    job_id = f"it-alert-sgd-{uuid.uuid4().hex[:8]}"
    with ExitStack() as cleanup:
        plain = cleanup.enter_context(published_collection(live_services))
        shuffled_spec = load_spec(PROJECT_ROOT / "examples" / "shuffled.yaml").replace(
            name=f"it-alert-shuffled-{uuid.uuid4().hex[:8]}", windows=["10s"],
            shuffle=Shuffle(delta=1e-6, min_batch=100, grace_s=40))  # the fleet's reports are made at once, then sent
        publish_spec(shuffled_spec, live_services.bootstrap)
        shuffled = Collection(live_services, shuffled_spec, RedisStore(live_services.redis), "")
        spec = poisoned_spec()
        publish_spec(spec, live_services.bootstrap)
        poisoned = Collection(live_services, spec, RedisStore(live_services.redis), "")
        client = redis_client(live_services.redis)

        def forget() -> None:
            for c in (shuffled, poisoned):
                with suppress(Exception):
                    c.store.delete_collection(c.spec.name)
                for topic in (c.spec.topic, c.spec.raw_topic):
                    with suppress(Exception):
                        delete_topic(live_services.bootstrap, topic)
            with suppress(Exception):
                client.delete(figures_key(shuffled.spec.name), *client.scan_iter(edge_keys(shuffled.spec.name)))
                RedisCheckpoint(live_services.redis).delete(job_id)

        cleanup.callback(forget)
        prometheus = PrometheusService(cfg, scrape_interval="1s", rules_for="0s")
        s = Stack(cfg, env, logs, {}, prometheus, plain, poisoned, shuffled, time.time())

        def stop_all() -> None:
            for proc in s.procs.values():  # all at once, then each waited for
                with suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
            for name in list(s.procs):
                with suppress(Exception):
                    s.stop(name)
            with suppress(Exception):
                prometheus.stop()

        cleanup.callback(stop_all)
        prometheus.start()
        api_port, edge_port = free_port(), free_port()
        s.start("api", "serve", "--port", str(api_port))
        s.start("edge", "edge", "--port", str(edge_port))
        s.start("shuffler", "shuffle", "--margin-s", "1", "--metrics-port", str(free_port()))
        s.start("train", "train", "--job", str(job_file(logs / "job.yaml", job_id)), "--devices", str(TRAIN_DEVICES),
                "--metrics-port", str(free_port()))
        # a lost Kafka range: the plain collection's first offset of partition 0 deleted before any worker reads it
        producer = ReportProducer(live_services.bootstrap)
        simulate(plain.spec, 2000, producer, seed=1)
        raw = producer_client(live_services.bootstrap)
        raw.produce(plain.spec.topic, b"\x00not an envelope", partition=1)  # rejected: the DLQ and the reasons
        assert raw.flush(30) == 0
        admin = admin_client(live_services.bootstrap)
        for future in admin.delete_records([TopicPartition(plain.spec.topic, 0, 1)]).values():
            future.result(30)
        s.aggregator_port = free_port()
        s.start("aggregator", "aggregate", "--group", f"ldp-aggregator-it-{plain.spec.name}",
                "--metrics-port", str(s.aggregator_port))
        s.first_ms = (now_ms() // MINUTE + 1) * MINUTE  # within the worker's allowed clock skew (5 min)
        for w in range(3):
            poison_window(poisoned, w, s.first_ms, attacked=w == 2)
        credentials = list(DeviceRegistry(client, Keyring.create(live_services.edge_key)).enroll(
            shuffled.spec.name, 600))
        s.wait("every service announced", lambda: set(announced(cfg)) >= JOBS - {"ldp-sgd"})  # training may be over
        edge_url = f"http://127.0.0.1:{edge_port}"
        s.wait("the edge", lambda: s.query('up{job="ldp-edge"} == 1'))
        sent: list[Any] = []
        sender = threading.Thread(target=lambda: sent.append(send_fleet(shuffled.spec, credentials, edge_url,
                                                                        concurrency=16)), daemon=True)
        sender.start()
        for body in (b"{}", b"not json"):  # refused enrolments: 400 malformed
            with suppress(urllib.error.HTTPError):
                urllib.request.urlopen(urllib.request.Request(f"{edge_url}/v1/enroll", data=body, method="POST",
                                                              headers={"Content-Type": "application/json"}))
        sender.join(60)
        assert sent and sent[0][1].statuses == {200: len(credentials)}, sent
        yield s


def substitute(expr: str, s: Stack) -> str:
    """A panel's expression with the dashboard's variables set (the plain collection, its all-time window)."""
    attribute = s.plain.spec.attributes[0].name
    return (expr.replace("$__rate_interval", "10s").replace("$collection", s.plain.spec.name)
            .replace("$window", "all").replace("$attribute", attribute))


def test_every_panel_and_variable_returns_data_and_every_service_passes_promtool(stack: Stack) -> None:
    s = stack
    s.wait("the plain collection counted", lambda: s.plain.accepted() >= 1000)
    s.wait("the shuffled collection released", lambda: s.query("ldp_shuffler_released_batches_total > 0"))
    s.wait("the training job done", lambda: s.procs["train"].poll() is not None, 120)
    assert s.procs["train"].returncode == 0, (s.logs / "train.log").read_text()[-3000:]
    board = json.loads(DASHBOARD.read_text())
    exprs = [(p["title"], t["expr"]) for p in board["panels"] for t in p.get("targets", [])]
    exprs += [(f"variable {v['name']}", re.sub(r"^label_values\((.*),\s*\w+\)$", r"\1", v["query"]["query"]))
              for v in board["templating"]["list"]]
    # the panels of jobs devices join (`ldp_job_*`, `ldp train run`): this stack runs the lab's `ldp train --job`;
    # test_prometheus_scrape runs a device job's coordinator under a real Prometheus and asks each of those panels
    exprs = [(title, expr) for title, expr in exprs if "ldp_job_" not in expr]

    def empty() -> list[tuple[str, str]]:
        return [(title, expr) for title, expr in exprs if not s.query(substitute(expr, s), s.started_s)]

    s.wait("data in every panel", lambda: not empty(), 60, detail=empty)
    promtool = str(Path(debian_program("prometheus", "prometheus")).with_name("promtool"))
    token = s.prometheus.token_file.read_text().strip()
    checked = set()
    for job, targets in announced(s.cfg).items():
        for target in targets:
            headers = {"Authorization": f"Bearer {token}"} if job in TOKEN_JOBS else {}
            try:
                with urllib.request.urlopen(urllib.request.Request(f"http://{target}/metrics", headers=headers),
                                            timeout=10) as resp:
                    text = resp.read()
            except urllib.error.URLError:
                continue  # a process that finished (the training job)
            lint = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, timeout=30)
            assert lint.returncode == 0, f"{job} at {target}: {lint.stdout.decode()}{lint.stderr.decode()}"
            assert not re.search(rb'[{,]device\w*="', text), f"{job}: a device label"
            checked.add(job)
    assert checked >= JOBS - {"ldp-sgd"}
    status = subprocess.run([*LDP, "status", "--services-only", "--json"], capture_output=True, text=True,
                            env=s.env, timeout=60)
    rows = {row["name"]: row for row in json.loads(status.stdout)["services"]}
    assert rows["prometheus"]["answers"] and rows["prometheus"]["address"] == s.prometheus.address
    assert "ldp-aggregator x1" in rows["prometheus"]["detail"], rows["prometheus"]


def test_each_alert_fires_when_its_fault_is_made_and_clears_after(stack: Stack) -> None:
    s = stack
    plain, poisoned, shuffled = s.plain.spec.name, s.poisoned.spec.name, s.shuffled.spec.name
    lost = s.wait("LdpLostMessages", lambda: s.firing("LdpLostMessages"))
    assert [a["topic"] for a in lost] == [s.plain.spec.topic]
    alert = s.wait("LdpSuspectedPoisoning", lambda: s.firing("LdpSuspectedPoisoning"))
    assert {(a["collection"], a["window"]) for a in alert} == {(poisoned, "1m")}
    assert not s.firing("LdpAggregatorLagging") and not s.firing("LdpShuffleWindowOverdue")

    client = redis_client(s.plain.cfg.redis)
    due_ms = int(s.wait("the shuffler's next due close", lambda: client.hget(figures_key(shuffled), DUE_FIELD)))
    time.sleep(max(0.0, (due_ms - now_ms()) / 1000 - 1.0))  # overdue from its next close on
    s.procs["shuffler"].send_signal(signal.SIGSTOP)  # stuck: alive, answering nothing, closing nothing
    s.stop("aggregator")
    simulate(s.plain.spec, 1000, ReportProducer(s.plain.cfg.bootstrap), seed=2)
    lagging = s.wait("LdpAggregatorLagging", lambda: s.firing("LdpAggregatorLagging"))
    assert {a["collection"] for a in lagging} == {plain}
    overdue = s.wait("LdpShuffleWindowOverdue", lambda: s.firing("LdpShuffleWindowOverdue"))
    assert {a["collection"] for a in overdue} == {shuffled}

    s.procs["shuffler"].send_signal(signal.SIGCONT)
    s.start("aggregator", "aggregate", "--group", f"ldp-aggregator-it-{plain}",
            "--metrics-port", str(s.aggregator_port))
    poison_window(s.poisoned, 3, s.first_ms, attacked=False)
    for name in ("LdpAggregatorLagging", "LdpShuffleWindowOverdue", "LdpSuspectedPoisoning"):
        s.wait(f"{name} cleared", lambda name=name: not s.firing(name))  # type: ignore[misc]
