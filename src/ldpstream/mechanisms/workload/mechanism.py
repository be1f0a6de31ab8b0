"""The workload factorization mechanism as an `ldpstream.mechanisms.base.Mechanism` (McKenna et al., Def. 3.1).

Privacy (Prop. 2.2): a device of type u reports output o with probability Q[o, u], and nothing else. For every
output o and types u, u', Pr[o | u] / Pr[o | u'] = Q[o, u] / Q[o, u'] <= max_u Q[o, u] / min_u Q[o, u] <= e^eps,
which the constructor checks for every row of Q (up to `LDP_RTOL` of floating-point rounding); an output with
probability zero for one type has probability zero for all. The estimate V* y is post-processing of the reports.
The sampler is the inverse CDF of the column, so it emits only outputs of positive probability for that type.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO, ClassVar

import numpy as np

from ldpstream.mechanisms.base import Column, Estimate, LDPError, Mechanism, Reports, ReportSchema, check_epsilon
from ldpstream.mechanisms.workload.strategy import check_strategy, factorize
from ldpstream.mechanisms.workload.workloads import Workload

_ROWS_PER_CHUNK = 4096  # workload rows per block when forming (V* o V*) Q, to bound memory for large workloads


def content_hash(q: np.ndarray, w: np.ndarray, epsilon: float) -> str:
    """sha256 over the shapes and little-endian float64 bytes of Q, W and epsilon: pins a strategy version."""
    digest = hashlib.sha256()
    for array in (np.asarray(q, dtype="<f8"), np.asarray(w, dtype="<f8"), np.asarray([epsilon], dtype="<f8")):
        digest.update(np.asarray(array.shape, dtype="<i8").tobytes())
        digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()


class FactorizationMechanism(Mechanism):
    """Answers a workload W (p x n) from reports drawn from an eps-LDP strategy Q (m x n): estimate V* y / N.

    Reports: {"output": int64 in [0, m)}. Statistics: the count of every output (additive). The estimate is the
    workload answers as fractions of the N reports, unbiased, with the closed-form standard error of each query.

    Examples
    --------
    >>> import numpy as np
    >>> from ldpstream.mechanisms.workload.baselines import randomized_response
    >>> mech = FactorizationMechanism(randomized_response(4, 2.0), np.tril(np.ones((4, 4))), 2.0)
    >>> rng = np.random.default_rng(0)
    >>> stats = mech.accumulate(mech.perturb(rng.integers(0, 4, 100_000), rng))
    >>> est = mech.estimate(stats)
    >>> est.n, np.round(est.value, 2).tolist(), bool(est.stderr[-1] < 1e-9)
    (100000, [0.25, 0.5, 0.75, 1.0], True)
    """

    name: ClassVar[str] = "factorization"

    def __init__(
        self,
        strategy: np.ndarray,
        workload: np.ndarray | Workload,
        epsilon: float,
        labels: Sequence[object] | np.ndarray | None = None,
    ) -> None:
        self.epsilon = check_epsilon(epsilon)
        q = check_strategy(strategy, self.epsilon).copy()
        w = workload.matrix() if isinstance(workload, Workload) else np.asarray(workload, dtype=np.float64)
        if w.ndim != 2 or w.shape[1] != q.shape[1] or not np.isfinite(w).all():
            raise LDPError(f"workload must be a finite p x {q.shape[1]} matrix, got shape {w.shape}")
        self.q, self.w = q, np.array(w, dtype=np.float64)
        self.q.setflags(write=False)
        self.w.setflags(write=False)
        self.labels = None if labels is None else np.asarray(labels)
        if self.labels is not None and (self.labels.shape != (self.n,) or len(np.unique(self.labels)) != self.n):
            raise LDPError(f"labels must be {self.n} distinct values, got shape {self.labels.shape}")
        self._recon = factorize(q, w.T @ w).recon  # raises if W is not in Q's row space
        self._second_moment: np.ndarray | None = None
        m, n = q.shape
        # inverse-CDF table: type u's cumulative column, offset by u so that all types form one sorted array
        cdf = np.cumsum(q, axis=0)
        self._last = m - 1 - np.argmax(q[::-1] > 0, axis=0)  # last output of positive probability per type
        cdf[np.arange(m)[:, None] >= self._last[None, :]] = 1.0
        self._cdf_flat = (cdf.T + np.arange(n)[:, None]).ravel()
        self.hash = content_hash(self.q, self.w, self.epsilon)

    @classmethod
    def optimized(
        cls,
        workload: Workload,
        epsilon: float,
        seed: int = 0,
        labels: Sequence[object] | np.ndarray | None = None,
    ) -> FactorizationMechanism:
        """The mechanism with a strategy optimised for the workload (`optimize_strategy`; deterministic per seed)."""
        from ldpstream.mechanisms.workload.optimize import optimize_strategy  # SciPy: loaded where optimised

        return cls(optimize_strategy(workload, epsilon, seed=seed).q, workload, epsilon, labels)

    @property
    def n(self) -> int:
        """Number of types (domain size)."""
        return self.q.shape[1]

    @property
    def outputs(self) -> int:
        """Number of outputs m of the strategy."""
        return self.q.shape[0]

    @property
    def schema(self) -> ReportSchema:
        return ReportSchema((Column("output", "int64", 0, self.outputs - 1),))

    @property
    def stats_size(self) -> int:
        return self.outputs

    def type_index(self, values: np.ndarray) -> np.ndarray:
        """The type index (0..n-1) of every value: the value itself, or its position in `labels`."""
        values = np.asarray(values)
        if values.ndim != 1:
            raise LDPError(f"values must be 1-D, got shape {values.shape}")
        if self.labels is None:
            if values.size and not np.issubdtype(values.dtype, np.integer):
                if not np.issubdtype(values.dtype, np.floating) or (values != np.floor(values)).any():
                    raise LDPError("values must be integer type indices when the mechanism has no labels")
            index = values.astype(np.int64)
            if ((index < 0) | (index >= self.n)).any():
                raise LDPError(f"values must lie in [0, {self.n}), got {index.min()}..{index.max()}")
            return index
        order = np.argsort(self.labels)
        try:
            pos = np.searchsorted(self.labels, values, sorter=order)
        except TypeError as exc:
            raise LDPError(f"values of dtype {values.dtype} cannot be compared with the labels") from exc
        index = order[np.minimum(pos, self.n - 1)]
        unknown = self.labels[index] != values
        if np.any(unknown):
            raise LDPError(f"values not in the labels: {np.unique(values[unknown])[:5].tolist()}")
        return index

    def perturb(self, values: np.ndarray, rng: np.random.Generator) -> Reports:
        """Each device draws its output from its type's column of Q (inverse CDF, vectorised over devices)."""
        index = self.type_index(values)
        keys = index + rng.random(index.size)
        output = np.searchsorted(self._cdf_flat, keys, side="right") - index * self.outputs
        # index + u may round up to index + 1 (probability < 2^-43): that is the type's last possible output
        return {"output": np.minimum(output, self._last[index]).astype(np.int64)}

    def accumulate(self, reports: Reports) -> np.ndarray:
        """Count of every output (length m)."""
        bad = self.schema.violations(reports)
        if bad.size and (bad != "").any():
            raise LDPError(f"invalid reports: {bad[bad != ''][0]}")
        output = np.asarray(reports["output"]).astype(np.int64)
        return np.bincount(output, minlength=self.outputs).astype(np.float64)

    def _moments(self) -> np.ndarray:
        """(V* o V*) Q (p x n): row i, column u is E[(V* e_o)_i^2] for one user of type u."""
        if self._second_moment is None:
            blocks = [
                ((self.w[i : i + _ROWS_PER_CHUNK] @ self._recon) ** 2) @ self.q
                for i in range(0, self.w.shape[0], _ROWS_PER_CHUNK)
            ]
            self._second_moment = np.vstack(blocks)
        return self._second_moment

    def user_variance(self) -> np.ndarray:
        """Variance of one user's term V* e_o of every query, per type (p x n): ((V* o V*) Q)[i, u] - W[i, u]^2.

        This is Thm. 3.3 for one query and one user; a sum over the users of their types gives the total.
        """
        return np.maximum(self._moments() - self.w * self.w, 0.0)

    def query_variance(self, fractions: np.ndarray, n_reports: float) -> np.ndarray:
        """Variance of every estimated workload answer (as a fraction) for type distribution `fractions`:
        Var_i = (1/N) sum_u pi_u [((V* o V*) Q)[i, u] - W[i, u]^2]  (Thm. 3.3, divided by N^2)."""
        return self.user_variance() @ np.asarray(fractions, dtype=np.float64) / n_reports

    def reconstruction(self) -> np.ndarray:
        """V* (p x m): a report of output o contributes column o to the (unnormalised) workload answers."""
        return self.w @ self._recon

    def _type_fractions(self, stats: np.ndarray) -> tuple[float, np.ndarray]:
        """N and the least-squares estimate (Q^T D^-1 Q)^+ Q^T D^-1 y / N of the type fractions."""
        y = np.asarray(stats, dtype=np.float64)
        if y.shape != (self.outputs,) or not np.isfinite(y).all() or (y < 0).any():
            raise LDPError(f"statistics must be {self.outputs} non-negative finite counts, got shape {y.shape}")
        total = float(y.sum())
        if total <= 0:
            raise LDPError("no reports to estimate from")
        return total, self._recon @ (y / total)

    def estimate(self, stats: np.ndarray) -> Estimate:
        """Workload answers V* y / N as fractions, with standard errors from the plug-in of the estimated x."""
        total, x_hat = self._type_fractions(stats)
        pi = np.clip(x_hat, 0.0, None)  # a valid distribution, for the variance only
        pi = pi / pi.sum() if pi.sum() > 0 else np.full(self.n, 1.0 / self.n)
        return Estimate(int(round(total)), self.w @ x_hat, np.sqrt(self.query_variance(pi, total)))

    def consistent_answers(self, stats: np.ndarray) -> np.ndarray:
        """WNNLS answers W x with x >= 0 closest to the unbiased ones (Appendix A): biased, no closed-form stderr."""
        _, x_hat = self._type_fractions(stats)
        from ldpstream.mechanisms.workload.postprocess import wnnls  # SciPy: loaded where estimates are made

        return self.w @ wnnls(self.w.T @ self.w, x_hat)

    def save(self, path: str | Path | BinaryIO) -> str:
        """Write Q, W, epsilon, labels and the content hash as a .npz file (to a path or an open binary file);
        returns the hash."""
        labels = np.array([]) if self.labels is None else self.labels  # empty: no labels (a domain has >= 2)
        if isinstance(path, str | Path):
            with open(path, "wb") as handle:
                return self.save(handle)
        np.savez_compressed(path, q=self.q, w=self.w, epsilon=np.asarray(self.epsilon), hash=np.asarray(self.hash),
                            labels=labels)
        return self.hash

    @classmethod
    def load(cls, path: str | Path | BinaryIO, expected_hash: str | None = None) -> FactorizationMechanism:
        """Read a mechanism saved by `save` (from a path or an open binary file); LDPError if its content does not
        match its stored (or expected) hash. The hashes are checked first: content that is not the one pinned
        costs no factorization."""
        name = str(path) if isinstance(path, str | Path) else "a binary file"
        try:
            with np.load(path, allow_pickle=False) as data:
                q, w, eps, stored = data["q"], data["w"], float(data["epsilon"]), str(data["hash"])
                labels = data["labels"] if data["labels"].size else None
            actual = content_hash(q, w, eps)
        except (OSError, KeyError, ValueError) as exc:
            raise LDPError(f"cannot read a factorization strategy from {name!r}: {exc}") from exc
        for label, wanted in (("stored", stored), ("expected", expected_hash)):
            if wanted is not None and wanted != actual:
                raise LDPError(f"strategy file {name!r} does not match its {label} hash {wanted[:12]}...")
        return cls(q, w, eps, labels)
