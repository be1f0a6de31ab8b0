"""The Python SDK against the vectors of the deterministic parts of perturbation (tests/vectors/memo.json,
collectors.json, hashes.json): what the device computes through its public paths (`Device.report` on a spec with a
lifetime budget, the collector's `memo_keys`, a strategy loaded from its .npz bytes) is what the files record, which
every other SDK (sdk/typescript) is held to as well."""

from __future__ import annotations

import base64
import io
import json
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ldpstream.contract.collector import collector_for, privacy_budgets, strategy_from_bytes
from ldpstream.contract.spec import SpecError, parse_spec
from ldpstream.device import Device, PrivacyLedger
from ldpstream.device.ledger import Account
from ldpstream.device.perturb import memo_prefix, report_memos
from ldpstream.mechanisms import registry
from ldpstream.mechanisms.workload.mechanism import FactorizationMechanism

VECTORS = Path(__file__).resolve().parents[1] / "vectors"


def cases(name: str) -> list[dict[str, Any]]:
    data: dict[str, Any] = json.loads((VECTORS / name).read_text())
    return data["cases"]


LONGITUDINAL = [c for c in cases("memo.json") if c["kind"] == "longitudinal"]


@pytest.mark.parametrize("case", LONGITUDINAL, ids=lambda c: c["name"])
def test_memo_keys_and_reprs(case: dict[str, Any]) -> None:
    mech = registry.make_longitudinal(case["mechanism"], case["lifetime"], case["first"], case["domain"],
                                      **case["parameters"])
    secrets = np.array([int(s) for s in case["secrets"]], dtype=np.uint64)
    assert repr(mech) == case["repr"]
    assert memo_prefix("battery", mech) == case["memo_prefix"]  # type: ignore[arg-type]
    assert mech.memo_keys(np.array(case["values"]), secrets).tolist() == case["memo_keys"]
    if case["mechanism"] in ("l-grr", "l-oue", "l-osue", "l-sue", "rappor"):
        prr = mech.permanent_response(case["values"], secrets)  # type: ignore[attr-defined]
        column = prr["value"] if case["mechanism"] == "l-grr" else prr["bits"].astype(int)
        assert column.tolist() == case["permanent"]


@pytest.mark.parametrize("case", cases("collectors.json"), ids=lambda c: c["name"])
def test_collectors_resolve_as_recorded(case: dict[str, Any]) -> None:
    spec = parse_spec(case["spec"])
    collector = collector_for(spec)
    assert collector.k == case["k"]
    assert {n: m.name for n, m in collector.mechanisms.items()} == case["mechanisms"]
    budgets = privacy_budgets(spec)
    assert {n: a["mechanism"] for n, a in budgets["attributes"].items()} == {
        n: a["mechanism"] for n, a in case["budgets"]["attributes"].items()}
    if "memos" in case:
        keys = iter(case["memos"])
        for secret in case["secrets"]:
            for record in case["records"]:
                columns = {n: np.array([v]) for n, v in record.items()}
                memos = report_memos(spec, columns, np.array([int(secret)], dtype=np.uint64))[0]
                assert [m.key for m in memos] == next(keys)


def test_a_device_charges_the_recorded_memos() -> None:
    """A device with a lifetime budget charges, through `report`, the memos the vectors name for its secret."""
    case = next(c for c in cases("collectors.json") if "memos" in c)
    spec = parse_spec(case["spec"])
    secret = int(case["secrets"][2])
    ledger = PrivacyLedger({spec.name: Account(secret=secret)})
    device = Device(spec, "phone", ledger=ledger, policy=None)
    record = case["records"][0]
    device.report(record, timestamp=1_795_788_000_000)
    index = 2 * len(case["records"])
    assert sorted(ledger.memos(spec.name)) == sorted(case["memos"][index])


def test_a_ledger_of_legacy_memo_names_pays_for_none_again() -> None:
    """A device upgraded from the repr-named memos: each memo it paid for is found paid under its legacy name, which
    stays (kept on disk, reports after a restart pay nothing for it); a value it never paid for is charged once, under
    its m1 name."""
    case = next(c for c in cases("collectors.json") if "memos" in c)
    spec = parse_spec(case["spec"])
    secret, n, t = int(case["secrets"][2]), len(case["records"]), 1_795_788_000_000
    legacy, later = case["legacy_memos"][2 * n], case["memos"][2 * n + 1]
    assert legacy != case["memos"][2 * n] and not set(later) & set(case["memos"][2 * n])
    paid = {key: 0.75 for key in legacy}  # what the old SDK charged for them
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ledger.json"
        PrivacyLedger({spec.name: Account(lifetime_spent=0.75 * len(paid), memos=paid, secret=secret)}).save(path)
        Device(spec, "phone", ledger=PrivacyLedger.open(path), policy=None).report(case["records"][0], timestamp=t)
        again = PrivacyLedger.open(path)  # as after a restart
        assert again.lifetime_spent(spec.name) == 0.75 * len(paid) and again.memos(spec.name) == paid
        device = Device(spec, "phone", ledger=again, policy=None)
        device.report(case["records"][0], timestamp=t + 3_600_000)
        device.report(case["records"][1], timestamp=t + 2 * 3_600_000)  # new values: new memos, m1 names, charged
        last = PrivacyLedger.open(path)
        cost = collector_for(spec).mechanisms  # each new memo costs its mechanism's eps_inf
        assert set(last.memos(spec.name)) == set(legacy) | set(later)
        assert last.lifetime_spent(spec.name) == pytest.approx(
            0.75 * len(paid) + sum(last.memos(spec.name)[k] for k in later))
        eps_inf = {name: float(mech.epsilon_lifetime) for name, mech in cost.items()}  # type: ignore[attr-defined]
        assert all(last.memos(spec.name)[k] == eps_inf[k.split("/")[1]] for k in later)


@pytest.mark.parametrize("case", [c for c in cases("hashes.json") if c["kind"] == "strategy"], ids=lambda c: c["name"])
def test_the_strategy_vectors_load_and_their_tampered_bytes_do_not(case: dict[str, Any]) -> None:
    mech = FactorizationMechanism.load(io.BytesIO(base64.b64decode(case["npz"])), expected_hash=case["hash"])
    assert mech.hash == case["hash"] and mech.q.tolist() == case["q"]
    with pytest.raises(SpecError):
        strategy_from_bytes(base64.b64decode(case["tampered"]), case["hash"])


def test_every_mechanism_a_spec_can_name_has_vectors() -> None:
    """Driven by the registry (tests/vectors/rules.json `mechanisms.every`): each name a spec can give is run by some
    case of collectors.json, memo.json (the memoized ones) or hashes.json (factorization), so that every SDK passing
    the vectors runs it; a training job's mechanisms by training.json."""
    rules = json.loads((VECTORS / "rules.json").read_text())
    named = {m for c in cases("collectors.json") for m in c["mechanisms"].values()}
    named |= {c["mechanism"] for c in LONGITUDINAL}
    named |= {"factorization"} if any(c["kind"] == "strategy" for c in cases("hashes.json")) else set()
    named |= {u["name"].split()[0] for u in json.loads((VECTORS / "training.json").read_text())["updates"]}
    missing = sorted(set(rules["mechanisms"]["every"]) - named)
    assert not missing, f"mechanisms a spec can name with no vector case: {missing} (tests/vectors/perturb_vectors.py)"
