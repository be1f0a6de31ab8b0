"""Choose a numeric mechanism by its worst-case variance, computed from the closed forms (no thresholds).

For one attribute the candidates are the 1-D mechanisms (000 Sec. III: Laplace, SCDF, Staircase, Duchi, PM, HM); for d
attributes they are the vector mechanisms of `ldpstream.mechanisms.multidim` and the figure of merit is the worst-case
variance of one attribute's report (000 Lemma 6). The crossovers of 000 Table I (eps* ~ 0.61 where HM stops being
Duchi's mechanism, eps# ~ 1.29 where PM overtakes Duchi's) come out of these formulas; tests check them. Note that at
large eps the Staircase mechanism's variance (~ e^{-2 eps/3}) falls below HM's (~ e^{-eps/2}), so the choice there is
Staircase: 000 only compares worst-case variances of bounded-output mechanisms.

The candidates are the registered numeric mechanisms (`ldpstream.mechanisms.registry`), in the order of their classes'
`auto_rank`: on a tie (HM equals Duchi for eps <= eps*) the earlier one wins. In one dimension those whose class says
`auto_one_dimensional = False` (Harmony, which is then Duchi's mechanism) are left out.
"""

from __future__ import annotations

from ldpstream.mechanisms import registry
from ldpstream.mechanisms.base import check_epsilon
from ldpstream.mechanisms.multidim import check_dims, make_vector_mechanism, vector_names


def one_dimensional_candidates() -> tuple[str, ...]:
    """The 1-D mechanisms `choose_numeric` and `choose_sampled` compare, in tie-break order."""
    return registry.by_preference(
        name for name in registry.NUMERIC if registry.numeric_class(name).auto_one_dimensional
    )


def vector_candidates() -> tuple[str, ...]:
    """The vector mechanisms `choose_numeric` compares for d > 1, in tie-break order."""
    return registry.by_preference(vector_names())


def worst_case_variances(epsilon: float, dims: int = 1) -> dict[str, float]:
    """Worst-case variance of one attribute's report, per candidate mechanism, at budget eps over d attributes."""
    eps, d = check_epsilon(epsilon), check_dims(dims)
    if d == 1:
        return {name: registry.numeric_class(name)(eps).worst_case_variance() for name in one_dimensional_candidates()}
    return {name: make_vector_mechanism(name, eps, d).worst_case_variance() for name in vector_candidates()}


def sampled_worst_case_variance(name: str, epsilon: float, dims: int, k: int) -> float:
    """Worst case over t in [-1, 1] of (d/k)(a + (1 + b) t^2) - t^2: the 1-D mechanism `name` at eps/k used for one
    of d attributes of which each user reports k (000 Alg. 4 and Sec. IV-C), as in `ldpstream.mechanisms.mixed`."""
    a, b = registry.numeric_class(name)(check_epsilon(epsilon) / k).variance_coefficients()
    scale = check_dims(dims) / check_dims(k)
    return max(scale * a, scale * (a + 1 + b) - 1)  # linear in t^2: an end point


def choose_numeric(epsilon: float, dims: int = 1) -> str:
    """The mechanism name with the lowest worst-case variance at eps (vector names when dims > 1)."""
    variances = worst_case_variances(epsilon, dims)
    return min(variances, key=lambda name: variances[name])


def choose_sampled(epsilon: float, dims: int, k: int) -> str:
    """The 1-D mechanism with the lowest `sampled_worst_case_variance` (the mixed collector's "auto")."""
    return min(one_dimensional_candidates(), key=lambda name: sampled_worst_case_variance(name, epsilon, dims, k))
