"""64-bit mixing shared by the keyed memos of `ldpstream.mechanisms.longitudinal` and the device pseudonyms of
`ldpstream.contract`."""

from __future__ import annotations

import numpy as np

_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def mix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finalizer (Steele, Lea and Flood, OOPSLA 2014), a bijection of uint64 words with full
    avalanche, on a copy of x (vectorised).

    Examples
    --------
    >>> mix64(np.array([0, 1], dtype=np.uint64)).tolist()
    [0, 6238072747940578789]
    """
    return mix64_inplace(np.array(x, dtype=np.uint64))


def mix64_inplace(z: np.ndarray) -> np.ndarray:
    """`mix64` of a uint64 array the caller owns, in place (one scratch array for the shifts), returned; a numpy
    scalar (what arithmetic on 0-d arrays gives) comes back as a new 0-d array.

    Examples
    --------
    >>> mix64_inplace(np.uint64(1)).tolist(), mix64_inplace(np.array([1], dtype=np.uint64)).tolist()
    (6238072747940578789, [6238072747940578789])
    """
    if not isinstance(z, np.ndarray):
        z = np.array(z, dtype=np.uint64)
    scratch = np.empty_like(z)
    with np.errstate(over="ignore"):
        np.right_shift(z, np.uint64(30), out=scratch)
        z ^= scratch
        z *= _MIX1
        np.right_shift(z, np.uint64(27), out=scratch)
        z ^= scratch
        z *= _MIX2
        np.right_shift(z, np.uint64(31), out=scratch)
        z ^= scratch
    return z
