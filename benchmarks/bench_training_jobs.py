"""Training jobs on devices (docs/reference/protocol.md section 13, issue 40's benchmark), as JSON, in one command:

- `update_bytes`: bytes per update per mechanism (privunitg, projunit at k = 1000), softmax 784-10 and the MLP
  784-64-10, with the Python device's time per update (gradient of its examples, clip, perturb from uniforms,
  encode) next to its peer measured in the same run: the server mechanism's vectorised perturbation of the vector.
- `edge` (with `--live`): updates admitted per second by one real edge process (`python -m ldpstream.edge`), each
  a distinct enrolled device's pre-encoded, pre-signed update for the current version, replayed by the Go load
  generator (`benchmarks/loadgen`, as `bench_edge`) with the edge's CPU microseconds per update; its peer in the
  same run: the same edge's collection report intake (one report a request, `bench_edge`'s requests).
- `coordinator` (with `--live`): updates per second one job coordinator (`JobCoordinator.run`, as `ldp train run`)
  consumes, decodes, sums and steps on, B a version, read from Kafka with its Redis transaction per micro-batch;
  its ceiling in the same run: decoding and summing the same bytes in process (no Kafka, no Redis).
- `device_time` (with `--device-times`): `benchmarks/bench_typescript_training.py`'s JSON, the device's time per
  update in Python, Node and Chromium for softmax and the MLP.
- `offline_vs_edge` (with `--compare-epochs E`): devices through the real edge train the example job's settings
  (examples/sgd_fashion_softmax.yaml: softmax, PrivUnitG at eps 8, B = 600, IID) for E passes of
  `--compare-devices` devices next to the offline trainer with the same settings (`device_job_twin`).

    .venv/bin/python -m benchmarks.bench_training_jobs [--repeats 20] [--live [--updates 2000]] [--device-times]
        [--compare-epochs 1 --compare-devices 6000]

`--live` and `--compare-epochs` need Kafka and Redis (`ldp up`, or KAFKA_PORT / REDIS_PORT of a stack of your own)
and Go. PrivUnitG's update is P float32 values, so it fits the edge's 64 KiB update only up to ~16k parameters;
bigger models use ProjUnit (seed + k float32 values, 4,008 bytes at k = 1000, whatever P).
"""

from __future__ import annotations

import argparse
import json
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.bench_edge import _chunk, load, write_requests
from ldpstream.contract.auth import authorization
from ldpstream.contract.clock import now_ms
from ldpstream.contract.networks import make_network
from ldpstream.contract.spec import load_spec
from ldpstream.contract.topics import UPDATES_TOPIC
from ldpstream.contract.training import JobSpec, clipped_update_vector, decode_update, encode_update
from ldpstream.mechanisms.gradients import gradient_mechanism
from ldpstream.mechanisms.gradients.device import GeneratorUniforms, privunitg_report, projunit_report
from ldpstream.sgd.jobfile import complete_job

MODELS = {"softmax": [784, 10], "mlp": [784, 64, 10]}
CASES = (("softmax", "privunitg"), ("softmax", "projunit"), ("mlp", "projunit"))  # an MLP privunitg update of
# 50,890 float32 values would pass the edge's limit (protocol 13.1): jobs refuse it
ROOT = Path(__file__).resolve().parents[1]


def job(model: str, mechanism: str, examples: int = 10, **fields: Any) -> JobSpec:
    """A job of `model` with `mechanism` (projunit at k = 1000) at eps 8; `fields` override the rest."""
    mech: dict[str, object] = {"name": mechanism, **({"k": 1000} if mechanism == "projunit" else {})}
    return complete_job({"job_id": f"bench-{uuid.uuid4().hex[:8]}", "version": 1,
                         "model": {"architecture": model, "dims": MODELS[model]}, "mechanism": mech, "clip": 1.0,
                         "epsilon": 8.0, "max_rounds": 1, "batch_size": 100, "max_versions": 10, "lr": 1.0,
                         "version_validity_s": 3600, "max_examples": examples, **fields})


def report(spec: JobSpec, vector: np.ndarray, source: GeneratorUniforms) -> dict[str, np.ndarray]:
    """The device's report of a clipped vector under the job's mechanism."""
    m = spec.mechanism
    return (privunitg_report(vector, m.p, m.q, source) if m.name == "privunitg"
            else projunit_report(vector, m.k or 0, m.p, m.q, source))


def updates(spec: JobSpec, n: int, model_version: int | None = 0, seed: int = 0) -> list[bytes]:
    """n updates of random unit-ball vectors for version `model_version` (None: update i for version i // B)."""
    rng = np.random.default_rng(seed)
    source = GeneratorUniforms(rng)
    out = []
    for i in range(n):
        v = rng.standard_normal(spec.parameters)
        v *= rng.random() / np.linalg.norm(v)
        out.append(encode_update(spec.job_id, spec.version, i // spec.batch_size if model_version is None
                                 else model_version, report(spec, v, source)))
    return out


def measure(model: str, mechanism: str, repeats: int, examples: int) -> dict[str, object]:
    spec = job(model, mechanism, examples)
    dims = MODELS[model]
    rng = np.random.default_rng(0)
    net = make_network(model, tuple(dims))
    theta = net.init(rng)
    x, y = rng.random((examples, dims[0])), rng.integers(0, dims[-1], examples)
    source = GeneratorUniforms(rng)
    started = time.perf_counter()
    for _ in range(repeats):
        vector = clipped_update_vector(spec, theta, x, y)
        body = encode_update("bench", 1, 0, report(spec, vector, source))
    device_s = (time.perf_counter() - started) / repeats
    m = spec.mechanism
    peer = gradient_mechanism(mechanism, dims=spec.parameters, epsilon=8.0, **({"k": 1000} if m.k else {}))
    started = time.perf_counter()
    for _ in range(repeats):
        peer.perturb(vector[None, :], rng)
    peer_s = (time.perf_counter() - started) / repeats
    return {"model": model, "parameters": spec.parameters, "mechanism": mechanism, "examples": examples,
            "update_bytes": len(body),
            "device_ms_per_update": round(device_s * 1000, 3), "server_perturb_ms_peer": round(peer_s * 1000, 3)}


def write_updates(path: Path, spec: JobSpec, credentials: list[tuple[str, bytes]], bodies: list[bytes]) -> Path:
    """loadgen's request file (`bench_edge.write_requests`' format): device i posts update i mod len(bodies)."""
    url_path = f"/v1/jobs/{spec.job_id}/updates"
    now = now_ms()
    with path.open("wb") as out:
        for i, (device, key) in enumerate(credentials):
            body = bodies[i % len(bodies)]
            out.write(_chunk(url_path.encode()) + struct.pack("<I", 2) + _chunk(b"Content-Type")
                      + _chunk(b"application/msgpack") + _chunk(b"Authorization")
                      + _chunk(authorization(device, key, "POST", url_path, body, now).encode()) + _chunk(body))
    return path


def edge_rates(n: int, seconds: float, concurrency: int) -> dict[str, Any]:
    """Updates admitted per second by one edge process per mechanism, and its collection report intake (peer)."""
    from ldpstream.edge.devices import DeviceRegistry
    from ldpstream.edge.keyring import Keyring
    from ldpstream.edge.processes import start_edge, stop_edge, wait_live
    from ldpstream.runtime.redis import redis_client
    from ldpstream.runtime.settings import PROJECT_ROOT, Settings
    from ldpstream.runtime.specs import publish_spec

    cfg = Settings.from_env()
    client = redis_client(cfg.redis)
    registry = DeviceRegistry(client, Keyring.create(cfg.edge_key))
    collection = load_spec(PROJECT_ROOT / "examples" / "diagnostics.yaml").replace(
        name=f"bench-jobs-{uuid.uuid4().hex[:6]}", one_report_per_window=False)
    publish_spec(collection, cfg.bootstrap)
    out: dict[str, Any] = {"updates_per_mechanism": n, "seconds": seconds, "concurrency": concurrency,
                           "client": "benchmarks/loadgen (Go), requests signed ahead of time"}
    with tempfile.TemporaryDirectory() as tmp:
        port = 18941
        edge = start_edge(port, Path(tmp) / "spool", "--rate", "1000000", log_file=Path(tmp) / "edge.log")
        url = f"http://127.0.0.1:{port}"
        try:
            wait_live(url, edge, probe="/readyz")
            for model, mechanism in (("softmax", "privunitg"), ("mlp", "projunit")):
                spec = job(model, mechanism, batch_size=n + 1, max_versions=1)  # version 0 stays open throughout
                coordinator = _coordinator(cfg, spec)
                coordinator.start()  # publishes version 0 for the edge
                credentials = [(c.device, c.key) for c in registry.enroll(spec.key, n)]
                bodies = updates(spec, 20)
                requests = write_updates(Path(tmp) / "updates", spec, credentials, bodies)
                result = load(url, requests, seconds, concurrency, server_pid=edge.pid)
                admitted = result["statuses"].get("200", 0)
                out[f"{model}_{mechanism}"] = {"update_bytes": len(bodies[0]), "admitted": admitted, **result,
                                               "server_cpu_us_per_update": result.get("server_cpu_us_per_request")}
            reports = write_requests(Path(tmp) / "reports", collection, [
                (c.device, c.key) for c in registry.enroll(collection.name, n)], 1, n, 0)
            out["peer_collection_reports"] = load(url, reports, seconds, concurrency, server_pid=edge.pid)
        finally:
            stop_edge(edge)
    peer = out["peer_collection_reports"]["requests_per_s"]
    for name in ("softmax_privunitg", "mlp_projunit"):
        out[name]["vs_collection_reports"] = round(out[name]["requests_per_s"] / peer, 3) if peer else None
    return out


def _coordinator(cfg: Any, spec: JobSpec, evaluator: Any = None) -> Any:
    from ldpstream.runtime.jobs import publish_job
    from ldpstream.runtime.redis import redis_client
    from ldpstream.runtime.signing import load_signing_key
    from ldpstream.sgd.jobrun import JobCoordinator

    publish_job(spec, cfg.bootstrap)
    return JobCoordinator(spec, cfg.bootstrap, redis_client(cfg.redis), load_signing_key(cfg.pointer_signing_key),
                          evaluator)


def coordinator_rates(n: int) -> dict[str, Any]:
    """Updates per second one coordinator consumes and steps on (B = 100 a version), per mechanism, and the
    in-process ceiling (decode and sum the same bytes)."""
    from ldpstream.runtime.catalog import service
    from ldpstream.runtime.kafka import ReportProducer
    from ldpstream.runtime.settings import Settings

    cfg = Settings.from_env()
    out: dict[str, Any] = {}
    for model, mechanism in (("softmax", "privunitg"), ("mlp", "projunit")):
        b = 100
        versions = max(1, n // b)
        spec = job(model, mechanism, batch_size=b, max_versions=versions)
        coordinator = _coordinator(cfg, spec)
        coordinator.start()  # at the updates topic's ends
        bodies = updates(spec, versions * b, model_version=None)
        producer = ReportProducer(cfg.bootstrap, principal=service("edge").principal.name)  # as the edge writes
        for i, body in enumerate(bodies):
            # one partition: read in the order made (version by version), as devices send them over time
            producer.produce(UPDATES_TOPIC, body, key=(i + 1).to_bytes(8, "little"), partition=0)
        producer.flush()
        if producer.failed:
            raise RuntimeError(f"{producer.failed} of {len(bodies)} updates were not delivered to {UPDATES_TOPIC}")
        deadline = time.monotonic() + 300
        started = time.perf_counter()
        state = coordinator.run(should_stop=lambda end=deadline: time.monotonic() > end)
        seconds = time.perf_counter() - started
        started = time.perf_counter()
        total = np.zeros(spec.parameters)
        for body in bodies:
            total += coordinator._decode(decode_update(body, spec).columns)
        ceiling = time.perf_counter() - started
        out[f"{model}_{mechanism}"] = {
            "updates": len(bodies), "batch_size": b, "versions": state.version, "done": state.done,
            "outcomes": state.outcomes, "updates_per_s": round(len(bodies) / seconds, 1),
            "ceiling_decode_sum_per_s": round(len(bodies) / ceiling, 1),
            "vs_ceiling": round(ceiling / seconds, 3)}
    return out


def offline_vs_edge(epochs: int, devices: int, seeds: int, seed: int) -> dict[str, Any]:
    """The example job (examples/sgd_fashion_softmax.yaml) over `devices` IID devices taking `epochs` rounds each,
    Python devices through one real edge process and the job's coordinator, next to the offline trainer's accuracy
    with the same settings (`device_job_twin`) over `seeds` seeds. `seed`: the split's, the fleet's order's and its
    devices' noise (a run is reproducible up to the order of a version's sum)."""
    import dataclasses
    import threading

    from ldpstream.contract.enrolment import mint, new_token
    from ldpstream.device.policy import PrivacyPolicy
    from ldpstream.edge.processes import start_edge, stop_edge, wait_live
    from ldpstream.runtime.join_keys import load_token_key, pinned_keys
    from ldpstream.runtime.redis import redis_client
    from ldpstream.runtime.settings import PROJECT_ROOT, Settings
    from ldpstream.sgd.federated import device_job_twin, train_federated
    from ldpstream.sgd.fleet import train_fleet
    from ldpstream.sgd.images import device_split, fashion_mnist
    from ldpstream.sgd.jobfile import held_out, load_job_yaml
    from ldpstream.sgd.jobrun import RunState, state_key

    cfg = Settings.from_env()
    example, evaluation = load_job_yaml(PROJECT_ROOT / "examples" / "sgd_fashion_softmax.yaml")
    b = example.batch_size
    devices -= devices % b
    spec = job("softmax", "privunitg", job_id=f"bench-e2e-{uuid.uuid4().hex[:8]}", epsilon=example.epsilon,
               clip=example.clip, batch_size=b, max_rounds=epochs, max_versions=epochs * devices // b, lr=example.lr,
               momentum=example.momentum, max_examples=example.max_examples, expected_population=devices)
    train, test = fashion_mnist("train"), fashion_mnist("test")
    twin, split = device_job_twin(spec, device_split("iid", train.y, seed))
    coordinator = _coordinator(cfg, spec, held_out(spec, evaluation or {"dataset": "fashion-mnist"}))
    coordinator.start()
    stop = threading.Event()
    thread = threading.Thread(target=coordinator.run, kwargs={"should_stop": stop.is_set}, daemon=True)
    thread.start()
    lifetime = example.epsilon * epochs
    token = mint(load_token_key(cfg), new_token([spec.key], devices, now_ms(), now_ms() + 86_400_000))
    with tempfile.TemporaryDirectory() as tmp:
        port = 18942
        edge = start_edge(port, Path(tmp) / "spool", "--rate", "1000000", "--enrol-per-address", "100000000",
                          log_file=Path(tmp) / "edge.log")
        try:
            wait_live(f"http://127.0.0.1:{port}", edge, probe="/readyz")
            fleet = train_fleet(f"http://127.0.0.1:{port}", spec.job_id, token, pinned_keys(cfg), train, devices,
                                "iid", Path(tmp) / "devices", seed=seed, timeout_s=6 * 3600,
                                policy=PrivacyPolicy(max_epsilon_per_report=example.epsilon,
                                                     max_epsilon_per_day=lifetime,
                                                     max_lifetime_per_collection=lifetime,
                                                     max_lifetime_per_device=max(lifetime, 32.0))).to_json()
            deadline = time.monotonic() + 60
            client = redis_client(cfg.redis)
            while not (state := RunState.from_redis(client.hgetall(state_key(spec.job_id)))).done and \
                    time.monotonic() < deadline:
                time.sleep(0.2)
        finally:
            stop.set()
            thread.join(30)
            stop_edge(edge)
    net = make_network("softmax", tuple(MODELS["softmax"]))
    offline = [100 * train_federated(dataclasses.replace(twin, seed=s), net, train, split, test).summary["accuracy"]
               for s in range(seeds)]
    edge_accuracy = 100 * state.evaluations[-1]["accuracy"] if state.evaluations else None
    return {"seed": seed, "devices": devices, "epochs": epochs, "batch_size": b, "versions": state.version,
            "done": state.done, "epsilon": spec.epsilon, "lr": spec.lr, "momentum": spec.momentum,
            "fleet_seconds": fleet["seconds"],
            "edge_accuracy": edge_accuracy, "offline_accuracies": [round(a, 2) for a in offline],
            "offline_mean": round(float(np.mean(offline)), 2),
            "offline_sd": round(float(np.std(offline, ddof=1)), 2) if seeds > 1 else None,
            "difference": None if edge_accuracy is None else round(edge_accuracy - float(np.mean(offline)), 2)}


def device_times(repeats: int) -> Any:
    """bench_typescript_training.py's JSON (Python, Node, Chromium)."""
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_typescript_training.py"), "--updates",
                           str(repeats)], capture_output=True, text=True, timeout=1800, check=True)
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--examples", type=int, default=10)
    parser.add_argument("--live", action="store_true", help="the edge and coordinator rates (Kafka, Redis, Go)")
    parser.add_argument("--updates", type=int, default=2000, help="with --live: updates per mechanism")
    parser.add_argument("--seconds", type=float, default=8.0, help="with --live: the longest a load step runs")
    parser.add_argument("--concurrency", type=int, default=64, help="with --live: requests in flight")
    parser.add_argument("--device-times", action="store_true", help="Python, Node and Chromium device times")
    parser.add_argument("--compare-epochs", type=int, default=0, help="through the edge vs offline, E passes")
    parser.add_argument("--compare-devices", type=int, default=6000)
    parser.add_argument("--compare-seeds", type=int, default=10, help="offline seeds next to the edge's run")
    parser.add_argument("--compare-seed", type=int, default=0, help="the edge run's split, order and noise")
    args = parser.parse_args()
    out: dict[str, Any] = {"benchmark": "training_jobs", "update_bytes": [
        measure(model, mechanism, args.repeats, args.examples) for model, mechanism in CASES]}
    if args.live:
        out["edge"] = edge_rates(args.updates, args.seconds, args.concurrency)
        out["coordinator"] = coordinator_rates(args.updates)
    if args.compare_epochs:
        out["offline_vs_edge"] = offline_vs_edge(args.compare_epochs, args.compare_devices, args.compare_seeds,
                                              args.compare_seed)
    if args.device_times:
        out["device_time"] = device_times(args.repeats)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
