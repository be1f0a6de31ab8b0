"""The audit as a service (`ldpstream.aggregator.auditor`): every closed window audited once, whichever of several
auditors gets it, its record carrying the sequential test's sums. A collection whose tests all read the sums (GRR)
is audited without reading Kafka again, so the pure processing into a memory store is enough here."""

from __future__ import annotations

import json
import threading

import numpy as np

from ldpstream.aggregator.auditor import audit_due
from ldpstream.aggregator.plans import Plan
from ldpstream.aggregator.poisoning import audit_records
from ldpstream.aggregator.processing import Message, PartitionProcessor
from ldpstream.aggregator.store import MemoryStore
from ldpstream.contract.spec import parse_spec
from ldpstream.contract.wire import encode
from ldpstream.simulator.simulator import fleet

SPEC = parse_spec(json.dumps({"name": "audited", "version": 1, "epsilon": 2.0, "sampling": 1, "partitions": 1,
                              "windows": ["1m"], "attributes": [{"name": "mode", "type": "categorical",
                                                                 "values": [f"v{i}" for i in range(8)],
                                                                 "mechanism": "grr"}]}))
MINUTE = 60_000
START = 1_600_000_020_000 // MINUTE * MINUTE  # long closed


class Published:
    """What the auditor asks of the specs topic: the published plans."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan

    def plans(self) -> list[Plan]:
        return [self.plan]


def test_every_closed_window_is_audited_once_by_one_of_several_auditors() -> None:
    plan, store = Plan(SPEC), MemoryStore()
    for w in range(3):
        processor = PartitionProcessor(lambda n, v, _: plan if (n, v) == (SPEC.name, 1) else None,
                                       lambda w=w: START + w * MINUTE + 1000)
        _, reports = next(fleet(SPEC, 2000, seed=1, chunk=2000, clock_ms=lambda w=w: START + w * MINUTE,
                                report_round=w))
        result = processor.process(SPEC.topic, [Message(w, encode(reports))])
        assert result.update is not None and store.apply(result.update).status == "applied"
    stop = threading.Event()
    first = audit_due("unused:9", store, Published(plan), "a", stop)  # type: ignore[arg-type]
    second = audit_due("unused:9", store, Published(plan), "b", stop)  # type: ignore[arg-type]
    assert (first, second) == (3, 0)
    records = audit_records(store, plan)
    assert sorted(k[2] for k in records) == [START + w * MINUTE for w in range(3)]
    last = records[(1, "1m", START + 2 * MINUTE)]
    assert last.reference_windows == 2 and set(last.drift) == {0}  # the sums carried into the next window
    assert np.all(last.drift[0].upper >= 0)
