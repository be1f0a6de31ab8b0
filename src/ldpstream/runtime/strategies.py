"""Factorization strategies by content hash: optimised when a spec is published, kept in `ldp.strategies`.

A categorical attribute with `mechanism: factorization` answers its `workload` with a strategy Q optimised for
the attribute's epsilon (the spec's epsilon / k). `with_strategies` optimises the strategies a spec lacks
(deterministic: seed 0), stores each in the compacted topic `ldp.strategies` (key = the sha256 content hash of
Q, W and epsilon; value = the .npz bytes) and returns the spec with the hashes filled in, so a published spec
version pins its strategies. `load_strategy(hash)` reads one back (a local cache first), verified against its
hash; `strategies_for(spec)` loads every strategy a spec pins, for `ldpstream.contract.collector.collector_for`.
The bytes of the topic and of the cache are outside bytes: `strategy_from_bytes` returns the strategy of the
hash or raises SpecError, nothing else, whatever they are; only bytes that decode are cached.
"""

from __future__ import annotations

import io
from pathlib import Path

from ldpstream.contract.collector import Strategies, pinned_strategies, strategy_from_bytes
from ldpstream.contract.files import write_atomically
from ldpstream.contract.spec import FACTORIZATION, CategoricalAttribute, CollectionSpec, SpecError
from ldpstream.contract.topics import STRATEGIES_TOPIC
from ldpstream.mechanisms.workload.mechanism import FactorizationMechanism
from ldpstream.mechanisms.workload.workloads import workload_by_name
from ldpstream.runtime.kafka import ReportProducer, ensure_topic, read_to_end
from ldpstream.runtime.settings import Settings

OPTIMIZER_SEED = 0


def cache_dir() -> Path:
    """Where strategies are cached locally (`$LDP_STATE_DIR/strategies`)."""
    path = Settings.from_env().state_dir / "strategies"
    path.mkdir(parents=True, exist_ok=True)
    return path


def optimise(attr: CategoricalAttribute, epsilon: float) -> FactorizationMechanism:
    """The attribute's mechanism with a strategy optimised for its workload at `epsilon` (seed 0)."""
    if attr.workload is None:
        raise SpecError(f"attribute {attr.name!r} has no workload")
    workload = workload_by_name(attr.workload, len(attr.values))
    return FactorizationMechanism.optimized(workload, epsilon, seed=OPTIMIZER_SEED)  # types are the codes 0..K-1


def with_strategies(spec: CollectionSpec, epsilon: float, bootstrap: str | None) -> CollectionSpec:
    """The spec with every factorization attribute's strategy hash filled in (optimised and stored if missing).

    `epsilon` is each attribute's share (spec epsilon / k); with `bootstrap` None the strategies are only cached
    locally (validation, offline runs).
    """
    attributes = list(spec.attributes)
    for i, attr in enumerate(attributes):
        if not (isinstance(attr, CategoricalAttribute) and attr.mechanism == FACTORIZATION):
            continue
        if attr.strategy is not None:
            load_strategy(attr.strategy, bootstrap)  # it must exist and match
            continue
        mechanism = optimise(attr, epsilon)
        path = strategy_path(mechanism.hash)
        if not path.exists():
            saved = io.BytesIO()
            mechanism.save(saved)
            write_atomically(path, saved.getvalue())
        if bootstrap is not None:
            store_strategy(path, mechanism.hash, bootstrap)
        attributes[i] = attr.replace(strategy=mechanism.hash)
    return spec.replace(attributes=attributes)


def strategies_for(spec: CollectionSpec, bootstrap: str | None = None) -> Strategies:
    """Every strategy the spec pins, by hash (from the local cache, else from `ldp.strategies`)."""
    return {h: load_strategy(h, bootstrap) for h in pinned_strategies(spec)}


def store_strategy(path: Path, content_hash: str, bootstrap: str) -> None:
    """Put a strategy file in `ldp.strategies` under its hash (idempotent: same key, same bytes)."""
    ensure_topic(bootstrap, STRATEGIES_TOPIC, 1, compacted=True)
    producer = ReportProducer(bootstrap)
    producer.produce(STRATEGIES_TOPIC, path.read_bytes(), content_hash.encode())
    producer.flush(timeout_s=60.0)


def load_strategy(content_hash: str, bootstrap: str | None = None) -> FactorizationMechanism:
    """The strategy with this content hash: from the local cache, else the first message under the hash in
    `ldp.strategies` that holds it (then cached). SpecError if there is none; a damaged cache file is replaced."""
    path = strategy_path(content_hash)
    if path.exists():
        try:
            return strategy_from_bytes(path.read_bytes(), content_hash)
        except SpecError:
            path.unlink(missing_ok=True)
    bootstrap = bootstrap or Settings.from_env().bootstrap
    ensure_topic(bootstrap, STRATEGIES_TOPIC, 1, compacted=True)
    problems: list[str] = []
    for key, value, _ in read_to_end(bootstrap, STRATEGIES_TOPIC):
        if key != content_hash.encode() or not value:
            continue
        try:
            mechanism = strategy_from_bytes(value, content_hash)
        except SpecError as exc:
            problems.append(str(exc))
            continue
        write_atomically(path, value)
        return mechanism
    raise SpecError(f"strategy {content_hash[:12]}... is not in {STRATEGIES_TOPIC}; publish its spec first"
                    + "".join(f"; skipped a message under its hash: {p}" for p in problems))


def strategy_path(content_hash: str) -> Path:
    """Where a strategy is cached locally (by its content hash)."""
    return cache_dir() / f"{content_hash}.npz"


