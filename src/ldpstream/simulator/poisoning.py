"""Fake devices: the published poisoning attacks, as reports crafted in vectorised batches (the attack harness
`benchmarks/bench_poisoning.py` and the detectors' tests use them; nothing here is sent anywhere by itself).

Frequency oracles (Cao, Jia and Gong, USENIX Security 2021, Sec. 3-4), r target items T:
- `maximal_gain` (MGA): GRR reports a target picked uniformly; UE sets every target bit and l - r random others, l =
  floor(p + (d - 1) q) the expected ones of an honest report (so a count of ones does not tell); local hashing draws
  `HASH_TRIES` seeds and keeps the one whose bucket holds the most targets, reporting that bucket.
- `random_item` (RIA): a target picked uniformly, perturbed by the protocol.
- `random_value` (RPA): a uniformly random report of the protocol's output space.
- `input`: input poisoning (Cheu, Smith, Ullman, IEEE S&P 2021): the devices hold the targets (target i mod r for
  fake i) and perturb honestly; for a frequency oracle it is RIA with the targets dealt out evenly.
- `adaptive`: an attacker who knows the detectors (`Adaptive`): each report supports at most `per_report` targets
  (one less than the itemset detector's threshold), and only enough fakes carry targets to raise each target by
  `rise` (under the excess-claims bound); the other fakes report honestly a random non-target item, or, where the
  attacker mimics the population (`Adaptive.mimic`, what the published estimates tell it), an item drawn from it.
- `demotion`: reports that support none of the targets, to push them down (the report crafted like an honest one
  otherwise): GRR a non-target uniformly; UE each non-target bit at the rate that gives an honest report's expected
  count of ones, every target bit 0; local hashing a uniformly random seed and a bucket that holds no target under
  it.
Numeric means (Li et al., "Fine-grained poisoning attacks to LDP protocols for mean and variance estimation",
USENIX Security 2023): `maximal_gain` reports the largest output; `random_value` a uniform output; `input` the
largest input (1) perturbed honestly; `adaptive` spreads reports under the detectors' caps (`adaptive_numeric`);
`demotion` reports the smallest output (the mean pushed down).
Key-value (Wu et al., USENIX Security 2022, M2GA): a target key with value +1, the report crafted like the oracle's;
`demotion` and `adaptive` as for the frequency oracles (`fake_keyvalue_reports`).
Heavy hitters (prefix trees, `fake_tree_reports`): `demotion` reports, at a level drawn uniformly, a hash drawn
uniformly and a bucket that holds none of the targets' prefixes under it (hashed GRR's levels, PEM).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ldpstream.mechanisms.base import Reports
from ldpstream.mechanisms.frequency.base import FrequencyOracle
from ldpstream.mechanisms.frequency.grr import GRR
from ldpstream.mechanisms.frequency.local_hash import HASH_PRIME, LocalHash, hash_buckets
from ldpstream.mechanisms.frequency.unary import UnaryEncoding
from ldpstream.mechanisms.keyvalue.base import KeyValueMechanism
from ldpstream.mechanisms.keyvalue.pckv import PCKVGRR, PCKVUE
from ldpstream.mechanisms.numeric.base import NumericMechanism
from ldpstream.mechanisms.open_domain.sketch import HashedGRR
from ldpstream.mechanisms.open_domain.tree import PrefixTree

ATTACKS = ("maximal_gain", "random_item", "random_value", "input", "adaptive", "demotion")
HASH_TRIES = 1000  # seeds an MGA fake of local hashing tries (Cao et al.)
SEED_POOL = 1 << 16  # the seeds the fakes draw their tries from (each fake tries HASH_TRIES of them)


class AttackError(ValueError):
    """An attack that does not apply to the mechanism, or bad attack arguments."""


@dataclass(frozen=True)
class Adaptive:
    """What the adaptive attacker knows of the detectors: a report may support at most `per_report` targets (None:
    any number), and each target may rise by at most `rise` (estimated frequency; None: no limit) in a window of
    about `population` reports (the published report counts tell it); `mimic`, the item distribution its fakes that
    carry no target draw from, so that they look like the population (None: uniform over the non-targets)."""

    per_report: int | None = None
    rise: float | None = None
    population: int = 0
    mimic: np.ndarray | None = field(default=None, compare=False)


def check_targets(targets: Sequence[int] | np.ndarray, domain: int) -> np.ndarray:
    """The target items as distinct int64 codes in 0..domain-1."""
    t = np.unique(np.asarray(targets, dtype=np.int64))
    if not len(t) or t.min() < 0 or t.max() >= domain or len(t) != len(np.asarray(targets)):
        raise AttackError(f"targets must be distinct codes in 0..{domain - 1}")
    return t


def fake_frequency_reports(oracle: FrequencyOracle, attack: str, targets: Sequence[int] | np.ndarray, m: int,
                           rng: np.random.Generator, adaptive: Adaptive = Adaptive()) -> Reports:
    """m fake reports of `attack` (module docstring) promoting `targets`."""
    t = check_targets(targets, oracle.domain_size)
    if attack == "maximal_gain":
        return _maximal(oracle, t, m, rng, None)
    if attack == "random_item":
        return oracle.perturb(t[rng.integers(0, len(t), size=m)], rng)
    if attack == "input":
        return oracle.perturb(t[np.arange(m) % len(t)], rng)
    if attack == "random_value":
        return _uniform_output(oracle, m, rng)
    if attack == "demotion":
        return _demoting(oracle, t, m, rng)
    if attack == "adaptive":
        carriers = m if adaptive.rise is None else min(m, _carriers(oracle, t, adaptive, rng))
        crafted = _maximal(oracle, t, carriers, rng, adaptive.per_report)
        if adaptive.mimic is None:
            others = np.setdiff1d(np.arange(oracle.domain_size), t)
            held = others[rng.integers(0, len(others), size=m - carriers)]
        else:
            held = rng.choice(oracle.domain_size, size=m - carriers, p=adaptive.mimic)
        honest = oracle.perturb(held, rng)
        return {k: np.concatenate([np.asarray(crafted[k]), np.asarray(honest[k])]).astype(honest[k].dtype)
                for k in honest}
    raise AttackError(f"unknown attack {attack!r}; one of {ATTACKS}")


def _carriers(oracle: FrequencyOracle, targets: np.ndarray, adaptive: Adaptive, rng: np.random.Generator) -> int:
    """How many crafted reports raise each target by about `rise`: a crafted report supports a given target with
    probability rate, raising its count by (rate - q) / (p - q) reports' worth (measured on a sample)."""
    sample = _maximal(oracle, targets, 4096, rng, adaptive.per_report)
    rate = float(oracle.support_matrix(sample)[:, targets].mean())
    gain = max(rate - oracle.q, 1e-12) / (oracle.p - oracle.q)
    if adaptive.population < 1:
        raise AttackError("the adaptive attacker needs the window's size (Adaptive.population)")
    return int(adaptive.rise / gain * adaptive.population) if adaptive.rise is not None else 0


def _maximal(oracle: FrequencyOracle, targets: np.ndarray, m: int, rng: np.random.Generator,
             per_report: int | None) -> Reports:
    """Maximal gain reports, each supporting at most `per_report` targets (None: all it can)."""
    r = len(targets)
    cap = r if per_report is None else max(1, min(r, per_report))
    if isinstance(oracle, GRR):
        return {"value": targets[rng.integers(0, r, size=m)].astype(np.uint32)}
    if isinstance(oracle, UnaryEncoding):
        d = oracle.domain_size
        ones = max(cap, int(np.floor(oracle.p + (d - 1) * oracle.q)))
        bits = np.zeros((m, d), dtype=np.uint8)
        # each fake: `cap` targets (a random subset when fewer than all), then random non-targets up to `ones`
        keys = rng.random((m, r))
        chosen = np.argsort(keys, axis=1)[:, :cap]
        bits[np.arange(m)[:, None], targets[chosen]] = 1
        others = np.setdiff1d(np.arange(d), targets)
        extra = min(ones - cap, len(others))
        if extra > 0:
            picks = np.argsort(rng.random((m, len(others))), axis=1)[:, :extra] if m * len(others) <= 1 << 26 \
                else _sample_rows(len(others), extra, m, rng)
            bits[np.arange(m)[:, None], others[picks]] = 1
        return {"bits": bits}
    if isinstance(oracle, LocalHash):
        return _hash_maximal(oracle, targets, m, rng, cap)
    raise AttackError(f"no maximal gain attack on {oracle.name}")


def _sample_rows(size: int, k: int, m: int, rng: np.random.Generator) -> np.ndarray:
    """(m, k) indices in 0..size-1, distinct within each row (chunked argsort of uniforms)."""
    out = np.empty((m, k), dtype=np.int64)
    step = max(1, (1 << 24) // size)
    for lo in range(0, m, step):
        hi = min(m, lo + step)
        out[lo:hi] = np.argsort(rng.random((hi - lo, size)), axis=1)[:, :k]
    return out


def best_buckets(oracle: LocalHash, targets: np.ndarray, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray,
                                                                                                 np.ndarray]:
    """Per seed (a, b): the most targets one bucket holds, and that bucket."""
    buckets = hash_buckets(a[:, None], b[:, None], targets[None, :], oracle.g)
    same = (buckets[:, :, None] == buckets[:, None, :]).sum(axis=2)  # per target, the targets in its bucket
    best = same.argmax(axis=1)
    rows = np.arange(len(a))
    return same[rows, best], buckets[rows, best]


def _hash_maximal(oracle: LocalHash, targets: np.ndarray, m: int, rng: np.random.Generator,
                  cap: int) -> Reports:
    """Each fake tries HASH_TRIES seeds of a common pool and keeps the one whose fullest bucket holds the most
    targets, at most `cap` (an adaptive attacker's limit; a seed over it is not taken)."""
    a = rng.integers(1, HASH_PRIME, size=SEED_POOL)
    b = rng.integers(0, HASH_PRIME, size=SEED_POOL)
    load, bucket = best_buckets(oracle, targets, a, b)
    score = np.where(load <= cap, load, -1).astype(np.float64) + rng.random(SEED_POOL) * 0.5  # ties: random
    chosen = np.empty(m, dtype=np.int64)
    step = max(1, (1 << 22) // HASH_TRIES)
    for lo in range(0, m, step):
        hi = min(m, lo + step)
        tries = rng.integers(0, SEED_POOL, size=(hi - lo, HASH_TRIES))
        chosen[lo:hi] = tries[np.arange(hi - lo), np.argmax(score[tries], axis=1)]
    return {"a": a[chosen].astype(np.uint32), "b": b[chosen].astype(np.uint32), "y": bucket[chosen].astype(np.uint32)}


def _demoting(oracle: FrequencyOracle, targets: np.ndarray, m: int, rng: np.random.Generator) -> Reports:
    """Reports that support none of the targets (module docstring, `demotion`)."""
    others = np.setdiff1d(np.arange(oracle.domain_size), targets)
    if isinstance(oracle, GRR):
        return {"value": others[rng.integers(0, len(others), size=m)].astype(np.uint32)}
    if isinstance(oracle, UnaryEncoding):  # each non-target bit set at the rate that gives the honest count of ones
        rate = min(1.0, (oracle.p + (oracle.domain_size - 1) * oracle.q) / len(others))
        bits = (rng.random((m, oracle.domain_size)) < rate).astype(np.uint8)
        bits[:, targets] = 0
        return {"bits": bits}
    if isinstance(oracle, LocalHash):
        a = rng.integers(1, HASH_PRIME, size=m)
        b = rng.integers(0, HASH_PRIME, size=m)
        held = hash_buckets(a[:, None], b[:, None], targets[None, :], oracle.g)  # (m, r): the targets' buckets
        y = rng.integers(0, oracle.g, size=m)
        for _ in range(64):  # redraw the buckets that hold a target (g > r: each try succeeds w.p. >= 1 - r / g)
            bad = (held == y[:, None]).any(axis=1)
            if not bad.any():
                break
            y[bad] = rng.integers(0, oracle.g, size=int(bad.sum()))
        return {"a": a.astype(np.uint32), "b": b.astype(np.uint32), "y": y.astype(np.uint32)}
    raise AttackError(f"no demotion attack on {oracle.name}")


def _demoting_tree(tree: PrefixTree, rows: np.ndarray, m: int, rng: np.random.Generator) -> Reports:
    """Reports of a tree that carry none of the target `rows`' prefixes (module docstring, heavy hitters)."""
    level = rng.integers(0, tree.levels, size=m).astype(np.uint8)
    out: dict[str, np.ndarray] = {"level": level, "hash": np.zeros(m, dtype=np.uint32),
                                  "y": np.zeros(m, dtype=np.uint32)}
    for t, oracle in enumerate(tree.oracles):
        if not isinstance(oracle, HashedGRR):
            raise AttackError(f"no demotion attack on {tree.name}'s levels")
        mine = np.flatnonzero(level == t)
        j = rng.integers(0, oracle.hashes, size=len(mine))
        held = oracle.candidate_buckets(rows)[:, j].T  # (reports, targets): the targets' buckets under each hash
        y = rng.integers(0, oracle.width, size=len(mine))
        for _ in range(64):  # redraw the buckets that hold a target (as `_demoting`'s local hashing)
            bad = (held == y[:, None]).any(axis=1)
            if not bad.any():
                break
            y[bad] = rng.integers(0, oracle.width, size=int(bad.sum()))
        out["hash"][mine], out["y"][mine] = j, y
    return out


def _uniform_output(oracle: FrequencyOracle, m: int, rng: np.random.Generator) -> Reports:
    if isinstance(oracle, GRR):
        return {"value": rng.integers(0, oracle.domain_size, size=m).astype(np.uint32)}
    if isinstance(oracle, UnaryEncoding):
        return {"bits": rng.integers(0, 2, size=(m, oracle.domain_size)).astype(np.uint8)}
    if isinstance(oracle, LocalHash):
        return {"a": rng.integers(1, HASH_PRIME, size=m).astype(np.uint32),
                "b": rng.integers(0, HASH_PRIME, size=m).astype(np.uint32),
                "y": rng.integers(0, oracle.g, size=m).astype(np.uint32)}
    raise AttackError(f"no random value attack on {oracle.name}")


# --- numeric means ---------------------------------------------------------------------------------------------------
def fake_numeric_reports(mech: NumericMechanism, attack: str, m: int, rng: np.random.Generator,
                         adaptive_low: float | None = None) -> Reports:
    """m fake reports pushing a numeric mean up (module docstring). `adaptive_low`: the adaptive attacker's reports
    are uniform on [adaptive_low, the largest output] (spread out under the density caps)."""
    lo, hi = mech.output_range
    top = hi if np.isfinite(hi) else 1.0 + 10 * np.sqrt(mech.worst_case_variance())
    bottom = lo if np.isfinite(lo) else -top
    if attack == "maximal_gain":
        return {"value": np.full(m, top)}
    if attack == "random_value":
        return {"value": rng.uniform(bottom, top, size=m)}
    if attack in ("input", "random_item"):
        return mech.perturb(np.ones(m), rng)
    if attack == "adaptive":
        start = 1.0 if adaptive_low is None else adaptive_low
        return {"value": rng.uniform(start, top, size=m)}
    if attack == "demotion":
        return {"value": np.full(m, bottom)}
    raise AttackError(f"unknown attack {attack!r}; one of {ATTACKS}")


# --- key-value ------------------------------------------------------------------------------------------------------
def fake_keyvalue_reports(mech: KeyValueMechanism, targets: Sequence[int] | np.ndarray, m: int,
                          rng: np.random.Generator, attack: str = "maximal_gain",
                          adaptive: Adaptive = Adaptive()) -> Reports:
    """m fake reports of `attack` on PCKV. `maximal_gain` (M2GA, Wu et al. 2022): each reports a target key
    (uniformly) with value +1; a PCKV-UE report's other entries are a fair +-1 with the honest rate b (to pass a count
    of non-zero entries). `demotion`: reports that name none of the targets (PCKV-GRR: a non-target key, dummies
    included, uniformly, with a fair +-1; PCKV-UE: every target entry 0, the others a fair +-1 at the rate b).
    `adaptive`: only enough M2GA reports to raise each target's frequency by `adaptive.rise` in a window of
    `adaptive.population` reports (a fake adds 1 - b to its key's centred support, c_f per unit of frequency and
    report); the rest report a random non-target key, with a uniform value, honestly (as the frequency oracles'
    adaptive fakes: they move no target's estimate on average)."""
    t = check_targets(targets, mech.domain_size)
    if not isinstance(mech, PCKVGRR | PCKVUE):
        raise AttackError(f"no key-value attack on {mech.name}")
    if attack == "adaptive":
        c_f = mech.holder_rate * mech.frequency_gain
        each = m // len(t) if adaptive.rise is None else min(
            m // len(t), math.ceil(adaptive.rise * c_f * adaptive.population / (1 - mech.b)))
        keys = np.repeat(t, each)
        others = np.setdiff1d(np.arange(mech.domain_size), t)
        pairs = np.full((m - len(keys), 1, 2), -1.0)
        pairs[:, 0, 0] = others[rng.integers(0, len(others), size=len(pairs))]
        pairs[:, 0, 1] = rng.uniform(-1.0, 1.0, size=len(pairs))
        rest = mech.perturb(pairs, rng)
        gain = _m2ga(mech, keys, rng)
        return {c: np.concatenate([gain[c], rest[c]]) for c in gain}
    if attack == "demotion":
        if isinstance(mech, PCKVGRR):
            others = np.setdiff1d(np.arange(mech.keys_with_dummies), t)
            return {"key": others[rng.integers(0, len(others), size=m)].astype(np.uint32),
                    "value": np.where(rng.random(m) < 0.5, 1, -1).astype(np.int8)}
        y = _fair_entries(mech, m, rng)
        y[:, t] = 0
        return {"bits": y}
    if attack != "maximal_gain":
        raise AttackError(f"unknown key-value attack {attack!r}; one of maximal_gain, demotion, adaptive")
    return _m2ga(mech, t[rng.integers(0, len(t), size=m)], rng)


def _fair_entries(mech: PCKVUE, m: int, rng: np.random.Generator) -> np.ndarray:
    """m PCKV-UE rows whose entries are a fair +-1 at the honest rate b, else 0."""
    d = mech.domain_size
    nonzero = rng.random((m, d)) < mech.b
    return np.where(nonzero, np.where(rng.random((m, d)) < 0.5, 1, -1), 0).astype(np.int8)


def _m2ga(mech: PCKVGRR | PCKVUE, keys: np.ndarray, rng: np.random.Generator) -> Reports:
    """M2GA reports of the given keys, value +1 (`fake_keyvalue_reports`)."""
    m = len(keys)
    if isinstance(mech, PCKVGRR):
        return {"key": keys.astype(np.uint32), "value": np.ones(m, dtype=np.int8)}
    y = _fair_entries(mech, m, rng)
    y[np.arange(m), keys] = 1
    return {"bits": y}


# --- heavy hitters --------------------------------------------------------------------------------------------------
def fake_tree_reports(tree: PrefixTree, attack: str, targets: Sequence[str], m: int, rng: np.random.Generator,
                      carriers: int | None = None, decoys: Sequence[str] = ()) -> Reports:
    """m fake reports of a prefix tree promoting the target strings (Cao et al. Sec. 5): `maximal_gain` reports, at
    a level drawn uniformly, a target's prefix bucket under a hash drawn uniformly (what a holder sends unperturbed);
    `random_item`/`input` a target perturbed honestly; `random_value` a uniform report; `adaptive` only `carriers`
    crafted reports (under the rise bound) and honest reports of the `decoys` (strings that gain nothing) for the
    rest; `demotion` reports that carry none of the targets' prefixes (module docstring), to push them down."""
    rows = tree.domain.encode(list(targets))
    pick = rng.integers(0, len(rows), size=m)
    if attack in ("random_item", "input"):
        return tree.perturb(rows[pick if attack == "random_item" else np.arange(m) % len(rows)], rng)
    if attack == "random_value":
        first = tree.oracles[0]
        return {"level": rng.integers(0, tree.levels, size=m).astype(np.uint8),
                "hash": rng.integers(0, first.hashes, size=m).astype(np.uint32),
                "y": rng.integers(0, first.width, size=m).astype(np.uint32)}
    if attack == "demotion":
        return _demoting_tree(tree, rows, m, rng)
    if attack not in ("maximal_gain", "adaptive"):
        raise AttackError(f"unknown attack {attack!r}; one of {ATTACKS}")
    crafted = m if attack == "maximal_gain" or carriers is None else min(m, carriers)
    if crafted < m and not len(decoys):
        raise AttackError("an adaptive attack on heavy hitters needs decoy strings for its other fakes")
    level = rng.integers(0, tree.levels, size=crafted).astype(np.uint8)
    out: dict[str, np.ndarray] = {"level": level, "hash": np.zeros(crafted, dtype=np.uint32),
                                  "y": np.zeros(crafted, dtype=np.uint32)}
    for t, oracle in enumerate(tree.oracles):
        mine = np.flatnonzero(level == t)
        buckets = oracle.candidate_buckets(rows)  # (targets, hashes)
        j = rng.integers(0, oracle.hashes, size=len(mine))
        out["hash"][mine] = j
        out["y"][mine] = buckets[pick[mine], j]
    if crafted == m:
        return out
    decoy_rows = tree.domain.encode(list(decoys))
    honest = tree.perturb(decoy_rows[rng.integers(0, len(decoy_rows), size=m - crafted)], rng)
    return {k: np.concatenate([v, np.asarray(honest[k]).astype(v.dtype)]) for k, v in out.items()}
