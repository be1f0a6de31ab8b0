"""The device SDK: perturb on the device, charge the privacy budget, keep an outbox, send to the ingestion edge.

It needs only the base install (numpy, msgspec, pyyaml, cryptography): no Kafka, Redis, HTTP server, SciPy or
pydantic module is imported here or below (`tests/test_install.py`, `benchmarks/bench_startup.py`).

    from ldpstream.device import Device, HttpTransport, Outbox, PrivacyLedger
"""

from ldpstream.device.ledger import BudgetExceeded, PrivacyLedger
from ldpstream.device.outbox import HttpTransport, Outbox
from ldpstream.device.perturb import RecordError
from ldpstream.device.sdk import Device

__all__ = ["BudgetExceeded", "Device", "HttpTransport", "Outbox", "PrivacyLedger", "RecordError"]
