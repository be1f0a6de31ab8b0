"""Mechanisms by name: the names the CLI, the collection specs and the training jobs use.

This is the one list of mechanisms: `auto` (`ldpstream.mechanisms.numeric.auto`, `ldpstream.mechanisms.frequency.auto`),
the vector mechanisms of `ldpstream.mechanisms.multidim`, `ldp mechanisms list` and the test suite's contract, audit and
doctest checks enumerate it. A new mechanism is a module and one line here; what `auto` and
`ldpstream.mechanisms.multidim` need to know about it, its class declares (`auto_rank`, and for a numeric one
`vector_scheme` and `auto_one_dimensional`). LONGITUDINAL lists the memoized mechanisms
(`ldpstream.mechanisms.longitudinal`), which the CLI, the contract and audit checks enumerate but `auto` does not;
DISTRIBUTION the mechanisms a numeric attribute names to get its distribution (`ldpstream.mechanisms.distribution`),
which `auto` does not pick either.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, cast

from ldpstream.mechanisms.base import LDPError, Mechanism

if TYPE_CHECKING:
    from ldpstream.mechanisms.distribution.base import DistributionMechanism
    from ldpstream.mechanisms.frequency.base import FrequencyOracle
    from ldpstream.mechanisms.keyvalue.base import KeyValueMechanism
    from ldpstream.mechanisms.longitudinal.base import Longitudinal
    from ldpstream.mechanisms.numeric.base import NumericMechanism

# name -> "module:Class"; imported on first use so that listing names costs nothing.
NUMERIC: dict[str, str] = {
    "laplace": "ldpstream.mechanisms.numeric.laplace:Laplace",
    "scdf": "ldpstream.mechanisms.numeric.staircase:SCDF",
    "staircase": "ldpstream.mechanisms.numeric.staircase:Staircase",
    "duchi": "ldpstream.mechanisms.numeric.duchi:Duchi",
    "pm": "ldpstream.mechanisms.numeric.piecewise:Piecewise",
    "hm": "ldpstream.mechanisms.numeric.hybrid:Hybrid",
    "harmony": "ldpstream.mechanisms.numeric.harmony:Harmony",
}
FREQUENCY: dict[str, str] = {
    "grr": "ldpstream.mechanisms.frequency.grr:GRR",
    "sue": "ldpstream.mechanisms.frequency.unary:SUE",
    "oue": "ldpstream.mechanisms.frequency.unary:OUE",
    "blh": "ldpstream.mechanisms.frequency.local_hash:BLH",
    "olh": "ldpstream.mechanisms.frequency.local_hash:OLH",
    "hadamard": "ldpstream.mechanisms.frequency.hadamard:HadamardResponse",
}
# Memoized mechanisms for reports every window (`ldpstream.mechanisms.longitudinal`): apart, since `auto` and
# `ldpstream.mechanisms.multidim` must not pick them (a device needs its secret to run them); their classes say which
# kind they are (`Longitudinal.kind`).
LONGITUDINAL: dict[str, str] = {
    "l-grr": "ldpstream.mechanisms.longitudinal.two_stage:LGRR",
    "l-oue": "ldpstream.mechanisms.longitudinal.two_stage:LOUE",
    "l-osue": "ldpstream.mechanisms.longitudinal.two_stage:LOSUE",
    "l-sue": "ldpstream.mechanisms.longitudinal.two_stage:LSUE",
    "rappor": "ldpstream.mechanisms.longitudinal.rappor:RAPPOR",
    "1bitmean": "ldpstream.mechanisms.longitudinal.one_bit_mean:OneBitMean",
    "dbitflip": "ldpstream.mechanisms.longitudinal.dbitflip:DBitFlip",
}
# Key-value mechanisms (`ldpstream.mechanisms.keyvalue`): a device's set of (key, value) pairs, not one value; apart,
# like LONGITUDINAL, so that `auto` never picks them and the CLI's tables of one-value mechanisms do not list them.
KEYVALUE: dict[str, str] = {
    "privkv": "ldpstream.mechanisms.keyvalue.privkv:PrivKV",
    "pckv-ue": "ldpstream.mechanisms.keyvalue.pckv:PCKVUE",
    "pckv-grr": "ldpstream.mechanisms.keyvalue.pckv:PCKVGRR",
}

# Open-domain mechanisms over strings (`ldpstream.mechanisms.open_domain`): sketch oracles, and the heavy-hitter trees a
# `type: string` attribute names (HEAVY_HITTERS); apart, since their values are strings, not codes or numbers.
OPEN_DOMAIN: dict[str, str] = {
    "cms": "ldpstream.mechanisms.open_domain.sketch:CMS",
    "hcms": "ldpstream.mechanisms.open_domain.sketch:HCMS",
    "hashed_grr": "ldpstream.mechanisms.open_domain.sketch:HashedGRR",
    "hcms_tree": "ldpstream.mechanisms.open_domain.tree:HCMSTree",
    "pem": "ldpstream.mechanisms.open_domain.tree:PEM",
    "sfp": "ldpstream.mechanisms.open_domain.sfp:SFP",
}
HEAVY_HITTERS = ("hcms_tree", "pem", "sfp")

# Distribution mechanisms (`ldpstream.mechanisms.distribution`): one numeric value per device whose statistics give its
# distribution as well as its mean (a histogram of the reports, or a tree of counts); apart, like LONGITUDINAL, since
# `auto` and the vector mechanisms must not pick them: a numeric attribute names one to ask for its distribution.
DISTRIBUTION: dict[str, str] = {
    "sw": "ldpstream.mechanisms.distribution.square_wave:SquareWave",
    "hh": "ldpstream.mechanisms.distribution.hierarchy:HierarchicalHistogram",
}

# Gradient randomizers (`ldpstream.mechanisms.gradients`): one clipped d-dimensional vector per device, for training;
# apart, since their reports and estimates are whole vectors (`GradientMechanism`, not `Mechanism`). pm, hm and duchi
# are the cube mechanisms of `ldpstream.mechanisms.multidim` behind that API.
GRADIENT: dict[str, str] = {
    "privunitg": "ldpstream.mechanisms.gradients.privunit:PrivUnitG",
    "privunit2": "ldpstream.mechanisms.gradients.privunit:PrivUnit2",
    "projunit": "ldpstream.mechanisms.gradients.projunit:ProjUnit",
    "duchi-l2": "ldpstream.mechanisms.gradients.duchi_l2:DuchiL2",
    "pm": "ldpstream.mechanisms.gradients.cube:PMGradient",
    "hm": "ldpstream.mechanisms.gradients.cube:HMGradient",
    "duchi": "ldpstream.mechanisms.gradients.cube:DuchiGradient",
}


def _load(target: str) -> type[Mechanism]:
    module, cls = target.split(":")
    return getattr(importlib.import_module(module), cls)


def known_names() -> list[str]:
    """Every registered name, numeric, frequency oracles, then longitudinal, each sorted."""
    return sorted(NUMERIC) + sorted(FREQUENCY) + sorted(LONGITUDINAL)


def mechanism_class(name: str) -> type[Mechanism]:
    """The class registered under `name` (numeric, frequency oracle or longitudinal)."""
    target = NUMERIC.get(name) or FREQUENCY.get(name) or LONGITUDINAL.get(name)
    if target is None:
        raise LDPError(f"unknown mechanism {name!r}; known: {known_names()}")
    return _load(target)


def _class_in(table: dict[str, str], kind: str, name: str) -> type[Mechanism]:
    if name not in table:
        raise LDPError(f"unknown {kind} {name!r}; known: {list(table)}")
    return _load(table[name])


def open_domain_class(name: str) -> type[Mechanism]:
    """The class registered under `name` in OPEN_DOMAIN."""
    return _class_in(OPEN_DOMAIN, "open-domain mechanism", name)


def numeric_class(name: str) -> type[NumericMechanism]:
    """The class registered under `name` in NUMERIC."""
    return cast("type[NumericMechanism]", _class_in(NUMERIC, "numeric mechanism", name))


def frequency_class(name: str) -> type[FrequencyOracle]:
    """The class registered under `name` in FREQUENCY."""
    return cast("type[FrequencyOracle]", _class_in(FREQUENCY, "frequency oracle", name))


def longitudinal_class(name: str) -> type[Longitudinal]:
    """The class registered under `name` in LONGITUDINAL."""
    return cast("type[Longitudinal]", _class_in(LONGITUDINAL, "longitudinal mechanism", name))


def longitudinal_parameters(name: str) -> tuple[str, ...]:
    """The structural parameters of the longitudinal mechanism `name` that a spec may set (RAPPOR's hashes,
    bloom_bits and cohorts; dBitFlip's sampled; 1BitMean's buckets): the keywords of its `with_budgets` after the
    budgets and the domain. The stage probabilities (f, p, q, gamma) are not among them: the budgets fix them."""
    return tuple(inspect.signature(longitudinal_class(name).with_budgets).parameters)[3:]


def keyvalue_class(name: str) -> type[KeyValueMechanism]:
    """The class registered under `name` in KEYVALUE."""
    return cast("type[KeyValueMechanism]", _class_in(KEYVALUE, "key-value mechanism", name))


def distribution_class(name: str) -> type[DistributionMechanism]:
    """The class registered under `name` in DISTRIBUTION."""
    return cast("type[DistributionMechanism]", _class_in(DISTRIBUTION, "distribution mechanism", name))


def gradient_class(name: str) -> type:
    """The class registered under `name` in GRADIENT (a `ldpstream.mechanisms.gradients.GradientMechanism`; typed
    there, since its module imports `ldpstream.mechanisms.multidim`, which imports this one)."""
    if name not in GRADIENT:
        raise LDPError(f"unknown gradient mechanism {name!r}; known: {list(GRADIENT)}")
    module, cls = GRADIENT[name].split(":")
    return cast(type, getattr(importlib.import_module(module), cls))


def make_distribution(name: str, epsilon: float, **parameters: Any) -> DistributionMechanism:
    """The distribution mechanism `name` at eps; `parameters` among its class's `parameter_names()` (e.g. bins)."""
    cls = distribution_class(name)
    unknown = sorted(set(parameters) - set(cls.parameter_names()))
    if unknown:
        raise LDPError(f"{name!r} has no parameter {', '.join(map(repr, unknown))} "
                       f"(it takes {', '.join(cls.parameter_names())})")
    return cls(epsilon, **parameters)  # type: ignore[call-arg]


def make_keyvalue(name: str, epsilon: float, domain: int, padding: int = 1) -> KeyValueMechanism:
    """The key-value mechanism `name` over `domain` keys; `padding` is PCKV's l (PrivKV samples a key of the
    domain and takes none)."""
    cls = keyvalue_class(name)
    return cls(epsilon, domain, padding) if cls.takes_padding else cls(epsilon, domain)  # type: ignore[call-arg]


def make_longitudinal(name: str, epsilon_lifetime: float, epsilon_first: float,
                      domain: int | None = None, **parameters: Any) -> Longitudinal:
    """The longitudinal mechanism `name` whose memo is eps_inf- and one report eps_1-LDP (`with_budgets`); `domain`
    is K for a frequency mechanism, None for a numeric one; `parameters` among `longitudinal_parameters(name)`."""
    accepted = longitudinal_parameters(name)
    unknown = sorted(set(parameters) - set(accepted))
    if unknown:
        takes = f"it takes {', '.join(accepted)}" if accepted else "it takes none"
        raise LDPError(f"{name!r} has no parameter {', '.join(map(repr, unknown))} ({takes})")
    return longitudinal_class(name).with_budgets(epsilon_lifetime, epsilon_first, domain, **parameters)


def takes_domain(name: str) -> bool:
    """Whether the mechanism `name` collects a category of a domain of size K (and `make` needs the domain)."""
    return name in FREQUENCY or (name in LONGITUDINAL and longitudinal_class(name).kind == "frequency")


def by_preference(names: Iterable[str]) -> tuple[str, ...]:
    """The registered `names` in `auto`'s tie-break order: by their classes' `auto_rank`, lowest first."""
    return tuple(sorted(names, key=lambda name: mechanism_class(name).auto_rank))


def make(name: str, epsilon: float, domain: int | None = None, **params: Any) -> Mechanism:
    """Build a mechanism by name: numeric ones take epsilon, frequency oracles epsilon and the domain size.

    For a longitudinal mechanism epsilon is its lifetime budget; `params` name the rest (e.g. epsilon_first).
    """
    cls = mechanism_class(name)
    if takes_domain(name):
        if domain is None:
            raise LDPError(f"frequency oracle {name!r} needs a domain size")
        return cls(epsilon, domain, **params)  # type: ignore[call-arg]
    return cls(epsilon, **params)  # type: ignore[call-arg]
