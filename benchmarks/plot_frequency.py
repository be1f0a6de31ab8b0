"""Frequency-oracle variance against epsilon and against the domain size K (004 Table 1 / Fig. 1 style).

    python benchmarks/plot_frequency.py        # about 30 s on 2 cores

Lines: each oracle's closed form n * Var[f_hat] for a rare value (`worst_case_variance`, 004 Table 1; OLH at
the rounded g = round(e^eps) + 1); left panel at K = 64 (and GRR at K = 1024 too), right panel at eps = 2.
Markers (left panel): the simulated n * mean squared error over the values nobody holds, n = 100,000 users spread
over half of K = 64 values, averaged over 25 seeded runs per point (about 800 squared errors: a relative standard
error of about 5%). Writes
docs/img/frequency_variance.png and prints the plotted numbers as JSON.
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from ldpstream.mechanisms import registry  # noqa: E402
from ldpstream.mechanisms.frequency import FrequencyOracle  # noqa: E402

NAMES = ("grr", "sue", "oue", "blh", "olh", "hadamard")
LABELS = {
    "grr": "GRR (DE)",
    "sue": "SUE",
    "oue": "OUE",
    "blh": "BLH",
    "olh": "OLH (~ OUE)",
    "hadamard": "Hadamard (= BLH)",
}
STYLE = {"grr": "-", "sue": "--", "oue": "-", "blh": "--", "olh": ":", "hadamard": "-."}
EPS_GRID = np.linspace(0.25, 6.0, 47)
SIM_EPS = (0.5, 1.0, 2.0, 4.0)
SIM_N, SIM_K, SIM_RUNS = 100_000, 64, 25
PANEL_EPS, LARGE_K = 2.0, 1024
K_GRID = np.unique(np.round(np.logspace(1, 14, 40, base=2)).astype(int))
OUT = Path(__file__).resolve().parent.parent / "docs" / "img" / "frequency_variance.png"


def oracle(name: str, eps: float, k: int) -> FrequencyOracle:
    made = registry.make(name, float(eps), int(k))
    assert isinstance(made, FrequencyOracle)
    return made


def closed_form(name: str, eps: float, k: int) -> float:
    return oracle(name, eps, k).worst_case_variance()


def simulated(name: str, eps: float, rng: np.random.Generator) -> float:
    """n * mean over the unheld values and the runs of (f_hat - 0)^2."""
    fo = oracle(name, eps, SIM_K)
    squared = []
    for _ in range(SIM_RUNS):
        values = rng.integers(0, SIM_K // 2, SIM_N)  # values SIM_K/2 .. SIM_K-1 are held by nobody
        est = fo.estimate(fo.accumulate(fo.perturb(values, rng)))
        squared.append(est.value[SIM_K // 2 :] ** 2)
    return float(SIM_N * np.mean(squared))


def main() -> None:
    rng = np.random.default_rng(2017)
    by_eps = {name: [closed_form(name, e, SIM_K) for e in EPS_GRID] for name in NAMES}
    grr_large_k = [closed_form("grr", e, LARGE_K) for e in EPS_GRID]
    by_eps_small_k = {name: [closed_form(name, e, SIM_K) for e in SIM_EPS] for name in NAMES}
    sims = {name: [simulated(name, e, rng) for e in SIM_EPS] for name in NAMES}
    by_k = {name: [closed_form(name, PANEL_EPS, k) for k in K_GRID] for name in NAMES}

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8))
    for name in NAMES:
        (line,) = left.plot(EPS_GRID, by_eps[name], STYLE[name], label=LABELS[name])
        left.plot(SIM_EPS, sims[name], "o", color=line.get_color(), mfc="none")
        right.plot(K_GRID, by_k[name], STYLE[name], label=LABELS[name])
    left.plot(EPS_GRID, grr_large_k, "-", color="0.6", lw=1, label=f"GRR, K = {LARGE_K}")
    left.plot([], [], "ko", mfc="none", label=f"simulated (n = {SIM_N:,})")
    left.set(
        yscale="log",
        xlabel="epsilon",
        ylabel="n * Var[f_hat] (rare value)",
        title=f"variance vs epsilon (K = {SIM_K})",
    )
    right.set(
        xscale="log",
        yscale="log",
        xlabel="domain size K",
        ylabel="n * Var[f_hat] (rare value)",
        title=f"variance vs domain size (epsilon = {PANEL_EPS:g})",
    )
    right.set_xscale("log", base=2)
    for ax in (left, right):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(OUT, dpi=110)

    result = {
        "png": str(OUT.relative_to(OUT.parent.parent.parent)),
        "closed_form_vs_simulated": {
            name: [
                {"epsilon": e, "K": SIM_K, "closed_form": c, "simulated": s}
                for e, c, s in zip(SIM_EPS, by_eps_small_k[name], sims[name], strict=True)
            ]
            for name in NAMES
        },
        "at_K_1024": {
            name: dict(zip((f"{e:g}" for e in SIM_EPS), (closed_form(name, e, 1024) for e in SIM_EPS), strict=True))
            for name in NAMES
        },
    }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
