"""Throughput of the numeric mechanisms on one core: perturbation and accumulate + estimate, values per second.

Prints JSON: {"n": n, "repeats": r, "tasks": [{"task", "values_per_s", "seconds"}]} (best of r runs, after a
warm-up). Target (issue 3): PM perturbation >= 5 million values/s on one core.
Run: .venv/bin/python benchmarks/bench_numeric.py [--n 1000000] [--repeats 7]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable

for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):  # one core, before numpy loads
    os.environ.setdefault(var, "1")

import numpy as np  # noqa: E402

from ldpstream.mechanisms import registry  # noqa: E402
from ldpstream.mechanisms.multidim import make_vector_mechanism  # noqa: E402


def best_seconds(work: Callable[[], object], repeats: int) -> float:
    work()  # warm-up: page faults, caches
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    t = rng.uniform(-1, 1, args.n)
    tasks = []
    for name in ("pm", "hm", "duchi", "laplace", "staircase"):
        mech = registry.make(name, 1.0)
        reports = mech.perturb(t, rng)
        for task, work in (
            (f"{name} perturb", lambda mech=mech: mech.perturb(t, rng)),
            (f"{name} accumulate+estimate", lambda mech=mech, r=reports: mech.estimate(mech.accumulate(r))),
        ):
            seconds = best_seconds(work, args.repeats)
            tasks.append({"task": task, "values_per_s": args.n / seconds, "seconds": seconds})
    d = 10
    vectors = rng.uniform(-1, 1, (args.n // d, d))
    for name in ("pm", "duchi"):
        mech = make_vector_mechanism(name, 4.0, d)
        seconds = best_seconds(lambda mech=mech: mech.perturb_dense(vectors, rng), args.repeats)
        tasks.append(
            {"task": f"{name} d={d} perturb_dense", "values_per_s": vectors.size / seconds, "seconds": seconds}
        )
    print(json.dumps({"n": args.n, "repeats": args.repeats, "tasks": tasks}, indent=1))


if __name__ == "__main__":
    main()
