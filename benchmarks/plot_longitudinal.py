"""Privacy over time: the audited epsilon of T reports of one value by one device, T = 1..100.

    python benchmarks/plot_longitudinal.py     # about a minute on 2 cores

Lines (markers): `ldpstream.mechanisms.audit.audit_longitudinal`'s Clopper-Pearson lower bound (confidence 0.999) for
GRR at eps = 0.5 with fresh noise per report, L-GRR with eps_1 = 0.5 and eps_inf = 2, Duchi's mechanism at eps = 0.5,
and 1BitMean memoized at eps = 2 with output perturbation (gamma chosen so that one report is 0.5-LDP); K = 4. Dashed:
the claimed budgets, T eps for fresh noise and min(T eps_1, eps_inf) for the memoized ones. The fresh-noise bounds
follow T eps until they meet what n samples per input can show (about ln n, n = 100,000); the memoized ones stay below
eps_inf whatever T. Writes docs/img/longitudinal_audit.png and prints the plotted numbers as JSON.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from ldpstream.mechanisms import registry  # noqa: E402
from ldpstream.mechanisms.audit import audit_longitudinal  # noqa: E402
from ldpstream.mechanisms.base import Mechanism  # noqa: E402

ONE, LIFETIME, K = 0.5, 2.0, 4
REPORTS = (1, 2, 3, 5, 8, 12, 20, 30, 50, 75, 100)
N, N_SELECT = 100_000, 20_000


def mechanisms() -> dict[str, tuple[Mechanism, list[float]]]:
    """label -> (mechanism, claimed budget per T)."""
    big, e = math.exp(LIFETIME), math.exp(ONE)
    gamma = (big - e) / ((big - 1) * (e + 1))  # (e^L (1 - g) + g) / ((1 - g) + g e^L) = e^1, solved for g
    cases = {
        "GRR, fresh noise": (registry.make("grr", ONE, K), None),
        "L-GRR, memoized": (registry.make("l-grr", LIFETIME, K, epsilon_first=ONE), LIFETIME),
        "Duchi, fresh noise": (registry.make("duchi", ONE), None),
        "1BitMean, memoized (gamma)": (registry.make("1bitmean", LIFETIME, gamma=gamma), LIFETIME),
    }
    return {
        label: (mech, [min(t * mech.epsilon, cap) if cap else t * mech.epsilon for t in REPORTS])
        for label, (mech, cap) in cases.items()
    }


def main() -> None:
    rows = {}
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, (label, (mech, claimed)) in enumerate(mechanisms().items()):
        bounds = [audit_longitudinal(mech, t, seed=i, n=N, n_select=N_SELECT).epsilon_lower_bound for t in REPORTS]
        rows[label] = {"one_report_epsilon": mech.epsilon, "reports": list(REPORTS), "claimed": claimed,
                       "lower_bound": bounds}
        line = ax.plot(REPORTS, bounds, "o-", label=f"{label}: audited")[0]
        ax.plot(REPORTS, claimed, "--", color=line.get_color(), alpha=0.6)
    ax.axhline(math.log(N), color="grey", lw=0.8, ls=":", label="ln n: the most n samples can show")
    ax.set_xscale("log")
    ax.set_xlabel("reports T of one value by one device")
    ax.set_ylabel("epsilon (audited lower bound; dashed: claimed)")
    ax.set_title(f"Privacy over time: one report {ONE}-LDP, memo {LIFETIME}-LDP")
    ax.legend(fontsize=8)
    out = Path(__file__).resolve().parents[1] / "docs" / "img" / "longitudinal_audit.png"
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    print(json.dumps({"figure": str(out), "n": N, "curves": rows}, default=float))


if __name__ == "__main__":
    main()
