"""Training jobs on devices (docs/reference/protocol.md section 13): bytes per update per mechanism, and the Python
device's time per update (gradient of its examples, clip, perturb from uniforms, encode), for softmax and the MLP,
next to the peer measured in the same run: the server mechanism's vectorised perturbation of the same vector.

    .venv/bin/python benchmarks/bench_training_jobs.py [--repeats 20]

Prints JSON. PrivUnitG's update is P float32 values, so it fits the edge's 64 KiB update only up to ~16k parameters;
bigger models use ProjUnit (seed + k float32 values, 4,008 bytes at k = 1000, whatever P).
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from ldpstream.contract.networks import make_network
from ldpstream.contract.training import MAX_UPDATE_BYTES, clipped_update_vector, encode_update
from ldpstream.mechanisms.gradients import gradient_mechanism
from ldpstream.mechanisms.gradients.device import GeneratorUniforms, privunitg_report, projunit_report
from ldpstream.sgd.jobfile import complete_job

MODELS = {"softmax": [784, 10], "mlp": [784, 64, 10]}


def measure(model: str, mechanism: str, repeats: int, examples: int) -> dict[str, object]:
    dims = MODELS[model]
    mech: dict[str, object] = {"name": mechanism, **({"k": 1000} if mechanism == "projunit" else {})}
    spec = complete_job({"job_id": "bench", "version": 1, "model": {"architecture": model, "dims": dims},
                         "mechanism": mech, "clip": 1.0, "epsilon": 8.0, "max_rounds": 1, "batch_size": 100,
                         "max_versions": 10, "lr": 1.0, "version_validity_s": 60, "max_examples": examples})
    rng = np.random.default_rng(0)
    net = make_network(model, tuple(dims))
    theta = net.init(rng)
    x, y = rng.random((examples, dims[0])), rng.integers(0, dims[-1], examples)
    source = GeneratorUniforms(rng)
    m = spec.mechanism
    started = time.perf_counter()
    for _ in range(repeats):
        vector = clipped_update_vector(spec, theta, x, y)
        report = (privunitg_report(vector, m.p, m.q, source) if mechanism == "privunitg"
                  else projunit_report(vector, m.k or 0, m.p, m.q, source))
        body = encode_update("bench", 1, 0, report)
    device_s = (time.perf_counter() - started) / repeats
    peer = gradient_mechanism(mechanism, dims=spec.parameters, epsilon=8.0, **({"k": 1000} if m.k else {}))
    started = time.perf_counter()
    for _ in range(repeats):
        peer.perturb(vector[None, :], rng)
    peer_s = (time.perf_counter() - started) / repeats
    return {"model": model, "parameters": spec.parameters, "mechanism": mechanism, "examples": examples,
            "update_bytes": len(body), "fits_the_edge": len(body) <= MAX_UPDATE_BYTES,
            "device_ms_per_update": round(device_s * 1000, 3), "server_perturb_ms_peer": round(peer_s * 1000, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--examples", type=int, default=10)
    args = parser.parse_args()
    rows = [measure(model, mechanism, args.repeats, args.examples)
            for model in MODELS for mechanism in ("privunitg", "projunit")]
    print(json.dumps({"benchmark": "training_jobs", "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
