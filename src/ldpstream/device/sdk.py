"""The device SDK: one device's reports of one collection, perturbed on the device, under the app's privacy policy.

A device joins on its own (`Device.join`): it enrols with a token the app's backend gave it, fetches the pointer to
the collection's current spec and the spec, verifies both against the keys the app pinned before it parses them
(`ldpstream.device.trust`), and holds the spec against the app's policy (`ldpstream.device.policy`); a refused spec
charges nothing and sends nothing, and the device keeps why (`Device.verdict`). Everything it learns is kept in its
state directory (`ldpstream.device.state`), so a restart neither resets its budget nor re-draws its memoized
answers.

`Device.report(record)` (1) validates and perturbs the record as a batch of one (`ldpstream.device.perturb`), (2)
charges the privacy-budget ledger, which refuses a report that would exceed the spec's epsilon in its window, its
lifetime budget (a spec with a privacy block: the memos the report reads, `ldpstream.device.perturb.report_memos`,
each charged once; the perturbation uses the collection secret the ledger keeps), or the policy's daily and lifetime
caps, (3) encodes the perturbed batch (`ldpstream.contract.wire`, which accepts nothing else) and (4) stores it in the
device's bounded outbox, which `Device.flush` sends to the ingestion edge (or, given a Kafka producer on a server
that simulates devices, produces it keyed by the device's pseudonym to its partition). The budget is charged when
the report is made, not when it is sent. The raw record goes no further than step (1); the device id never leaves
as such (`ldpstream.contract.pseudonym`). A record that fails validation or is refused by the ledger charges nothing
and sends nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ldpstream.contract.clock import now_ms
from ldpstream.contract.collector import Strategies, pinned_strategies, strategy_from_bytes
from ldpstream.contract.pointer import POINTER_PERIOD_MS, Pointer, PointerError, parse_pointer
from ldpstream.contract.pseudonym import device_partitions, device_pseudonym, pseudonym_key
from ldpstream.contract.signatures import TrustedKeys
from ldpstream.contract.spec import CollectionSpec, SpecError
from ldpstream.contract.validation import MAX_FUTURE_SKEW_MS
from ldpstream.contract.wire import encode
from ldpstream.device.edge_api import EdgeClient, EdgeError
from ldpstream.device.http import DEFAULT_TIMEOUT_S
from ldpstream.device.ledger import PrivacyLedger
from ldpstream.device.outbox import HttpTransport, Outbox
from ldpstream.device.perturb import perturb, report_memos
from ldpstream.device.policy import PrivacyPolicy, judge
from ldpstream.device.state import CollectionState, DeviceState, StateError
from ldpstream.device.trust import Seen, TrustError, check_pointer, check_spec

if TYPE_CHECKING:
    import ssl  # only the type of a TLS context the app passes in

DEFAULT_POLICY = PrivacyPolicy()


class ReportSink(Protocol):
    """Where a device with a direct Kafka connection produces (`ldpstream.runtime.kafka.ReportProducer`)."""

    def produce(self, topic: str, value: bytes, key: bytes | None = None, partition: int | None = None) -> None:
        """Queue one message."""


class SpecRefused(RuntimeError):
    """The device will not report to this collection now: `code` says why (a policy rule, a trust rule such as
    `expired`), the message explains; nothing was charged or sent."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class Device:
    """One device reporting to one collection (see the module docstring for the steps of a report).

    Made by `Device.join` on a phone, a browser or an app; made directly (a spec in hand) by code that already
    trusts the spec, such as tests and server-side simulations. Either way the app's `policy` (default: the
    defaults of `ldpstream.device.policy`; None: no policy) judges the spec first, and SpecRefused says why not.
    `strategies` are the factorization strategies the spec pins, by content hash (a spec without a factorization
    attribute needs none).
    """

    def __init__(self, spec: CollectionSpec, device_id: int | str, producer: ReportSink | None = None,
                 ledger: PrivacyLedger | None = None, rng: np.random.Generator | None = None,
                 strategies: Strategies | None = None, transport: HttpTransport | None = None,
                 policy: PrivacyPolicy | None = DEFAULT_POLICY, clock: Callable[[], int] = now_ms) -> None:
        if producer is not None and transport is not None:
            raise ValueError("a device sends through Kafka or through the edge, not both")
        self.producer = producer
        self.transport = transport
        self.ledger = ledger if ledger is not None else PrivacyLedger()
        self.rng = rng if rng is not None else np.random.default_rng()
        self.policy = policy
        self.clock = clock
        self.pseudonym = device_pseudonym(spec.name, device_id)
        self._devices = np.array([self.pseudonym], dtype=np.uint64)
        self._key = pseudonym_key(self.pseudonym)
        self._joined: Joined | None = None
        self._use(spec, {} if strategies is None else strategies)

    def _use(self, spec: CollectionSpec, strategies: Strategies) -> None:
        """Report to `spec` from now on, if the policy accepts it (its lifetime committed); SpecRefused if not."""
        if self.policy is not None:
            verdict = judge(spec, self.policy, self.ledger.commitments, strategies)
            if not verdict.accepted:
                raise SpecRefused(verdict.code, verdict.reason)
            self.ledger.commit(spec.name, verdict.commitment)
        self.spec = spec
        self.strategies = strategies
        self._partition = int(device_partitions(self._devices, spec.partitions)[0])

    @classmethod
    def join(cls, edge_url: str, collection: str, token: str | None, trusted_keys: TrustedKeys | Mapping[str, Any],
             policy: PrivacyPolicy | None = DEFAULT_POLICY, state_dir: str | Path = ".ldpstream-device", *,
             rng: np.random.Generator | None = None, tls: ssl.SSLContext | None = None,
             clock: Callable[[], int] = now_ms, outbox: Mapping[str, Any] | None = None,
             delivery: Mapping[str, Any] | None = None) -> Device:
        """The device of `collection` at the edge `edge_url`: its spec verified against `trusted_keys` (what
        `ldp spec keys --json` prints) and accepted by `policy`, then (only then) enrolled with `token` (once: a
        device that joined before reuses its credential, and may pass None). Its state lives in `state_dir`.
        `outbox` sets the outbox's bounds (`Outbox`), `delivery` the sending's (`HttpTransport`: `timeout_s`, one
        request's deadline, also of the join's requests; `flush_timeout_s`, a whole flush's; `max_backoff_s`, which
        also caps Retry-After; `attempts`, `batch`, `base_backoff_s`).

        Raises SpecRefused (nothing charged or sent; `.code` says why) when the spec breaks a trust or policy rule,
        EdgeError when the edge refuses the token or cannot be reached, StateError when the state cannot be kept.
        """
        keys = trusted_keys if isinstance(trusted_keys, TrustedKeys) else TrustedKeys.from_json(trusted_keys)
        state = DeviceState.open(state_dir)
        try:
            ledger = PrivacyLedger.open(state.ledger_path)
        except (ValueError, OSError) as exc:
            raise StateError(f"the privacy ledger {state.ledger_path} is damaged or unreadable ({exc}): the device "
                             f"will not guess what it spent; repair it, or reset the device") from None
        sending = dict(delivery or {})
        client = EdgeClient(edge_url, sending.get("timeout_s", DEFAULT_TIMEOUT_S), tls=tls)
        joined = Joined(client, keys, state, collection, clock)
        try:  # the spec first: a device that refuses it never enrols
            spec = joined.trusted_spec()
            strategies = joined.strategies(spec)
            verdict = judge(spec, policy, ledger.commitments, strategies) if policy is not None else None
            if verdict is not None and not verdict.accepted:
                raise SpecRefused(verdict.code, verdict.reason)
        except SpecRefused as refused:
            joined.remember(False, refused.code, str(refused))
            raise
        mine = state.of(collection)
        if mine.credential is None:
            if token is None:
                raise EdgeError(0, "no_token", f"the device has not joined {collection!r}: an enrolment token is "
                                               f"needed")
            mine.credential = client.enroll(token, collection)
            state.save()
        transport = HttpTransport(edge_url, mine.credential, Outbox(state.outbox_path(collection), **(outbox or {})),
                                  tls=tls, **sending)
        device = cls(spec, mine.credential.device, ledger=ledger, rng=rng, strategies=strategies,
                     transport=transport, policy=policy, clock=clock)
        joined.remember(True)
        device._joined = joined
        return device

    @property
    def verdict(self) -> dict[str, Any] | None:
        """Whether the device accepts its collection's current spec, and why not ({"accepted", "code", "reason"}):
        the app shows it; None for a device made without joining."""
        return None if self._joined is None else self._joined.state.of(self._joined.collection).verdict

    def refresh(self) -> dict[str, Any] | None:
        """Fetch the pointer again (and the spec, if it moved on), verify and judge it; the verdict. The last good
        spec stays in use when the edge cannot be reached or serves something the device does not believe."""
        joined = self._joined
        if joined is None:
            return None
        try:
            spec = joined.trusted_spec()
            if spec.content_hash() != self.spec.content_hash():
                self._use(spec, joined.strategies(spec))
            joined.remember(True)
        except SpecRefused as refused:
            joined.remember(False, refused.code, str(refused))
        except EdgeError:
            pass  # offline, or the edge is down: the last good spec stands until its pointer expires
        return self.verdict

    def report(self, record: Mapping[str, object], timestamp: int | datetime | None = None) -> bytes:
        """Perturb, charge, encode and send one report (with a producer), or store it in the outbox (with a
        transport); return the encoded message.

        `timestamp` is the report time: milliseconds since the epoch, an aware datetime, or None for now (the
        device's clock); it must lie after 1970 and at most the edge's clock skew ahead of the device's clock
        (`check_report_time`). Raises RecordError for a malformed record, ValueError for a report time out of
        bounds, BudgetExceeded when a budget or a policy cap would be exceeded, SpecRefused when the device does not
        accept its collection's spec now (refused, or its pointer expired).
        """
        if self._joined is not None:
            self._joined.require_ready()
        clock = self.clock()
        now = check_report_time(clock if timestamp is None else report_time_ms(timestamp), clock)
        columns = {name: np.array([value]) for name, value in record.items()}
        secrets, memos = None, []
        if self.spec.privacy is not None:
            secrets = np.array([self.ledger.secret(self.spec.name)], dtype=np.uint64)
            memos = report_memos(self.spec, columns, secrets, self.strategies)[0]
        self.ledger.check(self.spec, now, memos=memos, policy=self.policy, now_ms=clock)
        batch = perturb(self.spec, self._devices, np.array([now], dtype=np.int64), columns, self.rng, self.strategies,
                        secrets)
        self.ledger.charge(self.spec, now, memos=memos, policy=self.policy, now_ms=clock)
        message = encode(batch)
        if self.producer is not None:
            self.producer.produce(self.spec.topic, message, self._key, self._partition)
        if self.transport is not None:
            self.transport.enqueue(message)
        return message

    def stats(self) -> dict[str, Any]:
        """What became of this device's reports since it was made (`HttpTransport.stats`): delivered by verdict,
        dropped by reason, pending; empty without an HTTP transport."""
        return {} if self.transport is None else self.transport.stats()

    def flush(self) -> int:
        """Send the outbox to the edge (with an HTTP transport), within the transport's `flush_timeout_s` (and the
        pointer's refresh within its requests' deadlines); the number of reports the edge took (`stats` says what
        became of the others). A joined device refreshes its spec first when its pointer is due, and after when the
        edge says the version moved on."""
        if self.transport is None:
            return 0
        if self._joined is not None and self._joined.due():
            self.refresh()
        sent = self.transport.flush()
        moved_on = self.transport.current_version
        if self._joined is not None and moved_on is not None and moved_on > self.spec.version:
            self.refresh()
        return sent

    def leave(self) -> None:
        """Delete this device's enrolment at the edge (its credential stops working), forget the credential and
        drop the reports not sent yet; it reports nothing more until it joins again with a token."""
        joined = self._joined
        if joined is None or self.transport is None:
            raise ValueError("only a joined device can leave")
        joined.client.leave(self.transport.credential)
        for report in self.transport.outbox.pending():  # nobody would take them now (their budget stays spent)
            report.unlink(missing_ok=True)
        mine = joined.state.of(joined.collection)
        mine.credential = None
        mine.verdict = {"accepted": False, "code": "left", "reason": "the device left the collection"}
        joined.state.save()


@dataclass
class Joined:
    """A joined device's link to its edge: where its trust state is kept and how to renew it."""

    client: EdgeClient
    keys: TrustedKeys
    state: DeviceState
    collection: str
    clock: Callable[[], int]

    def trusted_spec(self) -> CollectionSpec:
        """The collection's current spec, checked (module `ldpstream.device.trust`): the pointer fetched (or the
        kept one, on 304), the spec fetched when it moved on (else the kept bytes, verified again). SpecRefused for
        a rule broken; EdgeError when the edge does not answer. The pointer and spec are kept only once they
        pass."""
        mine = self.state.of(self.collection)
        fetched = self.client.pointer(self.collection, mine.pointer_etag if mine.pointer is not None else None)
        body, block, etag = ((mine.pointer, mine.pointer_block, mine.pointer_etag) if fetched is None
                             else (fetched.body, fetched.block, fetched.etag))
        if body is None:
            raise EdgeError(304, "bad_answer", "the edge answered 304 to a device that holds no pointer")
        try:
            pointer = check_pointer(body, block, self.keys, self.collection, mine.seen, self.clock())
            spec, spec_bytes, spec_block = self._spec_of(pointer, mine)
        except TrustError as exc:
            raise SpecRefused(exc.code, str(exc)) from None
        mine.seen = Seen(pointer.version, pointer.sequence)
        mine.pointer, mine.pointer_block, mine.pointer_etag = body, block, etag
        mine.spec, mine.spec_block = spec_bytes, spec_block
        self.state.save()
        return spec

    def _spec_of(self, pointer: Pointer, mine: CollectionState) -> tuple[CollectionSpec, bytes, bytes | None]:
        """The spec the pointer names: the kept bytes if they are those (verified again), else fetched."""
        if mine.spec is not None and mine.seen.version == pointer.version:
            try:
                return check_spec(mine.spec, mine.spec_block, self.keys, pointer), mine.spec, mine.spec_block
            except TrustError:
                pass  # kept bytes that no longer verify (edited on disk): fetch them again
        fetched = self.client.spec(self.collection, pointer.version)
        return check_spec(fetched.body, fetched.block, self.keys, pointer), fetched.body, fetched.block

    def strategies(self, spec: CollectionSpec) -> Strategies:
        """The factorization strategies the spec pins, fetched and checked against their hashes."""
        try:
            return {h: strategy_from_bytes(self.client.strategy(h), h) for h in pinned_strategies(spec)}
        except SpecError as exc:
            raise SpecRefused("malformed_strategy", str(exc)) from None

    def remember(self, accepted: bool, code: str = "", reason: str = "") -> None:
        """Keep the verdict on the current spec for the app (saved)."""
        self.state.of(self.collection).verdict = {"accepted": accepted, "code": code, "reason": reason}
        self.state.save()

    def require_ready(self) -> None:
        """SpecRefused unless the current spec is accepted and its pointer still vouches for it."""
        mine = self.state.of(self.collection)
        verdict = mine.verdict or {}
        if not verdict.get("accepted"):
            raise SpecRefused(str(verdict.get("code", "not_joined")), str(verdict.get("reason", "not joined")))
        pointer = _kept_pointer(mine)
        if pointer is None or pointer.expired(self.clock()):
            raise SpecRefused("expired", f"the pointer to {self.collection!r} has expired (or is not kept): reports "
                                         f"stop until `refresh` gets a fresh one")

    def due(self) -> bool:
        """True when the kept pointer is older than a period (time to ask for a fresh one)."""
        pointer = _kept_pointer(self.state.of(self.collection))
        return pointer is None or self.clock() - pointer.issued_ms >= POINTER_PERIOD_MS


def _kept_pointer(mine: CollectionState) -> Pointer | None:
    """The pointer kept in the state (verified when it was kept), None if there is none or it no longer parses."""
    try:
        return None if mine.pointer is None else parse_pointer(mine.pointer)
    except PointerError:
        return None


def check_report_time(timestamp_ms: int, clock_ms: int) -> int:
    """`timestamp_ms` if a device may make a report at that time by its clock `clock_ms`: after 1970 and at most
    the edge's clock skew (`MAX_FUTURE_SKEW_MS`) ahead of the clock; ValueError otherwise (a clock that jumped, an
    app's bug: the edge would refuse it, and the ledger would charge a day that has not come)."""
    if timestamp_ms <= 0:
        raise ValueError(f"a report time must lie after 1970-01-01, got {timestamp_ms} ms")
    if timestamp_ms > clock_ms + MAX_FUTURE_SKEW_MS:
        raise ValueError(f"a report time must lie at most {MAX_FUTURE_SKEW_MS // 1000} s ahead of the device's clock "
                         f"({clock_ms} ms), got {timestamp_ms} ms")
    return timestamp_ms


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
