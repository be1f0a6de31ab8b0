"""The device SDK: one device's reports of one collection, perturbed on the device and produced to Kafka.

`Device.report(record)` (1) validates and perturbs the record as a batch of one (`producer.perturb`), (2) charges
the privacy-budget ledger, which refuses a report that would exceed the spec's epsilon in its window, (3) encodes
the perturbed batch (`producer.wire`, which accepts nothing else) and (4) produces it keyed by the device's
pseudonym. The raw record goes no further than step (1); the device id never leaves as such (`producer.pseudonym`).
A record that fails validation or is refused by the ledger charges nothing and sends nothing.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

import numpy as np

from producer.kafka import ReportProducer
from producer.ledger import PrivacyLedger
from producer.perturb import perturb
from producer.pseudonym import device_pseudonym
from producer.spec import CollectionSpec
from producer.wire import encode


class Device:
    """One device reporting to one collection (see the module docstring for the steps of a report)."""

    def __init__(self, spec: CollectionSpec, device_id: int | str, producer: ReportProducer | None = None,
                 ledger: PrivacyLedger | None = None, rng: np.random.Generator | None = None) -> None:
        self.spec = spec
        self.pseudonym = device_pseudonym(spec.name, device_id)
        self.producer = producer
        self.ledger = ledger if ledger is not None else PrivacyLedger()
        self.rng = rng if rng is not None else np.random.default_rng()
        self._devices = np.array([self.pseudonym], dtype=np.uint64)
        self._key = self.pseudonym.to_bytes(8, "little")

    def report(self, record: Mapping[str, object], timestamp_ms: int | None = None) -> bytes:
        """Perturb, charge, encode and (with a producer) send one report; return the encoded message.

        Raises RecordError for a malformed record and BudgetExceeded when the window's budget is spent.
        """
        now = int(time.time() * 1000) if timestamp_ms is None else int(timestamp_ms)
        self.ledger.check(self.spec, now)
        columns = {name: np.array([value]) for name, value in record.items()}
        batch = perturb(self.spec, self._devices, np.array([now], dtype=np.int64), columns, self.rng)
        self.ledger.charge(self.spec, now)
        message = encode(batch)
        if self.producer is not None:
            self.producer.produce(self.spec.topic, message, self._key)
        return message
