"""WNNLS: workload non-negative least squares post-processing (McKenna et al., Appendix A).

Find x >= 0 minimising ||W x - a||^2 for the unbiased workload answers a = V* y, then answer W x. Consistent (the
answers of a real, non-negative data vector) and often much more accurate in the high-privacy / low-data regime,
but biased, so it has no closed-form standard error: keep the unbiased answers beside it. Post-processing of the
reports, so it costs no privacy.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import nnls

from ldpstream.mechanisms.base import LDPError


def wnnls(gram: np.ndarray, x_estimate: np.ndarray) -> np.ndarray:
    """The non-negative x minimising ||W x - W x_estimate||^2, from the Gram matrix G = W^T W alone.

    With R^T R = G (R = Lambda^1/2 U^T from G = U Lambda U^T), ||W (x - x_estimate)||^2 = ||R x - R x_estimate||^2,
    an n x n non-negative least squares problem, solved exactly by Lawson-Hanson's active set method (the paper
    uses L-BFGS-B; both minimise the same convex objective).
    """
    gram = np.asarray(gram, dtype=np.float64)
    target = np.asarray(x_estimate, dtype=np.float64)
    if gram.shape != (target.size, target.size) or not np.isfinite(target).all():
        raise LDPError(f"need an n x n Gram matrix and a finite estimate of length n, got {gram.shape}, {target.shape}")
    evals, evecs = np.linalg.eigh(gram)
    root = np.sqrt(np.clip(evals, 0.0, None))[:, None] * evecs.T
    solution, _ = nnls(root, root @ target, maxiter=50 * target.size)
    return solution
