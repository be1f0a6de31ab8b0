"""A device's persistent outbox and its HTTP transport to the ingestion edge.

`Outbox` keeps encoded reports (mechanism output only: what `ldpstream.contract.wire.encode` made of a `PerturbedBatch`;
a raw value is never stored) as one file each, written atomically and fsynced, so they survive an app restart.
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
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from ldpstream.contract.auth import Credential, authorization
from ldpstream.contract.clock import now_ms
from ldpstream.contract.pseudonym import device_pseudonym
from ldpstream.contract.wire import WireError, check_envelope, decode_envelope, encode_envelope, join_envelopes

RETRYABLE = frozenset({429, 503, 507})
DONE = frozenset({200, 202, 409})
HOPELESS = frozenset({400, 403, 404, 413})


def backoff_s(attempt: int, retry_after_s: float, base_s: float, cap_s: float) -> float:
    """The wait before attempt `attempt` + 1: full jitter over base * 2^(attempt-1) (capped), at least Retry-After."""
    return max(retry_after_s, random.uniform(0, min(cap_s, base_s * 2 ** (attempt - 1))))


class Outbox:
    """Encoded reports waiting to be sent, one fsynced file each, oldest first."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._seq = max((int(p.stem) for p in self.directory.glob("*.report")), default=0)

    def add(self, message: bytes) -> Path:
        """Store one encoded report (atomically: a crash leaves it whole or absent)."""
        self._seq += 1
        path = self.directory / f"{self._seq:016d}.report"
        tmp = path.with_suffix(".tmp")
        with open(tmp, "wb") as handle:
            handle.write(message)
            handle.flush()
            os.fsync(handle.fileno())
        tmp.rename(path)
        return path

    def pending(self, limit: int | None = None) -> list[Path]:
        """The stored reports, oldest first (at most `limit`)."""
        return sorted(self.directory.glob("*.report"))[:limit]

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

    def enqueue(self, message: bytes) -> None:
        """Keep an encoded report until it is sent."""
        self.outbox.add(message)

    def flush(self) -> int:
        """Send the outbox, `batch` reports a request; the number of reports that left it. Stops early (reports
        kept) when the edge stays unavailable through every retry."""
        sent = 0
        while files := self.outbox.pending(self.batch):
            try:
                status = self._send(joined_body([f.read_bytes() for f in files]))
            except WireError:  # a stored report damaged on disk: the edge could never accept it
                status = 400
            if status not in DONE and status not in HOPELESS:
                break
            for f in files:
                f.unlink()
            sent += len(files)
        return sent

    def _send(self, body: bytes) -> int:
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
                    return int(response.status)
            except urllib.error.HTTPError as exc:
                status = exc.code
                if status not in RETRYABLE:
                    return status
                retry_after = float(exc.headers.get("Retry-After", 0) or 0)
            except (urllib.error.URLError, OSError):
                status = 0
            if attempt < self.attempts:
                self.sleep(backoff_s(attempt, retry_after, self.base_backoff_s, self.max_backoff_s))
        return status


def joined_body(messages: list[bytes]) -> bytes:
    """Encoded reports of one device and spec version as one envelope (WireError if one no longer decodes, or is
    not well formed as far as its lengths tell: a file damaged on disk)."""
    if len(messages) == 1:
        return messages[0]
    envelopes = [decode_envelope(m) for m in messages]
    for env in envelopes:
        check_envelope(env)
    return encode_envelope(join_envelopes(envelopes))
