"""Generalized randomized response, a.k.a. direct encoding (004 "Direct Encoding"; 002, GRR).

Each user reports her own code with probability p = e^eps / (e^eps + K - 1) and each other code with probability
q = 1 / (e^eps + K - 1). Support(y) = {y}, so the pure estimator applies with these p and q, and
n * Var[f_hat] = (e^eps + K - 2) / (e^eps - 1)^2 for a rare value (004 Table 1, DE).

Privacy (004, DE): a report y has probability p or q under any true value, so the ratio of its probabilities
under two true values is at most p / q = e^eps.
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np

from ldpstream.mechanisms.base import Column, Reports, ReportSchema
from ldpstream.mechanisms.frequency.base import FrequencyOracle, randomized_response


class GRR(FrequencyOracle):
    """Generalized randomized response over K codes; a report is one code {"value": uint32 (n,)}.

    Examples
    --------
    >>> import numpy as np
    >>> oracle = GRR(2.0, 4)
    >>> reports = oracle.perturb(np.array([0, 1, 2, 3, 3]), np.random.default_rng(1))
    >>> reports["value"].shape, int(oracle.accumulate(reports)[-1])
    ((5,), 5)
    >>> round(oracle.worst_case_variance(), 4)  # (e^2 + 2) / (e^2 - 1)^2
    0.23
    """

    name: ClassVar[str] = "grr"
    auto_rank: ClassVar[int] = 10  # aggregation: one bincount

    @property
    def p(self) -> float:
        return math.exp(self.epsilon) / (math.exp(self.epsilon) + self.domain_size - 1)  # 004, DE

    @property
    def q(self) -> float:
        return 1.0 / (math.exp(self.epsilon) + self.domain_size - 1)  # 004, DE

    @property
    def report_bits(self) -> int:
        return math.ceil(math.log2(self.domain_size))

    @property
    def schema(self) -> ReportSchema:
        return ReportSchema((Column("value", "uint32", 0, self.domain_size - 1),))

    def _sample(self, codes: np.ndarray, rng: np.random.Generator) -> Reports:
        return {"value": randomized_response(codes, self.domain_size, self.p, rng)}

    def _support_counts(self, reports: Reports) -> np.ndarray:
        return np.bincount(np.asarray(reports["value"], dtype=np.intp), minlength=self.domain_size)

    def _support_matrix(self, reports: Reports) -> np.ndarray:
        return np.asarray(reports["value"])[:, None] == np.arange(self.domain_size)

    def _log_pmf(self, reports: Reports, codes: np.ndarray) -> np.ndarray:
        same = np.asarray(reports["value"])[:, None] == codes[None, :]
        return np.where(same, math.log(self.p), math.log(self.q))
