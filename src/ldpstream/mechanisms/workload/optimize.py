"""Strategy optimisation for a workload: projected gradient descent over (Q, z) (McKenna et al., Sec. 4, Alg. 1-2).

Minimises the average-case variance L_avg(Q) = trace[(Q^T D^-1 Q)^-1 W^T W] / n - trace(W^T W) / n (Thm. 3.8)
over strategies whose every column lies in the box [z, e^eps z] and sums to 1: exactly the eps-LDP strategies
(Prop. 2.2 with z_o the smallest entry allowed in row o). The result is therefore eps-LDP by construction, and
`optimize_strategy` checks the row ratios of what it returns.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.linalg import cho_solve
from threadpoolctl import threadpool_limits

from ldpstream.mechanisms.base import LDPError, check_epsilon
from ldpstream.mechanisms.workload.baselines import baseline_strategies
from ldpstream.mechanisms.workload.strategy import check_strategy, evaluate, factorize, normal_cholesky
from ldpstream.mechanisms.workload.workloads import Workload

OUTPUTS_PER_TYPE = 4  # m = 4n outputs by default (Sec. 4)
_Z_FLOOR = 1e-10  # rows whose z fell below this are dropped


def project_bounded_simplex(r: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
    """Euclidean projection of every column of R (m x n) onto {q : lower <= q <= upper, sum(q) = 1} (Alg. 1).

    The solution is clip(r + lambda, lower, upper) with one scalar lambda per column (Prop. 4.2). The column sum
    g(lambda) is piecewise linear and non-decreasing with breakpoints lower - r and upper - r; sorting them and
    accumulating slope x width gives g at every breakpoint, and lambda is interpolated in the segment where g
    crosses 1. All columns at once: O(m log m) per column, no loop over columns.
    """
    r = np.asarray(r, dtype=np.float64)
    lower, upper = np.asarray(lower, dtype=np.float64), np.asarray(upper, dtype=np.float64)
    if r.ndim != 2 or lower.shape != (r.shape[0],) or upper.shape != (r.shape[0],):
        raise LDPError(
            f"projection needs R (m x n) and bounds of length m, got {r.shape}, {lower.shape}, {upper.shape}"
        )
    if (lower > upper).any() or lower.sum() > 1.0 or upper.sum() < 1.0:
        raise LDPError("the bounded simplex is empty: need lower <= upper, sum(lower) <= 1 <= sum(upper)")
    m, n = r.shape
    breaks = np.empty((n, 2 * m))  # one row of 2m breakpoints per column of R, sorted along the contiguous axis
    np.subtract(lower, r.T, out=breaks[:, :m])
    np.subtract(upper, r.T, out=breaks[:, m:])
    order = np.argsort(breaks, axis=1)
    lam = np.take_along_axis(breaks, order, axis=1)
    slope = np.cumsum(np.where(order < m, 1, -1), axis=1)[:, :-1]  # entries strictly inside their box per segment
    totals = np.empty_like(lam)  # totals[:, k] = g(lam[:, k])
    totals[:, 0] = lower.sum()
    np.cumsum(slope * np.diff(lam, axis=1), axis=1, out=totals[:, 1:])
    totals[:, 1:] += totals[:, :1]
    reached = totals >= 1.0
    reached[:, -1] = True  # g(lam[-1]) = sum(upper) >= 1, whatever the rounding of the cumulative sum
    k = np.argmax(reached, axis=1)
    cols = np.arange(n)
    prev = np.maximum(k - 1, 0)
    seg_slope = slope[cols, prev]
    step = np.divide(1.0 - totals[cols, prev], seg_slope, out=np.zeros(n), where=seg_slope > 0)
    lam_star = np.where(k == 0, lam[:, 0], np.minimum(lam[cols, prev] + step, lam[cols, k]))
    return np.clip(r + lam_star, lower[:, None], upper[:, None])


def objective_and_gradient(q: np.ndarray, gram: np.ndarray) -> tuple[float, np.ndarray]:
    """L_avg(Q) (Thm. 3.8) and its gradient with respect to Q; (inf, zeros) where Q^T D^-1 Q is singular
    (`normal_cholesky`).

    With M = Q^T D^-1 Q, D = diag(Q 1), X = M^-1 G M^-1 and dM = dQ^T D^-1 Q + Q^T D^-1 dQ - Q^T D^-2 diag(dQ 1) Q:
    dL = -trace(X dM) / n, so grad = [-2 D^-1 Q X + r 1^T] / n with r_o = (Q X Q^T)[o, o] / d_o^2.
    """
    n = q.shape[1]
    scaled, factor = normal_cholesky(q)  # D^-1 Q and the Cholesky factor of M
    if factor is None:
        return float("inf"), np.zeros_like(q)
    minv_g = cho_solve(factor, gram)
    value = float((np.trace(minv_g) - np.trace(gram)) / n)
    x = cho_solve(factor, minv_g.T)  # M^-1 G M^-1 (G, M symmetric)
    scaled_x = scaled @ x
    r = np.einsum("ou,ou->o", scaled_x, scaled)
    return value, (r[:, None] - 2.0 * scaled_x) / n


def z_gradient(q: np.ndarray, z: np.ndarray, grad: np.ndarray, epsilon: float) -> np.ndarray:
    """Gradient of L_avg with respect to z, back-propagated through the projection (Sec. 4, chain rule).

    In column u, q_ou = clip(r_ou + lambda_u, z_o, e^eps z_o): an entry at its bound moves with b_ou = 1 (lower)
    or e^eps (upper) times z_o, and lambda_u moves to keep the column sum at 1, by -b_ou / F_u per unit of z_o
    (F_u free entries). So dL/dz_o = sum_u b_ou (grad_ou - mean of grad over the free entries of column u).
    (Collecting only grad_ou at the bounds, without the lambda term, lets the column-constant part of the
    gradient, which the projection removes from Q, push z; our runs found it worse at eps <= 2.)
    """
    e = np.exp(epsilon)
    bound = (q == z[:, None]) + e * (q == (e * z)[:, None])
    free = bound == 0
    count = free.sum(axis=0)
    mean_free = np.where(count > 0, (grad * free).sum(axis=0) / np.maximum(count, 1), grad.mean(axis=0))
    return (bound * (grad - mean_free)).sum(axis=1)


@dataclass(frozen=True)
class _State:
    q: np.ndarray
    z: np.ndarray
    value: float


def _start(q: np.ndarray, gram: np.ndarray) -> _State:
    """A feasible strategy as a starting state: z_o = the smallest entry of row o."""
    return _State(q, q.min(axis=1), objective_and_gradient(q, gram)[0])


def _descend(
    state: _State, gram: np.ndarray, eps: float, step: float, iters: int, halve_every: int
) -> tuple[_State, bool, int]:
    """`iters` projected gradient steps from `state` (Alg. 2): the best state seen (smallest L_avg), whether the
    descent failed (non-finite objective, or z left no feasible box: the step is too large), and the steps taken."""
    e = np.exp(eps)
    z_step = step / (state.q.shape[1] * e)  # z moves more slowly than Q (Sec. 4)
    q, z = state.q, state.z
    best = state
    for t in range(1, iters + 2):
        value, grad = objective_and_gradient(q, gram)
        if not np.isfinite(value):
            return best, True, t - 1
        if value < best.value:
            best = _State(q, z, value)
        if t > iters:
            break
        z = np.maximum(z - z_step * z_gradient(q, z, grad, eps), 0.0)
        used = z > _Z_FLOOR  # outputs that (almost) never occur any more
        q, z, grad = q[used], z[used], grad[used]
        if z.sum() > 1.0 or e * z.sum() < 1.0:
            return best, True, t
        q = project_bounded_simplex(q - step * grad, z, e * z)
        if t % halve_every == 0:
            step, z_step = step / 2, z_step / 2
    return best, False, iters


@dataclass(frozen=True)
class _Schedule:
    iters: int
    trial_iters: int
    trial_steps: int
    halve_every: int


def _search_and_descend(start: _State, gram: np.ndarray, eps: float, plan: _Schedule) -> tuple[_State, float, int]:
    """Step-size search then a long run (Sec. 4): the best state, the chosen step and the iterations used.

    From step 1, halve until `trial_iters` steps run without failure; run trials at that step and its next
    `trial_steps - 1` halvings from `start`; continue the best trial for `iters` steps.
    """
    step, used = 1.0, 0
    while True:
        first, failed, taken = _descend(start, gram, eps, step, plan.trial_iters, plan.halve_every)
        used += taken
        if not failed:
            break
        step /= 2
        if step < 1e-30:
            raise LDPError("strategy optimisation failed at every step size")
    trials = [(first, step)]
    for j in range(1, plan.trial_steps):
        trial, failed, taken = _descend(start, gram, eps, step / 2**j, plan.trial_iters, plan.halve_every)
        used += taken
        if not failed:
            trials.append((trial, step / 2**j))
    best, step = min(trials, key=lambda trial: trial[0].value)
    best, _, taken = _descend(best, gram, eps, step, plan.iters, plan.halve_every)
    return best, step, used + taken


def initial_strategy(n: int, epsilon: float, outputs: int, rng: np.random.Generator) -> np.ndarray:
    """Random start: Q uniform in [0, 1), z_o = (1/(m e^eps) + 1/m) / 2, Q projected onto the box (Sec. 4)."""
    e = np.exp(check_epsilon(epsilon))
    z = np.full(outputs, (1.0 / e + 1.0) / (2.0 * outputs))
    return project_bounded_simplex(rng.random((outputs, n)), z, e * z)


@dataclass(frozen=True)
class OptimizationResult:
    """The optimised eps-LDP strategy (m x n) and how it was found.

    `start` is "random" or the baseline the winning run started from; `random_start_worst_case` is the worst-case
    variance the random start alone reached (the paper's method), kept for honest comparisons.
    """

    q: np.ndarray
    worst_case_variance: float
    average_case_variance: float
    start: str
    random_start_worst_case: float
    step: float
    iterations: int


def optimize_strategy(
    workload: Workload,
    epsilon: float,
    *,
    seed: int = 0,
    outputs: int | None = None,
    iters: int = 250,
    trial_iters: int = 50,
    trial_steps: int = 3,
    halve_every: int = 50,
    warm_start: bool = True,
    blas_threads: int | None = 1,
) -> OptimizationResult:
    """An eps-LDP strategy with small variance on the workload; deterministic given `seed`.

    Minimises L_avg by projected gradient descent from a random m x n start (m = `outputs`, default 4n), with the
    step-size search of `_search_and_descend`. With `warm_start`, also descends from the baseline with the
    smallest worst-case variance (the paper's alternative initialisation, Sec. 4) and returns whichever run has
    the smaller worst-case variance, the quantity the mechanism is judged by (Sec. 3): at large eps the random
    start can stall a few percent above randomized response, which is near-optimal there.

    BLAS runs on `blas_threads` threads (None: the library default). Each iteration multiplies small matrices
    (m x n by n x n), where extra threads only contend: on our shared 2-core machine n = 256 took 45 s on one
    thread and over 4 minutes with the default.
    """
    with threadpool_limits(limits=blas_threads, user_api="blas"):
        return _optimize(
            workload, epsilon, seed, outputs, _Schedule(iters, trial_iters, trial_steps, halve_every), warm_start
        )


def _optimize(
    workload: Workload, epsilon: float, seed: int, outputs: int | None, plan: _Schedule, warm_start: bool
) -> OptimizationResult:
    eps = check_epsilon(epsilon)
    m = OUTPUTS_PER_TYPE * workload.n if outputs is None else int(outputs)
    if m < workload.n:
        raise LDPError(f"need at least n = {workload.n} outputs to answer every workload, got {m}")
    rng = np.random.default_rng(seed)
    starts = {"random": _start(initial_strategy(workload.n, eps, m, rng), workload.gram)}
    if warm_start:
        baselines = {name: _start(q, workload.gram) for name, q in baseline_strategies(workload, eps).items()}
        scored = {name: evaluate(start.q, workload).worst_case_variance for name, start in baselines.items()}
        smooth = [name for name in baselines if np.isfinite(baselines[name].value)]  # L_avg needs M invertible
        if smooth:
            name = min(smooth, key=lambda key: scored[key])
            starts[name] = baselines[name]
    runs = {}
    for name, start in starts.items():
        try:
            state, step, used = _search_and_descend(start, workload.gram, eps, plan)
        except LDPError:
            if name == "random":
                raise
            continue
        q = check_strategy(state.q, eps)
        runs[name] = (q, factorize(q, workload.gram), step, used)
    best = min(runs, key=lambda key: runs[key][1].worst_case_variance)
    q, fact, step, _ = runs[best]
    return OptimizationResult(
        q=q,
        worst_case_variance=fact.worst_case_variance,
        average_case_variance=fact.average_case_variance,
        start=best,
        random_start_worst_case=runs["random"][1].worst_case_variance,
        step=step,
        iterations=sum(run[3] for run in runs.values()),
    )
