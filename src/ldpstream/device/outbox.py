"""A device's persistent outbox and its HTTP transport to the ingestion edge.

`Outbox` keeps encoded reports (mechanism output only: what `ldpstream.contract.wire.encode` made of a `PerturbedBatch`;
a raw value is never stored) as one file each, written atomically and fsynced, so they survive an app restart. It is
bounded, so a device offline for weeks cannot fill its disk with reports nobody would take:
- `max_reports` (1,000): beyond it the oldest reports are dropped (an hourly collection fills it in 41 days);
- `max_bytes` (1 MiB): likewise by size (a report is about 100-300 bytes);
- `max_age_s` (24 h, the edge's default for the oldest report time it accepts, `DEFAULT_MAX_AGE_MS`): older reports
  are dropped before a flush, since the edge would refuse them as stale.
A dropped report's budget is never refunded: it was charged when the report was made, and a report that left the
device once (an answer lost on the way) may have been counted.
`HttpTransport.flush` sends them oldest first (the order they were made), up to `batch` per request as one envelope,
signed with the device's credential (`ldpstream.contract.auth`), and acts on the edge's verdict on each report
(`docs/reference/protocol.md`, "Delivery"): a report leaves the outbox when the edge took it (`admitted`) or
already had it (`duplicate`: an earlier attempt got through, or its window was used), or when it can never be
admitted (`stale_timestamp`: its window closed, with the spec's grace; `out_of_range`, `wrong_shape`, a damaged
file, a 400/403/404/413 answer): those are dropped with their reason counted (`HttpTransport.stats`) and logged. A
`future_timestamp` report stays for a later flush (the edge's clock is behind the device's; its age drops it in
the end). Nothing is sent twice once the edge answered for it, and no budget is refunded. Connection errors, 429,
503 and 507 are retried with exponential backoff and full jitter, at least as long as Retry-After asks but never
longer than `max_backoff_s`; every request has one deadline (`timeout_s`, `ldpstream.device.http`) and a whole
flush another (`flush_timeout_s`): at it the flush stops, and the reports not answered for stay.
"""

from __future__ import annotations

import logging
import os
import random
import re
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ldpstream.contract.auth import Credential, authorization
from ldpstream.contract.clock import now_ms
from ldpstream.contract.files import write_atomically
from ldpstream.contract.pseudonym import device_pseudonym
from ldpstream.contract.validation import (
    DEFAULT_MAX_AGE_MS,
    DUPLICATE,
    FUTURE,
    MALFORMED,
    OUT_OF_RANGE,
    STALE,
    UNKNOWN_COLLECTION,
    WRONG_SHAPE,
)
from ldpstream.contract.wire import WireError, check_envelope, decode_envelope, encode_envelope, join_envelopes
from ldpstream.device.http import DEFAULT_TIMEOUT_S, Answer, EdgeError, exchange, json_of

if TYPE_CHECKING:
    import ssl

log = logging.getLogger("ldpstream.device")

VERSION_HEADER = "LDP-Spec-Version"  # the edge's current version of the collection, on its answers to reports
RETRYABLE = frozenset({429, 503, 507})
DONE = frozenset({200, 202, 409})
HOPELESS = frozenset({400, 403, 404, 413})
_SECONDS = re.compile(r"[0-9]{1,12}(\.[0-9]{1,9})?")
DEFAULT_FLUSH_TIMEOUT_S = 120.0  # a whole flush, by default
MAX_ANSWER_BYTES = 64 * 2**10
# The verdicts on a report (the edge's, `ldpstream.edge.intake`); what a device does with each: module docstring.
ADMITTED = "admitted"
DELIVERED = frozenset({ADMITTED, DUPLICATE})
REFUSED = "refused"  # a refusal the device does not know by name: dropped as never admissible
DAMAGED = "damaged"  # a stored report that no longer decodes
VERDICTS = frozenset({ADMITTED, DUPLICATE, FUTURE, STALE, OUT_OF_RANGE, WRONG_SHAPE, MALFORMED, UNKNOWN_COLLECTION,
                      "wrong_device", "too_large", "unsupported_media_type",
                      # a training update's (docs/reference/protocol.md section 13.4)
                      "closed_version", "round_limit", "not_finite", "unknown_job"})


def backoff_s(attempt: int, retry_after_s: float, base_s: float, cap_s: float, u: float | None = None) -> float:
    """The wait before attempt `attempt` + 1: full jitter (`u`, uniform in [0, 1): drawn when None) over
    base * 2^(attempt-1), at least Retry-After, at most `cap_s` (an absurd Retry-After cannot put a device to sleep
    for days)."""
    jitter = random.random() if u is None else u
    return min(cap_s, max(retry_after_s, jitter * min(cap_s, base_s * 2 ** (attempt - 1))))


class Outbox:
    """Encoded reports waiting to be sent, one fsynced file each, oldest first, within bounds (module docstring)."""

    def __init__(self, directory: Path, max_reports: int = 1000, max_bytes: int = 2**20,
                 max_age_s: float = DEFAULT_MAX_AGE_MS / 1000) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.max_reports = max_reports
        self.max_bytes = max_bytes
        self.max_age_s = max_age_s
        self.dropped = 0  # reports dropped since this outbox was opened...
        self.reasons: Counter[str] = Counter()  # ...by reason (the outbox's bounds, or the edge's verdict)
        self._seq = max((int(p.stem) for p in self.pending()), default=0)

    def add(self, message: bytes) -> Path:
        """Store one encoded report (atomically: a crash leaves it whole or absent), then drop the oldest beyond the
        bounds."""
        self._seq += 1
        path = self.directory / f"{self._seq:016d}.report"
        write_atomically(path, message)
        self._bound()
        return path

    def pending(self, limit: int | None = None) -> list[Path]:
        """The stored reports, oldest first (at most `limit`); files that are not reports of ours are ignored."""
        return sorted(p for p in self.directory.glob("*.report") if p.stem.isdigit())[:limit]

    def drop_stale(self, now_s: float | None = None) -> int:
        """Drop the reports stored more than `max_age_s` ago; how many."""
        cutoff = (time.time() if now_s is None else now_s) - self.max_age_s
        return self.discard([p for p, stat in self._stats() if stat.st_mtime < cutoff], "expired")

    def _bound(self) -> None:
        stats = self._stats()
        sizes = [stat.st_size for _, stat in stats]
        cut, total = max(0, len(stats) - self.max_reports), sum(sizes)
        while cut < len(stats) - 1 and total - sum(sizes[:cut]) > self.max_bytes:
            cut += 1
        self.discard([p for p, _ in stats[:cut]], "outbox_full")

    def _stats(self) -> list[tuple[Path, os.stat_result]]:
        stats = []
        for p in self.pending():
            try:
                stats.append((p, p.stat()))
            except FileNotFoundError:  # sent or dropped meanwhile
                pass
        return stats

    def discard(self, files: list[Path], reason: str) -> int:
        """Drop stored reports that will never be admitted, counted (and logged) under `reason`; how many."""
        for p in files:
            p.unlink(missing_ok=True)
        if files:
            self.dropped += len(files)
            self.reasons[reason] += len(files)
            log.warning("the device dropped %d report(s) of its outbox %s: %s (their budget stays spent)",
                        len(files), self.directory, reason)
        return len(files)

    def __len__(self) -> int:
        return len(self.pending())


class HttpTransport:
    """Sends a device's outbox (reports of one collection and spec version) to the edge (see the module
    docstring)."""

    def __init__(self, base_url: str, credential: Credential, outbox: Outbox, *, batch: int = 50, attempts: int = 6,
                 base_backoff_s: float = 0.2, max_backoff_s: float = 30.0, timeout_s: float = DEFAULT_TIMEOUT_S,
                 flush_timeout_s: float = DEFAULT_FLUSH_TIMEOUT_S, sleep: Callable[[float], None] = time.sleep,
                 tls: ssl.SSLContext | None = None) -> None:
        self.url = base_url.rstrip("/")
        self.credential = credential
        self.outbox = outbox
        self.batch = batch
        self.attempts = attempts
        self.base_backoff_s = base_backoff_s
        self.max_backoff_s = max_backoff_s
        self.timeout_s = timeout_s
        self.flush_timeout_s = flush_timeout_s
        self.sleep = sleep
        self.tls = tls
        self.pseudonym = device_pseudonym(credential.collection, credential.device)
        self.path = f"/v1/collections/{credential.collection}/reports"  # where batches go
        self.current_version: int | None = None  # the edge's current spec version, when an answer said it
        self.delivered: Counter[str] = Counter()  # reports the edge took, by verdict (admitted, duplicate)

    def enqueue(self, message: bytes) -> None:
        """Keep an encoded report until it is sent."""
        self.outbox.add(message)

    def stats(self) -> dict[str, Any]:
        """What became of the reports since this transport was made: `delivered` (by verdict: admitted, or
        duplicate: the edge had it already), `dropped` (by reason: never admissible, or beyond the outbox's bounds),
        and `pending` (in the outbox now)."""
        return {"delivered": dict(self.delivered), "dropped": dict(self.outbox.reasons), "pending": len(self.outbox)}

    def flush(self) -> int:
        """Send the outbox, up to `batch` reports of one spec version a request, oldest first, within
        `flush_timeout_s`; the number of reports the edge took (admitted, or had already). Stale reports are dropped
        first; stops early (reports kept) when the edge stays unavailable through every retry or the flush's time
        is up. `current_version` is then the edge's current spec version if it said one."""
        deadline = time.monotonic() + self.flush_timeout_s
        self.outbox.drop_stale()
        taken = 0
        later: set[Path] = set()  # kept for a later flush (from the future, for the edge's clock)
        while files := [p for p in self.outbox.pending() if p not in later][:self.batch]:
            try:
                files, body = same_version(files)
            except WireError:  # a stored report damaged on disk: the edge could never accept it
                self.outbox.discard(files[:1], DAMAGED)
                continue
            verdicts = self._send(body, len(files), deadline)
            if verdicts is None:
                break
            for f, verdict in zip(files, verdicts, strict=True):
                if verdict in DELIVERED:
                    f.unlink(missing_ok=True)
                    self.delivered[verdict] += 1
                    taken += 1
                elif verdict == FUTURE:
                    later.add(f)
                else:
                    self.outbox.discard([f], verdict)
        return taken

    def _send(self, body: bytes, n: int, deadline: float) -> list[str] | None:
        """POST one body of `n` reports with retries before `deadline`: the verdict on each, or None when the edge
        gave none (no answer, still unavailable, or a status that may change: the reports stay)."""
        path = self.path
        for attempt in range(1, self.attempts + 1):
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            headers = {"Content-Type": "application/msgpack", "Authorization": authorization(
                self.credential.device, self.credential.key, "POST", path, body, now_ms())}
            retry_after = 0.0
            try:
                answer = exchange(self.url, "POST", path, body, headers, MAX_ANSWER_BYTES, min(self.timeout_s, left),
                                  self.tls)
                self._note_version(answer.headers)
                if answer.status not in RETRYABLE:
                    return verdicts_of(answer, n)
                retry_after = retry_after_s(answer.headers.get("retry-after"))
            except EdgeError:
                pass  # no answer in time, a redirect, an answer too large: try again
            if attempt < self.attempts:
                wait = min(backoff_s(attempt, retry_after, self.base_backoff_s, self.max_backoff_s),
                           deadline - time.monotonic())
                if wait > 0:
                    self.sleep(wait)
        return None

    def _note_version(self, headers: dict[str, str]) -> None:
        """Remember the edge's current spec version of the collection (header `LDP-Spec-Version`), if it said one."""
        value = headers.get(VERSION_HEADER.lower())
        if value is not None and value.isdigit() and len(value) < 10:
            self.current_version = int(value)


def verdicts_of(answer: Answer, n: int) -> list[str] | None:
    """The verdict on each of the `n` reports of a request from the edge's answer (`verdicts`, or for an answer
    without them the status's: 200/202 admitted, 409 duplicate, 400/403/404/413 the reason given); None when the
    reports must stay (any other status)."""
    if answer.status in DONE or answer.status in HOPELESS:
        try:
            value = json_of(answer.body, answer.status, "the edge's answer")
        except EdgeError:
            value = None
        given = value.get("verdicts") if isinstance(value, dict) else None
        if isinstance(given, list) and len(given) == n and all(isinstance(v, str) for v in given):
            return [v if v in VERDICTS else REFUSED for v in given]
        if answer.status in DONE:
            return [DUPLICATE if answer.status == 409 else ADMITTED] * n
        reason = value.get("reason") if isinstance(value, dict) else None
        return [reason if reason in VERDICTS else REFUSED] * n
    return None


def retry_after_s(value: str | None) -> float:
    """A Retry-After of seconds, digits with an optional fraction (0 when absent or anything else, a date
    included; the backoff caps it)."""
    text = (value or "").strip()
    return float(text) if _SECONDS.fullmatch(text) else 0.0


def same_version(files: list[Path]) -> tuple[list[Path], bytes]:
    """The leading reports of `files` that decode and share the first one's spec version, and their joined body
    (WireError if the first no longer decodes: a file damaged on disk, which the caller drops alone)."""
    messages: list[bytes] = []
    version = None
    for f in files:
        message = f.read_bytes()
        try:
            envelope = decode_envelope(message)
        except WireError:
            if not messages:
                raise
            break  # sent next time on its own, and dropped then
        if version is not None and envelope.spec_version != version:
            break
        version = envelope.spec_version
        messages.append(message)
    return files[:len(messages)], joined_body(messages)


def joined_body(messages: list[bytes]) -> bytes:
    """Encoded reports of one device and spec version as one envelope (WireError if one no longer decodes, or is
    not well formed as far as its lengths tell: a file damaged on disk)."""
    if len(messages) == 1:
        return messages[0]
    envelopes = [decode_envelope(m) for m in messages]
    for env in envelopes:
        check_envelope(env)
    return encode_envelope(join_envelopes(envelopes))
