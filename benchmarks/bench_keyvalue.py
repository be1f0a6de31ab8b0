"""Key-value mechanisms side by side on identical inputs: PrivKV, PCKV-UE and PCKV-GRR
(`ldpstream.mechanisms.keyvalue`).

    python benchmarks/bench_keyvalue.py          # about a minute on 2 cores

Inputs: n devices over d = 16 or 128 keys; a device holds key i with probability min(0.9, 1.5 P_i), P Zipf(1.1) over the
keys (1.5 pairs a device on average), its value for key i drawn around a mean per key in [-0.6, 0.6] (sd 0.3,
clipped to [-1, 1]). PCKV pads to l = 4 (the devices holding more, logged on stderr, bias their keys' frequencies
by l/|S|: included in the measured error, not in the closed form). Per d, epsilon and mechanism:
- perturb_per_s, aggregate_per_s: devices per second (best of a few runs; aggregate = accumulate + estimate);
- freq_mse, mean_mse: mean squared error over `runs` collections against the inputs' exact truth, averaged over the
  d keys (frequencies) and over the keys held by at least 10% of devices (means, on [-1, 1]; a collection where
  f_hat <= 0 leaves a mean undefined: counted in mean_undefined, left out of the average); mean_clipped_mse: the
  means clipped into [-1, 1] (an undefined one taken as 0), the post-processing the API offers (biased);
- freq_mse_closed, mean_mse_closed: the closed forms (`frequency_variance`, `mean_variance`) at the true f and m,
  averaged the same way: what the measured MSE should match;
- exact_epsilon: what a report provides (PrivKV is charged eps but provides less, module
`ldpstream.mechanisms.keyvalue.privkv`). Ceiling: "grr_keys_perturb_per_s" per d, GRR over the d keys of one uniformly
chosen key per device (the least work a key report can take), timed in the same run.

Prints {"epsilons", "domains", "n", "padding", "tasks": [{"d", "epsilon", "mechanism", ...}], "ceiling": {d: ...}}.
Timings on a shared machine are noisy: rerun on a quiet one for numbers to quote.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from bench_mechanisms import best_seconds, log  # run as a script: benchmarks/ is on the path

from ldpstream.mechanisms import registry
from ldpstream.mechanisms.keyvalue.base import EMPTY, KeyValueMechanism

N, PADDING, RUNS, REPEATS = 200_000, 4, 10, 3
DOMAINS = (16, 128)
COMMON = 0.1  # the means compared are those of keys held by at least this fraction of devices
EPSILONS = (1.0, 4.0)
SEED = 2020


def inputs(rng: np.random.Generator, d: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(pairs array, true frequency per key, true mean per key) of the module docstring's population."""
    zipf = np.arange(1, d + 1, dtype=np.float64) ** -1.1
    hold = np.minimum(0.9, 1.5 * zipf / zipf.sum())
    key_mean = np.linspace(-0.6, 0.6, d)
    held = rng.random((N, d)) < hold
    values = np.clip(key_mean + 0.3 * rng.standard_normal((N, d)), -1, 1)
    order = np.argsort(~held, axis=1, kind="stable")[:, : int(held.sum(axis=1).max())]
    kept = np.take_along_axis(held, order, axis=1)
    pairs = np.stack([np.where(kept, order, EMPTY), np.where(kept, np.take_along_axis(values, order, axis=1), 0.0)],
                     axis=2).astype(np.float64)
    freq = held.mean(axis=0)
    return pairs, freq, (held * values).sum(axis=0) / held.sum(axis=0)


def measure(mech: KeyValueMechanism, pairs: np.ndarray, freq: np.ndarray, mean: np.ndarray,
            rng: np.random.Generator) -> dict[str, Any]:
    reports = mech.perturb(pairs, rng)
    perturb_s = best_seconds(lambda: mech.perturb(pairs, rng), REPEATS)
    aggregate_s = best_seconds(lambda: (mech.estimate(mech.accumulate(reports)),
                                        mech.estimate_means(mech.accumulate(reports))), REPEATS)
    common = freq >= COMMON
    freq_err, mean_err, clipped_err = [], [], []
    for _ in range(RUNS):
        stats = mech.accumulate(mech.perturb(pairs, rng))
        freq_err.append(np.mean((mech.estimate(stats).value[0] - freq) ** 2))
        means = mech.estimate_means(stats).value[common]
        mean_err.append((means - mean[common]) ** 2)
        clipped_err.append((np.clip(np.nan_to_num(means), -1, 1) - mean[common]) ** 2)
    return {
        "perturb_per_s": N / perturb_s,
        "aggregate_per_s": N / aggregate_s,
        "freq_mse": float(np.mean(freq_err)),
        "freq_mse_closed": float(np.mean(mech.frequency_variance(freq)) / N),
        "mean_mse": float(np.nanmean(mean_err)),
        "mean_undefined": int(np.isnan(mean_err).sum()),
        "mean_clipped_mse": float(np.mean(clipped_err)),
        "mean_mse_closed": float(np.mean(mech.mean_variance(freq[common], mean[common])) / N),
        "exact_epsilon": mech.exact_epsilon(),  # type: ignore[attr-defined]
        "report_bytes": sum(np.dtype(c.dtype).itemsize * c.width for c in mech.schema.columns),
    }


def main() -> None:
    rng = np.random.default_rng(SEED)
    tasks, ceiling = [], {}
    for d in DOMAINS:
        pairs, freq, mean = inputs(rng, d)
        held = (pairs[:, :, 0] >= 0).sum(axis=1)
        log(f"{N} devices, d = {d}, {held.mean():.2f} pairs a device, {np.mean(held > PADDING):.2%} above l")
        for eps in EPSILONS:
            for name in registry.KEYVALUE:
                row = {"d": d, "epsilon": eps, "mechanism": name,
                       **measure(registry.make_keyvalue(name, eps, d, PADDING), pairs, freq, mean, rng)}
                log(json.dumps(row))
                tasks.append(row)
        grr = registry.make("grr", 1.0, d)
        one_key = rng.integers(0, d, N)
        ceiling[d] = {"grr_keys_perturb_per_s": N / best_seconds(lambda grr=grr, keys=one_key: grr.perturb(keys, rng),
                                                                    REPEATS)}
    print(json.dumps({"epsilons": list(EPSILONS), "domains": list(DOMAINS), "n": N, "padding": PADDING,
                      "tasks": tasks, "ceiling": ceiling}))


if __name__ == "__main__":
    main()
