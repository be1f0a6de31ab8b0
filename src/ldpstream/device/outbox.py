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
`HttpTransport.flush` sends them oldest first, up to `batch` per request as one envelope, signed with the device's
credential (`ldpstream.contract.auth`); a report leaves the outbox only when the edge acknowledged it (200/202), or
answered that its window was already used (409: an earlier attempt got through) or that it can never be accepted
(400/403/404/413: kept it would block the outbox forever). Connection errors, 429, 503 and 507 are retried with
exponential backoff and full jitter, at least as long as Retry-After asks; after `attempts` the reports stay for
the next flush.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ldpstream.contract.auth import Credential, authorization
from ldpstream.contract.clock import now_ms
from ldpstream.contract.pseudonym import device_pseudonym
from ldpstream.contract.validation import DEFAULT_MAX_AGE_MS
from ldpstream.contract.wire import WireError, check_envelope, decode_envelope, encode_envelope, join_envelopes

VERSION_HEADER = "LDP-Spec-Version"  # the edge's current version of the collection, on its answers to reports
RETRYABLE = frozenset({429, 503, 507})
DONE = frozenset({200, 202, 409})
HOPELESS = frozenset({400, 403, 404, 413})


def backoff_s(attempt: int, retry_after_s: float, base_s: float, cap_s: float) -> float:
    """The wait before attempt `attempt` + 1: full jitter over base * 2^(attempt-1) (capped), at least Retry-After."""
    return max(retry_after_s, random.uniform(0, min(cap_s, base_s * 2 ** (attempt - 1))))


class Outbox:
    """Encoded reports waiting to be sent, one fsynced file each, oldest first, within bounds (module docstring)."""

    def __init__(self, directory: Path, max_reports: int = 1000, max_bytes: int = 2**20,
                 max_age_s: float = DEFAULT_MAX_AGE_MS / 1000) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.max_reports = max_reports
        self.max_bytes = max_bytes
        self.max_age_s = max_age_s
        self.dropped = 0  # reports dropped by the bounds since this outbox was opened
        self._seq = max((int(p.stem) for p in self.pending()), default=0)

    def add(self, message: bytes) -> Path:
        """Store one encoded report (atomically: a crash leaves it whole or absent), then drop the oldest beyond the
        bounds."""
        self._seq += 1
        path = self.directory / f"{self._seq:016d}.report"
        tmp = path.with_suffix(".tmp")
        with open(tmp, "wb") as handle:
            handle.write(message)
            handle.flush()
            os.fsync(handle.fileno())
        tmp.rename(path)
        self._bound()
        return path

    def pending(self, limit: int | None = None) -> list[Path]:
        """The stored reports, oldest first (at most `limit`); files that are not reports of ours are ignored."""
        return sorted(p for p in self.directory.glob("*.report") if p.stem.isdigit())[:limit]

    def drop_stale(self, now_s: float | None = None) -> int:
        """Drop the reports stored more than `max_age_s` ago; how many."""
        cutoff = (time.time() if now_s is None else now_s) - self.max_age_s
        return self._drop([p for p, stat in self._stats() if stat.st_mtime < cutoff])

    def _bound(self) -> None:
        stats = self._stats()
        sizes = [stat.st_size for _, stat in stats]
        cut, total = max(0, len(stats) - self.max_reports), sum(sizes)
        while cut < len(stats) - 1 and total - sum(sizes[:cut]) > self.max_bytes:
            cut += 1
        self._drop([p for p, _ in stats[:cut]])

    def _stats(self) -> list[tuple[Path, os.stat_result]]:
        stats = []
        for p in self.pending():
            try:
                stats.append((p, p.stat()))
            except FileNotFoundError:  # sent or dropped meanwhile
                pass
        return stats

    def _drop(self, files: list[Path]) -> int:
        for p in files:
            p.unlink(missing_ok=True)
        self.dropped += len(files)
        return len(files)

    def __len__(self) -> int:
        return len(self.pending())


class HttpTransport:
    """Sends a device's outbox (reports of one collection and spec version) to the edge (see the module
    docstring)."""

    def __init__(self, base_url: str, credential: Credential, outbox: Outbox, *, batch: int = 50, attempts: int = 6,
                 base_backoff_s: float = 0.2, max_backoff_s: float = 30.0, timeout_s: float = 30.0,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.url = base_url.rstrip("/")
        self.credential = credential
        self.outbox = outbox
        self.batch = batch
        self.attempts = attempts
        self.base_backoff_s = base_backoff_s
        self.max_backoff_s = max_backoff_s
        self.timeout_s = timeout_s
        self.sleep = sleep
        self.pseudonym = device_pseudonym(credential.collection, credential.device)
        self.current_version: int | None = None  # the edge's current spec version, when an answer said it

    def enqueue(self, message: bytes) -> None:
        """Keep an encoded report until it is sent."""
        self.outbox.add(message)

    def flush(self) -> int:
        """Send the outbox, up to `batch` reports of one spec version a request, oldest first; the number of reports
        that left it. Stale reports are dropped first; stops early (reports kept) when the edge stays unavailable
        through every retry. `current_version` is then the edge's current spec version if it said one."""
        self.outbox.drop_stale()
        sent = 0
        while files := self.outbox.pending(self.batch):
            try:
                files, body = same_version(files)
                status = self._send(body)
            except WireError:  # a stored report damaged on disk: the edge could never accept it
                files, status = files[:1], 400
            if status not in DONE and status not in HOPELESS:
                break
            for f in files:
                f.unlink(missing_ok=True)
            sent += len(files)
        return sent

    def _send(self, body: bytes) -> int:
        import urllib.error  # loaded when a device first sends: an import of the SDK stays light
        import urllib.request

        """POST one body with retries; the final status (0: no answer)."""
        path = f"/v1/collections/{self.credential.collection}/reports"
        status = 0
        for attempt in range(1, self.attempts + 1):
            headers = {"Content-Type": "application/msgpack", "Authorization": authorization(
                self.credential.device, self.credential.key, "POST", path, body, now_ms())}
            retry_after = 0.0
            try:
                request = urllib.request.Request(self.url + path, data=body, method="POST", headers=headers)
                with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                    self._note_version(response.headers)
                    return int(response.status)
            except urllib.error.HTTPError as exc:
                self._note_version(exc.headers)
                status = exc.code
                if status not in RETRYABLE:
                    return status
                retry_after = _seconds(exc.headers.get("Retry-After"))
            except (urllib.error.URLError, OSError):
                status = 0
            if attempt < self.attempts:
                self.sleep(backoff_s(attempt, retry_after, self.base_backoff_s, self.max_backoff_s))
        return status

    def _note_version(self, headers: Any) -> None:
        """Remember the edge's current spec version of the collection (header `LDP-Spec-Version`), if it said one."""
        value = headers.get(VERSION_HEADER) if headers is not None else None
        if value is not None and value.isdigit() and len(value) < 10:
            self.current_version = int(value)


def _seconds(value: str | None) -> float:
    """A Retry-After of seconds (0 when absent or not a number; at most a day)."""
    try:
        return min(max(float(value or 0), 0.0), 86_400.0)
    except ValueError:
        return 0.0


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
