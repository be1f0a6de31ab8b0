"""`ldp demo`: the main job end to end against the running services.

Publish the smartphone-diagnostics spec (under a name of its own for this run, so every run starts from zero),
start an aggregator worker and an ingestion edge, have a simulated fleet join like phones (enrol with a token, fetch
and verify the signed spec, accept it under the default privacy policy) and send each device's perturbed report to
the edge as a signed HTTP request (`--direct`: straight to Kafka in bulk instead), show one device refusing a copy of
the collection published at epsilon 16, wait until the worker
has applied them all in Redis, read the estimates back through the HTTP API (`ldp serve`, with a short-lived token
of its own, revoked afterwards), and print every estimate next to the population's true value. Then train a
logistic model over Kafka with LDP SGD and print its misclassification next to non-private SGD's on the same
held-out rows.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.progress import Progress

from ldpstream.cli.errors import require_services
from ldpstream.cli.output import estimates_table, fail, progress, shuffle_table, styled
from ldpstream.cli.output import wide as console
from ldpstream.runtime.settings import PROJECT_ROOT

if TYPE_CHECKING:
    from ldpstream.aggregator.store import RedisStore
    from ldpstream.contract.spec import CollectionSpec
    from ldpstream.runtime.settings import Settings
    from ldpstream.simulator.simulator import SimulationResult

DEFAULT_SPEC = PROJECT_ROOT / "examples" / "diagnostics.yaml"
LAST_DEMO = "demo-collection"  # in the state dir: the name of the collection the last demo made (`ldp demo --last`)


def wait_for_accepted(store: RedisStore, collection: str, target: int, timeout_s: float,
                      worker_alive: Callable[[], bool] = lambda: True,
                      on_count: Callable[[int], None] = lambda n: None) -> int:
    """Poll the store until `target` reports of `collection` are accepted (`on_count` told each count read); the
    count reached."""
    deadline = time.monotonic() + timeout_s
    accepted = 0
    while time.monotonic() < deadline and worker_alive():
        accepted = store.outcomes(collection).get("accepted", 0)
        on_count(accepted)
        if accepted >= target:
            break
        time.sleep(0.1)
    return accepted


def read_through_api(collection: str, token: str, timeout_s: float = 60.0) -> tuple[dict[str, Any], bool]:
    """Start `ldp serve` on a free port, read a collection's estimates and check /metrics names it (with `token`,
    scopes read and metrics); stop it."""
    from ldpstream.runtime.process import stop_pid

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    auth = {"Authorization": f"Bearer {token}"}
    server = subprocess.Popen([sys.executable, "-m", "ldpstream", "serve", "--port", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                with urllib.request.urlopen(urllib.request.Request(f"{base}/collections/{collection}/estimates",
                                                                   headers=auth), timeout=10) as r:
                    estimates = json.load(r)
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise
                time.sleep(0.2)
        with urllib.request.urlopen(urllib.request.Request(f"{base}/metrics", headers=auth), timeout=30) as r:
            text = r.read().decode()
        metrics_ok = f'collection="{collection}"' in text and "ldp_reports_total" in text
        return estimates, metrics_ok
    finally:
        stop_pid(server.pid)


GREEDY_EPSILON = 16.0  # per report: twice the most the default device policy takes


def greedy_variant(spec: CollectionSpec) -> CollectionSpec:
    """`spec` renamed and asking GREEDY_EPSILON per report (a lifetime budget raised to allow it), as a compromised
    server would publish it."""
    privacy = spec.privacy
    if privacy is not None:
        privacy = privacy.replace(per_report=GREEDY_EPSILON,
                                  lifetime=max(privacy.lifetime, GREEDY_EPSILON * privacy.values))
    return spec.replace(name=f"{spec.name}-greedy", epsilon=GREEDY_EPSILON, privacy=privacy)


def through_the_edge(cfg: Settings, spec: CollectionSpec, devices: int, seed: int,
                     shown: Progress | None = None) -> tuple[SimulationResult, str]:
    """Start an edge process; mint an enrolment token; have `devices` simulated devices join like phones (enrol with
    the token, fetch and verify the spec against this machine's pinned keys, accept it under the default privacy
    policy) and send their reports; then have one real SDK device try to join a copy of the collection published
    at epsilon 16 (signed by the real key: the compromised-server case). The run, and that device's refusal
    (RuntimeError if a device could not join or report, or the greedy spec was accepted). The devices are removed
    afterwards. `shown`: where the devices joined and the reports sent are counted as they go."""
    import asyncio
    import tempfile

    from ldpstream.contract.clock import now_ms
    from ldpstream.contract.enrolment import mint, new_token
    from ldpstream.contract.signatures import TrustedKeys
    from ldpstream.device.policy import PrivacyPolicy
    from ldpstream.device.sdk import Device, SpecRefused
    from ldpstream.edge.devices import devices_keys
    from ldpstream.edge.processes import start_edge, stop_edge, wait_live
    from ldpstream.runtime.join_keys import load_token_key, pinned_keys
    from ldpstream.runtime.redis import redis_client
    from ldpstream.runtime.specs import publish_spec
    from ldpstream.simulator.edge_client import join_fleet, send_fleet

    greedy = greedy_variant(spec)
    publish_spec(greedy, cfg.bootstrap)
    now = now_ms()
    token = mint(load_token_key(cfg), new_token([spec.name, greedy.name], devices + 1, now, now + 3_600_000))
    keys = pinned_keys(cfg)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    edge = start_edge(port, cfg.state_dir / "edge" / "spool" / f"demo-{port}", "--enrol-per-address",
                      str(devices + 10), log_file=cfg.state_dir / "demo-edge.log")
    try:
        wait_live(url, edge, probe="/readyz")
        shown = shown or Progress(disable=True)
        joining = shown.add_task("devices join (enrol, verify the spec)", total=devices)
        sending = shown.add_task("reports sent through the edge", total=devices)
        joined = asyncio.run(join_fleet(url, spec.name, token, TrustedKeys.from_json(keys), PrivacyPolicy(), devices,
                                        concurrency=128, on_device=lambda n: shown.advance(joining, n)))
        if joined.spec is None or len(joined.credentials) != devices:
            raise RuntimeError(f"{len(joined.credentials):,} of {devices:,} devices joined: refused {joined.reasons}, "
                               f"enrolment failures {joined.enrol_failures}; see {cfg.state_dir / 'demo-edge.log'}")
        result, answers = send_fleet(joined.spec, joined.credentials, url, seed=seed, concurrency=128,
                                     on_answer=lambda n: shown.advance(sending, n))
        with tempfile.TemporaryDirectory() as state:
            try:
                Device.join(url, greedy.name, token, keys, state_dir=state)
            except SpecRefused as refused:
                refusal = str(refused)
            else:
                raise RuntimeError(f"a device accepted {greedy.key} at epsilon 16: the default policy failed")
    finally:
        stop_edge(edge)
        client = redis_client(cfg.redis, 10.0)
        client.delete(*devices_keys(spec.name), *devices_keys(greedy.name))
    if answers.acknowledged != devices:
        raise RuntimeError(f"the edge acknowledged {answers.acknowledged:,} of {devices:,} requests: "
                           f"{answers.statuses}; see {cfg.state_dir / 'demo-edge.log'}")
    return result, (f"one device asked to join {greedy.key} (eps = 16 per report, twice the default policy's most, "
                    f"signed by the admin's key) refused it: {refusal}; nothing charged, nothing sent")


def demo_timescale(spec: CollectionSpec, devices: int) -> CollectionSpec:
    """A shuffled spec on the demo's timescale: 10 s windows, 3 s of grace, and a smallest batch the fleet fills."""
    assert spec.shuffle is not None
    shuffle = spec.shuffle.replace(grace_s=3, min_batch=max(100, min(spec.shuffle.min_batch, devices // 2)))
    return spec.replace(windows=["10s"], shuffle=shuffle)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def demo(devices: int = typer.Option(50_000, min=1, help="simulated devices, one report each"),
         spec_file: Path = typer.Option(DEFAULT_SPEC, "--spec", help="collection spec to run"),
         seed: int = typer.Option(0, help="population and noise seed"),
         direct: bool = typer.Option(False, "--direct", help="produce to Kafka in bulk instead of through the edge"),
         train_devices: int = typer.Option(200_000, min=0, help="devices of the LDP SGD demo over Kafka (0: skip)"),
         as_json: bool = typer.Option(False, "--json", help="print the estimates and truth as JSON"),
         train: bool = typer.Option(False, "--train", help="instead: Python devices (at most 2,000 of --devices) join "
                                                           "a Fashion-MNIST training job through the edge and train "
                                                           "it, accuracy shown version by version"),
         last: bool = typer.Option(False, "--last", help="only print the name of the collection the last demo made "
                                                         "(each demo makes its own, SPEC-demo-TIME), for "
                                                         "`ldp series \"$(ldp demo --last)\" ...`")) -> None:
    """Publish a spec, send a simulated fleet's reports through the edge and Kafka into Redis, compare with the
    truth."""
    from ldpstream.aggregator.processes import start_worker, stop_worker
    from ldpstream.aggregator.store import RedisStore
    from ldpstream.contract.clock import now_ms
    from ldpstream.contract.spec import load_spec
    from ldpstream.runtime.kafka import ReportProducer
    from ldpstream.runtime.redis import redis_client
    from ldpstream.runtime.settings import Settings
    from ldpstream.runtime.specs import publish_spec
    from ldpstream.runtime.tokens import Scope, TokenStore
    from ldpstream.sgd.jobs import train_over_kafka_demo
    from ldpstream.simulator.simulator import simulate

    if last:
        print_last_demo(Settings.from_env().state_dir)
        return
    if train:
        from ldpstream.cli.train_jobs import train_demo

        summary = train_demo(min(devices, 2000), seed, as_json, free_port())
        if as_json:
            typer.echo(json.dumps(summary))
        else:
            console.print(f"{summary['fleet']['joined']:,} devices joined {summary['job']} through the edge and sent "
                          f"{summary['fleet']['taken']:,} updates (eps 8 each, B = {summary['batch_size']}); one "
                          f"device refused a copy of the job at eps 16: {summary['refusal']}")
        return
    require_services()
    cfg = Settings.from_env()
    base = load_spec(spec_file)
    spec = base.replace(name=f"{base.name}-demo-{time.strftime('%Y%m%d-%H%M%S')}")
    if spec.shuffle is not None:
        if direct:
            fail("a shuffled collection's reports go through the edge and the shuffler: drop --direct", code=2)
        if devices < 200:
            fail("a shuffled demo needs --devices 200 or more (a batch holds at least 100)", code=2)
        spec = demo_timescale(spec, devices)
    publish_spec(spec, cfg.bootstrap)
    (cfg.state_dir / LAST_DEMO).write_text(spec.name + "\n")
    store = RedisStore(cfg.redis)
    log_file = cfg.state_dir / "demo-worker.log"
    worker = start_worker(group=f"ldp-aggregator-{spec.name}", log_file=log_file)
    shuffler = None if spec.shuffle is None else subprocess.Popen(
        [sys.executable, "-m", "ldpstream", "shuffle", "--margin-s", "2"],
        stdout=(cfg.state_dir / "demo-shuffler.log").open("wb"), stderr=subprocess.STDOUT)
    try:
        started = time.perf_counter()
        refusal = ""
        with progress(console, disable=as_json, transient=True) as shown:
            if direct:
                task = shown.add_task(f"reports produced to {spec.topic}", total=devices)
                result = simulate(spec, devices, ReportProducer(cfg.bootstrap), seed=seed,
                                  on_progress=lambda k: shown.advance(task, k))
            else:
                result, refusal = through_the_edge(cfg, spec, devices, seed, shown)
            counted = shown.add_task("reports aggregated into Redis", total=devices)
            accepted = wait_for_accepted(store, spec.name, devices, timeout_s=300,
                                         worker_alive=lambda: worker.poll() is None,
                                         on_count=lambda n: shown.update(counted, completed=n))
        elapsed = time.perf_counter() - started
    finally:
        stop_worker(worker)
        if shuffler is not None:
            shuffler.terminate()
            shuffler.wait(30)
    if accepted != devices:
        fail(f"the aggregator applied {accepted:,} of {devices:,} reports; see {log_file}")
    tokens = TokenStore(redis_client(cfg.redis, 10.0))
    token = tokens.issue([Scope.READ, Scope.METRICS], "ldp demo", now_ms(), ttl_ms=600_000)
    try:
        estimates, metrics_ok = read_through_api(spec.name, token.token)
    finally:
        tokens.revoke(token.record.id, now_ms())
    training = None
    if train_devices:
        with progress(console, disable=as_json, transient=True) as shown:
            task = shown.add_task(f"LDP SGD over Kafka ({train_devices:,} devices): model versions", total=None)
            training = train_over_kafka_demo(cfg, train_devices, seed, on_iteration=lambda t, total: shown.update(
                task, completed=t, total=max(t, total)))
    if as_json:
        typer.echo(json.dumps({"estimates": estimates, "truth": result.truth, "seconds": elapsed,
                               "training": training, "refusal": refusal}))
        return
    console.print(estimates_table(estimates, truth=result.truth["attributes"]))  # type: ignore[arg-type]
    if "shuffle" in estimates:
        console.print(shuffle_table(estimates["shuffle"]))
        console.print(f"Shuffled ({spec.windows[0]} windows for the demo, {spec.shuffle.grace_s} s of grace): the "  # type: ignore[union-attr]
                      f"analyst saw each window's reports as one anonymous batch, whose central epsilon is in the "
                      f"table above (eps0 = {spec.epsilon} on the device).")
    path = "produced to Kafka in bulk" if direct else "each enrolled with a token, verified the signed spec against " \
        "the pinned keys and accepted it under the default privacy policy, sent its report to the ingestion edge " \
        "(signed HTTP), batched into Kafka"
    console.print(f"{devices:,} devices simulated and perturbed (eps = {spec.epsilon}), {path}, and aggregated into "
                  f"Redis in {elapsed:.1f} s, the worker's start-up included.")
    if refusal:
        console.print(refusal[0].upper() + refusal[1:] + ".")
    console.print(styled(
        "Read through the HTTP API; /metrics ", ("exports", "") if metrics_ok else ("does not export", "red"),
        " the report totals and estimates. Any time: ", (f"ldp estimate {spec.name}", "bold"), ", or ",
        ("ldp serve", "bold"), f" and http://127.0.0.1:8000/collections/{spec.name}/estimates, "
        "http://127.0.0.1:8000/metrics with a token from ", ("ldp tokens create --scope read --scope metrics", "bold"),
        " (header Authorization: Bearer TOKEN); its series: ",
        (f"ldp series {spec.name} -a {spec.attributes[0].name}", "bold"),
        f"; the console: http://127.0.0.1:8000/console/collection?name={spec.name} (it asks for the token)"))
    if training is not None:
        console.print(f"LDP SGD over Kafka ({training['devices']:,} devices, eps = {training['epsilon']}, HM, "
                      f"{training['iterations']} iterations of {training['batch_size']:,} gradients, "
                      f"{training['seconds']:.0f} s): logistic misclassification {training['private']:.4f} "
                      f"private vs {training['non_private']:.4f} non-private on the same held-out rows "
                      f"(`ldp train status {training['job']} --json`).")
    if not metrics_ok:
        raise typer.Exit(1)


def print_last_demo(state_dir: Path) -> None:
    """The name of the collection the last `ldp demo` on `state_dir` made; exit 1 if none did."""
    try:
        typer.echo((state_dir / LAST_DEMO).read_text().strip())
    except FileNotFoundError:
        fail(f"no demo has run on {state_dir} yet: run `make demo` (or `ldp up` and `ldp demo`)")


def register(app: typer.Typer) -> None:
    """Add `ldp demo` to the app."""
    app.command()(demo)
