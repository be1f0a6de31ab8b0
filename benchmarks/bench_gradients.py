"""Gradient randomizers (`ldpstream.mechanisms.gradients`) on unit vectors: measured error against each closed form
and against PrivUnitG's, device and server cost, report size, in one run.

    python benchmarks/bench_gradients.py            # a few minutes on 2 shared cores
    python benchmarks/bench_gradients.py --table    # also the docs' Markdown table on stderr

For d in {100, 1,000, 10,000, 100,000} and eps in {1, 2, 4, 8}, every mechanism perturbs n copies of one random unit
vector x (n = ELEMENTS / d, at least MIN_N: the 100,000-d cells use small n), and per cell the JSON says:
`mse` the mean of ||x_hat_i - x||^2 over the n reports, `mse_se` its standard error, `closed_form` the mechanism's
`mse(d)`, `z` = (mse - closed_form) / mse_se, `over_privunitg` closed_form / PrivUnitG's closed form (and
`measured_over_privunitg` the ratio of the measured errors), `perturb_us` CPU microseconds per device to perturb,
`decode_us` per report to decode and average (`mean`), `report_bytes`. Duchi's d-dimensional cube mechanism takes
d <= 1023 (`ldpstream.mechanisms.multidim.MAX_DUCHI_DIMS`): its larger cells carry `error` instead.
`goals`: the default L2 mechanism (`default_gradient_mechanism("l2", d)`) within 1.05x of PrivUnitG's error at
every (d, eps), ProjUnit (k = 1,000) within 1.2x with a report under 4,096 bytes; both by the closed forms, which
the measured `z` confirm.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from typing import Any

import numpy as np

from ldpstream.mechanisms.base import LDPError
from ldpstream.mechanisms.gradients import default_gradient_mechanism, gradient_mechanism, gradient_names

DIMS = (100, 1_000, 10_000, 100_000)
EPSILONS = (1.0, 2.0, 4.0, 8.0)
ELEMENTS = 2_000_000  # n * d per cell
MIN_N = 20
SEED = 39


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def cell(name: str, d: int, eps: float, x: np.ndarray, n: int, rng: np.random.Generator) -> dict[str, Any]:
    row: dict[str, Any] = {"mechanism": name, "d": d, "epsilon": eps, "n": n}
    try:
        m = gradient_mechanism(name, dims=d, epsilon=eps)
    except LDPError as exc:
        return {**row, "error": str(exc)}
    batch = np.tile(x, (n, 1))
    start = time.process_time()
    reports = m.perturb(batch, rng)
    perturb = time.process_time() - start
    start = time.process_time()
    m.mean(reports)
    decode = time.process_time() - start
    errors = ((m.decode(reports) - x) ** 2).sum(axis=1)
    mse, se = float(errors.mean()), float(errors.std(ddof=1) / math.sqrt(n))
    closed = m.mse(d)
    return {**row, "norm": m.norm, "mse": mse, "mse_se": se, "closed_form": closed,
            "z": (mse - closed) / se if se > 0 else 0.0, "perturb_us": 1e6 * perturb / n,
            "decode_us": 1e6 * decode / n, "report_bytes": m.report_bytes()}


def run() -> dict[str, Any]:
    rng = np.random.default_rng(SEED)
    cells: list[dict[str, Any]] = []
    for d in DIMS:
        x = rng.normal(size=d)
        x /= np.linalg.norm(x)
        n = max(MIN_N, ELEMENTS // d)
        for eps in EPSILONS:
            rows = [cell(name, d, eps, x, n, rng) for name in gradient_names()]
            reference = next(r for r in rows if r["mechanism"] == "privunitg")
            for r in rows:
                if "error" not in r:
                    r["over_privunitg"] = r["closed_form"] / reference["closed_form"]
                    r["measured_over_privunitg"] = r["mse"] / reference["mse"]
                log(json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()}))
            cells.extend(rows)
    return {"cells": cells, "goals": goals(cells)}


def goals(cells: list[dict[str, Any]]) -> dict[str, Any]:
    def ratio(name: str, d: int, eps: float) -> dict[str, Any]:
        return next(c for c in cells if c["mechanism"] == name and c["d"] == d and c["epsilon"] == eps)

    default = [ratio(default_gradient_mechanism("l2", d), d, eps) for d in DIMS for eps in EPSILONS]
    projunit = [ratio("projunit", d, eps) for d in DIMS for eps in EPSILONS]
    worst_default = max(c["over_privunitg"] for c in default)
    worst_projunit = max(c["over_privunitg"] for c in projunit)
    most_bytes = max(c["report_bytes"] for c in projunit)
    return {"default_l2": {d: default_gradient_mechanism("l2", d) for d in DIMS},
            "default_l2_max_over_privunitg": worst_default, "default_l2_goal": 1.05,
            "projunit_max_over_privunitg": worst_projunit, "projunit_goal": 1.2,
            "projunit_max_report_bytes": most_bytes, "projunit_bytes_goal": 4096,
            "met": worst_default <= 1.05 and worst_projunit <= 1.2 and most_bytes < 4096,
            "max_abs_z": max(abs(c["z"]) for c in cells if "z" in c)}


def table(result: dict[str, Any]) -> str:
    """Markdown: per (d, eps) PrivUnitG's closed-form MSE, every other mechanism's closed-form ratio to it, and the
    largest |z| of the row's measured errors against their closed forms."""
    names = [n for n in gradient_names() if n != "privunitg"]
    lines = ["| d | eps | PrivUnitG MSE | " + " | ".join(names) + " | max abs z |", "|---" * (4 + len(names)) + "|"]
    for d in DIMS:
        for eps in EPSILONS:
            by = {c["mechanism"]: c for c in result["cells"] if c["d"] == d and c["epsilon"] == eps}
            ratios = ["-" if "error" in by[n] else ratio_text(by[n]["over_privunitg"]) for n in names]
            z = max(abs(c["z"]) for c in by.values() if "z" in c)
            lines.append(f"| {d:,} | {eps:g} | {mse_text(by['privunitg']['closed_form'])} | " + " | ".join(ratios)
                         + f" | {z:.1f} |")
    return "\n".join(lines)


def mse_text(mse: float) -> str:
    return f"{mse:,.0f}" if mse >= 1000 else f"{mse:.4g}"


def ratio_text(ratio: float) -> str:
    return f"{ratio:.3f}" if ratio < 10 else f"{ratio:,.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--table", action="store_true", help="also print the docs' Markdown table on stderr")
    args = parser.parse_args()
    result = run()
    print(json.dumps(result, indent=1))
    if args.table:
        log(table(result))


if __name__ == "__main__":
    main()
