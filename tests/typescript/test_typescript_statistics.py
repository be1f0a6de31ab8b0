"""Reports made by the TypeScript SDK (`Collector.perturb`, noise from crypto.getRandomValues), decoded by the Python
wire decoder and held to the Python mechanisms' closed forms, mechanism by mechanism: every per-device unbiased term
has the mean the mechanism promises (within 4 standard errors of the closed form) and the closed-form variance (the
mean squared deviation within 4 of its own standard errors, estimated from its fourth moment, as
tests/mechanisms/checks.py does for the Python mechanisms). One collection attribute per spec, so k = 1 and the
terms are the mechanism's own. Needs Node and the built SDK, no service."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from ts_support import perturb_with_typescript

from ldpstream.contract.collector import collector_for
from ldpstream.contract.spec import parse_spec
from ldpstream.contract.wire import decode
from ldpstream.device.policy import EVERY_MECHANISM
from ldpstream.mechanisms import registry
from ldpstream.mechanisms.base import Mechanism, Reports
from ldpstream.mechanisms.distribution import HierarchicalHistogram
from ldpstream.mechanisms.frequency.base import FrequencyOracle
from ldpstream.mechanisms.frequency.hadamard import hadamard_bit
from ldpstream.mechanisms.keyvalue.base import KeyValueMechanism, pairs_array
from ldpstream.mechanisms.longitudinal.dbitflip import DBitFlip
from ldpstream.mechanisms.longitudinal.rappor import RAPPOR
from ldpstream.mechanisms.longitudinal.two_stage import TwoStageOracle
from ldpstream.mechanisms.workload.baselines import randomized_response
from ldpstream.mechanisms.workload.mechanism import FactorizationMechanism

N = 20_000
Z = 4.0
K = 5
VALUES = ["a", "b", "c", "d", "e"]


def spec_text(attribute: dict[str, Any], epsilon: float = 1.0, privacy: dict[str, float] | None = None) -> str:
    body: dict[str, Any] = {"name": "ts-stats", "version": 1, "epsilon": epsilon, "attributes": [attribute]}
    if privacy is not None:
        body["privacy"] = privacy
        body["epsilon"] = privacy["per_report"]
    return parse_spec(json.dumps(body)).canonical_json()


def reports_of(tmp: Path, spec: str, records: list[dict[str, Any]], strategy: dict[str, str] | None = None
               ) -> tuple[Mechanism, Reports]:
    """The TypeScript reports as the attribute's mechanism's columns (row shapes from its schema)."""
    parsed = parse_spec(spec)
    batch = decode(perturb_with_typescript(tmp, spec, records, strategy))
    assert len(batch) == len(records) and len(batch.attributes) == 1
    assert batch.attributes[0].rows.tolist() == list(range(len(records)))  # k = 1 of d = 1: every device reports it
    strategies = None
    if strategy is not None:
        strategies = {strategy["hash"]: FactorizationMechanism.load(io.BytesIO(base64.b64decode(strategy["npz"])))}
    mech = collector_for(parsed, strategies).mechanisms[parsed.attributes[0].name]
    columns = {c.name: np.asarray(batch.attributes[0].reports[c.name]).reshape(len(records), *c.row_shape())
               for c in mech.schema.columns}
    reasons = mech.schema.violations(columns)
    assert (reasons == "").all(), set(reasons.tolist())
    return mech, columns


def check_terms(contributions: np.ndarray, expected: np.ndarray, variance: np.ndarray, what: str) -> None:
    """Unbiased within Z closed-form standard errors; variance equal to the closed form within Z of its own."""
    n = contributions.shape[0]
    c, e, v = (np.asarray(x, dtype=np.float64).reshape(n, -1) for x in (contributions, expected, variance))
    exact = v.mean(axis=0) < 1e-12  # a query every report answers exactly (a prefix's total): no noise at all
    assert np.all(np.abs(c - e)[:, exact] < 1e-9), f"{what}: an exact answer is off"
    c, e, v = c[:, ~exact], e[:, ~exact], v[:, ~exact]
    stderr = np.sqrt(v.mean(axis=0) / n)
    bias = np.abs(c.mean(axis=0) - e.mean(axis=0)) / stderr
    assert np.all(bias <= Z), f"{what}: mean off by {bias.max():.2f} standard errors"
    deviation2 = (c - e) ** 2
    own = deviation2.std(axis=0, ddof=1) / np.sqrt(n)
    z = np.abs(deviation2.mean(axis=0) - v.mean(axis=0)) / np.maximum(own, 1e-300)
    assert np.all(z <= Z), f"{what}: variance {deviation2.mean(axis=0)} vs closed form {v.mean(axis=0)} ({z.max():.2f})"


def numeric_records(rng: np.random.Generator) -> tuple[list[dict[str, Any]], np.ndarray]:
    x = rng.uniform(0, 100, N)
    return [{"x": float(v)} for v in x], x / 50.0 - 1.0


@pytest.mark.parametrize("name", [*registry.NUMERIC, "sw"])
@pytest.mark.parametrize("epsilon", [0.5, 3.0])
def test_numeric_mechanisms(name: str, epsilon: float, tmp_path: Path) -> None:
    records, t = numeric_records(np.random.default_rng(1))
    mech, reports = reports_of(tmp_path, spec_text({"name": "x", "type": "numeric", "range": [0, 100],
                                                    "mechanism": name}, epsilon), records)
    a, b = mech.variance_coefficients()  # type: ignore[attr-defined]
    check_terms(reports["value"], t, a + b * t**2, f"{name} at eps {epsilon}")


def test_hierarchical_histogram(tmp_path: Path) -> None:
    """Per device, h c H[row, v] (2 bit - 1) on the reports of level 1 is unbiased for the indicator of the level-1
    node v holding t (E[term^2] = h c^2: the level is 1 with probability 1 / h), and the levels are uniform."""
    records, t = numeric_records(np.random.default_rng(9))
    attribute = {"name": "x", "type": "numeric", "range": [0, 100], "mechanism": "hh",
                 "parameters": {"bins": 16, "fanout": 4}}
    mech, reports = reports_of(tmp_path, spec_text(attribute, 2.0), records)
    assert isinstance(mech, HierarchicalHistogram)
    h, c, b = mech.height, mech.c, mech.fanout
    level = reports["level"].astype(np.int64)
    counts = np.bincount(level, minlength=h + 1)[1:]
    assert np.all(np.abs(counts - N / h) <= Z * np.sqrt(N * (1 / h) * (1 - 1 / h))), counts
    nodes = np.arange(b)
    signs = np.where(hadamard_bit(reports["row"].astype(np.int64)[:, None], nodes[None, :]) == reports["bit"][:, None],
                     1.0, -1.0)
    terms = h * c * (level == 1)[:, None] * signs
    own = (mech.leaves(t) // b ** (h - 1))[:, None] == nodes[None, :]
    check_terms(terms, own.astype(np.float64), h * c**2 - own.astype(np.float64), "hh level 1")


def codes_and_records(rng: np.random.Generator, attribute: str = "c") -> tuple[np.ndarray, list[dict[str, Any]]]:
    codes = rng.choice(K, size=N, p=[0.4, 0.3, 0.15, 0.1, 0.05])
    return codes, [{attribute: VALUES[c]} for c in codes]


def check_pure(mech: FrequencyOracle, reports: Reports, codes: np.ndarray, what: str) -> None:
    p, q, s = mech.p, mech.q, mech.supports_per_report
    support = np.asarray(mech.support_matrix(reports), dtype=np.float64)
    own = np.eye(K)[codes]
    variance = np.where(own == 1, p * (1 - p), q * (1 - q)) / ((p - q) ** 2 * s)
    check_terms((support / s - q) / (p - q), own, variance, what)


@pytest.mark.parametrize("name", list(registry.FREQUENCY))
def test_frequency_oracles(name: str, tmp_path: Path) -> None:
    codes, records = codes_and_records(np.random.default_rng(2))
    mech, reports = reports_of(tmp_path, spec_text({"name": "c", "type": "categorical", "values": VALUES,
                                                    "mechanism": name}, 2.0), records)
    assert isinstance(mech, FrequencyOracle)
    check_pure(mech, reports, codes, name)


PRIVACY = {"per_report": 1.0, "lifetime": 3.0}
TWO_STAGE = [name for name in registry.LONGITUDINAL if issubclass(registry.longitudinal_class(name), TwoStageOracle)]


@pytest.mark.parametrize("name", TWO_STAGE)
def test_two_stage_oracles_with_a_secret_per_device(name: str, tmp_path: Path) -> None:
    codes, records = codes_and_records(np.random.default_rng(3))
    mech, reports = reports_of(tmp_path, spec_text({"name": "c", "type": "categorical", "values": VALUES,
                                                    "mechanism": name}, privacy=PRIVACY), records)
    assert isinstance(mech, FrequencyOracle)
    check_pure(mech, reports, codes, name)


def test_rappor_with_a_secret_per_device(tmp_path: Path) -> None:
    codes, records = codes_and_records(np.random.default_rng(4))
    attribute = {"name": "c", "type": "categorical", "values": VALUES, "mechanism": "rappor",
                 "parameters": {"hashes": 2, "bloom_bits": 16, "cohorts": 8}}
    mech, reports = reports_of(tmp_path, spec_text(attribute, privacy=PRIVACY), records)
    assert isinstance(mech, RAPPOR)
    m, bits = mech.cohorts, mech.bloom_bits
    cohort = reports["cohort"].astype(np.int64)
    blocks = mech.decoder.reshape(K, m, bits)[:, cohort, :].transpose(1, 0, 2)  # (n, K, k): A_c per report
    terms = m * np.einsum("nub,nb->nu", blocks, reports["bits"] - mech.p_star) / (mech.q_star - mech.p_star)
    own = np.eye(K)[codes]
    check_terms(terms, own, mech.variance(own), "rappor")


def test_dbitflip_with_a_secret_per_device(tmp_path: Path) -> None:
    codes, records = codes_and_records(np.random.default_rng(5))
    attribute = {"name": "c", "type": "categorical", "values": VALUES, "mechanism": "dbitflip",
                 "parameters": {"sampled": 2}}
    mech, reports = reports_of(tmp_path, spec_text(attribute, privacy=PRIVACY), records)
    assert isinstance(mech, DBitFlip)
    scale, delta = K / mech.sampled, mech.p_own - mech.p_other
    sampled = np.zeros((N, K))
    np.put_along_axis(sampled, reports["buckets"].astype(np.int64), 1.0, axis=1)
    bit = np.zeros((N, K))
    np.put_along_axis(bit, reports["buckets"].astype(np.int64), reports["bits"].astype(np.float64), axis=1)
    own = np.eye(K)[codes]
    variance = np.where(own == 1, scale * (mech.p_own * (1 - mech.p_own) / delta**2 + 1) - 1,
                        scale * mech.p_other * (1 - mech.p_other) / delta**2)
    check_terms(scale * sampled * (bit - mech.p_other) / delta, own, variance, "dbitflip")


def test_one_bit_mean_with_a_secret_per_device(tmp_path: Path) -> None:
    records, t = numeric_records(np.random.default_rng(6))
    mech, reports = reports_of(tmp_path, spec_text({"name": "x", "type": "numeric", "range": [0, 100],
                                                    "mechanism": "1bitmean"}, privacy=PRIVACY), records)
    check_terms(reports["value"], t, mech.bound**2 - t**2, "1bitmean")  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", list(registry.KEYVALUE))
def test_key_value_mechanisms(name: str, tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    keys = ["k0", "k1", "k2", "k3"]
    sets = []
    for _ in range(N):
        held = rng.choice(4, size=rng.integers(0, 3), replace=False, p=[0.4, 0.3, 0.2, 0.1])
        sets.append({int(k): float(rng.uniform(0, 10)) for k in held})
    records = [{"kv": {keys[k]: v for k, v in s.items()}} for s in sets]
    attribute = {"name": "kv", "type": "keyvalue", "keys": keys, "range": [0, 10], "mechanism": name, "padding": 2}
    mech, reports = reports_of(tmp_path, spec_text(attribute, 2.0), records)
    assert isinstance(mech, KeyValueMechanism)
    pairs = pairs_array([{k: v / 5.0 - 1.0 for k, v in s.items()} for s in sets], slots=2)
    keys_held = pairs[:, :, 0].astype(np.int64)
    r = mech.selection(keys_held)
    values = np.zeros((N, 4))
    for slot in range(2):
        held = keys_held[:, slot] >= 0
        values[np.flatnonzero(held), keys_held[held, slot]] = pairs[held, slot, 1]
    x, y = mech.per_device_terms(reports)
    f_scale = mech.holder_rate * mech.frequency_gain
    s_scale = mech.holder_rate * mech.value_gain
    holds = (r > 0).astype(np.float64)
    var_f, var_s, _ = mech.per_device_covariance(r, values)
    check_terms(x / f_scale, holds, var_f, f"{name} frequencies")
    check_terms(y / s_scale, holds * values, var_s, f"{name} value totals")


STRINGS = ["abcab", "cab", "b", "aaaa", "cc"]


@pytest.mark.parametrize("name", list(registry.HEAVY_HITTERS))
def test_heavy_hitter_mechanisms(name: str, tmp_path: Path) -> None:
    rng = np.random.default_rng(8)
    truth = rng.choice(len(STRINGS), size=N, p=[0.4, 0.25, 0.15, 0.12, 0.08])
    records = [{"s": STRINGS[i]} for i in truth]
    attribute = {"name": "s", "type": "string", "max_length": 5, "alphabet": "abc", "mechanism": name, "top": 3}
    mech, reports = reports_of(tmp_path, spec_text(attribute, 4.0), records)
    found = mech.estimate(mech.accumulate(reports))
    assert list(found.items) == STRINGS[:3], found.items  # type: ignore[attr-defined]
    if name == "sfp":
        oracle, part, rows = mech.word, {"hash": reports["word_hash"], "y": reports["word_y"]}, truth  # type: ignore
    else:
        last = reports["level"] == len(mech.oracles) - 1  # type: ignore[attr-defined]
        oracle = mech.oracles[-1]  # type: ignore[attr-defined]
        part = {k: v[last] for k, v in reports.items() if k != "level"}
        rows = truth[last]
    candidates = mech.domain.encode(STRINGS)  # type: ignore[attr-defined]
    terms = oracle.user_terms(part, candidates)[np.arange(len(rows)), rows]  # each device's own string
    m = oracle.width
    own_variance = (m / (m - 1)) ** 2 * float(oracle.z_variance(1.0, 1.0))
    check_terms(terms, np.ones(len(rows)), np.full(len(rows), own_variance), f"{name}: a device's own string")


def test_factorization_with_a_pinned_strategy(tmp_path: Path) -> None:
    mech = FactorizationMechanism(randomized_response(K, 2.0), np.tril(np.ones((K, K))), 2.0)
    path = tmp_path / "strategy.npz"
    mech.save(path)
    strategy = {"hash": mech.hash, "npz": base64.b64encode(path.read_bytes()).decode()}
    codes, records = codes_and_records(np.random.default_rng(9))
    attribute = {"name": "c", "type": "categorical", "values": VALUES, "mechanism": "factorization",
                 "workload": "prefix", "strategy": mech.hash}
    built, reports = reports_of(tmp_path, spec_text(attribute, 2.0), records, strategy)
    assert isinstance(built, FactorizationMechanism)
    output = reports["output"].astype(np.int64)
    check_terms(built.reconstruction()[:, output].T, built.w[:, codes].T, built.user_variance()[:, codes].T,
                "factorization")


# The mechanisms held to their closed forms one by one, each by a test of its own (the rest by the registry-driven
# parametrized tests above).
OWN_TESTS = {"hh": test_hierarchical_histogram, "rappor": test_rappor_with_a_secret_per_device,
             "dbitflip": test_dbitflip_with_a_secret_per_device, "1bitmean": test_one_bit_mean_with_a_secret_per_device,
             "factorization": test_factorization_with_a_pinned_strategy}
# a training job's mechanisms, run from the training entry point by test_typescript_training.py's
# test_reports_are_unbiased_with_the_closed_form_mse
TRAINING_TESTS = {"privunitg", "projunit"}


def test_every_mechanism_a_spec_can_name_is_checked_here() -> None:
    """The registry drives the suite: a mechanism a spec can name that no test here runs through the TypeScript SDK
    fails, by name (`ldpstream.device.policy.EVERY_MECHANISM`: every name a spec can give)."""
    checked = {*registry.NUMERIC, "sw", *registry.FREQUENCY, *TWO_STAGE, *registry.KEYVALUE, *registry.HEAVY_HITTERS,
               *OWN_TESTS, *TRAINING_TESTS}
    missing = sorted(EVERY_MECHANISM - checked)
    assert not missing, f"no statistical check of the TypeScript SDK's {missing}: add one here"
