"""Numeric distributions side by side on identical inputs: Square Wave + EMS as published, ours, hierarchical
histograms, and the best binned frequency oracle with Norm-Sub (`ldpstream.mechanisms.distribution`).

    python benchmarks/bench_distribution.py                 # n = 1e6, eps = 1, 1024 bins, 5 inputs x 2 seeds
    python benchmarks/bench_distribution.py --n 100000 --seeds 1 --datasets beta
    python benchmarks/bench_distribution.py --grids       # the smoothing level on coarse grids (below)

Inputs on [0, 1] (the paper's unit domain), n values each: Beta(5, 2) (Li et al.'s synthetic data), a bimodal mixture
0.3 N(0.25, 0.05) + 0.7 N(0.7, 0.1), a skewed income-like lognormal(0, 0.8) / 10, a latency-like power law peaked at
0 (density proportional to (2 x + 1)^-10, the simulator's `power_law`) and the uniform, the last four clipped to [0, 1].
Methods, per input and seed, on the same reports where they share a mechanism:
- sw_ems_published: the published algorithm on our SW reports: 1024 output cells over [-b, 1 + b], 1024 input cells,
  the (1, 2, 1)/4 kernel with the authors' re-normalised ends, uniform start, stop when the log-likelihood improves by
  less than 1e-3 or theta moves by at most 1/n (the authors' code); its transition matrix is computed exactly
  (`window_overlap`), where their code approximates it: if anything this helps the published method;
- sw_ems_kernel1: ours (`SquareWave`) with the paper's kernel (smoothing 1): cells aligned with the grid, the exact
  channel as a convolution, EMS to its fixed point (SQUAREM);
- sw_ems: ours as shipped, the smoothing level chosen by cross-validation;
- hh: hierarchical histogram (`HierarchicalHistogram`, fan-out 4, 4^5 = 1024 leaves), its own reports of the same
  values;
- oue_norm_sub: OUE over B bins + Norm-Sub, B in 16..256, the best B per input chosen with the truth (an optimistic
  baseline). OUE's support counts given the values are independent binomials, Binomial(n_v, p) + Binomial(n - n_v, q)
  per bin, the exact distribution of `OUE.accumulate` over n devices; they are drawn so, not device by device.
Metrics against the inputs' empirical CDF F at the 1025 edges of the 1024-cell grid, the estimate's CDF F_hat linear
inside its bins: Wasserstein-1 = sum |F_hat - F| / 1024 (the integral on [0, 1]) and Kolmogorov-Smirnov = max
|F_hat - F|. estimate_s: wall seconds from the statistics to the distribution (for ours: EMS or the tree, with the
smoothing choice where it is chosen, without standard errors); with_stderr_s: `distribution()` as the aggregator
calls it, standard errors included.

With --grids it measures instead why ours chooses EMS's smoothing level: on grids of 32, 64 and 256 bins, n = 1e4 and
1e5, the same inputs and seeds, Square Wave + EMS with the paper's kernel (smoothing 1) against the level chosen by
cross-validation, and prints {"epsilon", "seeds", "grids": [{"bins", "n", "dataset", "seed", "kernel1": {"w1", "ks"},
"chosen": {"w1", "ks", "smoothing"}}], "mean": {"bins/n": {"kernel1": {"w1", "ks"}, "chosen": {...}}}}.

Otherwise it prints {"n", "epsilon", "bins", "seeds", "load_average", "runs": [...], "summary": {method: {input:
{"w1", "ks", "estimate_s"}}}, "mean_over_inputs": {method: {"w1", "ks"}}}: means over the seeds. BLAS runs on one
thread (a multi-threaded matrix-vector product was 8 times slower on this loaded 2-core machine). Timings on a shared
machine are noisy: `load_average` says how shared it was.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):  # one core each, before numpy loads
    os.environ.setdefault(var, "1")

import numpy as np  # noqa: E402

from ldpstream.mechanisms import registry  # noqa: E402
from ldpstream.mechanisms.distribution import HierarchicalHistogram, SquareWave  # noqa: E402
from ldpstream.mechanisms.distribution.ems import choose_smoothing, ems  # noqa: E402
from ldpstream.mechanisms.distribution.square_wave import window_overlap  # noqa: E402
from ldpstream.mechanisms.postprocess import norm_sub  # noqa: E402

BINS = 1024
ORACLE_BINS = (16, 32, 64, 128, 256)
PUBLISHED_TOLERANCE, PUBLISHED_MAX_ITERATIONS = 1e-3, 10_000


def inputs(name: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """The module docstring's inputs on [0, 1]."""
    if name == "beta":
        return rng.beta(5.0, 2.0, n)
    if name == "bimodal":
        return np.clip(np.where(rng.random(n) < 0.3, rng.normal(0.25, 0.05, n), rng.normal(0.7, 0.1, n)), 0.0, 1.0)
    if name == "income":
        return np.clip(rng.lognormal(0.0, 0.8, n) / 10.0, 0.0, 1.0)
    if name == "latency":  # t = 2 v - 1 with density (t + 2)^-10 on [-1, 1], by its inverse CDF
        return ((1.0 - rng.random(n) * (1.0 - 3.0**-9)) ** (-1.0 / 9.0) - 1.0) / 2.0
    if name == "uniform":
        return rng.random(n)
    raise ValueError(f"unknown input {name!r}")


DATASETS = ("beta", "bimodal", "income", "latency", "uniform")


def distances(cdf_at_edges: np.ndarray, truth: np.ndarray) -> tuple[float, float]:
    """(Wasserstein-1, Kolmogorov-Smirnov) on [0, 1] from two CDFs at the 1025 grid edges."""
    gap = np.abs(cdf_at_edges - truth)
    return float(gap[1:].sum() / BINS), float(gap.max())


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def published_ems(mech: SquareWave, reports: np.ndarray) -> tuple[np.ndarray, float, int]:
    """Li et al.'s SW + EMS as their code runs it (module docstring): (theta on 1024 cells, seconds, iterations)."""
    b, p, q = mech.half_width, mech.p, mech.q
    noisy = (mech.scale * reports + 1.0) / 2.0  # the report on [-b, 1 + b]
    counts = np.histogram(noisy, bins=BINS, range=(-b, 1.0 + b))[0].astype(np.float64)
    x = np.linspace(0.0, 1.0, BINS + 1)
    y = np.linspace(-b, 1.0 + b, BINS + 1)
    inside = np.clip(np.minimum(y[1:], 1.0 + b) - np.maximum(y[:-1], -b), 0.0, None)
    channel = q * inside[:, None] + (p - q) * window_overlap(x[None, :-1], x[None, 1:], y[:-1, None], y[1:, None], b)

    def run() -> tuple[np.ndarray, int]:
        n = counts.sum()
        theta, old, old_loglik, r = np.full(BINS, 1.0 / BINS), np.zeros(BINS), 0.0, 0
        while np.abs(old - theta).sum() > 1.0 / n and r < PUBLISHED_MAX_ITERATIONS:
            old = theta
            theta = theta * (channel.T @ (counts / (channel @ theta)))
            theta = theta / theta.sum()
            smoothed = np.empty_like(theta)  # (1, 2, 1) / 4, the end rows re-normalised: (2, 1) / 3
            smoothed[1:-1] = (theta[:-2] + 2.0 * theta[1:-1] + theta[2:]) / 4.0
            smoothed[0], smoothed[-1] = (2.0 * theta[0] + theta[1]) / 3.0, (theta[-2] + 2.0 * theta[-1]) / 3.0
            theta = smoothed / smoothed.sum()
            loglik = counts @ np.log(channel @ theta)
            if r > 1 and abs(loglik - old_loglik) < PUBLISHED_TOLERANCE:
                break
            old_loglik, r = loglik, r + 1
        return theta, r

    (theta, iterations), seconds = timed(run)
    return theta, seconds, iterations


def oue_norm_sub(values: np.ndarray, epsilon: float, bins: int, rng: np.random.Generator) -> tuple[np.ndarray, float]:
    """OUE over `bins` bins + Norm-Sub: (the CDF at the 1025 grid edges, seconds of the estimate)."""
    oracle = registry.make("oue", epsilon, domain=bins)
    per_bin = np.bincount(np.minimum((values * bins).astype(np.int64), bins - 1), minlength=bins)
    support = rng.binomial(per_bin, oracle.p) + rng.binomial(values.size - per_bin, oracle.q)  # type: ignore[attr-defined]
    stats = np.append(support.astype(np.float64), values.size)
    freqs, seconds = timed(lambda: norm_sub(oracle.estimate(stats).value))
    coarse = np.concatenate([[0.0], np.cumsum(freqs)])
    return np.interp(np.linspace(0.0, 1.0, BINS + 1), np.linspace(0.0, 1.0, bins + 1), coarse), seconds


def one_run(dataset: str, seed: int, n: int, epsilon: float) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    values = inputs(dataset, n, rng)
    truth = np.searchsorted(np.sort(values), np.linspace(0.0, 1.0, BINS + 1), side="right") / n
    t = 2.0 * values - 1.0
    out = []

    def record(method: str, cdf: np.ndarray, estimate_s: float, **extra: Any) -> None:
        w1, ks = distances(cdf, truth)
        out.append({"dataset": dataset, "seed": seed, "method": method, "w1": w1, "ks": ks,
                    "estimate_s": estimate_s, **extra})
        print(f"{dataset} seed {seed} {method}: W1 {w1:.5f} KS {ks:.5f} ({estimate_s:.2f} s)", file=sys.stderr)

    sw = SquareWave(epsilon, bins=BINS)
    reports = sw.perturb(t, rng)["value"]
    stats = sw.accumulate({"value": reports})
    counts = stats[3:]
    theta, seconds, iterations = published_ems(sw, reports)
    record("sw_ems_published", np.concatenate([[0.0], np.cumsum(theta)]), seconds, iterations=iterations)

    kernel1 = SquareWave(epsilon, bins=BINS, smoothing=1.0)
    fit, seconds = timed(lambda: ems(kernel1.channel, counts, 1.0))
    dist, with_se = timed(lambda: kernel1.distribution(stats))
    record("sw_ems_kernel1", np.concatenate([[0.0], np.cumsum(fit.theta)]), seconds, with_stderr_s=with_se,
           ems_steps=fit.steps)

    def shipped() -> tuple[float, Any]:
        choice = choose_smoothing(sw.channel, counts)
        return choice.level, ems(sw.channel, counts, choice.level, start=choice.start)

    (level, fit), seconds = timed(shipped)
    dist, with_se = timed(lambda: sw.distribution(stats))
    record("sw_ems", dist.cdf, seconds, with_stderr_s=with_se, smoothing=level, ems_steps=fit.steps)

    hh = HierarchicalHistogram(epsilon, bins=BINS, fanout=4)
    hh_stats = hh.accumulate(hh.perturb(t, rng))
    dist, seconds = timed(lambda: hh.distribution(hh_stats))
    record("hh", dist.cdf, seconds, with_stderr_s=seconds)

    best: tuple[float, int, np.ndarray, float] | None = None
    for bins in ORACLE_BINS:
        cdf, seconds = oue_norm_sub(values, epsilon, bins, rng)
        w1, ks = distances(cdf, truth)
        if best is None or w1 + ks < best[0]:
            best = (w1 + ks, bins, cdf, seconds)
    assert best is not None
    record("oue_norm_sub", best[2], best[3], bins=best[1])
    return out


def grid_study(epsilon: float, seeds: int, datasets: list[str]) -> dict[str, Any]:
    """The --grids measurements (module docstring)."""
    rows = []
    for bins in (32, 64, 256):
        for n in (10_000, 100_000):
            kernel1, chosen = SquareWave(epsilon, bins=bins, smoothing=1.0), SquareWave(epsilon, bins=bins)
            edges = np.linspace(0.0, 1.0, bins + 1)
            for dataset in datasets:
                for seed in range(seeds):
                    rng = np.random.default_rng(seed)
                    values = inputs(dataset, n, rng)
                    truth = np.searchsorted(np.sort(values), edges, side="right") / n
                    counts = chosen.accumulate(chosen.perturb(2.0 * values - 1.0, rng))[3:]
                    level = choose_smoothing(chosen.channel, counts).level
                    row: dict[str, Any] = {"bins": bins, "n": n, "dataset": dataset, "seed": seed}
                    for name, mech, lam in (("kernel1", kernel1, 1.0), ("chosen", chosen, level)):
                        cdf = np.concatenate([[0.0], np.cumsum(ems(mech.channel, counts, lam).theta)])
                        gap = np.abs(cdf - truth)
                        row[name] = {"w1": float(gap[1:].sum() / bins), "ks": float(gap.max()), "smoothing": lam}
                    print(f"{bins} bins, n {n}, {dataset} seed {seed}: KS {row['kernel1']['ks']:.4f} with the "
                          f"paper's kernel, {row['chosen']['ks']:.4f} at {level:g}", file=sys.stderr)
                    rows.append(row)
    mean = {f"{bins}/{n}": {name: {key: float(np.mean([r[name][key] for r in rows if (r["bins"], r["n"]) == (bins, n)]))
                                   for key in ("w1", "ks")} for name in ("kernel1", "chosen")}
            for bins in (32, 64, 256) for n in (10_000, 100_000)}
    return {"epsilon": epsilon, "seeds": seeds, "grids": rows, "mean": mean}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=DATASETS)
    parser.add_argument("--grids", action="store_true", help="the smoothing level on coarse grids instead")
    args = parser.parse_args()
    if args.grids:
        print(json.dumps(grid_study(args.epsilon, args.seeds, args.datasets)))
        return
    runs = [r for dataset in args.datasets for seed in range(args.seeds)
            for r in one_run(dataset, seed, args.n, args.epsilon)]
    methods = list(dict.fromkeys(r["method"] for r in runs))
    summary = {m: {d: {key: float(np.mean([r[key] for r in runs if r["method"] == m and r["dataset"] == d]))
                       for key in ("w1", "ks", "estimate_s")} for d in args.datasets} for m in methods}
    mean = {m: {key: float(np.mean([summary[m][d][key] for d in args.datasets])) for key in ("w1", "ks")}
            for m in methods}
    print(json.dumps({"n": args.n, "epsilon": args.epsilon, "bins": BINS, "seeds": args.seeds,
                      "load_average": os.getloadavg(), "runs": runs, "summary": summary, "mean_over_inputs": mean}))


if __name__ == "__main__":
    main()
