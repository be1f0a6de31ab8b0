"""Strategy matrices and the variance of a workload factorization (McKenna et al., Sec. 3 and 5).

A strategy Q (m x n) is an epsilon-LDP mechanism on n types with m outputs: Q[o, u] = Pr[type u reports o].
Each column is a distribution, and every row stays within a factor e^eps of itself (Prop. 2.2), so the likelihood
ratio of any output between any two types is at most e^eps: the privacy argument of every factorization mechanism.
With the response vector y (counts per output), V y is an unbiased estimate of W x whenever V Q = W.

All variance functions take the workload through its Gram matrix G = W^T W; see
`ldpstream.mechanisms.workload.workloads`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ldpstream.mechanisms.base import LDPError, check_epsilon
from ldpstream.mechanisms.workload.workloads import Workload

ALPHA = 0.01  # target normalised variance of the sample complexity (our comparisons' value)
LDP_RTOL = 1e-9  # floating-point slack of the exact row-ratio check (a relative privacy loss of 1e-9)
_RANK_RTOL = 1e-10  # eigenvalues of Q^T D^-1 Q below this fraction of the largest are treated as zero
# Q^T D^-1 Q with a reciprocal condition number at or below this counts as singular (`normal_cholesky`): 4096 ulps.
SINGULAR_RCOND = 2.0**12 * float(np.finfo(np.float64).eps)


def check_distributions(q: np.ndarray, atol: float = 1e-9) -> np.ndarray:
    """Return Q as float64 if it is a finite m x n matrix whose columns are probability distributions, else raise."""
    q = np.asarray(q, dtype=np.float64)
    if q.ndim != 2 or q.shape[0] < 1 or q.shape[1] < 1:
        raise LDPError(f"a strategy matrix must be 2-D (outputs x types), got shape {q.shape}")
    if not np.isfinite(q).all():
        raise LDPError("the strategy matrix has non-finite entries")
    if (q < 0).any():
        raise LDPError("the strategy matrix has negative probabilities")
    sums = q.sum(axis=0)
    if not np.allclose(sums, 1.0, rtol=0.0, atol=atol):
        worst = int(np.argmax(np.abs(sums - 1.0)))
        raise LDPError(f"column {worst} of the strategy matrix sums to {sums[worst]!r}, not 1")
    return q


def privacy_loss(q: np.ndarray) -> float:
    """The smallest epsilon Q satisfies: max over rows of log(max / min); inf if a row mixes zero and non-zero."""
    q = np.asarray(q, dtype=np.float64)
    used = q.max(axis=1) > 0  # an all-zero row is an output that never occurs
    hi, lo = q[used].max(axis=1), q[used].min(axis=1)
    if (lo == 0).any():
        return float("inf")
    return float(np.log(hi / lo).max())


def check_ldp(q: np.ndarray, epsilon: float) -> None:
    """Raise LDPError unless max_u Q[o, u] <= e^eps min_u Q[o, u] in every row o (Prop. 2.2), up to `LDP_RTOL`."""
    eps = check_epsilon(epsilon)
    q = np.asarray(q, dtype=np.float64)
    used = q.max(axis=1) > 0
    hi, lo = q[used].max(axis=1), q[used].min(axis=1)
    bad = hi > np.exp(eps) * lo * (1.0 + LDP_RTOL)
    if bad.any():
        row = int(np.flatnonzero(used)[np.argmax(bad)])
        raise LDPError(f"strategy row {row} violates {eps}-LDP: max {hi[bad][0]!r} > e^eps * min {lo[bad][0]!r}")


def check_strategy(q: np.ndarray, epsilon: float) -> np.ndarray:
    """Return Q as float64 if it is a valid epsilon-LDP strategy matrix (distributions, row ratios), else raise."""
    q = check_distributions(q)
    check_ldp(q, epsilon)
    return q


@dataclass(frozen=True)
class Factorization:
    """Q with its optimal reconstruction for a workload Gram matrix G (Thm. 3.7), in the n x n form that scales.

    `recon` = (Q^T D^-1 Q)^+ Q^T D^-1 (n x m): V* = W recon, and recon y is the least-squares estimate of x.
    """

    q: np.ndarray
    recon: np.ndarray
    output_norms: np.ndarray  # sum_i V*[i, o]^2 for every output o
    gram: np.ndarray

    @property
    def type_variances(self) -> np.ndarray:
        """c_u = sum_o ||V*[:, o]||^2 Q[o, u] - sum_i W[i, u]^2: total variance one user of type u adds (Thm. 3.3)."""
        return self.q.T @ self.output_norms - np.diag(self.gram)

    @property
    def worst_case_variance(self) -> float:
        """L_worst = max_u c_u, total variance per user when all users share the worst type (Cor. 3.4)."""
        return float(self.type_variances.max())

    @property
    def average_case_variance(self) -> float:
        """L_avg = mean_u c_u, total variance per user averaged over the types (Cor. 3.5)."""
        return float(self.type_variances.mean())


def factorize(q: np.ndarray, gram: np.ndarray) -> Factorization:
    """The optimal reconstruction of the workload with Gram matrix G from strategy Q.

    V* = W (Q^T D^-1 Q)^+ Q^T D^-1 with D = diag(Q 1) (Thm. 3.7; the weighted least squares solution).
    Raises LDPError if W's rows are not in Q's row space (then no V with V Q = W exists).
    """
    q = np.asarray(q, dtype=np.float64)
    gram = np.asarray(gram, dtype=np.float64)
    if gram.shape != (q.shape[1], q.shape[1]):
        raise LDPError(f"workload has {gram.shape[0]} types, strategy has {q.shape[1]}")
    row_sums = q.sum(axis=1)
    weights = np.divide(1.0, row_sums, out=np.zeros_like(row_sums), where=row_sums > 0)  # never-used outputs: 0
    scaled = q * weights[:, None]  # D^-1 Q
    evals, evecs = np.linalg.eigh(q.T @ scaled)
    keep = evals > _RANK_RTOL * evals[-1]
    pinv = (evecs[:, keep] / evals[keep]) @ evecs[:, keep].T
    projection = evecs[:, keep] @ evecs[:, keep].T
    if np.linalg.norm(gram - gram @ projection) > 1e-8 * max(float(np.linalg.norm(gram)), 1.0):
        raise LDPError("the strategy cannot answer this workload: W's rows are not in the row space of Q")
    recon = pinv @ scaled.T
    # sum_i V*[i, o]^2 = (V*^T V*)[o, o] = row o of D^-1 Q . B . row o of D^-1 Q,  B = M^+ G M^+
    b = pinv @ gram @ pinv
    output_norms = np.einsum("ou,uv,ov->o", scaled, b, scaled, optimize=True)
    return Factorization(q, recon, output_norms, gram)


def reconstruction(q: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The optimal V* (p x m) for strategy Q and workload matrix W, so that V* Q = W (Thm. 3.7)."""
    w = np.asarray(w, dtype=np.float64)
    return w @ factorize(q, w.T @ w).recon


def check_factorization(v: np.ndarray, q: np.ndarray, w: np.ndarray, rtol: float = 1e-9) -> None:
    """Raise LDPError unless V Q = W to `rtol` of W's largest entry: then V y is unbiased for W x (Def. 3.1)."""
    w = np.asarray(w, dtype=np.float64)
    error = float(np.abs(np.asarray(v) @ np.asarray(q) - w).max())
    if error > rtol * max(float(np.abs(w).max()), 1e-300):
        raise LDPError(f"V Q differs from W by up to {error!r}: not a factorization of the workload")


def normal_cholesky(q: np.ndarray) -> tuple[np.ndarray, tuple[np.ndarray, bool] | None]:
    """D^-1 Q, and the Cholesky factor of M = Q^T D^-1 Q for `cho_solve`, or None when M is singular.

    Singular means: LAPACK's estimate of M's reciprocal condition number (1-norm, `dpocon`) is at most
    `SINGULAR_RCOND`, or the factorisation breaks down. A Q whose rows span fewer than n dimensions (the Fourier
    strategy of order 3 on 4 attributes) gives an M that is singular in exact arithmetic; rounding leaves it with
    an rcond of a few ulps or a negative pivot, and which of the two depends on the BLAS kernels. The tolerance
    classifies it the same way everywhere: for n <= 128 and eps >= 0.1 the rank-deficient baselines have
    rcond < 1e-16 and the others rcond > 1e-7, and an M above the tolerance still gets about 3.6 correct digits
    from the Cholesky solve (relative error ~ ulp / rcond).
    """
    from scipy.linalg import cho_factor  # SciPy is loaded where strategies are optimised, not on a device
    from scipy.linalg.lapack import dpocon

    scaled = q / q.sum(axis=1, keepdims=True)
    m = q.T @ scaled
    try:
        factor = cho_factor(m)
    except np.linalg.LinAlgError:
        return scaled, None
    rcond, _ = dpocon(factor[0], float(np.abs(m).sum(axis=0).max()), uplo="L" if factor[1] else "U")
    return scaled, (factor if rcond > SINGULAR_RCOND else None)


def average_case_objective(q: np.ndarray, gram: np.ndarray) -> float:
    """L_avg(Q) = trace[(Q^T D^-1 Q)^-1 W^T W] / n - trace(W^T W) / n (Thm. 3.8), inf if Q^T D^-1 Q is singular
    (`normal_cholesky`)."""
    from scipy.linalg import cho_solve

    _, factor = normal_cholesky(q)
    if factor is None:
        return float("inf")
    n = q.shape[1]
    return float(np.trace(cho_solve(factor, gram)) / n - np.trace(gram) / n)


def sample_complexity(worst_case_variance: float, num_queries: int, alpha: float = ALPHA) -> float:
    """N(alpha) = L_worst / (p alpha): users needed for normalised worst-case variance alpha (Cor. 5.4)."""
    return float(worst_case_variance) / (num_queries * alpha)


def svd_lower_bound(workload: Workload, epsilon: float) -> float:
    """[(sum_k sigma_k)^2 / e^eps - ||W||_F^2] / n <= L_avg <= L_worst of every eps-LDP factorization (Thm. 5.5).

    Derivation (checked here, the text lost it): with A = D^-1/2 Q, Cauchy-Schwarz gives
    (tr G^1/2)^2 <= tr[(A^T A)^-1 G] tr(A^T A), and tr(A^T A) = sum_o sum_u Q[o,u]^2 / d_o <= sum_o max_u Q[o,u]
    <= e^eps sum_o Q[o, u0] = e^eps by the row-ratio constraint.
    """
    eps = check_epsilon(epsilon)
    sigma = workload.singular_values()
    return (sigma.sum() ** 2 / np.exp(eps) - workload.frobenius_squared) / workload.n


@dataclass(frozen=True)
class StrategyReport:
    """How well a strategy answers a workload: per-user variances and the sample complexity at `ALPHA`."""

    worst_case_variance: float
    average_case_variance: float
    sample_complexity: float

    def as_dict(self) -> dict[str, float]:
        return {
            "sample_complexity": self.sample_complexity,
            "worst_case_variance": self.worst_case_variance,
            "average_case_variance": self.average_case_variance,
        }


def evaluate(q: np.ndarray, workload: Workload, alpha: float = ALPHA) -> StrategyReport:
    """Worst-case and average-case variance and sample complexity of Q on the workload, with the optimal V*."""
    fact = factorize(q, workload.gram)
    worst = fact.worst_case_variance
    return StrategyReport(worst, fact.average_case_variance, sample_complexity(worst, workload.num_queries, alpha))
