"""Mechanisms by name: the names the CLI, the collection specs and the training jobs use."""

from __future__ import annotations

import importlib
from typing import Any

from ldp.base import LDPError, Mechanism

# name -> "module:Class"; imported on first use so that listing names costs nothing.
NUMERIC: dict[str, str] = {
    "laplace": "ldp.numeric.laplace:Laplace",
    "scdf": "ldp.numeric.staircase:SCDF",
    "staircase": "ldp.numeric.staircase:Staircase",
    "duchi": "ldp.numeric.duchi:Duchi",
    "pm": "ldp.numeric.piecewise:Piecewise",
    "hm": "ldp.numeric.hybrid:Hybrid",
    "harmony": "ldp.numeric.harmony:Harmony",
}
FREQUENCY: dict[str, str] = {
    "grr": "ldp.frequency.grr:GRR",
    "sue": "ldp.frequency.unary:SUE",
    "oue": "ldp.frequency.unary:OUE",
    "blh": "ldp.frequency.local_hash:BLH",
    "olh": "ldp.frequency.local_hash:OLH",
    "hadamard": "ldp.frequency.hadamard:HadamardResponse",
}


def mechanism_class(name: str) -> type[Mechanism]:
    """The class registered under `name` (numeric or frequency oracle)."""
    target = NUMERIC.get(name) or FREQUENCY.get(name)
    if target is None:
        raise LDPError(f"unknown mechanism {name!r}; known: {sorted(NUMERIC) + sorted(FREQUENCY)}")
    module, cls = target.split(":")
    return getattr(importlib.import_module(module), cls)


def make(name: str, epsilon: float, domain: int | None = None, **params: Any) -> Mechanism:
    """Build a mechanism by name: numeric ones take epsilon, frequency oracles epsilon and the domain size."""
    cls = mechanism_class(name)
    if name in FREQUENCY:
        if domain is None:
            raise LDPError(f"frequency oracle {name!r} needs a domain size")
        return cls(epsilon, domain, **params)  # type: ignore[call-arg]
    return cls(epsilon, **params)  # type: ignore[call-arg]
