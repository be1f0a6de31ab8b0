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
  and it is not symmetric. A kept end cell can sit on the simplex's face (below, on the standard errors), and EMS
  creeps toward it slowly: the benchmark's estimate took about 1.5 times the reflecting ends' time (ours / published
  0.13 against 0.09; 0.84 s for the slowest input, "income" seed 1, timed alone at load 1.0).

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

The end cells, censored at 0 (after Self and Liang, JASA 82, 1987, and Andrews, Econometrica 67, 1999: an estimate
on the boundary of the parameter space). Every other cell receives a share of its neighbours' mass at any level, so
it stays inside the simplex. A kept end cell k is a pure EM coordinate, theta_k' = theta_k g_k / c (g = M^T r, c =
1^T S_lambda P): its fixed-point equation theta_k (1 - g_k / c) = 0 holds with theta_k > 0 and g_k = c, or on the
simplex's face theta_k = 0 where the data ask for less than nothing there (g_k < c; the iteration shrinks theta_k by
g_k / c per map and stops at a residue of order EMS_TOLERANCE / (1 - g_k / c)). On the face theta_k stays 0 for
small changes of the counts, and the implicit function theorem's derivative is that of the estimate held there; but
where the collections put the cell on the face in some draws and not in others the estimate has no derivative, and
the plain delta method's standard errors of the first CDF values understated their spread 5.6 times (Beta(5, 2) on
16 cells at n = 2e4, level 1/4: first cell's mass 6e-6) or 1.6 times (level 1/16).

`ems_cdf_sensitivity` therefore writes the end rows as the score equations f_k = 1 - g_k / c = 0 (the EM rows
divided by theta_k: the same solution inside the simplex, and one that crosses the face), d f_k / d theta = (M^T
diag(h / (n pi^2)) M)_k / c + (g_k / c) 1^T S_lambda dP/dtheta / c, d f_k / d h = -(e_k^T - (g_k / c) 1^T S_lambda
diag(theta)) [M^T diag(1 / (n pi)) - M^T r 1^T / n] / c, so that with K that system's matrix the free end cell's
value is Z_k ~ N(m_k, sigma_k^2): m_k = theta_k - (K^-1)_kk f_k(theta) (theta_k inside the simplex, one Newton step
past the face on it) and sigma_k from d Z_k / d h. Holding the cell at 0 instead changes theta by -w_k Z_k, w_k =
K^-1 e_k / (K^-1)_kk (the equation replaced by dtheta_k = 0, Sherman and Morrison), so to first order theta_hat =
theta_free - w_k min(0, Z_k). `censored_noise` gives its covariance exactly for a normal Z_k (Stein's lemma: Cov(X,
min(0, Z_k)) = Cov(X, Z_k) P(Z_k < 0)): the CDF's rows are the free rows minus P(Z_k < 0) C w_k dZ_k/dh, plus an
independent component along C w_k of variance Var(min(0, Z_k)) - P(Z_k < 0)^2 sigma_k^2 >= 0 (Cauchy-Schwarz). It is
the plain delta method where the cell is far inside (P = 0) and the held-at-0 derivative where it is far on the face
(P = 1), with no branch between. The two ends are censored separately (the coupling (K^-1)_0,d-1 (K^-1)_d-1,0 /
((K^-1)_00 (K^-1)_d-1,d-1) was below 1% on 16 to 256 cells with both ends empty). On the case above the CDF's spread
over 100 collections is then 0.90 to 1.10 times its standard error at every edge at levels 1/4 and 1/16, the
quantiles within 28% (tests/mechanisms/test_distribution.py). At the paper's level the cell is on the face in every
collection, its spread is the iteration's residue (4e-7) and its standard error 2e-5, from the draws that might have
left it. The held-at-0 change w_k keeps the total mass only up to a term proportional to theta_k (the EM row k it
replaces), so where P(Z_k < 0) is neither 0 nor 1 the CDF at the last edge, 1 by construction, gets a standard error
of that order (2e-6 on the 32-bin example of docs/explanation/distributions.md).
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


@dataclass(frozen=True)
class FreeEnds:
    """EMS's fixed point differentiated with its two end cells k = 0, d - 1 free of theta_k >= 0 (module docstring):
    `rows` (d + 1, m) is d F / d h, `end_rows` (2, m) is d theta_k / d h, `end_columns` (d + 1, 2) is C w_k (the CDF's
    change when end cell k is held at 0, per unit of theta_k) and `end_values` (2,) the free end cells' values m_k."""

    rows: np.ndarray
    end_rows: np.ndarray
    end_columns: np.ndarray
    end_values: np.ndarray


def ems_cdf_sensitivity(channel: BandedChannel, counts: np.ndarray, theta: np.ndarray,
                        level: float = 1.0) -> FreeEnds:
    """d F / d h at EMS's fixed point theta with the end cells free, F = (0, theta_0, theta_0 + theta_1, ..., 1) the
    CDF at the d + 1 edges of the input cells, and what holding an end cell at 0 changes (module docstring: implicit
    function theorem, the end rows as the score equations g_k = c).

    Every row of the right-hand side dG/dh (end rows: -d f_k / d h) is B_i [M^T diag(1 / (n pi)) - M^T r 1^T / n],
    B = ((S_lambda diag(theta), its end rows e_k^T) - u 1^T S_lambda diag(theta)) / c, u = theta with u_k = g_k / c.
    With C the (d + 1, d) cumulative-sum matrix, C K^-1 B is one LU solve with d + 3 right-hand sides (C^T and the two
    end cells' unit vectors) followed by B^T, the columns K^-1 e_k one more with two, and the products with M and M^T
    are batched convolutions: O(d^3) for the solve, O(d (m + d) log(m + d)) for the rest.
    """
    from scipy import linalg

    h = np.asarray(counts, dtype=np.float64)
    n, d = h.sum(), len(theta)
    ends = [0, d - 1]
    pi = channel.forward(theta)
    g = channel.adjoint(h / (n * pi))
    scale = smooth(theta * g, level).sum()  # c = 1^T S P
    weighted = channel.adjoint((h / (n * pi**2))[:, None] * channel.dense())  # M^T diag(h / (n pi^2)) M
    smoothed = smooth(np.diag(g) - theta[:, None] * weighted, level)  # S dP/dtheta
    total = smoothed.sum(axis=0)
    system = np.eye(d) - (smoothed - np.outer(theta, total)) / scale  # I - dG/dtheta
    ratio = g[ends] / scale  # g_k / c: 1 inside the simplex, below 1 on its face
    system[ends] = (weighted[ends] + ratio[:, None] * total) / scale  # d(1 - g_k / c) / dtheta at the end rows
    lu = linalg.lu_factor(system)
    unit = np.eye(d)[:, ends]
    x = linalg.lu_solve(lu, np.hstack([np.triu(np.ones((d, d + 1)), 1), unit]), trans=1)  # K^-T [C^T, e_0, e_d-1]
    own = theta[:, None] * smooth(x, level, transpose=True)  # (S diag(theta))^T x, then with B's end rows e_k
    own[ends] += (1.0 - theta[ends])[:, None] * x[ends]
    kept = theta.copy()  # u
    kept[ends] = ratio
    y = ((own - np.outer(theta * smooth(np.ones(d), level, transpose=True), kept @ x)) / scale).T  # B^T x
    derivative = channel.forward(y.T).T / (n * pi) - np.outer(y @ g, np.ones_like(h)) / n  # times F = dP/dh / theta
    columns = linalg.lu_solve(lu, unit)  # K^-1 e_k
    diagonal = columns[ends, [0, 1]]  # (K^-1)_kk
    return FreeEnds(derivative[:d + 1], derivative[d + 1:], np.vstack([np.zeros(2), np.cumsum(columns / diagonal, 0)]),
                    theta[ends] - diagonal * (1.0 - ratio))


def censored_noise(free: FreeEnds, pi: np.ndarray, n: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The CDF's noise with each end cell censored at 0 (module docstring): rows (d + 1, m + 2) on z = (the counts'
    noise, one independent component per end cell), and Cov(z) = diag(diagonal) - low_rank low_rank^T."""
    from scipy import special

    count_noise = n * pi, np.sqrt(n) * pi
    spread = np.sqrt(free.end_rows**2 @ count_noise[0] - (free.end_rows @ count_noise[1]) ** 2)  # sigma_k
    t = -free.end_values / spread  # min(0, Z_k) = -max(0, Y_k), Y_k ~ N(sigma_k t, sigma_k^2)
    below, density = special.ndtr(t), np.exp(-t**2 / 2.0) / np.sqrt(2.0 * np.pi)  # P(Z_k < 0), phi(t)
    variance = (1.0 + t**2) * below + t * density - (t * below + density) ** 2  # Var(max(0, Y_k)) / sigma_k^2
    rows = np.hstack([free.rows - (free.end_columns * below) @ free.end_rows, free.end_columns])
    extra = spread**2 * np.maximum(variance - below**2, 0.0)  # >= 0 (Cauchy-Schwarz); the floor is for rounding
    return rows, np.concatenate([count_noise[0], extra]), np.concatenate([count_noise[1], np.zeros(2)])[:, None]
