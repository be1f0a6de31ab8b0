"""Sample complexity of the workload factorization mechanism against the baselines (McKenna et al. Fig. 1 and 2).

    python benchmarks/plot_workload.py            # about 10 minutes on our 2 shared cores
    python benchmarks/plot_workload.py --quick    # n = 32 and n <= 64: about a minute

Sample complexity N(0.01) = L_worst / (p * 0.01) of every mechanism, with the optimal reconstruction V*, and the SVD
lower bound (clamped at 0 where vacuous). "optimized" is `optimize_strategy` (random start plus a warm start from
the best baseline, the smaller worst case wins); "optimized (random start)" is the paper's method alone.
Writes docs/img/workload_vs_epsilon.png (Fig. 1: n fixed, eps varies) and docs/img/workload_vs_domain.png (Fig. 2:
eps fixed, n varies), and prints the plotted numbers and the checks of the paper's Sec. 6 findings as JSON.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from ldpstream.mechanisms.workload.baselines import baseline_strategies  # noqa: E402
from ldpstream.mechanisms.workload.optimize import optimize_strategy  # noqa: E402
from ldpstream.mechanisms.workload.strategy import evaluate, sample_complexity, svd_lower_bound  # noqa: E402
from ldpstream.mechanisms.workload.workloads import WORKLOAD_NAMES, workload_by_name  # noqa: E402

OUT = Path(__file__).resolve().parent.parent / "docs" / "img"
SHOWN = ("optimized", "random_start", "randomized_response", "hadamard", "hierarchical", "fourier", "lower_bound")
LABELS = {
    "optimized": "Optimized",
    "random_start": "Optimized (random start only)",
    "randomized_response": "Randomized response",
    "hadamard": "Hadamard",
    "hierarchical": "Hierarchical (B = 4)",
    "fourier": "Fourier",
    "lower_bound": "SVD lower bound",
}
STYLE = {"optimized": "k-o", "random_start": "k:", "lower_bound": "k--"}
FINDING_EPS = (0.5, 1.0, 2.0, 4.0)


def point(name: str, n: int, eps: float) -> dict[str, float]:
    """Sample complexity of every mechanism (and the bound) for one workload, domain size and epsilon."""
    workload = workload_by_name(name, n)
    result = optimize_strategy(workload, eps)
    row = {
        "optimized": sample_complexity(result.worst_case_variance, workload.num_queries),
        "random_start": sample_complexity(result.random_start_worst_case, workload.num_queries),
        "lower_bound": sample_complexity(max(svd_lower_bound(workload, eps), 0.0), workload.num_queries),
    }
    for label, q in baseline_strategies(workload, eps).items():
        if label in SHOWN:
            row[label] = evaluate(q, workload).sample_complexity
    return row


def sweep(points: list[tuple[str, int, float]]) -> list[dict[str, Any]]:
    rows = []
    for name, n, eps in points:
        start = time.perf_counter()
        rows.append({"workload": name, "domain": n, "epsilon": eps, **point(name, n, eps)})
        rows[-1]["seconds"] = round(time.perf_counter() - start, 2)
    return rows


def plot(rows: list[dict[str, Any]], x_key: str, title: str, path: Path) -> None:
    fig, axes = plt.subplots(2, 3, figsize=(15, 8.5))
    for ax, name in zip(axes.ravel(), WORKLOAD_NAMES, strict=True):
        mine = [r for r in rows if r["workload"] == name]
        x = [r[x_key] for r in mine]
        for label in SHOWN:
            y = [r.get(label, np.nan) for r in mine]
            if not np.all(np.isnan(np.asarray(y, dtype=float))):
                ax.plot(x, np.asarray(y, dtype=float), STYLE.get(label, "-"), label=LABELS[label], markersize=4)
        ax.set_yscale("log")
        if x_key == "domain":
            ax.set_xscale("log", base=2)
        ax.set_title(name)
        ax.set_xlabel("epsilon" if x_key == "epsilon" else "domain size n")
        ax.set_ylabel("samples for normalised variance 0.01")
        ax.grid(True, which="both", alpha=0.3)
    axes[0, 0].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def findings(by_eps: list[dict[str, Any]], by_domain: list[dict[str, Any]]) -> dict[str, Any]:
    """The paper's Sec. 6 findings, checked on our numbers."""
    baselines = ("randomized_response", "hadamard", "hierarchical", "fourier")

    def best_baseline(row: dict[str, Any]) -> float:
        return min(float(row[b]) for b in baselines if b in row)

    at_grid = [r for r in by_eps if r["epsilon"] in FINDING_EPS]

    def ratios(label: str) -> dict[str, dict[str, float]]:
        """Per workload and epsilon: sample complexity of `label` / that of the best baseline."""
        table: dict[str, dict[str, float]] = {}
        for r in at_grid:
            table.setdefault(str(r["workload"]), {})[str(r["epsilon"])] = float(r[label]) / best_baseline(r)
        return table

    not_worse, random_ratio = ratios("optimized"), ratios("random_start")
    largest_eps = max(float(r["epsilon"]) for r in by_eps)
    vs_rr = {
        str(r["workload"]): float(r["optimized"]) / float(r["randomized_response"])
        for r in by_eps
        if r["epsilon"] == largest_eps
    }
    advantage = {
        name: {str(r["domain"]): best_baseline(r) / float(r["optimized"]) for r in by_domain if r["workload"] == name}
        for name in WORKLOAD_NAMES
    }
    return {
        "optimized_over_best_baseline": not_worse,
        "optimized_never_worse": all(v <= 1 + 1e-9 for row in not_worse.values() for v in row.values()),
        "random_start_over_best_baseline": random_ratio,
        "optimized_over_randomized_response_at_largest_eps": {"epsilon": largest_eps, "ratio": vs_rr},
        "advantage_over_best_baseline_by_domain": advantage,
        "advantage_grows_with_n": {
            name: list(gains.values())[-1] > list(gains.values())[0] for name, gains in advantage.items()
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller grids (n = 32 for Fig. 1, n <= 64 for Fig. 2)")
    parser.add_argument("--out", type=Path, default=OUT, help="folder for the PNGs")
    args = parser.parse_args()
    domain = 32 if args.quick else 64
    epsilons = (0.5, 1.0, 2.0, 4.0) if args.quick else (0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0)
    domains = (8, 16, 32, 64) if args.quick else (8, 16, 32, 64, 128, 256)
    domain_eps = 1.0
    by_eps = sweep([(name, domain, eps) for name in WORKLOAD_NAMES for eps in epsilons])
    by_domain = sweep([(name, n, domain_eps) for name in WORKLOAD_NAMES for n in domains])
    plot(
        by_eps,
        "epsilon",
        f"Sample complexity vs epsilon, n = {domain} (cf. McKenna et al. Fig. 1)",
        args.out / "workload_vs_epsilon.png",
    )
    plot(
        by_domain,
        "domain",
        f"Sample complexity vs domain size, eps = {domain_eps} (cf. Fig. 2)",
        args.out / "workload_vs_domain.png",
    )
    report = {
        "alpha": 0.01,
        "vs_epsilon": {"domain": domain, "rows": by_eps},
        "vs_domain": {"epsilon": domain_eps, "rows": by_domain},
        "findings": findings(by_eps, by_domain),
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
