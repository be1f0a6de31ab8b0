"""`ldp workload optimize|compare`: the workload factorization mechanism (McKenna et al.) from the command line.

JSON contracts (`--json`):
- compare: {"workload", "domain", "epsilon", "lower_bound": {"sample_complexity"}, "mechanisms": {name:
  {"sample_complexity", "worst_case_variance", "average_case_variance"}}} for "optimized" and every baseline that
  applies ("fourier" needs n = 2^k; "rappor" and "subset_selection" only on small domains). Sample complexity at
  alpha = 0.01; the SVD lower bound is clamped at 0 where it is vacuous (large eps).
- optimize: {"workload", "domain", "epsilon", "seed", "out", "hash", "outputs", "start", "sample_complexity",
  "worst_case_variance", "average_case_variance", "seconds"}.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.table import Table

from ldpstream.cli.output import console, fail, print_fields
from ldpstream.mechanisms.workload.names import WORKLOAD_NAMES

if TYPE_CHECKING:
    from ldpstream.mechanisms.workload.workloads import Workload

workload_app = typer.Typer(
    no_args_is_help=True, add_completion=False, help="Workload-adaptive factorization mechanism: optimise, compare."
)

WORKLOAD = typer.Option(..., "--workload", "-w", help=f"one of {', '.join(WORKLOAD_NAMES)}, or a .npy/.csv matrix")
DOMAIN = typer.Option(..., "--domain", "-n", help="domain size n (2^k for marginals and parity)")
EPSILON = typer.Option(..., "--epsilon", "-e", help="privacy budget per user")
SEED = typer.Option(0, "--seed", help="seed of the optimiser's random start")
JSON = typer.Option(False, "--json", help="print JSON")


def comparison(workload: Workload, epsilon: float, seed: int = 0) -> dict[str, Any]:
    """Sample complexity and variances of the optimised strategy and every applicable baseline, and the bound."""
    from ldpstream.mechanisms.base import check_epsilon
    from ldpstream.mechanisms.workload.baselines import baseline_strategies
    from ldpstream.mechanisms.workload.optimize import optimize_strategy
    from ldpstream.mechanisms.workload.strategy import evaluate, sample_complexity, svd_lower_bound

    eps = check_epsilon(epsilon)
    strategies = {"optimized": optimize_strategy(workload, eps, seed=seed).q, **baseline_strategies(workload, eps)}
    bound = max(svd_lower_bound(workload, eps), 0.0)
    return {
        "lower_bound": {"sample_complexity": sample_complexity(bound, workload.num_queries)},
        "mechanisms": {name: evaluate(q, workload).as_dict() for name, q in strategies.items()},
    }


def compare(
    workload: str = WORKLOAD, domain: int = DOMAIN, epsilon: float = EPSILON, seed: int = SEED, as_json: bool = JSON
) -> None:
    """Sample complexity (alpha = 0.01) of the optimised strategy, the baselines and the SVD lower bound."""
    from ldpstream.mechanisms.base import LDPError
    from ldpstream.mechanisms.workload.workloads import workload_by_name

    try:
        result = comparison(workload_by_name(workload, domain), epsilon, seed)
    except LDPError as exc:
        fail(str(exc), code=2)
    payload = {"workload": workload, "domain": domain, "epsilon": epsilon, **result}
    if as_json:
        typer.echo(json.dumps(payload))
        return
    table = Table("mechanism", "sample complexity", "worst-case variance", "average-case variance")
    for name, row in result["mechanisms"].items():
        table.add_row(name, *(f"{row[key]:.6g}" for key in row))
    table.add_row("lower bound", f"{result['lower_bound']['sample_complexity']:.6g}", "", "")
    console.print(table)


def optimize(
    workload: str = WORKLOAD,
    domain: int = DOMAIN,
    epsilon: float = EPSILON,
    seed: int = SEED,
    out: Path = typer.Option(..., "--out", "-o", help="where to write the strategy (.npz, with its content hash)"),
    as_json: bool = JSON,
) -> None:
    """Optimise an eps-LDP strategy for the workload and save it as a FactorizationMechanism .npz."""
    from ldpstream.mechanisms.base import LDPError
    from ldpstream.mechanisms.workload.mechanism import FactorizationMechanism
    from ldpstream.mechanisms.workload.optimize import optimize_strategy
    from ldpstream.mechanisms.workload.strategy import evaluate
    from ldpstream.mechanisms.workload.workloads import workload_by_name

    start = time.perf_counter()
    try:
        target = workload_by_name(workload, domain)
        result = optimize_strategy(target, epsilon, seed=seed)
        mechanism = FactorizationMechanism(result.q, target.matrix(), epsilon)
        digest = mechanism.save(out)
    except (LDPError, OSError) as exc:
        fail(str(exc), code=2)
    payload = {
        "workload": workload,
        "domain": domain,
        "epsilon": epsilon,
        "seed": seed,
        "out": str(out),
        "hash": digest,
        "outputs": mechanism.outputs,
        "start": result.start,
        **evaluate(result.q, target).as_dict(),
        "seconds": round(time.perf_counter() - start, 3),
    }
    print_fields(payload, as_json)


def register(app: typer.Typer) -> None:
    """Add `ldp workload optimize|compare` to the `ldp` app."""
    workload_app.command("optimize")(optimize)
    workload_app.command("compare")(compare)
    app.add_typer(workload_app, name="workload")
