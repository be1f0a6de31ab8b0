"""Randomizers of clipped gradients: one d-dimensional vector per device, eps-LDP, unbiased on average.

`gradient_mechanism(name, dims=d, epsilon=e, **params)` builds one by name (the names and classes are
`ldpstream.mechanisms.registry.GRADIENT`); `m.perturb(G, rng)` turns an (n, d) array of clipped gradients into a
report batch, `m.mean(reports)` is the unbiased (d,) estimate of their mean, `m.mse(d)` the closed-form per-report
E||x_hat - x||^2 for a unit vector, `m.norm` the clipping the mechanism expects ("l2": rows of L2 norm <= 1;
"linf": rows in [-1, 1]^d).

- L2: `privunitg` (Asi, Feldman and Talwar 2022, optimal), `privunit2` (Bhowmick et al. 2018 with AFT22's
  optimised p), `projunit` (Asi, Feldman, Nelson, Nguyen and Talwar 2023: a seeded randomized Hadamard projection
  to k <= 1000 dimensions, then PrivUnitG; a report of at most 4,008 bytes whatever d), `duchi-l2` (Duchi, Jordan
  and Wainwright 2018, the classic baseline).
- L-infinity: `pm`, `hm` (k-of-d sampling, 000 Alg. 4) and `duchi` (000 Alg. 3), from `ldpstream.mechanisms.multidim`.

`default_gradient_mechanism(norm, dims)` is the one a job gets for its clipping: PrivUnitG for L2 (ProjUnit above
PROJECTION_DIMS, where PrivUnitG's report would pass 8 KB for at most 1% more error), HM for L-infinity (the
cube mechanism `ldpstream.sgd` has used by default).

Examples
--------
>>> import numpy as np
>>> m = gradient_mechanism("privunitg", dims=1000, epsilon=4.0)
>>> round(m.mse(1000))
435
>>> g = np.random.default_rng(0).normal(size=(500, 1000))
>>> g /= np.maximum(1.0, np.linalg.norm(g, axis=1))[:, None]
>>> m.mean(m.perturb(g, np.random.default_rng(1))).shape
(1000,)
"""

from __future__ import annotations

from typing import Any, cast

from ldpstream.mechanisms import registry
from ldpstream.mechanisms.base import LDPError
from ldpstream.mechanisms.gradients.base import GradientMechanism, Norm

__all__ = ["GradientMechanism", "Norm", "PROJECTION_DIMS", "default_gradient_mechanism", "gradient_mechanism",
           "gradient_names"]

# Above this d an L2 job defaults to ProjUnit: PrivUnitG's float64 report would exceed 8 KB, and ProjUnit at k = 1000
# is within 1% of PrivUnitG's error there (benchmarks/bench_gradients.py).
PROJECTION_DIMS = 1024


def gradient_names() -> tuple[str, ...]:
    """The names `gradient_mechanism` takes."""
    return tuple(registry.GRADIENT)


def gradient_mechanism(name: str, dims: int, epsilon: float, **params: Any) -> GradientMechanism:
    """The gradient randomizer `name` for d-dimensional gradients at eps per report; `params` are the mechanism's
    own keywords (projunit: k, the projected dimension; pm and hm: k, the sampled attributes)."""
    cls = cast("type[GradientMechanism]", registry.gradient_class(name))
    try:
        return cls(dims=dims, epsilon=epsilon, **params)
    except TypeError as exc:  # an unknown keyword: one error type for every bad argument
        raise LDPError(f"{name!r} got unexpected parameters {sorted(params)}: {exc}") from exc


def default_gradient_mechanism(norm: str, dims: int | None = None) -> str:
    """The name of the mechanism a job clipping to `norm` ("l2" or "linf") gets by default at d = `dims`."""
    if norm == "l2":
        return "projunit" if dims is not None and dims > PROJECTION_DIMS else "privunitg"
    if norm == "linf":
        return "hm"
    raise LDPError(f"unknown clipping norm {norm!r}; known: 'l2', 'linf'")
