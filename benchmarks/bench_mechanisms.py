"""Throughput and accuracy of our mechanisms next to pure-LDP 1.2.0 on identical inputs, in one run.

    pip install -e '.[bench]'                 # pure-LDP 1.2.0 and the packages it needs (pyproject.toml)
    python benchmarks/bench_mechanisms.py     # about 2 minutes on 2 cores

Tasks, each at epsilon = 1: perturbation ("<mech>_perturb") and aggregation + estimation ("<mech>_aggregate") for
PM and HM (mean of one attribute; pure-LDP has neither, so its fields are null), GRR at K = 16, OUE at K = 128 and
OLH at K = 1024 (frequency histograms). Ours is timed on n reports (best of a few runs). pure-LDP loops over users
in Python, so it is timed on the first n_pure of the same inputs (logged on stderr); both rates are per second.
MSE: of the mean (numeric) or averaged over the K frequencies (frequency oracles), against the empirical truth of
the inputs, averaged over several runs; for the oracles both libraries run on the same n_pure inputs, so their MSEs
compare directly (the closed-form MSE is logged on stderr as the reference).

Prints {"tasks": [{"task", "n", "ours_per_s", "pure_ldp_per_s", "speedup", "ours_mse", "pure_ldp_mse"}]}.

Longitudinal mechanisms (`ldpstream.mechanisms.longitudinal`, eps_inf = 2, eps_1 = 1; `python
benchmarks/bench_mechanisms.py
--longitudinal` runs this part alone, without pure-LDP): perturbation of n reports by devices whose secrets are given
(the memoized path a device runs every window) and aggregation + estimation, per mechanism, each timed in CPU
seconds of this process (reports per second per core: on a shared machine, time waiting for a core is not counted),
median and best of 5 runs. Next to each, in the same run, the aggregation of its one-stage counterpart on the same
values (L-GRR: GRR; L-OUE, L-OSUE: OUE; L-SUE: SUE; RAPPOR and dBitFlip: OUE at the same K; 1BitMean: Duchi et al.'s
mechanism, whose reports it sends) and the ratio one-stage rate / ours. L-GRR, L-OUE, L-OSUE and L-SUE are compared
with multi-freq-ldpy (`pip install multi-freq-ldpy`; skipped when missing) on the same n_mfl inputs, one report per
device (its clients redraw the permanent response at every call: memoizing is the caller's job), both MSEs against the
inputs' truth: multi-freq-ldpy's estimator clips and renormalizes, so ours is given raw and after the same
clip-and-renormalize (ours over 40 runs, theirs over 8). Prints {"longitudinal": [{"task", "n", "ours_per_s",
"ours_best_per_s", "ours_aggregate_per_s", "one_stage", "one_stage_aggregate_per_s", "aggregate_ratio", "mfl_per_s",
"speedup", "ours_mse", "ours_clipped_mse", "closed_form_mse", "mfl_mse"}]}.
"""

from __future__ import annotations

import json
import random
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ldpstream.mechanisms import registry
from ldpstream.mechanisms.base import Reports
from ldpstream.mechanisms.frequency.base import FrequencyOracle
from ldpstream.mechanisms.longitudinal.memo import draw_secrets
from ldpstream.mechanisms.numeric.base import NumericMechanism

EPSILON = 1.0
SEED = 2024


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def best_seconds(run: Callable[[], Any], repeats: int) -> float:
    """The fastest of `repeats` timed calls (the machine is shared: the minimum is the least disturbed)."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


def task(
    name: str, n: int, ours_per_s: float, ours_mse: float, pure_per_s: float | None, pure_mse: float | None
) -> dict:
    return {
        "task": name,
        "n": n,
        "ours_per_s": ours_per_s,
        "pure_ldp_per_s": pure_per_s,
        "speedup": None if pure_per_s is None else ours_per_s / pure_per_s,
        "ours_mse": ours_mse,
        "pure_ldp_mse": pure_mse,
    }


# --- numeric: PM and HM (pure-LDP has no numeric mechanisms) ----------------------------------------------------


def numeric_tasks(name: str, n: int, runs: int, rng: np.random.Generator) -> list[dict]:
    mech = registry.make(name, EPSILON)
    assert isinstance(mech, NumericMechanism)
    values = 2 * rng.beta(2.0, 5.0, n) - 1  # a skewed attribute on [-1, 1]
    truth = values.mean()
    reports = mech.perturb(values, rng)
    perturb_s = best_seconds(lambda: mech.perturb(values, rng), 3)
    aggregate_s = best_seconds(lambda: mech.estimate(mech.accumulate(reports)), 3)
    errors = [float(mech.estimate(mech.accumulate(mech.perturb(values, rng))).value) - truth for _ in range(runs)]
    mse = float(np.mean(np.square(errors)))
    log(f"{name}: closed-form MSE {np.mean(mech.variance(values)) / n:.3g}, measured {mse:.3g} over {runs} runs")
    return [
        task(f"{name}_perturb", n, n / perturb_s, mse, None, None),
        task(f"{name}_aggregate", n, n / aggregate_s, mse, None, None),
    ]


# --- frequency oracles -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OracleTask:
    name: str  # our registry name
    k: int
    n: int  # reports timed for ours
    n_pure: int  # reports timed for pure-LDP, and the inputs both MSEs are measured on
    runs_pure: int
    runs_ours: int
    pure_ldp: Callable[[int], tuple[Any, Any]]  # k -> (client, server)


def pure_ldp_oracles() -> dict[str, Callable[[int], tuple[Any, Any]]]:
    try:
        from pure_ldp.frequency_oracles import DEClient, DEServer, LHClient, LHServer, UEClient, UEServer
    except ImportError as exc:  # the 'bench' extra is not installed
        raise SystemExit(f"pure-LDP is missing ({exc}): pip install -e '.[bench]'") from exc

    identity = dict(index_mapper=lambda x: x)  # our codes are 0..K-1 (pure-LDP's default maps 1..K)
    return {
        "grr": lambda k: (DEClient(EPSILON, k, **identity), DEServer(EPSILON, k, **identity)),
        "oue": lambda k: (
            UEClient(EPSILON, k, use_oue=True, **identity),
            UEServer(EPSILON, k, use_oue=True, **identity),
        ),
        "olh": lambda k: (
            LHClient(EPSILON, k, use_olh=True, **identity),
            LHServer(EPSILON, k, use_olh=True, **identity),
        ),
    }


def pure_ldp_run(spec: OracleTask, values: list[int]) -> tuple[float, float, np.ndarray]:
    """(perturb seconds, aggregate + estimate seconds, estimated frequencies) of one pure-LDP pipeline."""
    client, server = spec.pure_ldp(spec.k)
    start = time.perf_counter()
    reports = [client.privatise(v) for v in values]
    perturb_s = time.perf_counter() - start
    start = time.perf_counter()
    server.aggregate_all(reports)
    counts = np.asarray(server.estimate_all(range(spec.k), suppress_warnings=True), dtype=np.float64)
    aggregate_s = time.perf_counter() - start
    return perturb_s, aggregate_s, counts / len(values)


def ours_run(oracle: FrequencyOracle, values: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return oracle.estimate(oracle.accumulate(oracle.perturb(values, rng))).value


def frequency_tasks(spec: OracleTask, rng: np.random.Generator) -> list[dict]:
    oracle = registry.make(spec.name, EPSILON, spec.k)
    assert isinstance(oracle, FrequencyOracle)
    zipf = 1.0 / np.arange(1, spec.k + 1) ** 1.1
    values = rng.choice(spec.k, size=spec.n, p=zipf / zipf.sum())
    reports: Reports = oracle.perturb(values, rng)
    shared = values[: spec.n_pure]  # the identical inputs both libraries' MSEs are measured on
    truth = np.bincount(shared, minlength=spec.k) / spec.n_pure
    # Interleaved: each pure-LDP run sits between timings of ours, so both see the same load on a shared machine.
    perturb_s, aggregate_s, pure_runs = [], [], []
    for _ in range(spec.runs_pure):
        perturb_s.append(best_seconds(lambda: oracle.perturb(values, rng), 1))
        aggregate_s.append(best_seconds(lambda: oracle.estimate(oracle.accumulate(reports)), 1))
        pure_runs.append(pure_ldp_run(spec, shared.tolist()))
    ours_mse = float(np.mean([np.mean((ours_run(oracle, shared, rng) - truth) ** 2) for _ in range(spec.runs_ours)]))
    pure_mse = float(np.mean([np.mean((r[2] - truth) ** 2) for r in pure_runs]))
    theory = float(np.mean(oracle.variance(truth)) / spec.n_pure)
    log(
        f"{spec.name} K={spec.k}: ours timed on n={spec.n}, pure-LDP on n={spec.n_pure}; MSE at n={spec.n_pure}: "
        f"closed form {theory:.4g}, ours {ours_mse:.4g} ({spec.runs_ours} runs), pure-LDP {pure_mse:.4g} "
        f"({spec.runs_pure} runs); ours aggregate+estimate of n={spec.n}: {min(aggregate_s):.2f} s"
    )
    ours_rates = (spec.n / min(perturb_s), spec.n / min(aggregate_s))
    pure_rates = (spec.n_pure / min(r[0] for r in pure_runs), spec.n_pure / min(r[1] for r in pure_runs))
    return [
        task(f"{spec.name}_k{spec.k}_{step}", spec.n, ours, ours_mse, pure, pure_mse)
        for step, ours, pure in zip(("perturb", "aggregate"), ours_rates, pure_rates, strict=True)
    ]


# --- longitudinal mechanisms ---------------------------------------------------------------------------------------

LIFETIME, FIRST = 2.0, 1.0


def multi_freq_ldpy_clients() -> dict[str, Callable[[int, int], Any]] | None:
    """Our name -> (value, k) -> one multi-freq-ldpy report, or None when the package is missing."""
    try:
        from multi_freq_ldpy.long_freq_est import L_GRR, L_OSUE, L_OUE, L_SUE
    except ImportError as exc:
        log(f"multi-freq-ldpy is missing ({exc}): its comparison is skipped")
        return None
    return {
        "l-grr": lambda v, k: L_GRR.L_GRR_Client(v, k, LIFETIME, FIRST),
        "l-oue": lambda v, k: L_OUE.L_OUE_Client(v, k, LIFETIME, FIRST),
        "l-osue": lambda v, k: L_OSUE.L_OSUE_Client(v, k, LIFETIME, FIRST),
        "l-sue": lambda v, k: L_SUE.L_SUE_Client(v, k, LIFETIME, FIRST),
    }


def multi_freq_ldpy_estimate(name: str, reports: list[Any], k: int) -> np.ndarray:
    from multi_freq_ldpy.long_freq_est import L_GRR, L_OSUE, L_OUE, L_SUE

    if name == "l-grr":
        return np.asarray(L_GRR.L_GRR_Aggregator_MI(reports, k, LIFETIME, FIRST))
    aggregate = {"l-oue": L_OUE.L_OUE_Aggregator_MI, "l-osue": L_OSUE.L_OSUE_Aggregator_MI,
                 "l-sue": L_SUE.L_SUE_Aggregator_MI}[name]
    return np.asarray(aggregate(np.asarray(reports), LIFETIME, FIRST))


def clip_and_normalize(freqs: np.ndarray) -> np.ndarray:
    """multi-freq-ldpy's post-processing: negative frequencies to 0, then sum to 1."""
    clipped = np.clip(freqs, 0.0, None)
    return clipped / clipped.sum()


LONGITUDINAL_CASES = (("l-grr", 16, {"epsilon_first": FIRST}, "grr"), ("l-oue", 16, {"epsilon_first": FIRST}, "oue"),
                      ("l-osue", 16, {"epsilon_first": FIRST}, "oue"), ("l-sue", 16, {"epsilon_first": FIRST}, "sue"),
                      ("rappor", 128, {}, "oue"), ("dbitflip", 128, {"sampled": 4, "gamma": 0.1}, "oue"),
                      ("1bitmean", None, {"gamma": 0.1}, "duchi"))


def cpu_seconds(run: Callable[[], Any], repeats: int = 5) -> tuple[float, float]:
    """(median, least) CPU seconds of this process over `repeats` calls: a core's time, whatever else runs."""
    times = []
    for _ in range(repeats):
        start = time.process_time()
        run()
        times.append(time.process_time() - start)
    return float(np.median(times)), min(times)


def longitudinal_tasks(rng: np.random.Generator, n: int = 1_000_000, n_mfl: int = 20_000, runs: int = 40) -> list[dict]:
    clients = multi_freq_ldpy_clients()
    out = []
    for name, k, params, one_stage_name in LONGITUDINAL_CASES:
        mech = registry.make(name, LIFETIME, k, **params)
        one_stage = registry.make(one_stage_name, FIRST, k)  # its aggregation does not depend on epsilon
        secrets = draw_secrets(rng, n)
        if k is None:
            values: np.ndarray = 2 * rng.beta(2.0, 5.0, n) - 1
        else:
            zipf = 1.0 / np.arange(1, k + 1) ** 1.1
            values = rng.choice(k, size=n, p=zipf / zipf.sum())
        reports = mech.perturb(values, rng, secrets=secrets)  # type: ignore[call-arg]
        one_stage_reports = one_stage.perturb(values, rng)
        perturb_s, perturb_best_s = cpu_seconds(lambda: mech.perturb(values, rng, secrets=secrets))  # type: ignore[call-arg]  # noqa: B023
        aggregate_s = cpu_seconds(lambda: mech.estimate(mech.accumulate(reports)))[0]  # noqa: B023
        one_stage_s = cpu_seconds(lambda: one_stage.estimate(one_stage.accumulate(one_stage_reports)))[0]  # noqa: B023
        row = {"task": name if k is None else f"{name}_k{k}", "n": n, "ours_per_s": n / perturb_s,
               "ours_best_per_s": n / perturb_best_s, "ours_aggregate_per_s": n / aggregate_s,
               "one_stage": one_stage_name, "one_stage_aggregate_per_s": n / one_stage_s,
               "aggregate_ratio": aggregate_s / one_stage_s, "mfl_per_s": None, "speedup": None}
        shared = values[:n_mfl]
        if k is None:
            truth = shared.mean()
            row["ours_mse"] = float(np.mean([(mech.estimate(mech.accumulate(mech.perturb(shared, rng))).value - truth)
                                             ** 2 for _ in range(runs)]))
            row["closed_form_mse"] = float(np.mean(mech.variance(shared)) / n_mfl)  # type: ignore[attr-defined]
            out.append(row)
            continue
        truth = np.bincount(shared, minlength=k) / n_mfl
        ours = [mech.estimate(mech.accumulate(mech.perturb(shared, rng))).value for _ in range(runs)]
        row["ours_mse"] = float(np.mean([np.mean((e - truth) ** 2) for e in ours]))
        row["ours_clipped_mse"] = float(np.mean([np.mean((clip_and_normalize(e) - truth) ** 2) for e in ours]))
        row["closed_form_mse"] = float(np.mean(mech.variance(truth)) / n_mfl)  # type: ignore[attr-defined]
        if clients is not None and name in clients:
            as_list = shared.tolist()
            start = time.perf_counter()
            theirs = [clients[name](v, k) for v in as_list]
            mfl_s = time.perf_counter() - start
            mfl_runs = [multi_freq_ldpy_estimate(name, theirs, k)]
            mfl_runs += [multi_freq_ldpy_estimate(name, [clients[name](v, k) for v in as_list], k) for _ in range(7)]
            row["mfl_per_s"] = n_mfl / mfl_s
            row["speedup"] = row["ours_per_s"] / row["mfl_per_s"]
            row["mfl_mse"] = float(np.mean([np.mean((e - truth) ** 2) for e in mfl_runs]))
        log(f"{row['task']}: {json.dumps({key: value for key, value in row.items() if key != 'task'})}")
        out.append(row)
    return out


def main() -> None:
    rng = np.random.default_rng(SEED)
    if "--longitudinal" in sys.argv[1:]:
        np.random.seed(SEED)  # multi-freq-ldpy draws from numpy's global state
        print(json.dumps({"longitudinal": longitudinal_tasks(rng)}, indent=1))
        return
    random.seed(SEED)  # pure-LDP draws from the global random and numpy.random states
    np.random.seed(SEED)
    warnings.filterwarnings("ignore", category=RuntimeWarning, module="pure_ldp")
    pure = pure_ldp_oracles()
    oracles = (
        OracleTask("grr", 16, 1_000_000, 200_000, runs_pure=10, runs_ours=40, pure_ldp=pure["grr"]),
        OracleTask("oue", 128, 1_000_000, 20_000, runs_pure=3, runs_ours=40, pure_ldp=pure["oue"]),
        OracleTask("olh", 1024, 1_000_000, 2_000, runs_pure=2, runs_ours=20, pure_ldp=pure["olh"]),
    )
    tasks = [*numeric_tasks("pm", 1_000_000, 50, rng), *numeric_tasks("hm", 1_000_000, 50, rng)]
    for spec in oracles:
        tasks.extend(frequency_tasks(spec, rng))
    print(json.dumps({"tasks": tasks, "longitudinal": longitudinal_tasks(rng)}, indent=1))


if __name__ == "__main__":
    main()
