"""Device time per training update (issue 40), as JSON: what one device spends making one update (section 13.5 of
docs/reference/protocol.md: the mean gradient of its examples at the model, clipping, the job's randomizer, the
update's bytes), for softmax 784-10 with privunitg and projunit (k = 1000) and the MLP 784-64-10 with projunit
(a privunitg update of its 50,890 values would pass the edge's limit), by

- the Python SDK (`clipped_update_vector`, `ldpstream.mechanisms.gradients.device`, `encode_update`),
- the TypeScript SDK in Node (benchmarks/typescript/train.mjs),
- the TypeScript SDK in Debian's Chromium, headless (benchmarks/typescript/train_browser.mjs; skipped with
  --no-browser or without Chromium),

each the median over `--updates` updates of one device with `--examples` examples, the bytes of one update, and the
ratios TypeScript / Python measured in this run.

    .venv/bin/python benchmarks/bench_typescript_training.py [--updates 20] [--examples 10] [--no-browser]

Needs the built SDK (`make install-test`). The machine has 2 shared cores: times move by tens of percent.
"""

from __future__ import annotations

import argparse
import json
import shutil
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

from ldpstream.contract.networks import make_network  # noqa: E402
from ldpstream.contract.training import (  # noqa: E402
    JobSpec,
    clipped_update_vector,
    encode_update,
    job_from_mapping,
)
from ldpstream.mechanisms.gradients.device import (  # noqa: E402
    GeneratorUniforms,
    Uniforms,
    privunitg_report,
    projunit_report,
)
from ldpstream.mechanisms.gradients.privunit import optimal_cap  # noqa: E402

HERE = ROOT / "benchmarks" / "typescript"
EPSILON = 8.0
K = 1000


def cases(updates: int, examples: int) -> list[dict[str, Any]]:
    out = []
    for architecture, dims in (("softmax", [784, 10]), ("mlp", [784, 64, 10])):
        size = make_network(architecture, tuple(dims)).size
        for name in ("privunitg", "projunit") if 4 * size <= 65_536 else ("projunit",):  # protocol 13.1's limit
            inner = size if name == "privunitg" else min(K, 1 << (size - 1).bit_length())
            cap = optimal_cap("gaussian", EPSILON, inner)
            mechanism = {"name": name, "p": cap.p, "q": cap.q, **({"k": K} if name == "projunit" else {})}
            out.append({"name": f"{architecture} {'-'.join(map(str, dims))} {name}", "architecture": architecture,
                        "dims": dims, "parameters": size, "mechanism": mechanism, "epsilon": EPSILON,
                        "examples": examples, "updates": updates})
    return out


def python_update(spec: JobSpec, theta: np.ndarray, x: np.ndarray, y: np.ndarray, source: Uniforms,
                  version: int) -> bytes:
    """One update of the Python SDK, as `TrainingDevice.train` makes it (less the ledger and the outbox)."""
    vec = clipped_update_vector(spec, theta, x, y)
    m = spec.mechanism
    report = (projunit_report(vec, m.k or 0, m.p, m.q, source) if m.name == "projunit"
              else privunitg_report(vec, m.p, m.q, source))
    return encode_update("bench", 1, version, report)


def python_times(job_cases: list[dict[str, Any]]) -> dict[str, Any]:
    out = {}
    for c in job_cases:
        spec = job_from_mapping({"job_id": "bench", "version": 1, "model": {"architecture": c["architecture"],
                                 "dims": c["dims"]}, "parameters": c["parameters"], "mechanism": c["mechanism"],
                                 "clip": 1.0, "epsilon": c["epsilon"], "max_rounds": 1, "batch_size": 1,
                                 "max_versions": 1, "lr": 1.0, "version_validity_s": 3600,
                                 "max_examples": c["examples"]})
        rng = np.random.default_rng(0)
        theta = (rng.random(c["parameters"]) - 0.5) * 0.1
        x = np.where(rng.random((c["examples"], c["dims"][0])) < 0.5, 0.0, rng.random((c["examples"], c["dims"][0])))
        y = rng.integers(0, c["dims"][-1], c["examples"])
        source = GeneratorUniforms(np.random.default_rng(1))
        python_update(spec, theta, x, y, source, 0)  # warm-up
        ms, size = [], 0
        for i in range(c["updates"]):
            t0 = time.perf_counter()
            size = len(python_update(spec, theta, x, y, source, i))
            ms.append(1000 * (time.perf_counter() - t0))
        out[c["name"]] = {"median_ms": statistics.median(ms), "min_ms": min(ms), "updates": c["updates"],
                          "update_bytes": size}
    return out


def node(script: str, path: Path) -> Any:
    done = subprocess.run(["node", str(HERE / script), str(path)], capture_output=True, text=True, timeout=900,
                          check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--updates", type=int, default=20)
    parser.add_argument("--examples", type=int, default=10)
    parser.add_argument("--no-browser", action="store_true")
    args = parser.parse_args()
    job_cases = cases(args.updates, args.examples)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "cases.json"
        path.write_text(json.dumps(job_cases))
        python = python_times(job_cases)
        ts_node = node("train.mjs", path)
        browser = None if args.no_browser or shutil.which("chromium") is None else node("train_browser.mjs", path)
    ratios = {name: {"node_over_python": round(ts_node[name]["median_ms"] / python[name]["median_ms"], 3),
                     **({} if browser is None else
                        {"chromium_over_python": round(browser[name]["median_ms"] / python[name]["median_ms"], 3)})}
              for name in python}
    print(json.dumps({"examples_per_update": args.examples, "epsilon": EPSILON, "python": python, "node": ts_node,
                      "chromium": browser, "ratios": ratios}, indent=2))


if __name__ == "__main__":
    main()
