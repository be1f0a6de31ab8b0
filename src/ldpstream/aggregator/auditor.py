"""The poisoning audit as a service: `python -m ldpstream.aggregator.auditor`, which `ldp aggregate` starts beside its
workers and supervises like them (restarted if it exits; stopped with them), so that every closed window is audited
without an operator running `ldp poisoning audit` (docs/explanation/fake-devices.md).

Every POLL_S seconds it audits, oldest first, the closed windows of every published spec version that have reports and
no audit record yet, or one made before an attribute's new level was accepted from them (`ldp poisoning accept`;
`ldpstream.aggregator.audit.closed_windows`, `audit_window`). Several auditors (one per
`ldp aggregate`) share the work: each window is claimed in the store first (`StatsStore.claim_audit`, held CLAIM_S),
so one audits it; one that dies frees its claim when the claim expires, and another audits the window then (an audit
run twice writes the same record and the same set-aside reports again). A window that cannot be audited (its reports
gone from Kafka, too large) is logged and tried again at the next claim. It acts as the aggregator's principal: it
reads the report topics, writes `ldp.setaside` and the collection's keys in Redis.
"""

from __future__ import annotations

import logging
import os
import signal
import threading

import redis
from confluent_kafka import KafkaException

from ldpstream.aggregator.audit import AuditError, audit_window, closed_windows
from ldpstream.aggregator.plans import PlanRegistry
from ldpstream.aggregator.store import RedisStore, StatsStore
from ldpstream.contract.clock import now_ms
from ldpstream.runtime.access import act_as
from ldpstream.runtime.catalog import service
from ldpstream.runtime.settings import Settings
from ldpstream.runtime.supervisor import STOP_GRACE_S, die_with_parent, exit_within

log = logging.getLogger(__name__)

POLL_S = 30.0
CLAIM_S = 900  # a claim outlives the longest audit (MAX_AUDIT_REPORTS read back from Kafka in memory)


def audit_due(bootstrap: str, store: StatsStore, plans: PlanRegistry, owner: str, stop: threading.Event) -> int:
    """Audit the closed windows no one has audited or claimed, oldest first; how many were audited."""
    done = 0
    for plan in plans.plans():
        for window, start_ms in closed_windows(store, plan, now_ms()):
            if stop.is_set():
                return done
            if not store.claim_audit(plan.spec.name, (plan.spec.version, window, start_ms), owner, CLAIM_S):
                continue
            try:
                audit_window(bootstrap, store, plan, window, start_ms)
                done += 1
            except AuditError as exc:
                log.warning("%s %s:%s not audited: %s", plan.spec.key, window, start_ms, exc)
    return done


def main() -> None:
    """Audit every closed window until SIGTERM/SIGINT (module docstring)."""
    die_with_parent()
    act_as(service("auditor").principal.name)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    cfg = Settings.from_env()
    stop = threading.Event()

    def on_stop(*_: object) -> None:
        stop.set()
        exit_within(STOP_GRACE_S)  # a round blocked on Kafka or Redis gone is cut short: an audit's writes are atomic

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_stop)
    store, plans = RedisStore(cfg.redis), PlanRegistry(cfg.bootstrap)
    owner = f"{os.uname().nodename}:{os.getpid()}"

    def rounds() -> None:
        while not stop.is_set():
            try:
                audit_due(cfg.bootstrap, store, plans, owner, stop)
            except (redis.RedisError, KafkaException) as exc:  # a dependency away: try again at the next poll
                log.warning("audit round failed: %s", exc)
            stop.wait(POLL_S)

    # The rounds run in a thread, so that the main thread, which handles signals, never sits in a client's C call
    # (librdkafka's) that would hold a SIGTERM back; a round still running at the stop is cut short with the process.
    auditing = threading.Thread(target=rounds, name="audit", daemon=True)
    auditing.start()
    while auditing.is_alive() and not stop.is_set():
        stop.wait(1.0)
    auditing.join(timeout=1.0)


if __name__ == "__main__":
    main()
