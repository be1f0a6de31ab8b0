"""LDP mini-batch SGD against non-private SGD: the experiments of 000 Sec. VI-B (Fig. 9-11) and 001 Fig. 2.

    python benchmarks/eval_sgd.py            # bounded run: 10-fold CV once (about 5 minutes on 2 cores)
    python benchmarks/eval_sgd.py --full     # 10-fold CV repeated 5 times, as in 000 Sec. VI-B

1. Adult census data (extra 'data'): misclassification of logistic regression and SVM, and MSE of linear
   regression, for HM, PM, Duchi et al., Laplace (eps/d per attribute) and non-private SGD, eps in {0.5, 1, 2, 4};
   10-fold cross-validation; lambda = 1e-4; g from 001's rule; gamma_t = 1/sqrt(t).
2. MGD vs MGD-DR (r = 20) for linear regression at d >= 50 (001 Fig. 2): Adult (d = 58) and synthetic (d = 90).
3. The issue's target: synthetic logistic regression, 10^6 devices, d = 10, eps = 4.
Writes docs/img/sgd_*.png and prints every number as JSON.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from ldpstream.sgd.datasets import Dataset, adult, synthetic  # noqa: E402
from ldpstream.sgd.offline import compare_offline, train_offline  # noqa: E402
from ldpstream.sgd.training import TrainingJob  # noqa: E402

EPSILONS = (0.5, 1.0, 2.0, 4.0)
MECHANISMS = ("hm", "pm", "duchi", "laplace")
METHODS = (*MECHANISMS, "non_private")
STYLE = {
    "hm": "o-",
    "pm": "s-",
    "duchi": "^-",
    "laplace": "v-",
    "non_private": "k--",
    "mgd": "^-",
    "mgd_dr": "o-",
    "non_private_dr": "k:",
}
REDUCED_DIMS = 20  # 001 Sec. 5.3: "we set r = 20"

Runner = Callable[[TrainingJob, Dataset, Dataset, int], dict[str, float]]


def summary(values: list[float]) -> dict[str, float]:
    """Mean and standard error over the folds (and repeats)."""
    arr = np.asarray(values)
    stderr = float(arr.std(ddof=1) / np.sqrt(len(arr))) if len(arr) > 1 else 0.0
    return {"mean": float(arr.mean()), "stderr": stderr}


def cross_validate(data: Dataset, folds: int, repeats: int, run: Runner, eps: float, **job: object) -> dict:
    """Run `run` on every (train, test) fold of `repeats` random k-fold splits; summarise each method."""
    scores: dict[str, list[float]] = {}
    for rep in range(repeats):
        for i, (train, test) in enumerate(data.folds(folds, seed=rep)):
            spec = TrainingJob.model_validate(
                {"dims": data.dims, "epsilon": eps, "expected_population": len(train.y), **job}
            )
            for method, score in run(spec, train, test, 1000 * rep + i).items():
                scores.setdefault(method, []).append(score)
    return {method: summary(values) for method, values in scores.items()}


def mechanisms_run(job: TrainingJob, train: Dataset, test: Dataset, seed: int) -> dict[str, float]:
    """000 Fig. 9-11: each gradient mechanism, and non-private SGD, on the same fold and device order; also each
    private model's L2 distance to the non-private one (`<mechanism>_distance`), a less noisy view of the same."""
    trainers = {
        m: train_offline(job.model_copy(update={"mechanism": m}), train.x, train.y, seed).trainer for m in MECHANISMS
    }
    trainers["non_private"] = train_offline(job, train.x, train.y, seed, private=False).trainer
    scores = {m: trainer.evaluate(test.x, test.y) for m, trainer in trainers.items()}
    reference = trainers["non_private"].beta
    scores |= {f"{m}_distance": float(np.linalg.norm(trainers[m].beta - reference)) for m in MECHANISMS}
    return scores


def reduction_run(job: TrainingJob, train: Dataset, test: Dataset, seed: int) -> dict[str, float]:
    """001 Fig. 2: plain MGD, MGD-DR with r = 20, and non-private SGD without and with the projection (same
    mechanism, same device order)."""
    mgd = compare_offline(job, train, test, seed)
    dr = compare_offline(job.model_copy(update={"reduced_dims": REDUCED_DIMS}), train, test, seed)
    return {
        "mgd": mgd.private,
        "mgd_dr": dr.private,
        "non_private": mgd.non_private,
        "non_private_dr": dr.non_private,
    }


def plot(
    results: dict, methods: tuple[str, ...], ylabel: str, title: str, path: Path, zero_model: float | None = None
) -> None:
    """One panel like 000 Fig. 9-11: metric vs eps per method; for MSE (log scale) the model beta = 0 too."""
    fig, ax = plt.subplots(figsize=(4.8, 3.6))
    for method in methods:
        means = [results[str(eps)][method]["mean"] for eps in EPSILONS]
        errs = [results[str(eps)][method]["stderr"] for eps in EPSILONS]
        ax.errorbar(EPSILONS, means, yerr=errs, fmt=STYLE[method], label=method.replace("_", "-"), capsize=3, ms=5)
    ax.set_xscale("log", base=2)
    ax.set_xticks(EPSILONS, [str(e) for e in EPSILONS])
    if zero_model is not None:
        ax.axhline(zero_model, color="grey", ls="-.", lw=1, label="beta = 0")
        ax.set_yscale("log")
    ax.set_xlabel("privacy budget epsilon")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def zero_model(data: Dataset) -> float:
    """The MSE of beta = 0 (where every run starts): mean(y^2)."""
    return float(np.mean(data.y**2))


def beats(results: dict, winners: tuple[str, ...], losers: tuple[str, ...]) -> dict[str, bool]:
    """Per eps: whether every winner's mean is below every loser's."""
    return {
        str(eps): max(results[str(eps)][w]["mean"] for w in winners)
        < min(results[str(eps)][lo]["mean"] for lo in losers)
        for eps in EPSILONS
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--full", action="store_true", help="repeat the 10-fold cross-validation 5 times")
    parser.add_argument("--out", type=Path, default=Path("docs/img"), help="where the PNGs go")
    parser.add_argument("--synthetic-devices", type=int, default=200_000, help="devices of the synthetic d=90 set")
    args = parser.parse_args()
    repeats = 5 if args.full else 1
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    report: dict = {"folds": 10, "repeats": repeats, "epsilons": list(EPSILONS), "adult": {}, "reduction": {}}

    for model in ("logistic", "svm", "linear"):
        data = adult(model)
        results = {str(eps): cross_validate(data, 10, repeats, mechanisms_run, eps, model=model) for eps in EPSILONS}
        zero = zero_model(data) if model == "linear" else None
        report["adult"][model] = {"dims": data.dims, "rows": len(data.y), "zero_model": zero, "results": results}
        ylabel = "MSE" if model == "linear" else "misclassification rate"
        title = f"{model}, Adult (n = {len(data.y)}, d = {data.dims})"
        plot(results, METHODS, ylabel, title, args.out / f"sgd_{model}.png", zero)

    reduction_sets = {"adult": adult("linear"), "synthetic": synthetic("linear", args.synthetic_devices, 90, seed=0)}
    for name, data in reduction_sets.items():
        folds = 10 if name == "adult" else 5
        results = {
            str(eps): cross_validate(data, folds, repeats, reduction_run, eps, model="linear") for eps in EPSILONS
        }
        zero = zero_model(data)
        report["reduction"][name] = {
            "dims": data.dims,
            "rows": len(data.y),
            "folds": folds,
            "zero_model": zero,
            "results": results,
        }
        title = f"linear, MGD vs MGD-DR (r = {REDUCED_DIMS}), {name} (d = {data.dims})"
        methods = ("mgd", "mgd_dr", "non_private", "non_private_dr")
        plot(results, methods, "MSE", title, args.out / f"sgd_reduction_{name}.png", zero)

    data = synthetic("logistic", 1_100_000, 10, seed=0)
    train, test = data.split(100_000, seed=0)
    target = compare_offline(
        TrainingJob(model="logistic", dims=10, epsilon=4.0, expected_population=10**6), train, test, seed=0
    )
    report["targets"] = {
        "hm_and_pm_beat_duchi_and_laplace": {
            model: beats(entry["results"], ("hm", "pm"), ("duchi", "laplace"))
            for model, entry in report["adult"].items()
        },
        "hm_and_pm_closer_to_non_private_than_duchi_and_laplace": {
            model: beats(entry["results"], ("hm_distance", "pm_distance"), ("duchi_distance", "laplace_distance"))
            for model, entry in report["adult"].items()
        },
        "mgd_dr_beats_mgd": {
            name: beats(e["results"], ("mgd_dr",), ("mgd",)) for name, e in report["reduction"].items()
        },
        "logistic_1e6_devices_d10_eps4": {
            "private": target.private,
            "non_private": target.non_private,
            "iterations": target.iterations,
            "batch_size": target.batch_size,
            "within_5_points": target.private - target.non_private < 0.05,
        },
    }
    report["seconds"] = round(time.perf_counter() - started, 1)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
