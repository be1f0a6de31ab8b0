"""What every longitudinal mechanism declares: two budgets, its parameters, and perturbation with device secrets.

A longitudinal mechanism is run by the same device at every collection window. `epsilon` (the attribute every
`Mechanism` has) is what ONE report guarantees on its own, `epsilon_lifetime` what ALL the reports of a device about one
memoized value guarantee together, however many there are. `perturb(values, rng, secrets)` takes the devices' 64-bit
secrets (`ldpstream.mechanisms.longitudinal.memo`): the memoized part of a report is a function of (secret, memo key),
the rest is fresh noise from rng. Without secrets every row is a new device (fresh secrets from rng), which is the
one-report channel that the estimators' unbiasedness and variance are stated for. `memo_keys(values, secrets)` says
which memo each report reads (the value's code, or 1BitMean's rounded value): a device spends eps_lifetime once per
distinct key (`ldpstream.device.ledger`). `with_budgets(eps_inf, eps_1, domain)` builds a mechanism whose one report is
exactly eps_1-LDP and whose memo is eps_inf-LDP (a collection spec names both).
"""

from __future__ import annotations

import math
from abc import abstractmethod
from typing import Any, ClassVar, Literal

import numpy as np

from ldpstream.mechanisms.base import LDPError, check_epsilon


class Longitudinal:
    """Mixin of the longitudinal mechanisms: budgets, parameters and the privacy summary the CLI prints."""

    name: ClassVar[str]  # its registry name, as every `Mechanism` it is mixed into declares
    # "frequency" takes a domain size (`ldpstream.mechanisms.registry.make`), "numeric" a value in [-1, 1].
    kind: ClassVar[Literal["frequency", "numeric"]]
    epsilon: float
    epsilon_lifetime: float

    @classmethod
    @abstractmethod
    def with_budgets(cls, epsilon_lifetime: float, epsilon_first: float,
                     domain_size: int | None = None) -> Longitudinal:
        """The mechanism (other parameters at their defaults) whose memo is eps_inf- and one report eps_1-LDP;
        LDPError if it cannot reach that pair. `domain_size` is K for a frequency mechanism, None for a numeric one."""

    @abstractmethod
    def memo_keys(self, values: np.ndarray, secrets: np.ndarray) -> np.ndarray:
        """Per device (int64): the key of the memo its report of `values` reads; each distinct key costs the device
        eps_lifetime once."""

    @abstractmethod
    def parameters(self) -> dict[str, Any]:
        """The mechanism's parameters by name (probabilities of both stages, hashes, buckets...)."""

    @abstractmethod
    def memo_parameters(self) -> tuple[tuple[str, float], ...]:
        """What fixes the memos, by name, in the order the memo name lists them (docs/reference/protocol.md,
        "Memo naming"): the budgets and the structural parameters (domain size, hashes, buckets...)."""

    def privacy(self) -> dict[str, Any]:
        """{"epsilon_lifetime", "epsilon_one_report", "parameters"}: the two guarantees and what they come from."""
        return {
            "epsilon_lifetime": self.epsilon_lifetime,
            "epsilon_one_report": self.epsilon,
            "parameters": self.parameters(),
        }


def check_budgets(epsilon_lifetime: float, epsilon_first: float) -> tuple[float, float]:
    """(eps_inf, eps_1) as floats with 0 < eps_1 < eps_inf, or LDPError."""
    lifetime, first = check_epsilon(epsilon_lifetime), check_epsilon(epsilon_first)
    if not first < lifetime:
        raise LDPError(f"the one-report epsilon {first:g} must be below the lifetime epsilon {lifetime:g}")
    return lifetime, first


def check_gamma(gamma: float) -> float:
    """The output-perturbation flip probability as a float in [0, 1/2), or LDPError."""
    g = float(gamma)
    if not 0.0 <= g < 0.5:
        raise LDPError(f"gamma must lie in [0, 1/2), got {gamma!r}")
    return g


def check_secrets(secrets: np.ndarray, n: int) -> np.ndarray:
    """The n devices' secrets as a uint64 vector, or LDPError."""
    keys = np.atleast_1d(np.asarray(secrets))
    if keys.shape != (n,) or keys.dtype != np.uint64:
        raise LDPError(f"secrets must be a uint64 vector with one entry per value ({n}), got {keys.dtype} {keys.shape}")
    return keys


def check_no_domain(name: str, domain_size: int | None) -> None:
    """LDPError if a numeric mechanism is given a domain size."""
    if domain_size is not None:
        raise LDPError(f"{name} is numeric: it takes no domain size, got {domain_size!r}")


def flip_for(epsilon: float, target: float) -> float:
    """The gamma for which `flipped_epsilon`(epsilon, gamma) = target (0 < target <= epsilon), or LDPError.

    (E (1 - g) + g) / ((1 - g) + g E) = T, with E = e^eps and T = e^target, is linear in g:
    g = (E - T) / ((E - 1)(T + 1)).

    Examples
    --------
    >>> round(flipped_epsilon(2.0, flip_for(2.0, 0.5)), 12)
    0.5
    """
    lifetime, first = check_epsilon(epsilon), check_epsilon(target)
    if first > lifetime:
        raise LDPError(f"the one-report epsilon {first:g} must not exceed the lifetime epsilon {lifetime:g}")
    big, e = math.exp(lifetime), math.exp(first)
    return (big - e) / ((big - 1) * (e + 1))


def flipped_epsilon(epsilon: float, gamma: float) -> float:
    """The budget of an eps-LDP bit sent through a fresh flip with probability gamma (output perturbation).

    P[y = 1] ranges over gamma + (1 - 2 gamma) [1/(e^eps + 1), e^eps/(e^eps + 1)], so the ratio is
    (e^eps (1 - gamma) + gamma) / ((1 - gamma) + gamma e^eps), the same for y = 0 by symmetry.
    """
    e = math.exp(epsilon)
    return math.log((e * (1 - gamma) + gamma) / ((1 - gamma) + gamma * e))
