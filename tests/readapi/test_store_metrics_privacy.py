"""The API's store-wide series added for the dashboard's privacy and shuffler rows: `ldp_privacy_epsilon` as the
newest published spec states it, and `ldp_shuffle_window_overdue_seconds` from the due close the shuffler publishes."""

from __future__ import annotations

from typing import Any

from ldpstream.aggregator.plans import Plan
from ldpstream.aggregator.store import MemoryStore
from ldpstream.contract.spec import load_spec
from ldpstream.readapi.metrics import StoreCollector
from ldpstream.runtime.settings import PROJECT_ROOT

EXAMPLES = PROJECT_ROOT / "examples"


class DueStore(MemoryStore):
    """A store whose shuffled collections' next close is due at `due_ms`."""

    def __init__(self, due_ms: int | None) -> None:
        super().__init__()
        self.due_ms = due_ms

    def shuffle_due_ms(self, collection: str) -> int | None:
        return self.due_ms


def samples(store: MemoryStore, *plans: Plan, now_s: float = 1000.0) -> dict[tuple[str, ...], float]:
    collector = StoreCollector(store, lambda: list(plans), lambda topics: {}, clock_s=lambda: now_s)
    out: dict[tuple[str, ...], Any] = {}
    for family in collector.collect():
        for s in family.samples:
            if s.name in ("ldp_privacy_epsilon", "ldp_shuffle_window_overdue_seconds"):
                out[(s.name, *(s.labels[k] for k in sorted(s.labels)))] = s.value
    return out


def test_epsilon_per_report_window_and_lifetime_as_the_spec_states_them() -> None:
    plain = load_spec(EXAMPLES / "diagnostics.yaml")
    lifetime = load_spec(EXAMPLES / "app_lifetime.yaml")  # privacy: {per_report: 1.0, lifetime: 4.0, values: 2}
    many = plain.replace(name="many", one_report_per_window=False)
    got = samples(MemoryStore(), Plan(plain), Plan(lifetime), Plan(many))
    assert got == {("ldp_privacy_epsilon", plain.name, "report"): plain.epsilon,
                   ("ldp_privacy_epsilon", plain.name, "window"): plain.epsilon,
                   ("ldp_privacy_epsilon", lifetime.name, "lifetime"): 4.0,
                   ("ldp_privacy_epsilon", lifetime.name, "report"): 1.0,
                   ("ldp_privacy_epsilon", lifetime.name, "window"): 1.0,
                   ("ldp_privacy_epsilon", "many", "report"): plain.epsilon}  # no bound per window


def test_a_shuffled_window_is_overdue_from_its_due_close_on() -> None:
    shuffled = load_spec(EXAMPLES / "shuffled.yaml")

    def overdue(due_ms: int | None) -> float | None:
        return samples(DueStore(due_ms), Plan(shuffled)).get(("ldp_shuffle_window_overdue_seconds", shuffled.name))

    assert overdue(None) is None  # no close yet
    assert overdue(1_000_000) == 0 and overdue(1_200_000) == 0
    assert overdue(940_000) == 60.0
    plain = load_spec(EXAMPLES / "diagnostics.yaml")  # a collection that is not shuffled has none
    assert ("ldp_shuffle_window_overdue_seconds", plain.name) not in samples(DueStore(0), Plan(plain))
