"""Edge test support: an edge process, signed requests, one device's encoded report."""

from __future__ import annotations

import json
import socket
import subprocess
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from collection.auth import Credential, authorization
from collection.pseudonym import device_pseudonym
from collection.spec import CollectionSpec
from collection.wire import encode
from producer.perturb import perturb
from producer.population import Population
from runtime.clock import now_ms


@dataclass
class EdgeProcess:
    """A running edge: its URL, process, spool directory and port."""

    url: str
    proc: subprocess.Popen[bytes]
    spool: Path
    port: int


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def report_body(spec: CollectionSpec, credential: Credential, timestamps_ms: list[int] | None = None,
                seed: int = 0, pseudonym: int | None = None) -> bytes:
    """A wire envelope of the device's perturbed reports (one per timestamp; default: one, now)."""
    times = np.asarray(timestamps_ms or [now_ms()], dtype=np.int64)
    rng = np.random.default_rng(seed)
    records = Population(spec, seed).sample(len(times), rng)
    who = device_pseudonym(spec.name, credential.device) if pseudonym is None else pseudonym
    return encode(perturb(spec, np.full(len(times), who, dtype=np.uint64), times, records, rng))


def post(url: str, credential: Credential | None, body: bytes, content_type: str = "application/msgpack",
         headers: dict[str, str] | None = None, timestamp_ms: int | None = None,
         path: str | None = None) -> tuple[int, dict[str, object], dict[str, str]]:
    """POST a report body signed with `credential` (None: unsigned); (status, JSON answer, headers)."""
    collection = credential.collection if credential is not None else "none"
    path = path or f"/v1/collections/{collection}/reports"
    sent = {"Content-Type": content_type}
    if credential is not None:
        sent["Authorization"] = authorization(credential.device, credential.key, "POST", path, body,
                                              now_ms() if timestamp_ms is None else timestamp_ms)
    sent.update(headers or {})
    request = urllib.request.Request(url + path, data=body, method="POST", headers=sent)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read()), dict(response.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}"), dict(exc.headers)
