"""Pick the longitudinal mechanism a collection spec's "auto" attribute gets, for its two budgets (eps_inf, eps_1).

Numeric attributes: 1BitMean, the one numeric longitudinal mechanism. Categorical ones: the two-stage oracle (L-GRR,
L-OUE, L-OSUE, L-SUE) of least one-report variance for a rare value, each oracle's own closed form
(`worst_case_variance`) at the budgets and K, as `ldpstream.mechanisms.frequency.auto` does for fresh noise; an oracle
that cannot reach the pair (L-OUE near eps_1 = eps_inf) is left out, and of equal variances the lower `auto_rank` wins.
RAPPOR and dBitFlip are chosen only by name (their variance depends on parameters a spec does not set).
"""

from __future__ import annotations

from typing import Literal

from ldpstream.mechanisms import registry
from ldpstream.mechanisms.base import LDPError
from ldpstream.mechanisms.longitudinal.base import Longitudinal

TWO_STAGE = ("l-grr", "l-oue", "l-osue", "l-sue")
TIE_RTOL = 1e-9


def choose_longitudinal(kind: Literal["frequency", "numeric"], epsilon_lifetime: float, epsilon_first: float,
                        domain_size: int | None = None) -> str:
    """The registry name of the longitudinal mechanism "auto" means for this kind, budgets and K.

    Examples
    --------
    >>> choose_longitudinal("frequency", 2.0, 1.0, 4), choose_longitudinal("frequency", 2.0, 1.0, 64)
    ('l-grr', 'l-osue')
    >>> choose_longitudinal("numeric", 2.0, 1.0)
    '1bitmean'
    """
    if kind == "numeric":
        return "1bitmean"
    built: list[Longitudinal] = []
    errors = []
    for name in registry.by_preference(TWO_STAGE):
        try:
            built.append(registry.make_longitudinal(name, epsilon_lifetime, epsilon_first, domain_size))
        except LDPError as exc:
            errors.append(f"{name}: {exc}")
    if not built:
        raise LDPError(f"no longitudinal frequency oracle reaches these budgets ({'; '.join(errors)})")
    variances = [m.worst_case_variance() for m in built]  # type: ignore[attr-defined]
    best = min(variances)
    return next(type(m).name for m, v in zip(built, variances, strict=True) if v <= best * (1 + TIE_RTOL))
