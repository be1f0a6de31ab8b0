"""The mixed-record collector of a collection spec: the same object on devices (perturb) and aggregators (estimate).

`collector_for(spec)` maps a spec onto `ldp.mixed.MixedCollector`:
- sampling "auto": k = max(1, min(d, floor(eps / 2.5))) of the d attributes per report (000 Eq. 12);
  "one": k = 1, Harmony's one attribute per user (001 Sec. 3.2); "split": the budget-splitting baseline, every
  attribute at eps/d; an integer: that k;
- a numeric attribute keeps its [lo, hi] (the collector maps it onto [-1, 1]); mechanism "auto" is resolved by
  `ldp.numeric.auto.choose_sampled` for this eps, d and k (inside the collector);
- a categorical attribute has the codes 0..K-1 of its values, in the spec's order; mechanism "auto" is the oracle
  of least variance at eps/k for K values, `ldp.frequency.auto.choose_frequency`; "factorization" answers the
  attribute's workload with the strategy the spec pins by hash (`producer.strategies`).

The result depends only on the spec's content (and the `ldp` code), and is cached by the spec's canonical JSON
(and, to skip serialising the spec on every call, by the identity of the spec object).
"""

from __future__ import annotations

from functools import lru_cache

from ldp.frequency.auto import choose_frequency
from ldp.mixed import CategoricalAttribute as MixedCategorical
from ldp.mixed import MixedCollector
from ldp.mixed import NumericAttribute as MixedNumeric
from ldp.multidim import sampled_attributes
from producer.spec import FACTORIZATION, CategoricalAttribute, CollectionSpec, parse_spec
from producer.strategies import load_strategy, with_strategies

CACHED_SPECS = 256


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


def collector_for(spec: CollectionSpec) -> MixedCollector:
    """The spec's collector (cached per spec content); LDPError if the spec's mechanisms cannot be built."""
    hit = _by_identity.get(id(spec))
    if hit is not None and hit[0] is spec:  # the entry holds the spec, so its id cannot have been reused
        return hit[1]
    collector = _collector(spec.canonical_json())
    if len(_by_identity) >= CACHED_SPECS:
        _by_identity.clear()
    _by_identity[id(spec)] = (spec, collector)
    return collector


_by_identity: dict[int, tuple[CollectionSpec, MixedCollector]] = {}


@lru_cache(maxsize=CACHED_SPECS)
def _collector(canonical_json: str) -> MixedCollector:
    spec = parse_spec(canonical_json)
    k = sampled_count(spec)
    spec = with_strategies(spec, spec.epsilon / k, bootstrap=None)  # published hashes are loaded, others optimised
    attributes: list[MixedCategorical | MixedNumeric] = []
    for a in spec.attributes:
        if isinstance(a, CategoricalAttribute) and a.mechanism == FACTORIZATION:
            attributes.append(MixedCategorical(a.name, len(a.values), FACTORIZATION,
                                               mechanism=load_strategy(a.strategy)))  # type: ignore[arg-type]
        elif isinstance(a, CategoricalAttribute):
            oracle = choose_frequency(spec.epsilon / k, len(a.values)) if a.mechanism == "auto" else a.mechanism
            attributes.append(MixedCategorical(a.name, len(a.values), oracle))
        else:
            attributes.append(MixedNumeric(a.name, a.range[0], a.range[1], a.mechanism))
    return MixedCollector(attributes, spec.epsilon, k=k)


def resolved_mechanisms(spec: CollectionSpec) -> dict[str, str]:
    """Per attribute, the name of the mechanism its reports use (with "auto" resolved)."""
    return {name: mech.name for name, mech in collector_for(spec).mechanisms.items()}
