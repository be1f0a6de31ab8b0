"""Edge test support: an edge process, signed requests, one device's encoded report."""

from __future__ import annotations

import ipaddress
import json
import socket
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from ldpstream.contract.auth import Credential, authorization
from ldpstream.contract.clock import now_ms
from ldpstream.contract.pseudonym import device_pseudonym
from ldpstream.contract.spec import CollectionSpec
from ldpstream.contract.wire import encode
from ldpstream.device.perturb import perturb
from ldpstream.edge.processes import start_edge, stop_edge, wait_live
from ldpstream.simulator.population import Population


@dataclass
class EdgeProcess:
    """A running edge: its URL, process, spool directory and port."""

    url: str
    proc: subprocess.Popen[bytes]
    spool: Path
    port: int


def running_edge(directory: Path, *args: str) -> Iterator[EdgeProcess]:
    """An edge process of its own (`python -m ldpstream.edge`, more options in `args`) on a free port, its spool and
    log in
    `directory`, until the generator is closed."""
    port = free_port()
    proc = start_edge(port, directory / "spool", *args, log_file=directory / "edge.log")
    url = f"http://127.0.0.1:{port}"
    try:
        wait_live(url, proc)
        yield EdgeProcess(url, proc, directory / "spool", port)
    finally:
        stop_edge(proc)


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


def self_signed_certificate(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key (PEM files in `directory`): the edge's and the CA."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ldpstream test edge")])
    now = datetime.now(UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - timedelta(minutes=5))
            .not_valid_after(now + timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_file, key_file = directory / "edge.crt", directory / "edge.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_file, key_file
