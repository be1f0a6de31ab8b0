"""Two-stage (memoized) frequency oracles: L-GRR, L-OUE, L-OSUE, L-SUE (Arcolezi et al., "Improving the utility of
locally differentially private protocols for longitudinal and multidimensional frequency estimates", DCN 2022;
arXiv:2111.04636), on the machinery RAPPOR shares (`ldpstream.mechanisms.longitudinal.rappor`).

Stage 1, the permanent randomized response (PRR), is drawn once per (device, value) at eps_inf and memoized (a function
of the device secret and the value, `ldpstream.mechanisms.longitudinal.memo`); stage 2, the instantaneous randomized
response (IRR), perturbs the PRR afresh at every report. Each stage is a channel on a unit (the code for GRR, each bit
for unary encoding) with P[out = 1 | in = 1] = p_i and P[out = 1 | in = 0] = q_i (GRR: keep the code with p_i, any given
other code with q_i = (1 - p_i) / (K - 1)). Chained, a report supports the own value with probability p = p1 p2 + (1 -
p1) q2 and any other with q = q1 p2 + (1 - q1) q2, so one report is a pure protocol (004) with these p and q: the pure
estimator is unbiased and its closed-form variance exact for one window (`ldpstream.mechanisms.frequency.base`), with p
- q = (p1 - q1)(p2 - q2).

Privacy. Every report of a device about one value is a post-processing of its PRR, so any number of them is
eps_inf-LDP (eps_inf = ln(p1/q1) for GRR, ln(p1 (1 - q1) / (q1 (1 - p1))) for UE, 004). One report alone is the
chained channel: GRR chained with GRR is GRR(p, q), so eps_1 = ln(p / q); unary bits stay independent, and two
one-hot vectors differ in two bits, so eps_1 = ln(p (1 - q) / (q (1 - p))). Stage 2 is solved so that this is
exactly the requested eps_1 (tests/mechanisms/test_longitudinal.py enumerates the chained channels and checks both).

Second stage, derived here (E = e^eps_inf, e = e^eps_1, t_x = tanh(x / 2)):
- L-GRR (GRR, then GRR with q2 = (1 - p2)/(K - 1)): p = e q is linear in p2; with p1 = E / (E + K - 1),
      p2 = (e (E + K - 2) - K + 1) / ((E - 1)(e + K - 1)).
  Erratum: arXiv:2111.04636 and multi-freq-ldpy 0.2.5 (L_GRR.py) use p2 = (q1 - e p1) / (-p1 e + K q1 e - q1 e -
  p1 (K - 1) + q1), which agrees at K = 2 only; for K > 2 its chained channel is ln(p/q) < eps_1-LDP (K = 10,
  eps_inf = 2, eps_1 = 1: 0.699), private but noisier than the budget allows (tested).
- L-OSUE (OUE, then SUE: q2 = 1 - p2): with delta = 2 p2 - 1, p = 1/2 + delta (p1 - 1/2) and q likewise, and
  p1 = 1/2 makes the equation linear: p2 = (1 + t_eps1 / t_epsinf) / 2 = (e E - 1) / ((e + 1)(E - 1)).
- L-SUE (SUE, then SUE): a bit passed through two binary symmetric channels keeps correlation delta1 delta2, and
  SUE at budget x has delta = tanh(x / 4): p2 = (1 + tanh(eps_1 / 4) / tanh(eps_inf / 4)) / 2.
- L-OUE (OUE, then OUE: p2 = 1/2): with c = 1 - q1 = E / (E + 1) and y = q2, the equation p (1 - q) = e q (1 - p) is
      4 c (e - 1) y^2 + 2 (1 - e (4 c - 1)) y + (1 + c) - 3 e (1 - c) = 0,
  positive at y = 0 iff e < (2E + 1)/3 and equal to 2 - 2e < 0 at y = 1/2; the root in (0, 1/2) is the smaller one.
  So L-OUE reaches at most eps_1 < ln((2 e^eps_inf + 1) / 3) (at q2 -> 0), a bound the paper does not state
  (multi-freq-ldpy raises "Probabilities are negative" there).
L-OSUE and L-SUE's p2 and L-OUE's q2 agree with multi-freq-ldpy 0.2.5's to 1e-13 (checked once by hand at four
budget pairs; the tests check the budgets themselves by enumeration, and bench_mechanisms compares the MSEs).
"""

from __future__ import annotations

import math
from abc import abstractmethod
from typing import Any, ClassVar

import numpy as np

from ldpstream.mechanisms.base import LDPError, Reports
from ldpstream.mechanisms.frequency.base import (
    FrequencyOracle,
    check_codes,
    check_domain_size,
    check_frequency_epsilon,
    randomized_response,
    randomized_response_from_uniform,
    sample_in_chunks,
)
from ldpstream.mechanisms.frequency.grr import GRR
from ldpstream.mechanisms.frequency.unary import UnaryEncoding
from ldpstream.mechanisms.longitudinal.base import Longitudinal, check_budgets, check_secrets
from ldpstream.mechanisms.longitudinal.memo import TAG_PERMANENT, draw_secrets, keyed_bits, keyed_uniform


def chain(p1: float, q1: float, p2: float, q2: float) -> tuple[float, float]:
    """(p, q) of stage 1 followed by stage 2: p = p1 p2 + (1 - p1) q2, q = q1 p2 + (1 - q1) q2."""
    return p1 * p2 + (1 - p1) * q2, q1 * p2 + (1 - q1) * q2


def unary_epsilon(p: float, q: float) -> float:
    """ln(p (1 - q) / (q (1 - p))): the budget of independent bits with P[1 | own] = p, P[1 | other] = q (004, UE)."""
    return math.log(p / q) + math.log1p(-q) - math.log1p(-p)


def permanent_bits(
    secrets: np.ndarray, codes: np.ndarray, own: np.ndarray, width: int, p_own: float, p_other: float
) -> np.ndarray:
    """(n, width) bool memoized per (secret, code): Bernoulli(p_own) at the positions `own` (n, s), else p_other."""
    bits, uniforms = keyed_bits(secrets, codes, width, p_other, uniforms=own.shape[1])
    rows = np.arange(codes.shape[0]) * width
    bits.reshape(-1)[rows[:, None] + own] = uniforms < p_own  # flat: a 2-d fancy assignment costs several times more
    return bits


def instantaneous_bits(bits: np.ndarray, p_set: float, p_clear: float, rng: np.random.Generator) -> np.ndarray:
    """Fresh bits: 1 with probability p_set where `bits` is set, p_clear where it is clear; one random byte each.

    As `ldpstream.mechanisms.frequency.unary.bernoulli_bits` with a threshold per entry: byte B gives 1{B < top} with
    top = floor(256 p) of the entry's p, and B = top (1 in 256) is decided by a uniform V as 1{V < 256 p - top}. A p of
    1 has top = 255 and 256 p - top = 1, so every byte gives 1.
    """
    tops = [min(math.floor(256 * p), 255) for p in (p_clear, p_set)]
    rests = np.array([256 * p - top for p, top in zip((p_clear, p_set), tops, strict=True)])
    count = bits.size
    byte = rng.integers(0, 1 << 32, size=-(-count // 4), dtype=np.uint32).view(np.uint8)[:count].reshape(bits.shape)
    # top_clear + bit (top_set - top_clear) in uint8 arithmetic, modulo 256 (np.where costs 10x more per byte)
    threshold = bits.view(np.uint8) * np.uint8((tops[1] - tops[0]) % 256) + np.uint8(tops[0])
    out = byte < threshold
    ties = np.flatnonzero(byte == threshold)
    out.flat[ties] = rng.random(ties.size) < rests[bits.flat[ties].view(np.uint8)]
    return out


class TwoStageOracle(Longitudinal, FrequencyOracle):
    """A frequency oracle whose report is a fresh stage-2 response to a memoized stage-1 response (module docstring).

    The subclass sets the stage probabilities (p1, q1) and (p2, q2) and says how to draw each stage.
    """

    kind: ClassVar = "frequency"

    def __init__(
        self,
        epsilon_lifetime: float,
        epsilon_first: float,
        domain_size: int,
        first: tuple[float, float],
        second: tuple[float, float],
    ) -> None:
        super().__init__(epsilon_first, domain_size)
        self.epsilon_lifetime = check_frequency_epsilon(epsilon_lifetime)
        self.p1, self.q1 = first
        self.p2, self.q2 = second
        if not (0 <= self.q1 < self.p1 <= 1 and 0 <= self.q2 < self.p2 <= 1):
            raise LDPError(f"{type(self).__name__}: stage probabilities {first}, {second} are not 0 <= q < p <= 1")

    @abstractmethod
    def _permanent(self, codes: np.ndarray, secrets: np.ndarray) -> Reports:
        """Stage 1 for validated codes: a deterministic function of (secret, code) (`longitudinal.memo`)."""

    @abstractmethod
    def _instantaneous(self, permanent: Reports, rng: np.random.Generator) -> Reports:
        """Stage 2: the report, fresh noise on a stage-1 response."""

    @property
    def p(self) -> float:
        return chain(self.p1, self.q1, self.p2, self.q2)[0]

    @property
    def q(self) -> float:
        return chain(self.p1, self.q1, self.p2, self.q2)[1]

    def parameters(self) -> dict[str, Any]:
        return {"domain": self.domain_size, "p1": self.p1, "q1": self.q1, "p2": self.p2, "q2": self.q2}

    def perturb(
        self, values: np.ndarray | int | list[int], rng: np.random.Generator, secrets: np.ndarray | None = None
    ) -> Reports:
        """One report per device; devices with the same secret and value share their stage-1 response.

        Without secrets every row is a new device (`ldpstream.mechanisms.longitudinal.base`).
        """
        if secrets is None:
            return super().perturb(values, rng)
        codes = check_codes(values, self.domain_size)
        keys = check_secrets(secrets, codes.shape[0])
        return sample_in_chunks(
            self.schema, codes.shape[0], lambda rows: self._instantaneous(self._permanent(codes[rows], keys[rows]), rng)
        )

    def memo_keys(self, values: np.ndarray, secrets: np.ndarray) -> np.ndarray:
        """The value's code: the permanent response is memoized per (device, value)."""
        codes = check_codes(values, self.domain_size)
        check_secrets(secrets, codes.shape[0])
        return codes

    def permanent_response(self, values: np.ndarray | int | list[int], secrets: np.ndarray) -> Reports:
        """The memoized stage-1 responses of devices (secrets) to values: what every later report perturbs."""
        codes = check_codes(values, self.domain_size)
        return self._permanent(codes, check_secrets(secrets, codes.shape[0]))

    def _sample(self, codes: np.ndarray, rng: np.random.Generator) -> Reports:
        return self._instantaneous(self._permanent(codes, draw_secrets(rng, codes.shape[0])), rng)

    def memo_parameters(self) -> tuple[tuple[str, float], ...]:
        return (("epsilon_lifetime", self.epsilon_lifetime), ("epsilon_first", self.epsilon),
                ("domain_size", self.domain_size))

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(epsilon_lifetime={self.epsilon_lifetime:g}, epsilon_first={self.epsilon:g}, "
            f"domain_size={self.domain_size})"
        )


class SolvedTwoStage(TwoStageOracle):
    """A two-stage oracle given its two budgets: stage 1 at eps_inf, stage 2 solved for eps_1 (module docstring).

    epsilon_first defaults to half of epsilon_lifetime.
    """

    def __init__(self, epsilon_lifetime: float, domain_size: int, epsilon_first: float | None = None) -> None:
        lifetime = check_frequency_epsilon(epsilon_lifetime)
        lifetime, first = check_budgets(lifetime, lifetime / 2 if epsilon_first is None else epsilon_first)
        k = check_domain_size(domain_size)
        super().__init__(lifetime, first, k, self.first_stage(lifetime, k), self.second_stage(lifetime, first, k))

    @classmethod
    def with_budgets(cls, epsilon_lifetime: float, epsilon_first: float,
                     domain_size: int | None = None) -> SolvedTwoStage:
        return cls(epsilon_lifetime, domain_size, epsilon_first=epsilon_first)  # type: ignore[arg-type]

    @classmethod
    @abstractmethod
    def first_stage(cls, epsilon_lifetime: float, domain_size: int) -> tuple[float, float]:
        """(p1, q1) at eps_inf."""

    @classmethod
    @abstractmethod
    def second_stage(cls, epsilon_lifetime: float, epsilon_first: float, domain_size: int) -> tuple[float, float]:
        """(p2, q2) such that one report is exactly eps_1-LDP."""


class LGRR(SolvedTwoStage, GRR):
    """L-GRR: GRR at eps_inf memoized, then GRR solved for eps_1; a report is one code {"value": uint32 (n,)}.

    Examples
    --------
    >>> import numpy as np
    >>> oracle = LGRR(2.0, 4, epsilon_first=1.0)
    >>> round(oracle.p2, 4), round(math.log(oracle.p / oracle.q), 6)  # one report: exactly eps_1
    (0.6165, 1.0)
    >>> secrets = np.array([7, 7, 7], dtype=np.uint64)
    >>> oracle.permanent_response([2, 2, 2], secrets)["value"].tolist()  # one device, one value: one memo
    [2, 2, 2]
    """

    name: ClassVar[str] = "l-grr"
    auto_rank: ClassVar[int] = 110

    @classmethod
    def first_stage(cls, epsilon_lifetime: float, domain_size: int) -> tuple[float, float]:
        big = math.exp(epsilon_lifetime)
        return big / (big + domain_size - 1), 1 / (big + domain_size - 1)  # 004, DE at eps_inf

    @classmethod
    def second_stage(cls, epsilon_lifetime: float, epsilon_first: float, domain_size: int) -> tuple[float, float]:
        big, e, k = math.exp(epsilon_lifetime), math.exp(epsilon_first), domain_size
        p2 = (e * (big + k - 2) - k + 1) / (math.expm1(epsilon_lifetime) * (e + k - 1))  # derived (module docstring)
        return p2, (1 - p2) / (k - 1)

    def _permanent(self, codes: np.ndarray, secrets: np.ndarray) -> Reports:
        u = keyed_uniform(secrets, TAG_PERMANENT, codes)
        return {"value": randomized_response_from_uniform(codes, self.domain_size, self.p1, u)}

    def _instantaneous(self, permanent: Reports, rng: np.random.Generator) -> Reports:
        return {"value": randomized_response(permanent["value"], self.domain_size, self.p2, rng)}


class TwoStageUnary(SolvedTwoStage, UnaryEncoding):
    """Unary encoding in both stages, bit by bit; a report is {"bits": uint8 (n, K)}."""

    def _permanent(self, codes: np.ndarray, secrets: np.ndarray) -> Reports:
        return {"bits": permanent_bits(secrets, codes, codes[:, None], self.domain_size, self.p1, self.q1)}

    def _instantaneous(self, permanent: Reports, rng: np.random.Generator) -> Reports:
        return {"bits": instantaneous_bits(permanent["bits"], self.p2, self.q2, rng)}


def oue_stage(epsilon: float) -> tuple[float, float]:
    """OUE's (p, q) = (1/2, 1 / (e^eps + 1)) (004, Optimized UE)."""
    return 0.5, 1 / (math.exp(epsilon) + 1)


def sue_stage(epsilon: float) -> tuple[float, float]:
    """SUE's (p, q) = (e^{eps/2} / (e^{eps/2} + 1), 1 / (e^{eps/2} + 1)) (004, UE)."""
    return 1 / (1 + math.exp(-epsilon / 2)), 1 / (math.exp(epsilon / 2) + 1)


class LOUE(TwoStageUnary):
    """L-OUE: OUE at eps_inf memoized, then OUE (p2 = 1/2) with q2 solved; needs eps_1 < ln((2 e^eps_inf + 1) / 3).

    Examples
    --------
    >>> oracle = LOUE(2.0, 8, epsilon_first=1.0)
    >>> round(oracle.q2, 4), round(unary_epsilon(oracle.p, oracle.q), 6)
    (0.0809, 1.0)
    """

    name: ClassVar[str] = "l-oue"
    auto_rank: ClassVar[int] = 130

    @classmethod
    def first_stage(cls, epsilon_lifetime: float, domain_size: int) -> tuple[float, float]:
        return oue_stage(epsilon_lifetime)

    @classmethod
    def second_stage(cls, epsilon_lifetime: float, epsilon_first: float, domain_size: int) -> tuple[float, float]:
        big, e = math.exp(epsilon_lifetime), math.exp(epsilon_first)
        if not e < (2 * big + 1) / 3:
            reachable = math.log((2 * big + 1) / 3)
            raise LDPError(f"L-OUE reaches one-report budgets below {reachable:.6g} at eps_inf {epsilon_lifetime:g}")
        c = big / (big + 1)  # 1 - q1
        a, b, c0 = 4 * c * (e - 1), 2 * (1 - e * (4 * c - 1)), (1 + c) - 3 * e * (1 - c)  # derived (module docstring)
        return 0.5, 2 * c0 / (-b + math.sqrt(b * b - 4 * a * c0))  # the smaller root, without cancellation


class LOSUE(TwoStageUnary):
    """L-OSUE: OUE at eps_inf memoized, then SUE (q2 = 1 - p2) solved for eps_1.

    Examples
    --------
    >>> oracle = LOSUE(2.0, 8, epsilon_first=1.0)
    >>> round(oracle.p2, 4), round(unary_epsilon(oracle.p, oracle.q), 6)
    (0.8034, 1.0)
    """

    name: ClassVar[str] = "l-osue"
    auto_rank: ClassVar[int] = 120

    @classmethod
    def first_stage(cls, epsilon_lifetime: float, domain_size: int) -> tuple[float, float]:
        return oue_stage(epsilon_lifetime)

    @classmethod
    def second_stage(cls, epsilon_lifetime: float, epsilon_first: float, domain_size: int) -> tuple[float, float]:
        p2 = (1 + math.tanh(epsilon_first / 2) / math.tanh(epsilon_lifetime / 2)) / 2  # derived (module docstring)
        return p2, 1 - p2


class LSUE(TwoStageUnary):
    """L-SUE (basic RAPPOR's two stages): SUE at eps_inf memoized, then SUE solved for eps_1.

    Examples
    --------
    >>> oracle = LSUE(2.0, 8, epsilon_first=1.0)
    >>> round(oracle.p2, 4), round(unary_epsilon(oracle.p, oracle.q), 6)
    (0.765, 1.0)
    """

    name: ClassVar[str] = "l-sue"
    auto_rank: ClassVar[int] = 140

    @classmethod
    def first_stage(cls, epsilon_lifetime: float, domain_size: int) -> tuple[float, float]:
        return sue_stage(epsilon_lifetime)

    @classmethod
    def second_stage(cls, epsilon_lifetime: float, epsilon_first: float, domain_size: int) -> tuple[float, float]:
        p2 = (1 + math.tanh(epsilon_first / 4) / math.tanh(epsilon_lifetime / 4)) / 2  # derived (module docstring)
        return p2, 1 - p2
