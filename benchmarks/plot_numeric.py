"""Numeric mechanisms' variance and error against epsilon (000 Fig. 1, Fig. 3, Fig. 5-6 style).

    .venv/bin/python benchmarks/plot_numeric.py      # about a minute on one core

Writes three PNGs into docs/img/ and prints the plotted numbers as JSON:
- numeric_worst_case_variance.png (000 Fig. 1): worst-case variance of one report for Laplace, SCDF, Staircase,
  Duchi et al., PM and HM, with eps* ~ 0.61 and eps# ~ 1.29 marked (000 Table I).
- numeric_multidim_ratio.png (000 Fig. 3): worst-case per-attribute variance of PM and HM (000 Alg. 4, Lemma 6)
  over Duchi et al.'s d-dimensional mechanism, d = 5, 10, 20, 40. Solid: over the corrected Duchi mechanism we
  ship (001 Sec. 3.1); dashed: over 000 Eq. 9-10's constant, as the paper plots it. They differ for even d.
- numeric_mse_vs_epsilon.png (000 Fig. 5-6): simulated MSE of the 16 estimated means (n = 100,000 users, 5 seeded
  runs per point) for PM, HM, Duchi et al. (multi-D), Laplace and SCDF at eps/d, on three populations: Gaussian
  N(1/3, 1/16) truncated to [-1, 1], uniform on [-1, 1], and a power law with density proportional to
  (t + 1.1)^-2 on [-1, 1]; the lines are the closed forms (mean over users of Var / n).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from scipy.stats import truncnorm  # noqa: E402

from ldpstream.mechanisms import registry  # noqa: E402
from ldpstream.mechanisms.multidim import make_vector_mechanism  # noqa: E402
from ldpstream.mechanisms.numeric.hybrid import EPSILON_STAR  # noqa: E402

OUT = Path(__file__).resolve().parent.parent / "docs" / "img"
EPSILON_SHARP = math.log((7 + 4 * math.sqrt(7) + 2 * math.sqrt(20 + 14 * math.sqrt(7))) / 9)
LABELS = {
    "laplace": "Laplace",
    "scdf": "SCDF",
    "staircase": "Staircase",
    "duchi": "Duchi et al.",
    "pm": "PM",
    "hm": "HM",
}


def worst_case_figure() -> dict[str, list[float]]:
    eps = np.linspace(0.1, 8, 200)
    curves = {name: [registry.make(name, e).worst_case_variance() for e in eps] for name in LABELS}  # type: ignore[attr-defined]
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, values in curves.items():
        ax.plot(eps, values, label=LABELS[name], lw=1.6, ls="--" if name in ("scdf", "staircase") else "-")
    for x, label, y in ((EPSILON_STAR, "eps* = 0.61", 0.015), (EPSILON_SHARP, "eps# = 1.29", 0.04)):
        ax.axvline(x, color="grey", lw=0.8, ls=":")
        ax.text(x, y, f" {label}", color="grey")
    ax.set(
        yscale="log",
        xlabel="epsilon",
        ylabel="worst-case variance of one report",
        title="One numeric attribute (000 Fig. 1)",
    )
    ax.legend()
    fig.tight_layout()
    fig.savefig(OUT / "numeric_worst_case_variance.png", dpi=90)
    plt.close(fig)
    return {"epsilon": eps[::20].tolist(), **{k: v[::20] for k, v in curves.items()}}


def paper_duchi_worst_case(eps: float, d: int) -> float:
    """B^2 with 000 Eq. 9-10's constant (the one Fig. 3 of 000 uses)."""
    if d % 2:
        c = 2 ** (d - 1) / math.comb(d - 1, (d - 1) // 2)
    else:
        c = (2 ** (d - 1) + math.comb(d, d // 2) / 2) / math.comb(d - 1, d // 2)
    return ((math.exp(eps) + 1) / (math.exp(eps) - 1) * c) ** 2


def multidim_figure() -> dict[str, dict[str, list[float]]]:
    eps = np.linspace(0.1, 8, 160)
    fig, axes = plt.subplots(1, 4, figsize=(14, 3.4), sharey=True)
    numbers = {}
    for ax, d in zip(axes, (5, 10, 20, 40), strict=True):
        ours = np.array([make_vector_mechanism("duchi", e, d).worst_case_variance() for e in eps])
        paper = np.array([paper_duchi_worst_case(e, d) for e in eps])
        for name, colour in (("pm", "tab:purple"), ("hm", "tab:red")):
            v = np.array([make_vector_mechanism(name, e, d).worst_case_variance() for e in eps])
            ax.plot(eps, v / ours, color=colour, label=f"{LABELS[name]} / Duchi (corrected)")
            ax.plot(eps, v / paper, color=colour, ls="--", lw=1, label=f"{LABELS[name]} / Duchi (000 Eq. 10)")
            numbers[f"d={d} {name}/duchi"] = (v / ours)[::16].tolist()
        ax.axhline(1, color="grey", lw=0.8)
        ax.set(title=f"d = {d}", xlabel="epsilon")
    axes[0].set_ylabel("worst-case variance ratio")
    axes[0].legend(fontsize=7)
    fig.suptitle("PM and HM over Duchi et al., per attribute (000 Fig. 3)")
    fig.tight_layout()
    fig.savefig(OUT / "numeric_multidim_ratio.png", dpi=80)
    plt.close(fig)
    return numbers


def populations(rng: np.random.Generator, n: int, d: int) -> dict[str, np.ndarray]:
    mu, sigma = 1 / 3, 1 / 4
    gaussian = truncnorm.rvs((-1 - mu) / sigma, (1 - mu) / sigma, loc=mu, scale=sigma, size=(n, d), random_state=rng)
    u = rng.random((n, d))  # inverse CDF of density proportional to (t + 1.1)^-2 on [-1, 1]
    lo, hi = 1 / 0.1, 1 / 2.1
    power = 1 / (lo - u * (lo - hi)) - 1.1
    return {"Gaussian N(1/3, 1/16)": gaussian, "uniform": rng.uniform(-1, 1, (n, d)), "power law": power}


def mse_figure(n: int = 100_000, d: int = 16, runs: int = 5) -> dict[str, dict[str, list[float]]]:
    rng = np.random.default_rng(2019)
    eps_grid = (0.5, 1.0, 2.0, 4.0, 8.0)
    names = ("pm", "hm", "duchi", "laplace", "scdf")
    data = populations(rng, n, d)
    fig, axes = plt.subplots(1, 3, figsize=(14, 3.6), sharey=True)
    numbers: dict[str, dict[str, list[float]]] = {}
    for ax, (label, values) in zip(axes, data.items(), strict=True):
        truth = values.mean(axis=0)
        numbers[label] = {}
        for name in names:
            empirical, theory = [], []
            for eps in eps_grid:
                mech = make_vector_mechanism(name, eps, d)
                errors = [
                    np.mean((mech.estimate(mech.accumulate(mech.perturb(values, rng))).value - truth) ** 2)
                    for _ in range(runs)
                ]
                empirical.append(float(np.mean(errors)))
                theory.append(float(np.mean(mech.variance(values).mean(axis=0)) / n))
            line = ax.plot(eps_grid, theory, lw=1)[0]
            ax.plot(eps_grid, empirical, "o", color=line.get_color(), label=LABELS[name])
            numbers[label][name] = empirical
        ax.set(yscale="log", xscale="log", title=label, xlabel="epsilon")
        ax.minorticks_off()
        ax.set_xticks(eps_grid, [f"{e:g}" for e in eps_grid])
    axes[0].set_ylabel(f"MSE of the {d} means (n = {n:,})")
    axes[0].legend(fontsize=8)
    fig.suptitle("Mean estimation, d = 16 (000 Fig. 5-6): markers simulated, lines closed form")
    fig.tight_layout()
    fig.savefig(OUT / "numeric_mse_vs_epsilon.png", dpi=80)
    plt.close(fig)
    return numbers


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    result = {"worst_case_variance": worst_case_figure(), "multidim_ratio": multidim_figure(), "mse": mse_figure()}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
