"""The whole path at a sustained load, on this machine: simulated devices -> the real edge (`ldp edge`) -> Kafka -> two
aggregator workers (`ldp aggregate --workers 2`) -> Redis, with the read API (`ldp serve`) and Prometheus (`ldp up
--prometheus`) scraping every process throughout. Not a test: a measurement, bounded in time (`--max-seconds`, 900).

The devices of a fresh collection (examples/diagnostics.yaml renamed `soak-<time>`: 10 attributes, one report per
device per window) are enrolled and send one single-report request each through the edge, in chunks of
`--chunk` devices, `--concurrency` requests in flight, until `--reports` are sent or 80% of the time is spent; then
the run waits (the rest of the time at most) until every report the edge admitted is counted in the store.

Services: `ldp up --prometheus` on the ports the environment names (KAFKA_PORT, REDIS_PORT, PROMETHEUS_PORT, ...;
stopped at the end if the run started them); the edge, the API and the workers on free loopback ports.

Measured: per stage (the load generator, the edge, Kafka, the aggregator workers, Redis, the API, Prometheus) its
CPU seconds (its processes' user + system, from /proc, the supervisors' children included) per 1,000 reports counted,
in all and above its idle CPU (`--idle-seconds` with no load first: polls, heartbeats, scrapes; what a stage costs per
report at any rate is the marginal figure, its idle cores a fixed cost), and
the sum of its processes' peak resident memory (VmHWM); reports per second sent, admitted by the edge and counted by
the workers (each over its own stage's active time); from Prometheus: the freshness p50 and p99 over the sending
time (`quantile_over_time` of `ldp_freshness_seconds`), the peak consumer lag, and whether any alert fired. The graphs
(requests/s by status, reports counted/s, consumer lag, freshness, CPU by job) are written as PNG files from
Prometheus' query_range into `--out`.

Prints progress to stderr; the last line on stdout is the JSON: {"sent", "admitted", "counted", "rates": {...},
"freshness_s": {"p50", "p99"}, "peak_lag", "cpu_s_per_1k": {...}, "rss_peak_bytes": {...}, "alerts_fired",
"seconds", "graphs", ...}. `benchmarks/sizing.py` turns it into the sizing guide's table.
Run: .venv/bin/python benchmarks/soak.py [--reports 1000000] [--max-seconds 900]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench_edge import cpu_seconds, process_tree  # run as a script: benchmarks/ is on the path

from ldpstream.aggregator.store import RedisStore
from ldpstream.contract.spec import load_spec
from ldpstream.edge.devices import DeviceRegistry, edge_keys
from ldpstream.edge.keyring import Keyring
from ldpstream.runtime.kafka import delete_topic
from ldpstream.runtime.process import port_in_use, stop_pid
from ldpstream.runtime.redis import redis_client
from ldpstream.runtime.settings import PROJECT_ROOT, Settings
from ldpstream.runtime.specs import publish_spec
from ldpstream.services import services
from ldpstream.services.prometheus import PrometheusService
from ldpstream.simulator.edge_client import fleet_requests, post_all

LDP = [sys.executable, "-c", "from ldpstream.cli import main; main()"]
GRAPHS = {  # file name: (title, PromQL, unit); $c is the collection
    "edge_requests": ("Edge requests/s by status", "sum by (status) (rate(ldp_edge_requests_total[15s]))", "req/s"),
    "counted": ("Reports counted/s", 'sum(rate(ldp_worker_reports_total{outcome="accepted"}[15s]))', "reports/s"),
    "lag": ("Consumer lag", 'sum(ldp_consumer_lag_messages{collection="$c"})', "messages"),
    "freshness": ("Freshness", 'ldp_freshness_seconds{collection="$c"}', "s"),
    "cpu": ("CPU by job", "sum by (job) (rate(process_cpu_seconds_total[15s]))", "cores"),
}


def log(message: str) -> None:
    print(f"[soak {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def peak_rss(pid: int) -> int:
    """The sum of the peak resident memory (VmHWM) of a process and its descendants, in bytes."""
    (tree, _), total = process_tree(pid), 0
    for p in tree:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            continue
    return total


class Prometheus:
    """Queries to the run's Prometheus."""

    def __init__(self, address: str) -> None:
        self.address = address

    def get(self, path: str, **params: str) -> Any:
        url = f"{self.address}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=30) as resp:
            answer = json.loads(resp.read())
        assert answer["status"] == "success", answer
        return answer["data"]["result"]

    def scalar(self, promql: str, at_s: float) -> float | None:
        result = self.get("query", query=promql, time=f"{at_s:.3f}")
        return float(result[0]["value"][1]) if result else None

    def graph(self, path: Path, title: str, promql: str, unit: str, start_s: float, end_s: float) -> None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        series = self.get("query_range", query=promql, start=f"{start_s:.3f}", end=f"{end_s:.3f}", step="2")
        fig, ax = plt.subplots(figsize=(8, 3.5))
        for s in series:
            label = ",".join(f"{k}={v}" for k, v in sorted(s["metric"].items())) or title
            ax.plot([float(t) - start_s for t, _ in s["values"]], [float(v) for _, v in s["values"]], label=label)
        ax.set(title=title, xlabel="seconds since the start", ylabel=unit)
        if any(s["metric"] for s in series):
            ax.legend(fontsize=7, loc="upper left")
        fig.tight_layout()
        fig.savefig(path, dpi=90)
        plt.close(fig)


def wait_for(what: str, check: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"soak: no {what} within {timeout_s:g} s")
        time.sleep(0.5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reports", type=int, default=1_000_000)
    parser.add_argument("--max-seconds", type=float, default=900.0)
    parser.add_argument("--chunk", type=int, default=2000,
                        help="devices enrolled and sent at a time (their reports are made just before it)")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--edge-workers", type=int, default=1)
    parser.add_argument("--idle-seconds", type=float, default=10.0, help="CPU measured with no load first")
    parser.add_argument("--out", type=Path, default=None, help="where the graphs go (default .local/soak-<time>)")
    args = parser.parse_args()
    started = time.time()
    deadline = time.monotonic() + args.max_seconds
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    out = args.out or PROJECT_ROOT / ".local" / f"soak-{stamp}"
    out.mkdir(parents=True, exist_ok=True)
    cfg = Settings.from_env()
    were_up = all(any(r.pid or not r.managed for r in svc.statuses()) for svc in services(cfg))
    prometheus_was_up = PrometheusService(cfg).running
    if port_in_use(cfg.prometheus_port) and PrometheusService(cfg).running_pid() is None:
        raise SystemExit(f"soak: PROMETHEUS_PORT {cfg.prometheus_port} is taken by another process: set another")
    subprocess.run([*LDP, "up", "--prometheus"], check=True, stdout=subprocess.DEVNULL)
    prom = Prometheus(PrometheusService(cfg).address)
    spec = load_spec(PROJECT_ROOT / "examples" / "diagnostics.yaml").replace(name=f"soak-{stamp}".lower())
    publish_spec(spec, cfg.bootstrap)
    store, client = RedisStore(cfg.redis), redis_client(cfg.redis, 30.0)
    edge_port, api_port, metrics_port = free_port(), free_port(), free_port()
    procs: dict[str, subprocess.Popen[bytes]] = {}
    for name, argv in (("edge", ["edge", "--port", str(edge_port), "--workers", str(args.edge_workers)]),
                       ("aggregator", ["aggregate", "--workers", "2", "--group", f"ldp-aggregator-soak-{stamp}",
                                       "--metrics-port", str(metrics_port)]),
                       ("api", ["serve", "--port", str(api_port)])):
        with open(out / f"{name}.log", "ab") as logf:
            procs[name] = subprocess.Popen([*LDP, *argv], stdout=logf, stderr=subprocess.STDOUT,
                                           start_new_session=True)
    pids = {"edge": procs["edge"].pid, "aggregator": procs["aggregator"].pid, "api": procs["api"].pid,
            "kafka": services(cfg)[0].running_pid(), "redis": services(cfg)[1].running_pid(),
            "prometheus": PrometheusService(cfg).running_pid()}
    try:
        url = f"http://127.0.0.1:{edge_port}"
        wait_for("edge", lambda: port_in_use(edge_port), 60)
        wait_for("targets scraped", lambda: len(prom.get("query", query='up{job=~"ldp-.*"} == 1')) >= 3, 60)
        idle0 = {stage: cpu_seconds(pid) for stage, pid in pids.items() if pid}
        idle_start = time.monotonic()
        time.sleep(args.idle_seconds)  # every stage's CPU with no load: heartbeats, polls, scrapes
        cpu0 = {stage: cpu_seconds(pid) for stage, pid in pids.items() if pid}
        idle_cores = {stage: (cpu0[stage] - idle0[stage]) / (time.monotonic() - idle_start) for stage in cpu0}
        own0 = resource.getrusage(resource.RUSAGE_SELF)
        registry = DeviceRegistry(client, Keyring.create(cfg.edge_key))
        send_start = time.time()
        sent = admitted = 0
        send_by = time.monotonic() + 0.8 * (deadline - time.monotonic())
        log(f"sending {args.reports:,} reports of {spec.name} through {url}")
        while sent < args.reports and time.monotonic() < send_by:
            n = min(args.chunk, args.reports - sent)
            credentials = registry.enroll(spec.name, n)
            requests, _ = fleet_requests(spec, credentials, seed=sent)
            answers = asyncio.run(post_all(url, requests, args.concurrency))
            sent, admitted = sent + n, admitted + answers.acknowledged
            log(f"sent {sent:,}, admitted {admitted:,} ({sent / (time.time() - send_start):,.0f}/s); statuses "
                f"{answers.statuses}")
        send_end = time.time()
        wait_for_counted = max(1.0, deadline - time.monotonic())
        counted_at = time.time()
        try:
            wait_for("every admitted report counted",
                     lambda: store.outcomes(spec.name).get("accepted", 0) >= admitted, wait_for_counted)
            counted_at = time.time()
        except SystemExit as exc:
            log(str(exc))
        counted = store.outcomes(spec.name).get("accepted", 0)
        time.sleep(3.0)  # the last scrapes
        own1 = resource.getrusage(resource.RUSAGE_SELF)
        cpu1 = {stage: cpu_seconds(pid) for stage, pid in pids.items() if pid}
        cpu = {stage: cpu1[stage] - cpu0[stage] for stage in cpu1}
        cpu["loadgen"] = (own1.ru_utime + own1.ru_stime) - (own0.ru_utime + own0.ru_stime)
        rss = {stage: peak_rss(pid) for stage, pid in pids.items() if pid}
        rss["loadgen"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        end = time.time()
        sending = f"{max(1, round(send_end - send_start))}s"
        freshness = {q: prom.scalar(f'quantile_over_time({x}, ldp_freshness_seconds{{collection="{spec.name}"}}'
                                    f"[{sending}])", send_end) for q, x in (("p50", 0.5), ("p99", 0.99))}
        whole = f"{max(1, round(end - send_start))}s"
        peak_lag = prom.scalar(f'max_over_time(sum(ldp_consumer_lag_messages{{collection="{spec.name}"}})'
                               f"[{whole}:1s])", end)
        alerts = sorted({r["metric"]["alertname"] for r in prom.get(
            "query", query=f'max_over_time(ALERTS{{alertstate="firing"}}[{whole}])', time=f"{end:.3f}")})
        graphs = []
        for name, (title, promql, unit) in GRAPHS.items():
            path = out / f"{name}.png"
            prom.graph(path, title, promql.replace("$c", spec.name), unit, send_start - 10, end)
            graphs.append(str(path))
        per_1k = 1000 / max(counted, 1)
        loaded_s = end - send_start
        marginal = {stage: max(0.0, cpu[stage] - idle_cores.get(stage, 0.0) * loaded_s) for stage in cpu}
        result = {
            "sent": sent, "admitted": admitted, "counted": counted, "equal": sent == admitted == counted,
            "spec": "examples/diagnostics.yaml (10 attributes, one report per device per window)",
            "edge_workers": args.edge_workers, "aggregator_workers": 2, "concurrency": args.concurrency,
            "rates": {"sent_per_s": round(sent / (send_end - send_start)),
                      "admitted_per_s": round(admitted / (send_end - send_start)),
                      "counted_per_s": round(counted / (counted_at - send_start))},
            "freshness_s": {q: None if v is None else round(v, 3) for q, v in freshness.items()},
            "peak_lag": peak_lag, "alerts_fired": alerts,
            "cpu_s_per_1k": {stage: round(s * per_1k, 4) for stage, s in sorted(cpu.items())},
            "cpu_s_per_1k_marginal": {stage: round(s * per_1k, 4) for stage, s in sorted(marginal.items())},
            "cpu_idle_cores": {stage: round(c, 4) for stage, c in sorted(idle_cores.items())},
            "rss_peak_bytes": dict(sorted(rss.items())),
            "seconds": {"sending": round(send_end - send_start, 1), "drain": round(counted_at - send_end, 1),
                        "total": round(time.time() - started, 1)},
            "cores": os.cpu_count(), "load_average": os.getloadavg(), "graphs": graphs,
        }
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                stop_pid(proc.pid, timeout_s=30)
        store.delete_collection(spec.name)
        keys = list(client.scan_iter(edge_keys(spec.name), count=10_000))
        for lo in range(0, len(keys), 10_000):
            client.delete(*keys[lo:lo + 10_000])
        delete_topic(cfg.bootstrap, spec.topic)
        if not were_up:
            subprocess.run([*LDP, "down"], check=False, stdout=subprocess.DEVNULL)
        elif not prometheus_was_up:
            PrometheusService(cfg).stop()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
