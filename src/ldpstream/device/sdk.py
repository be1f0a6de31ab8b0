"""The device SDK: one device's reports of one collection, perturbed on the device and produced to Kafka.

`Device.report(record)` (1) validates and perturbs the record as a batch of one (`ldpstream.device.perturb`), (2)
charges the privacy-budget ledger, which refuses a report that would exceed the spec's epsilon in its window or, for a
spec with a privacy block, its lifetime budget (the memos the report reads, `ldpstream.device.perturb.report_memos`,
each charged once; the perturbation uses the collection secret the ledger keeps), (3) encodes the perturbed batch
(`ldpstream.contract.wire`, which accepts nothing else) and (4) produces it keyed by the device's pseudonym, to the
device's partition (`ldpstream.contract.pseudonym.device_partitions`), or with an HTTP transport
(`ldpstream.device.outbox.HttpTransport`) stores it in the device's persistent outbox, which `Device.flush` sends to the
ingestion edge. The budget is charged when the report is made, not when it is sent. The raw record goes no further than
step (1); the device id never leaves as such (`ldpstream.contract.pseudonym`). A record that fails validation or is
refused by the ledger charges nothing and sends nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Protocol

import numpy as np

from ldpstream.contract.clock import now_ms
from ldpstream.contract.collector import Strategies
from ldpstream.contract.pseudonym import device_partitions, device_pseudonym, pseudonym_key
from ldpstream.contract.spec import CollectionSpec
from ldpstream.contract.wire import encode
from ldpstream.device.ledger import PrivacyLedger
from ldpstream.device.outbox import HttpTransport
from ldpstream.device.perturb import perturb, report_memos


class ReportSink(Protocol):
    """Where a device with a direct Kafka connection produces (`ldpstream.runtime.kafka.ReportProducer`)."""

    def produce(self, topic: str, value: bytes, key: bytes | None = None, partition: int | None = None) -> None:
        """Queue one message."""


class Device:
    """One device reporting to one collection (see the module docstring for the steps of a report).

    `strategies` are the factorization strategies the spec pins, by content hash (a spec without a
    factorization attribute needs none; `ldpstream.runtime.strategies.strategies_for` loads them on a server).
    """

    def __init__(self, spec: CollectionSpec, device_id: int | str, producer: ReportSink | None = None,
                 ledger: PrivacyLedger | None = None, rng: np.random.Generator | None = None,
                 strategies: Strategies | None = None, transport: HttpTransport | None = None) -> None:
        self.spec = spec
        self.strategies = {} if strategies is None else strategies
        self.pseudonym = device_pseudonym(spec.name, device_id)
        if producer is not None and transport is not None:
            raise ValueError("a device sends through Kafka or through the edge, not both")
        self.producer = producer
        self.transport = transport
        self.ledger = ledger if ledger is not None else PrivacyLedger()
        self.rng = rng if rng is not None else np.random.default_rng()
        self._devices = np.array([self.pseudonym], dtype=np.uint64)
        self._key = pseudonym_key(self.pseudonym)
        self._partition = int(device_partitions(self._devices, spec.partitions)[0])

    def report(self, record: Mapping[str, object], timestamp: int | datetime | None = None) -> bytes:
        """Perturb, charge, encode and send one report (with a producer), or store it in the outbox (with a
        transport); return the encoded message.

        `timestamp` is the report time: milliseconds since the epoch, an aware datetime, or None for now.
        Raises RecordError for a malformed record and BudgetExceeded when the window's budget is spent, or the
        lifetime budget would be (a new value of a collection with a privacy block, `ldpstream.device.ledger`).
        """
        now = report_time_ms(timestamp)
        columns = {name: np.array([value]) for name, value in record.items()}
        secrets, memos = None, []
        if self.spec.privacy is not None:
            secrets = np.array([self.ledger.secret(self.spec.name)], dtype=np.uint64)
            memos = report_memos(self.spec, columns, secrets, self.strategies)[0]
        self.ledger.check(self.spec, now, memos=memos)
        batch = perturb(self.spec, self._devices, np.array([now], dtype=np.int64), columns, self.rng, self.strategies,
                        secrets)
        self.ledger.charge(self.spec, now, memos=memos)
        message = encode(batch)
        if self.producer is not None:
            self.producer.produce(self.spec.topic, message, self._key, self._partition)
        if self.transport is not None:
            self.transport.enqueue(message)
        return message

    def flush(self) -> int:
        """Send the outbox to the edge (with an HTTP transport); the number of reports that left it."""
        return 0 if self.transport is None else self.transport.flush()


def report_time_ms(timestamp: int | datetime | None) -> int:
    """Milliseconds since the epoch of a report time given as ms, an aware datetime, or None (now)."""
    if timestamp is None:
        return now_ms()
    if isinstance(timestamp, datetime):
        if timestamp.tzinfo is None:
            raise ValueError("a report time given as a datetime must carry its time zone")
        return int(timestamp.timestamp() * 1000)
    if isinstance(timestamp, bool) or not isinstance(timestamp, int | np.integer):
        raise ValueError(f"a report time is integer milliseconds since the epoch or a datetime, got {timestamp!r}")
    return int(timestamp)
