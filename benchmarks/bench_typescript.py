"""The TypeScript device SDK's numbers, as JSON (issue 26):

- `bundle`: the browser bundle (dist/browser/ldpstream-device.js, every mechanism included), minified and
  minified+gzipped (goal: at most 25 kB);
- `perturb`: reports perturbed and encoded per second, per mechanism, one device's report at a time (what an SDK
  does), by the TypeScript SDK in Node and in Debian's Chromium (headless), next to the Python SDK's collector and
  encoder on the same inputs;
- `join`: the time for one device to join against a local edge (pointer, spec, Ed25519 verification, policy,
  enrolment), TypeScript and Python, when the services are up (`ldp up`; null otherwise).

    .venv/bin/python benchmarks/bench_typescript.py [--join-devices 30] [--no-browser]

Needs the built SDK (`make install-test`). The machine has 2 shared cores: rates move by tens of percent.
"""

from __future__ import annotations

import argparse
import base64
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from ldpstream.contract.collector import collector_for  # noqa: E402
from ldpstream.contract.spec import parse_spec  # noqa: E402
from ldpstream.contract.wire import encode  # noqa: E402
from ldpstream.device.perturb import perturb  # noqa: E402
from ldpstream.mechanisms.workload.baselines import randomized_response  # noqa: E402
from ldpstream.mechanisms.workload.mechanism import FactorizationMechanism  # noqa: E402

HERE = ROOT / "benchmarks" / "typescript"
VALUES = [f"v{i}" for i in range(16)]


def spec(attribute: dict[str, Any], epsilon: float = 2.0, privacy: dict[str, float] | None = None) -> str:
    body: dict[str, Any] = {"name": "bench", "version": 1, "epsilon": epsilon, "attributes": [attribute]}
    if privacy:
        body.update(privacy=privacy, epsilon=privacy["per_report"])
    return parse_spec(json.dumps(body)).canonical_json()


def jobs(tmp: Path) -> list[dict[str, Any]]:
    rng = np.random.default_rng(0)
    numeric = [{"x": float(v)} for v in rng.uniform(0, 100, 500)]
    categorical = [{"c": VALUES[i]} for i in rng.integers(0, 16, 500)]
    privacy = {"per_report": 1.0, "lifetime": 3.0}
    out: list[dict[str, Any]] = []
    for name in ("laplace", "scdf", "staircase", "duchi", "pm", "hm", "harmony"):
        out.append({"name": name, "spec": spec({"name": "x", "type": "numeric", "range": [0, 100],
                                                "mechanism": name}), "records": numeric})
    for name in ("grr", "sue", "oue", "blh", "olh", "hadamard"):
        out.append({"name": name, "spec": spec({"name": "c", "type": "categorical", "values": VALUES,
                                                "mechanism": name}), "records": categorical})
    for name in ("l-grr", "l-oue", "l-osue", "l-sue", "rappor", "dbitflip"):
        out.append({"name": name, "spec": spec({"name": "c", "type": "categorical", "values": VALUES,
                                                "mechanism": name}, privacy=privacy), "records": categorical})
    out.append({"name": "1bitmean", "spec": spec({"name": "x", "type": "numeric", "range": [0, 100],
                                                  "mechanism": "1bitmean"}, privacy=privacy), "records": numeric})
    pairs = [{"kv": {f"k{j}": float(rng.uniform(0, 1)) for j in rng.choice(8, size=2, replace=False)}}
             for _ in range(500)]
    for name in ("privkv", "pckv-ue", "pckv-grr"):
        out.append({"name": name, "spec": spec({"name": "kv", "type": "keyvalue", "keys": [f"k{j}" for j in range(8)],
                                                "range": [0, 1], "mechanism": name, "padding": 2}), "records": pairs})
    words = [{"s": w} for w in rng.choice(["alpha.org", "beta.com", "gamma.net", "delta.io"], 500)]
    for name in ("pem", "hcms_tree", "sfp"):
        out.append({"name": name, "spec": spec({"name": "s", "type": "string", "max_length": 12,
                                                "mechanism": name}, epsilon=4.0), "records": words})
    mech = FactorizationMechanism(randomized_response(16, 2.0), np.tril(np.ones((16, 16))), 2.0)
    mech.save(tmp / "strategy.npz")
    out.append({"name": "factorization", "records": categorical,
                "spec": spec({"name": "c", "type": "categorical", "values": VALUES, "mechanism": "factorization",
                              "workload": "prefix", "strategy": mech.hash}),
                "strategy": {"hash": mech.hash, "npz": base64.b64encode((tmp / "strategy.npz").read_bytes()).decode()}})
    return out


def node(script: str, *args: str, timeout: float = 900) -> Any:
    done = subprocess.run(["node", str(HERE / script), *args], capture_output=True, text=True, timeout=timeout,
                          check=True)
    return json.loads(done.stdout)


def python_rates(specs: list[dict[str, Any]], tmp: Path, seconds: float = 0.4) -> dict[str, int]:
    """The Python SDK's path for one report: validate, perturb (the collector), encode."""
    out = {}
    rng = np.random.default_rng()
    for job in specs:
        parsed = parse_spec(job["spec"])
        strategies = None
        if job.get("strategy"):
            strategies = {job["strategy"]["hash"]: FactorizationMechanism.load(tmp / "strategy.npz")}
        collector_for(parsed, strategies)
        secrets = np.array([12345], dtype=np.uint64) if parsed.privacy is not None else None
        devices, times = np.array([1], dtype=np.uint64), np.array([1_795_788_000_000], dtype=np.int64)
        columns = [{k: np.array([v], dtype=object if isinstance(v, dict) else None) for k, v in r.items()}
                   for r in job["records"]]
        done, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            encode(perturb(parsed, devices, times, columns[done % len(columns)], rng, strategies, secrets))
            done += 1
        out[job["name"]] = round(done / (time.perf_counter() - start))
    return out


def bundle() -> dict[str, Any]:
    done = subprocess.run(["node", "scripts/bundle.mjs"], cwd=ROOT / "sdk" / "typescript", capture_output=True,
                          text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def join_times(devices: int, tmp: Path) -> dict[str, Any] | None:
    """Median and p90 join times (ms) of N devices joining one after another, TypeScript and Python."""
    from ldpstream.contract.clock import now_ms
    from ldpstream.contract.enrolment import mint, new_token
    from ldpstream.device import Device
    from ldpstream.edge.processes import start_edge, stop_edge, wait_live
    from ldpstream.runtime.join_keys import load_token_key, pinned_keys
    from ldpstream.runtime.kafka import delete_topic, metadata_answers
    from ldpstream.runtime.redis import redis_answers
    from ldpstream.runtime.settings import Settings
    from ldpstream.runtime.specs import publish_spec

    cfg = Settings.from_env()
    if not (metadata_answers(cfg.bootstrap, 5.0) and redis_answers(cfg.redis)):
        return None
    name = f"bench-join-{int(time.time())}"
    published = parse_spec(json.dumps({"name": name, "version": 1, "epsilon": 4.0, "attributes": [
        {"name": "x", "type": "numeric", "range": [0, 100]},
        {"name": "c", "type": "categorical", "values": VALUES}]}))
    publish_spec(published, cfg.bootstrap)
    port = 38000 + int(time.time()) % 1000
    proc = start_edge(port, tmp / "spool", "--enrol-per-address", "1000000", log_file=tmp / "edge.log")
    url = f"http://127.0.0.1:{port}"
    try:
        wait_live(url, proc)
        token = mint(load_token_key(cfg), new_token([name], 2 * devices + 2, now_ms(), now_ms() + 600_000))
        job = tmp / "join.json"
        job.write_text(json.dumps({"edge": url, "collection": name, "token": token, "keys": pinned_keys(cfg),
                                   "devices": devices}))
        ts = node("join.mjs", str(job))["ms"]
        py = []
        for i in range(devices):
            start = time.perf_counter()
            Device.join(url, name, token, pinned_keys(cfg), state_dir=tmp / f"py-{i}")
            py.append(1000 * (time.perf_counter() - start))
    finally:
        stop_edge(proc)
        delete_topic(cfg.bootstrap, published.topic)

    def summary(ms: list[float]) -> dict[str, float]:
        return {"median_ms": round(statistics.median(ms), 2), "p90_ms": round(float(np.percentile(ms, 90)), 2)}

    return {"devices": devices, "typescript": summary(ts), "python": summary(py)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--join-devices", type=int, default=30)
    parser.add_argument("--no-browser", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        tmp = Path(directory)
        specs = jobs(tmp)
        (tmp / "jobs.json").write_text(json.dumps(specs))
        result: dict[str, Any] = {"bundle": bundle()}
        ts_node = node("perturb.mjs", str(tmp / "jobs.json"))
        ts_chromium = None if args.no_browser else node("browser.mjs", str(tmp / "jobs.json"))
        python = python_rates(specs, tmp)
        result["perturb"] = {"unit": "reports/s (perturbed and encoded, one at a time)", "mechanisms": {
            s["name"]: {"typescript_node": ts_node[s["name"]],
                        "typescript_chromium": None if ts_chromium is None else ts_chromium[s["name"]],
                        "python": python[s["name"]]} for s in specs}}
        result["join"] = join_times(args.join_devices, tmp)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
