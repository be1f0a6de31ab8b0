"""The mixed-record collector of a collection spec: the same object on devices (perturb) and aggregators (estimate).

`collector_for(spec, strategies)` maps a spec onto `ldpstream.mechanisms.mixed.MixedCollector`, purely:
- sampling "auto": k = max(1, min(d, floor(eps / 2.5))) of the d attributes per report (000 Eq. 12);
  "one": k = 1, Harmony's one attribute per user (001 Sec. 3.2); "split": the budget-splitting baseline, every
  attribute at eps/d; an integer: that k;
- a numeric attribute keeps its [lo, hi] (the collector maps it onto [-1, 1]); mechanism "auto" is resolved by
  `ldpstream.mechanisms.numeric.auto.choose_sampled` for this eps, d and k (inside the collector);
- a keyvalue attribute has d = its keys (or buckets), its [lo, hi] and padding; "auto" is the PCKV variant of
  least variance for a rare key (`ldpstream.mechanisms.mixed.choose_keyvalue`);
- a categorical attribute has the codes 0..K-1 of its values, in the spec's order; mechanism "auto" is the oracle
  of least variance at eps/k for K values, `ldpstream.mechanisms.frequency.auto.choose_frequency`; "factorization"
  answers the attribute's workload with the strategy the spec pins by hash, which the caller passes in `strategies`
  (loading them is I/O: `ldpstream.runtime.strategies`);
- a string attribute is collected by a heavy-hitter tree of `ldpstream.mechanisms.open_domain` over its max_length and
alphabet,
  with public hashes seeded by the collection's and attribute's names (`hash_seed`).

With a `privacy` block (`ldpstream.contract.spec.Privacy`) the collector has the lifetime budget lifetime / values and
reports every attribute with a memoized mechanism ("auto": `ldpstream.mechanisms.longitudinal.auto`),
`ldpstream.mechanisms.mixed`'s "over time"; `privacy_budgets` says what a device spends, per report and over its
lifetime, and checks the mechanisms keep it.

The result depends only on the spec's content and the strategies its hashes name (content-addressed), so it is
cached by the spec's canonical JSON (and, to skip serialising the spec on every call, by the identity of the spec
object).
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Mapping
from typing import Any

from ldpstream.contract.spec import (
    FACTORIZATION,
    CategoricalAttribute,
    CollectionSpec,
    KeyValueAttribute,
    SpecError,
    StringAttribute,
    parse_spec,
)
from ldpstream.contract.untrusted import rejecting
from ldpstream.mechanisms.frequency.auto import choose_frequency
from ldpstream.mechanisms.longitudinal.base import Longitudinal
from ldpstream.mechanisms.mixed import CategoricalAttribute as MixedCategorical
from ldpstream.mechanisms.mixed import KeyValueAttribute as MixedKeyValue
from ldpstream.mechanisms.mixed import MixedCollector
from ldpstream.mechanisms.mixed import NumericAttribute as MixedNumeric
from ldpstream.mechanisms.mixed import StringAttribute as MixedString
from ldpstream.mechanisms.multidim import sampled_attributes
from ldpstream.mechanisms.open_domain.strings import StringDomain
from ldpstream.mechanisms.workload.mechanism import FactorizationMechanism

CACHED_SPECS = 256
BUDGET_RTOL = 1e-9  # relative slack on budgets computed in floating point
Strategies = Mapping[str, FactorizationMechanism]  # content hash -> the strategy's mechanism


def sampled_count(spec: CollectionSpec) -> int:
    """k: how many of the spec's attributes each report carries."""
    d = len(spec.attributes)
    if spec.sampling == "auto":
        return sampled_attributes(spec.epsilon, d)
    if spec.sampling == "one":
        return 1
    if spec.sampling == "split":
        return d
    return int(spec.sampling)


def pinned_strategies(spec: CollectionSpec) -> list[str]:
    """The content hashes of the strategies the spec's factorization attributes pin (SpecError if one pins none:
    an unpublished spec, see `ldpstream.runtime.strategies.with_strategies`)."""
    hashes = []
    for a in spec.attributes:
        if isinstance(a, CategoricalAttribute) and a.mechanism == FACTORIZATION:
            if a.strategy is None:
                raise SpecError(f"{spec.key}: attribute {a.name!r} pins no strategy yet (publish the spec, or "
                                f"optimise its strategies first)")
            hashes.append(a.strategy)
    return hashes


@rejecting(SpecError, "not a factorization strategy")
def strategy_from_bytes(data: bytes, content_hash: str) -> FactorizationMechanism:
    """The strategy in .npz bytes, verified against its content hash; SpecError, nothing else, whatever the bytes
    (np.load and zipfile raise many things on damaged ones)."""
    return FactorizationMechanism.load(io.BytesIO(data), expected_hash=content_hash)


def hash_seed(collection: str, attribute: str) -> int:
    """The public seed of a string attribute's hashes: fixed by the collection's and the attribute's names, so
    every version, device and worker hashes alike."""
    return int.from_bytes(hashlib.sha256(f"{collection}/{attribute}".encode()).digest()[:8], "little")


def collector_for(spec: CollectionSpec, strategies: Strategies | None = None) -> MixedCollector:
    """The spec's collector (cached per spec content); SpecError if a pinned strategy is not in `strategies`,
    LDPError if the spec's mechanisms cannot be built."""
    missing = [h for h in pinned_strategies(spec) if h not in (strategies or {})]
    if missing:
        raise SpecError(f"{spec.key}: strategies {', '.join(h[:12] + '...' for h in missing)} are not loaded")
    hit = _by_identity.get(id(spec))
    if hit is not None and hit[0] is spec:  # the entry holds the spec, so its id cannot have been reused
        return hit[1]
    content = spec.canonical_json()
    collector = _by_content.get(content)
    if collector is None:  # the strategies are named by content hash in the spec: the content decides it all
        collector = _build(parse_spec(content), strategies or {})
        _remember(_by_content, content, collector)
    _remember(_by_identity, id(spec), (spec, collector))
    return collector


_by_identity: dict[int, tuple[CollectionSpec, MixedCollector]] = {}
_by_content: dict[str, MixedCollector] = {}


def _remember(cache: dict, key: object, value: object) -> None:  # type: ignore[type-arg]
    if len(cache) >= CACHED_SPECS:
        cache.clear()
    cache[key] = value


def _build(spec: CollectionSpec, strategies: Strategies) -> MixedCollector:
    k = sampled_count(spec)
    attributes: list[MixedCategorical | MixedNumeric | MixedKeyValue | MixedString] = []
    for a in spec.attributes:
        if isinstance(a, CategoricalAttribute) and a.mechanism == FACTORIZATION:
            attributes.append(MixedCategorical(a.name, len(a.values), FACTORIZATION,
                                               mechanism=strategies[a.strategy]))  # type: ignore[index]
        elif isinstance(a, CategoricalAttribute):
            # with a lifetime, ldpstream.mechanisms.mixed resolves auto
            fresh_auto = a.mechanism == "auto" and spec.privacy is None
            oracle = choose_frequency(spec.epsilon / k, len(a.values)) if fresh_auto else a.mechanism
            attributes.append(MixedCategorical(a.name, len(a.values), oracle, parameters=a.parameters))
        elif isinstance(a, KeyValueAttribute):
            attributes.append(MixedKeyValue(a.name, a.domain_size, a.range[0], a.range[1], a.mechanism, a.padding))
        elif isinstance(a, StringAttribute):
            attributes.append(MixedString(a.name, StringDomain(a.max_length, a.alphabet), a.mechanism, a.top,
                                          hash_seed(spec.name, a.name)))
        else:
            attributes.append(MixedNumeric(a.name, a.range[0], a.range[1], a.mechanism, parameters=a.parameters))
    lifetime = None if spec.privacy is None else spec.privacy.per_value
    return MixedCollector(attributes, spec.epsilon, k=k, epsilon_lifetime=lifetime)


def resolved_mechanisms(spec: CollectionSpec, strategies: Strategies | None = None) -> dict[str, str]:
    """Per attribute, the name of the mechanism its reports use (with "auto" resolved)."""
    return {name: mech.name for name, mech in collector_for(spec, strategies).mechanisms.items()}


def privacy_budgets(spec: CollectionSpec, strategies: Strategies | None = None) -> dict[str, Any]:
    """What a device spends on the spec's collection: {"per_report", "lifetime", "values", "attributes": {name:
    {"mechanism", "one_report", "per_value", "parameters"}}} ("parameters": a memoized mechanism's, from its
    `parameters()`, else None). Without a privacy block "lifetime" and "values" are None (T reports
    cost T per_report) and "per_value" is None; SpecError if a mechanism would spend more than the spec states."""
    collector = collector_for(spec, strategies)
    k = collector.k
    attributes: dict[str, dict[str, Any]] = {}
    for name, mech in collector.mechanisms.items():
        per_value = getattr(mech, "epsilon_lifetime", None) if spec.privacy is not None else None
        parameters = mech.parameters() if isinstance(mech, Longitudinal) else None
        attributes[name] = {"mechanism": mech.name, "one_report": mech.epsilon, "per_value": per_value,
                            "parameters": parameters}
        if mech.epsilon > spec.epsilon / k * (1 + BUDGET_RTOL):
            raise SpecError(f"{spec.key}: {name}'s {mech.name} spends {mech.epsilon:g} per report > eps / k = "
                            f"{spec.epsilon / k:g}")
        if spec.privacy is not None and not (per_value is not None
                                             and per_value <= spec.privacy.per_value / k * (1 + BUDGET_RTOL)):
            raise SpecError(f"{spec.key}: {name}'s {mech.name} cannot keep the lifetime bound: it spends "
                            f"{per_value} per value, the spec allows lifetime / (k values) = "
                            f"{spec.privacy.per_value / k:g}")
    privacy = spec.privacy
    return {"per_report": spec.epsilon, "lifetime": None if privacy is None else privacy.lifetime,
            "values": None if privacy is None else privacy.values, "attributes": attributes}
