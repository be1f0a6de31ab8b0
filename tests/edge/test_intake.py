"""The edge's checks: many requests checked together answer each exactly as checking it alone does."""

from __future__ import annotations

import msgspec
import numpy as np

from ldpstream.contract.pseudonym import device_pseudonym
from ldpstream.contract.spec import load_spec
from ldpstream.contract.wire import Envelope, decode_envelope, encode
from ldpstream.device.perturb import perturb
from ldpstream.edge.intake import Checked, Refusal, check, check_many
from ldpstream.edge.plans import EdgePlan
from ldpstream.runtime.settings import PROJECT_ROOT
from ldpstream.simulator.population import Population

NOW = 1_700_000_000_000
SPEC = load_spec(PROJECT_ROOT / "examples" / "diagnostics.yaml")
PLAN = EdgePlan.load(SPEC, "unused:9")  # the diagnostics spec pins no factorization strategy


def envelope(device: str, times: list[int], seed: int) -> Envelope:
    rng = np.random.default_rng(seed)
    who = np.full(len(times), device_pseudonym(SPEC.name, device), dtype=np.uint64)
    return decode_envelope(encode(perturb(SPEC, who, np.asarray(times), Population(SPEC, seed).sample(len(times),
                                                                                                     rng), rng)))


def answer(result: Checked | Refusal) -> tuple[object, ...]:
    if isinstance(result, Refusal):
        return result.status, result.reason, result.detail
    return msgspec.msgpack.encode(result.envelope), result.window_starts.tolist()


def test_check_many_answers_each_request_as_check_alone() -> None:
    good = [envelope(f"d{i}", [NOW - i], i) for i in range(6)]
    outbox = envelope("d9", [NOW - 3600_000 + 5, NOW], 9)
    other = msgspec.structs.replace(good[0], devices=np.array([7], dtype="<u8").tobytes())
    spoiled = msgspec.structs.replace(good[1], attributes=[msgspec.structs.replace(block, columns=[
        msgspec.structs.replace(c, data=b"\xff" * len(c.data)) for c in block.columns])  # NaN or the dtype's max
        for block in good[1].attributes])
    items = [(env, PLAN, device_pseudonym(SPEC.name, f"d{i}")) for i, env in enumerate(good)]
    items += [(outbox, PLAN, device_pseudonym(SPEC.name, "d9")), (other, PLAN, 1),
              (spoiled, PLAN, device_pseudonym(SPEC.name, "d1")),
              (envelope("d8", [NOW + 3600_000], 8), PLAN, device_pseudonym(SPEC.name, "d8")),
              (envelope("d7", [NOW, NOW + 1], 7), PLAN, device_pseudonym(SPEC.name, "d7")), (good[2], None, 3)]
    together = [answer(r) for r in check_many(items, NOW)]
    alone = []
    for item in items:
        try:
            alone.append(answer(check(*item, NOW)))
        except Refusal as refusal:
            alone.append(answer(refusal))
    assert together == alone
    twice = check(*items[10], NOW)  # the second report of one window is refused alone, the first goes on
    assert [a[0] for a in together[6:]] == [msgspec.msgpack.encode(check(*items[6], NOW).envelope), 403, 400, 400,
                                            msgspec.msgpack.encode(twice.envelope), 404]
    assert twice.verdicts == ("", "duplicate") and twice.rows.tolist() == [0]
