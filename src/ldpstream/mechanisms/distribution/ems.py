"""Expectation Maximization with Smoothing (EMS) over a banded Toeplitz channel, and its delta-method sensitivity.

The reports of n devices fall into m output cells with counts h. A device whose value lies in input cell i (of d)
lands in output cell j with probability M[j, i] (the channel, `BandedChannel`: columns sum to 1). The estimate is
the distribution theta over the d input cells that explains h (Li et al., SIGMOD 2020, Sec. 5):

- EM step (Sec. 5.1; Dempster, Laird and Rubin 1977 for the multinomial mixture): P = theta * M^T (h / (n M theta)),
  which keeps sum(P) = 1 since the columns of M sum to 1;
- smoothing step (Sec. 5.2, after Silverman et al. 1990): theta' = S P / (1^T S P) with the binomial kernel
  (1, 2, 1) / 4 (below: its level lambda).
  At the two ends the paper's code re-normalises the kernel row ((2, 1) / 3). Here the end cells are kept as they
  are: the kernel sees the distribution extended linearly past the end (theta_-1 = 2 theta_0 - theta_1, an
  anti-reflection), whose (1, 2, 1) / 4 average at the end cell is theta_0 itself. A reflecting end ((3, 1) / 4, an
  even extension) raises the density where it falls to 0 at an end (a V's average is above its minimum) and lowers
  it where it peaks there; the kept ends leave a density that is linear near the end unbiased. On the benchmark's
  1,024 bins at n = 1e6, eps = 1 (`python benchmarks/bench_distribution.py`: 5 inputs x 2 seeds, smoothing chosen
  as below) they took the mean W1 from 0.0020 to 0.0018 and KS from 0.0087 to 0.0069 (the published SW + EMS:
  0.0021 and 0.0114), and Beta(5, 2)'s KS from 0.0080 to 0.0047 (published: 0.0066); the uniform's went from
  0.0023 / 0.0066 to 0.0024 / 0.0072 (W1 / KS; published 0.0023 / 0.0069). An end row that leaks a share a of its
  neighbour ((1 - a, a): a = 1/4 is the reflection) brought Beta(5, 2)'s KS back to 0.0077 at a = 1/16 and 0.0079
  at 1/8. S no longer keeps the mass (the end cells' neighbours gain a quarter of them), hence the normalisation,
  and it is not symmetric. A kept end cell can sit on the simplex's face (below, on the standard errors).

Smoothing level (an extension, measured in benchmarks/bench_distribution.py): S_lambda = (1 - lambda) I + lambda S for
lambda <= 1, S^lambda for lambda = 2, 4; lambda = 1 is the paper's. The kernel acts per cell, so the same lambda smooths
more, in units of the attribute, on a coarser grid: with the paper's kernel on 64 cells the CDF of a distribution peaked
at one end is off by up to 0.10 (n = 1e5, eps = 1; 0.16 with reflecting ends). The right amount also falls as n grows.
`choose_smoothing` picks lambda from the data by two-fold cross-validation: binomial thinning splits h into two
independent multinomial halves (each count h_j into Binomial(h_j, 1/2) and the rest: exact for i.i.d. reports), EMS fits
one half at a candidate level, and scores the fit by the log-likelihood it gives the other half (summed over both ways
round). The search starts at the paper's level and moves to the next stronger level while that one's score is higher by
more than one standard error of the gain (the held-out counts are multinomial: Var = sum h_j g_j^2 - (sum h_j g_j)^2 / n
for the cells' log-ratios g_j), else the same way toward weaker smoothing. It usually fits three to six levels, not all
eleven (the weakest levels' fits are also the slowest), and leaves the paper's level only when the data clearly ask to.
The split is seeded by the counts themselves, so the same statistics always give the same estimate. Over 5 distributions
and 2 seeds at eps = 1 the mean Kolmogorov-Smirnov distance was 0.080 / 0.018 (paper's lambda / chosen) on 32 cells at
n = 1e5, 0.054 / 0.021 on 64, 0.024 / 0.021 on 256, and 0.050 / 0.048 on 256 cells at n = 1e4
(`python benchmarks/bench_distribution.py --grids`).

The paper stops the iteration when the log-likelihood improves by less than a threshold (its code: 1e-3, in absolute
terms, whatever n). Here EMS runs to its fixed point theta = S P(theta) instead (||step||_1 < tol), accelerated by
SQUAREM (Varadhan and Roland, Scand. J. Statist. 35, 2008, scheme S3, with a residual safeguard): the estimate is then
a well-defined function of h, independent of n's scale and of the path, and the delta method applies to it. At the
fixed point G(theta, h) = theta the implicit function theorem gives

    d theta / d h = (I - dG/dtheta)^-1 dG/dh,
    dG/dtheta = A [diag(M^T r) - diag(theta) M^T diag(h / (n pi^2)) M],     r = h / (n pi),  pi = M theta,
    dG/dh     = A [diag(theta) M^T diag(1 / (n pi)) - P 1^T / n],
    A         = (I - theta 1^T) S_lambda / (1^T S_lambda P)     (the normalisation's derivative at G = theta),

and h is multinomial(n, pi): Cov(h) = n diag(pi) - n pi pi^T (with pi = M theta_hat as the plug-in). EMS smooths,
so theta_hat is biased toward a smoother distribution; the standard errors are those of theta_hat around its own
expectation (the variability), not a bound on that bias; with a level chosen by cross-validation they are
conditional on that choice (the choice's own variability is not in them).

Where the delta method does not hold: an end cell. Every other cell receives a share of its neighbours' mass at any
level, so it stays inside the simplex; a kept end cell is a pure EM coordinate, theta_0' = theta_0 g_0 / c (g = M^T
r, c = 1^T S_lambda P), and where the data ask for less than nothing there (g_0 < c at theta_0 = 0) the fixed point
lies on the face theta_0 = 0 (the iteration shrinks theta_0 by g_0 / c per map and stops at a residue of order
EMS_TOLERANCE / (1 - g_0 / c)). On the face the derivative above is that of the constrained estimate: dG_0/dtheta_0
= g_0 / c < 1 and dG_0/dh = 0, so theta_0 stays 0 for small changes of the counts and its standard error is 0. That
is right where every likely collection puts the cell on the face: Beta(5, 2) on 16 cells at n = 2e4 (first cell's
mass 6e-6) at the paper's level, where the estimate is 0 in every one of 100 collections (spread and standard error
both residues of the iteration, 4e-7 and 1e-7). It understates the spread where some collections put the cell on the
face and others do not, for there the estimate has no derivative in the counts: the same input at level 1/16 (on the
face in 74 of 100 collections), where the first three CDF values' spread was 1.65, 1.38 and 1.17 times their mean
standard error (0.0018, 0.0030 and 0.0038 against 0.0011, 0.0021 and 0.0033); the other edges and the quantiles
within 28% (4 times the SD's own sampling error; tests/mechanisms/test_distribution.py). Weak smoothing next to a
nearly empty end is what it takes: with the reflecting end of earlier versions the same case gave 1.19, 1.14 and
1.09, since a leaking end cell is never exactly on the face; that end cost Beta(5, 2) its KS (above).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ldpstream.mechanisms.base import LDPError

EMS_TOLERANCE = 1e-7  # ||theta' - theta||_1 at which EMS has reached its fixed point
SMOOTHING_LEVELS = tuple(4.0 / 2**k for k in range(11))  # `choose_smoothing`'s candidates, 4 down to 1/256
CROSS_VALIDATION_TOLERANCE = 1e-5  # the candidates' fits stop earlier: the held-out likelihood is what counts
MAX_CROSS_VALIDATION_STEPS = 3_000
CROSS_VALIDATION_MARGIN = 1.0  # standard errors by which a level's held-out score must beat the current one's
MAX_EMS_STEPS = 20_000  # EMS maps evaluated at most (SQUAREM takes a few hundred on the benchmark's inputs)
SQUAREM_SAFEGUARD = 100.0  # a jump that multiplies the residual by more is refused (10 took 3 times the EM maps over
# 5 inputs x 4 levels at n = 1e6 on 1,024 bins, and 20,000 without converging at level 1/16 on one)


@dataclass(frozen=True)
class BandedChannel:
    """M[j, i] = uniform[j] + band[j - i - offset] (0 outside the band), j over m outputs, i over d inputs.

    The uniform part does not depend on the input (an output spread evenly, like SW's q), the band does, through j - i
    only (equally wide input and output cells): M theta is a convolution, computed by FFT in O((m + d) log(m + d)).
    """

    uniform: np.ndarray
    band: np.ndarray
    offset: int
    inputs: int

    def __post_init__(self) -> None:
        if not self.offset <= 0 <= self.offset + len(self.band) - 1:
            raise LDPError("a channel's band must cover j - i = 0 (pad it with zeros)")

    @property
    def outputs(self) -> int:
        return len(self.uniform)

    @cached_property
    def _size(self) -> int:
        """The shortest fast FFT length at which the circular convolutions equal the linear ones on the entries
        `forward` and `adjoint` keep: entry i of a circular convolution of length N adds entry i + N of the linear one,
        so N must exceed every kept index and the linear length minus the first kept index."""
        from scipy import fft  # the collector's side: a device builds the mechanism without SciPy

        width, first_forward, first_adjoint = len(self.band), -self.offset, self.offset + len(self.band) - 1
        return fft.next_fast_len(max(first_forward + self.outputs, self.inputs + width - 1 - first_forward,
                                     first_adjoint + self.inputs, self.outputs + width - 1 - first_adjoint))

    @cached_property
    def _band_fft(self) -> tuple[np.ndarray, np.ndarray]:
        from scipy import fft

        return fft.rfft(self.band, self._size), fft.rfft(self.band[::-1], self._size)

    def forward(self, theta: np.ndarray) -> np.ndarray:
        """M @ theta (theta: (d,) or (d, k))."""
        return np.multiply.outer(self.uniform, theta.sum(axis=0)) + self._convolve(theta, 0, -self.offset, self.outputs)

    def adjoint(self, r: np.ndarray) -> np.ndarray:
        """M^T @ r (r: (m,) or (m, k))."""
        start = self.offset + len(self.band) - 1
        return np.multiply.outer(np.ones(self.inputs), self.uniform @ r) + self._convolve(r, 1, start, self.inputs)

    def _convolve(self, x: np.ndarray, which: int, start: int, length: int) -> np.ndarray:
        """Entries start..start + length - 1 of the linear convolution of x (along axis 0) with the band (which = 0)
        or the reversed band (which = 1), by FFT along the contiguous axis."""
        from scipy import fft

        rows = np.ascontiguousarray(x.T)
        c = fft.irfft(fft.rfft(rows, self._size, axis=-1) * self._band_fft[which], self._size, axis=-1)
        return c[..., start:start + length].T

    def dense(self) -> np.ndarray:
        """M as an (m, d) matrix."""
        a = np.arange(self.outputs)[:, None] - np.arange(self.inputs)[None, :] - self.offset
        inside = (a >= 0) & (a < len(self.band))
        return self.uniform[:, None] + np.where(inside, self.band[np.clip(a, 0, len(self.band) - 1)], 0.0)


def check_smoothing(level: float) -> float:
    """A smoothing level lambda: in (0, 1], or 2 or 4 (module docstring); LDPError otherwise."""
    if isinstance(level, bool) or not isinstance(level, int | float) or not (0 < level <= 1 or level in (2, 4)):
        raise LDPError(f"the smoothing level must lie in (0, 1] or be 2 or 4, got {level!r}")
    return float(level)


def smooth(theta: np.ndarray, level: float = 1.0, transpose: bool = False) -> np.ndarray:
    """S_lambda theta, or S_lambda^T theta, along axis 0: the binomial kernel (1, 2, 1) / 4 inside, the end cells
    kept (module docstring), mixed with the identity below lambda = 1, applied twice or four times above."""
    if level > 1:
        for _ in range(int(level)):
            theta = smooth(theta, 1.0, transpose)
        return theta
    if transpose:  # column k of S: 1/2 at row k, 1/4 at rows k -/+ 1 where those rows are inside, 1 at an end row
        quarter = theta / 4.0
        quarter[0] = quarter[-1] = 0.0
        out = 2.0 * quarter
        out[1:] += quarter[:-1]
        out[:-1] += quarter[1:]
        out[0] += theta[0]
        out[-1] += theta[-1]
    else:
        out = np.empty_like(theta)
        out[1:-1] = (theta[:-2] + 2.0 * theta[1:-1] + theta[2:]) / 4.0
        out[0], out[-1] = theta[0], theta[-1]
    return out if level == 1 else level * out + (1.0 - level) * theta


def ems_step(channel: BandedChannel, counts: np.ndarray, theta: np.ndarray, level: float = 1.0) -> np.ndarray:
    """One EMS map G(theta, h) = S_lambda P / (1^T S_lambda P), P = theta * M^T (h / (n M theta)) (module
    docstring)."""
    p = theta * channel.adjoint(counts / (counts.sum() * channel.forward(theta)))
    out = smooth(p, level)
    return out / out.sum()


@dataclass(frozen=True)
class EmsResult:
    """EMS's fixed point, the EMS maps it took, and whether the step fell below the tolerance."""

    theta: np.ndarray
    steps: int
    converged: bool


def ems(channel: BandedChannel, counts: np.ndarray, level: float = 1.0, tol: float = EMS_TOLERANCE,
        max_steps: int = MAX_EMS_STEPS, start: np.ndarray | None = None) -> EmsResult:
    """EMS at smoothing level lambda from `start` (default: the uniform distribution) to its fixed point,
    SQUAREM-accelerated (module docstring).

    Each round maps theta twice, extrapolates theta - 2 a r + a^2 v (r = G(theta) - theta, v = G(G(theta)) - 2 G(theta)
    + theta, a = -||r|| / ||v|| <= -1), clips it to the simplex and maps it once more. The residual ||G(x) - x|| is not
    monotone along SQUAREM's path, so a jump is refused (for G(G(theta))) only when it multiplies the residual by more
    than SQUAREM_SAFEGUARD.
    """
    h = np.asarray(counts, dtype=np.float64)
    if h.shape != (channel.outputs,) or not np.all(h >= 0) or h.sum() <= 0:
        raise LDPError(f"EMS needs {channel.outputs} non-negative counts, not all zero")
    theta = np.full(channel.inputs, 1.0 / channel.inputs) if start is None else start
    mapped, steps = ems_step(channel, h, theta, level), 1
    while steps < max_steps:
        if np.abs(mapped - theta).sum() < tol:
            return EmsResult(mapped, steps, True)
        twice = ems_step(channel, h, mapped, level)
        r, v = mapped - theta, twice - 2.0 * mapped + theta
        alpha = min(-np.sqrt((r @ r) / (v @ v)), -1.0) if v @ v > 0 else -1.0
        jump = np.maximum(theta - 2.0 * alpha * r + alpha**2 * v, 0.0)
        jump = ems_step(channel, h, jump / jump.sum(), level)
        jump_mapped = ems_step(channel, h, jump, level)
        steps += 3
        if np.abs(jump_mapped - jump).sum() <= SQUAREM_SAFEGUARD * np.abs(mapped - theta).sum():
            theta, mapped = jump, jump_mapped
        else:  # the extrapolation overshot: the two plain steps instead
            theta, mapped = twice, ems_step(channel, h, twice, level)
            steps += 1
    return EmsResult(mapped, steps, False)


@dataclass(frozen=True)
class SmoothingChoice:
    """The level `choose_smoothing` chose, the held-out log-likelihood of each level it scored (the others were not
    fitted), and a start for EMS on all the counts at that level: the mean of the two halves' fits."""

    level: float
    scores: dict[float, float]
    start: np.ndarray


def choose_smoothing(channel: BandedChannel, counts: np.ndarray,
                     levels: tuple[float, ...] = SMOOTHING_LEVELS) -> SmoothingChoice:
    """A smoothing level of `levels` (strongest first) by two-fold cross-validation (module docstring), climbing from
    the paper's level 1: to the next stronger level while its held-out log-likelihood beats the current level's by more
    than CROSS_VALIDATION_MARGIN standard errors of that gain, else to the next weaker one on the same test. Each fit
    starts where the previous one of its half ended."""
    h = np.asarray(counts, dtype=np.float64)
    rng = np.random.default_rng(int.from_bytes(hashlib.blake2b(h.tobytes(), digest_size=8).digest(), "little"))
    first = rng.binomial(np.round(h).astype(np.int64), 0.5).astype(np.float64)
    halves = [(fit_on, score_on) for fit_on, score_on in ((first, h - first), (h - first, first))
              if fit_on.sum() > 0 and score_on.sum() > 0]
    fits: dict[int, list[np.ndarray]] = {}
    logs: dict[int, list[np.ndarray]] = {}
    scores: dict[float, float] = {}

    def fit(k: int, starts: list[np.ndarray] | list[None]) -> None:
        fits[k] = [ems(channel, fit_on, levels[k], CROSS_VALIDATION_TOLERANCE, MAX_CROSS_VALIDATION_STEPS, s).theta
                   for (fit_on, _), s in zip(halves, starts, strict=True)]
        logs[k] = [np.log(channel.forward(theta)) for theta in fits[k]]
        scores[levels[k]] = float(sum(score_on @ log for (_, score_on), log in zip(halves, logs[k], strict=True)))

    def better(k: int, than: int) -> bool:
        gain = variance = 0.0
        for (_, score_on), new, old in zip(halves, logs[k], logs[than], strict=True):
            ratio = new - old
            gain += score_on @ ratio
            variance += score_on @ ratio**2 - (score_on @ ratio) ** 2 / score_on.sum()
        return gain > CROSS_VALIDATION_MARGIN * np.sqrt(max(variance, 0.0))

    best = min(range(len(levels)), key=lambda k: abs(np.log(levels[k])))  # the paper's level, or the nearest
    paper = best
    fit(best, [None] * len(halves))
    for step in (-1, 1):  # stronger, then (if that did not help) weaker
        k = best + step
        while 0 <= k < len(levels):
            fit(k, fits[k - step])
            if not better(k, best):
                break
            best, k = k, k + step
        if best != paper:
            break
    start = np.mean(fits[best], axis=0) if halves else np.full(channel.inputs, 1.0 / channel.inputs)
    return SmoothingChoice(levels[best], scores, start / start.sum())


def ems_cdf_sensitivity(channel: BandedChannel, counts: np.ndarray, theta: np.ndarray,
                        level: float = 1.0) -> np.ndarray:
    """d F / d h at EMS's fixed point theta, F = (0, theta_0, theta_0 + theta_1, ..., 1) the CDF at the d + 1 edges of
    the input cells: a (d + 1, m) matrix (module docstring, implicit function theorem).

    With C the (d + 1, d) cumulative-sum matrix, C (I - dG/dtheta)^-1 A is one LU solve with d + 1 right-hand sides
    followed by A^T, and the products with M and M^T are batched convolutions: O(d^3) for the solve, O(d (m + d)
    log(m + d)) for the rest.
    """
    from scipy import linalg

    h = np.asarray(counts, dtype=np.float64)
    n, d = h.sum(), len(theta)
    pi = channel.forward(theta)
    r = h / (n * pi)
    p = theta * channel.adjoint(r)
    scale = smooth(p, level).sum()  # 1^T S P
    weighted = channel.adjoint((h / (n * pi**2))[:, None] * channel.dense())  # M^T diag(h / (n pi^2)) M
    smoothed = smooth(np.diag(channel.adjoint(r)) - theta[:, None] * weighted, level)
    jacobian = (smoothed - np.outer(theta, smoothed.sum(axis=0))) / scale  # dG / dtheta = A dP / dtheta
    cumulative_t = np.triu(np.ones((d, d + 1)), 1)  # C^T: row i marks the edges k > i
    x = linalg.solve((np.eye(d) - jacobian).T, cumulative_t)  # (I - dG/dtheta)^-T C^T
    y = smooth((x - np.outer(np.ones(d), theta @ x)) / scale, level, transpose=True).T  # C (I - dG/dtheta)^-1 A
    return channel.forward((y * theta).T).T / (n * pi) - np.outer(y @ p, np.ones_like(h)) / n
