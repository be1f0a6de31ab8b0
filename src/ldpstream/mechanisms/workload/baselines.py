"""Existing LDP mechanisms as strategy matrices (McKenna et al., Sec. 6.1), built exactly as our note restates them.

Each is an epsilon-LDP strategy Q (m x n): every row holds at most two distinct values, in the ratio e^eps (or, for
RAPPOR, a product of per-bit ratios e^(eps/2) over the two bits where two one-hot inputs differ). All are evaluated
with the same optimal reconstruction V* (`ldpstream.mechanisms.workload.strategy.factorize`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import numpy as np

from ldpstream.mechanisms.base import LDPError, check_epsilon
from ldpstream.mechanisms.workload.workloads import Workload, popcount, sylvester_hadamard

MAX_OUTPUTS = 1 << 14  # RAPPOR and Subset Selection only where their output space is at most this large


def randomized_response(n: int, epsilon: float) -> np.ndarray:
    """Randomized response (Example 2.3): Q[o, u] = e^eps / (e^eps + n - 1) if o = u, else 1 / (e^eps + n - 1)."""
    e = np.exp(check_epsilon(epsilon))
    return (np.ones((n, n)) + (e - 1.0) * np.eye(n)) / (e + n - 1.0)


def hadamard_response(n: int, epsilon: float) -> np.ndarray:
    """Hadamard response (Acharya, Sun, Zhang), general privacy regime.

    B = 2^(ceil(log2 min(e^eps, 2n)) - 1) blocks of size b = 2^ceil(log2(n / B + 1)); a K x K (K = B b) matrix of -1
    except B diagonal b x b Sylvester-Hadamard blocks; drop the first column of every block, map +1 -> e^eps and
    -1 -> 1, normalise the columns (all sum to (b/2)(e^eps + 1) + K - b) and keep the first n.
    """
    e = np.exp(check_epsilon(epsilon))
    blocks = 2 ** (math.ceil(math.log2(min(e, 2 * n))) - 1)
    size = 2 ** math.ceil(math.log2(n / blocks + 1))
    col = np.arange(n)
    block, within = col // (size - 1), col % (size - 1) + 1  # the kept columns: all but the first of each block
    row = np.arange(blocks * size)
    in_block = (row[:, None] // size) == block[None, :]
    plus = in_block & ((popcount((row[:, None] % size) & within[None, :]) & 1) == 0)
    q = np.where(plus, e, 1.0)
    return q / q.sum(axis=0)


def hierarchical(n: int, epsilon: float, branching: int = 4) -> np.ndarray:
    """Hierarchical (Cormode, Kulkarni, Srivastava): a Hadamard-response oracle per level, one level per user.

    Level l = 0, 1, ... while branching^l < n has ceil(n / branching^l) nodes, node j covering types
    j branching^l .. (j + 1) branching^l - 1; the levels are stacked and divided by their number.
    """
    eps = check_epsilon(epsilon)
    u = np.arange(n)
    levels = []
    width = 1
    while width < n:
        oracle = hadamard_response(-(-n // width), eps)
        levels.append(oracle[:, u // width])
        width *= branching
    return np.vstack(levels) / len(levels)


def fourier(n: int, epsilon: float, order: int) -> np.ndarray:
    """Fourier (Cormode, Kulkarni, Srivastava) on n = 2^k types, for marginals of up to `order` attributes.

    T = the O subsets of the k attributes with at most `order` elements; a user picks t in T uniformly and reports
    (t, sign), sign = H[t, u] with probability e^eps / (1 + e^eps): 2 O outputs, rows (t, +) then rows (t, -).
    """
    e = np.exp(check_epsilon(epsilon))
    masks = np.arange(n)
    coefficients = masks[popcount(masks) <= order]
    h = sylvester_hadamard(n)[coefficients]
    plus = np.where(h > 0, e, 1.0) / (1.0 + e)
    return np.vstack([plus, 1.0 - plus]) / len(coefficients)


def fourier_order(workload: Workload) -> int:
    """The largest number of attributes in a Fourier coefficient the workload uses (so Fourier of that order spans it).

    Coefficient t is used iff column t of W H is non-zero, i.e. (H W^T W H)[t, t] > 0.
    """
    h = sylvester_hadamard(workload.n)
    energy = np.einsum("tu,uv,tv->t", h, workload.gram, h)
    used = np.flatnonzero(energy > 1e-9 * energy.max())
    return int(popcount(used).max())


def rappor(n: int, epsilon: float) -> np.ndarray:
    """Basic RAPPOR (Erlingsson et al.): one-hot encode, flip each of the n bits with probability 1/(1 + e^(eps/2)).

    Outputs are all 2^n bit vectors (output o has bit i = bit i of o); two one-hot inputs differ in two bits.
    """
    if 2**n > MAX_OUTPUTS:
        raise LDPError(f"RAPPOR has 2^{n} outputs, more than {MAX_OUTPUTS}")
    keep = np.exp(check_epsilon(epsilon) / 2) / (1.0 + np.exp(check_epsilon(epsilon) / 2))
    outputs = np.arange(2**n)
    disagree = popcount(outputs[:, None] ^ (1 << np.arange(n))[None, :])
    return keep ** (n - disagree) * (1.0 - keep) ** disagree


def subset_size(n: int, epsilon: float) -> int:
    """Subset Selection's subset size d = ceil(n / (e^eps + 1)) (Ye and Barg), at least 1."""
    return max(1, math.ceil(n / (np.exp(check_epsilon(epsilon)) + 1.0)))


def subset_selection(n: int, epsilon: float) -> np.ndarray:
    """Subset Selection (Ye and Barg): report a d-subset of the types, weight e^eps if it holds the true type, else 1.

    Q[S, u] = e^eps / Z if u in S else 1 / Z, Z = C(n-1, d-1) e^eps + C(n-1, d); outputs are all C(n, d) subsets.
    """
    e = np.exp(check_epsilon(epsilon))
    d = subset_size(n, epsilon)
    if math.comb(n, d) > MAX_OUTPUTS:
        raise LDPError(f"Subset Selection has C({n}, {d}) outputs, more than {MAX_OUTPUTS}")
    subsets = np.array(list(itertools.combinations(range(n), d)))
    members = np.zeros((len(subsets), n), dtype=bool)
    members[np.arange(len(subsets))[:, None], subsets] = True
    return np.where(members, e, 1.0) / (math.comb(n - 1, d - 1) * e + math.comb(n - 1, d))


def _is_power_of_two(n: int) -> bool:
    return n >= 2 and not n & (n - 1)


def baseline_strategies(workload: Workload, epsilon: float) -> dict[str, np.ndarray]:
    """Every baseline that applies to the workload: name -> strategy matrix.

    Fourier needs n = 2^k (its order is the largest Fourier coefficient the workload uses); RAPPOR and Subset
    Selection are included only where their output space has at most `MAX_OUTPUTS` outputs.
    """
    n, eps = workload.n, check_epsilon(epsilon)
    builders: dict[str, Callable[[], np.ndarray]] = {
        "randomized_response": lambda: randomized_response(n, eps),
        "hadamard": lambda: hadamard_response(n, eps),
        "hierarchical": lambda: hierarchical(n, eps),
    }
    if _is_power_of_two(n):
        builders["fourier"] = lambda: fourier(n, eps, fourier_order(workload))
    if 2**n <= MAX_OUTPUTS:
        builders["rappor"] = lambda: rappor(n, eps)
    if math.comb(n, subset_size(n, eps)) <= MAX_OUTPUTS:
        builders["subset_selection"] = lambda: subset_selection(n, eps)
    return {name: build() for name, build in builders.items()}
