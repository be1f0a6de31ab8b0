"""Pick the frequency oracle with the lowest variance for a given epsilon and domain size (004 Table 1).

The criterion is each oracle's own closed form, `worst_case_variance()` (n * Var[f_hat] for a rare value), at
the given epsilon and K; nothing is hard-coded. GRR's variance grows with K, the others' do not, so GRR wins for
small K and OUE or OLH otherwise (OLH is OUE's variance at g = e^eps + 1; rounding g raises it, and its exact
hash, which collides a relative O(1/P) less than an ideal one, can lower it a hair below OUE's at large eps).

The candidates are the registered frequency oracles (`ldpstream.mechanisms.registry`). Ties: variances within a relative
1e-6 of the best count as equal (BLH and the Hadamard response have the same formula; hash-bucket rounding moves BLH by
~1e-7), and among those the oracle with the smallest report wins (`report_bits`), then the cheaper aggregation: the
lower `auto_rank`, which orders GRR, Hadamard, OUE, SUE, OLH, BLH (GRR is a bincount, Hadamard one transform, UE a
column sum, local hashing evaluates a hash per report and value).
"""

from __future__ import annotations

from ldpstream.mechanisms import registry

TIE_RTOL = 1e-6


def frequency_candidates() -> tuple[str, ...]:
    """The oracles `choose_frequency` compares, cheapest aggregation first (the last tie-break)."""
    return registry.by_preference(registry.FREQUENCY)


def choose_frequency(epsilon: float, domain_size: int) -> str:
    """The registry name of the oracle with the lowest rare-value variance at (epsilon, K); ties as documented.

    Examples
    --------
    >>> choose_frequency(1.0, 4), choose_frequency(1.0, 1024), choose_frequency(4.0, 16)
    ('grr', 'oue', 'grr')
    """
    oracles = [registry.frequency_class(name)(epsilon, domain_size) for name in frequency_candidates()]
    best = min(o.worst_case_variance() for o in oracles)
    tied = [
        (o.report_bits, o.auto_rank, o.name) for o in oracles if o.worst_case_variance() <= best * (1 + TIE_RTOL)
    ]
    return min(tied)[2]
