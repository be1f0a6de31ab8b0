"""Harmony's 1-bit numeric method for one value (001 Alg. 2 with d = 1).

With one attribute, 001 Alg. 2 reports +-(e^eps + 1)/(e^eps - 1) with P[+] = (t (e^eps - 1) + e^eps + 1) / (2e^eps + 2)
(001 Eq. 4), which is exactly Duchi et al.'s 1-D mechanism (000 Eq. 3); the privacy proof is 001 Lemma 1.
The d-attribute form (sample one attribute uniformly, report it at full eps scaled by d) is
`ldpstream.mechanisms.multidim.make_vector_mechanism("harmony", eps, d)`.
"""

from __future__ import annotations

from ldpstream.mechanisms.numeric.duchi import Duchi


class Harmony(Duchi):
    """Harmony's 1-bit report of one value in [-1, 1] (001 Alg. 2, d = 1): the sign carries the bit.

    Examples
    --------
    >>> Harmony(1.0).worst_case_variance() == Duchi(1.0).worst_case_variance()
    True
    """

    name = "harmony"
    auto_rank = 30
    vector_scheme = "sample_one"
    auto_one_dimensional = False  # in one dimension it is Duchi's mechanism
