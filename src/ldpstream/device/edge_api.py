"""The device's side of the edge's join protocol, over HTTP (the standard library's client: no dependency).

- `enroll`: `POST /v1/enroll` {"token", "collection"} -> 201 and the device's credential;
- `pointer`: `GET /v1/collections/NAME` (If-None-Match: the last ETag) -> 200 the signed pointer, or 304;
- `spec`: `GET /v1/collections/NAME/specs/VERSION` -> the spec's signed bytes;
- `strategy`: `GET /v1/strategies/HASH` -> a factorization strategy's .npz, checked against the hash the spec pins;
- `leave`: `DELETE /v1/collections/NAME/devices/ID`, signed with the device's credential -> 204.

Signatures come in the `LDP-Signature` header (`ldpstream.contract.signatures.block_header`). Every answer is read
up to a size bound (a hostile server cannot fill the device's memory) and within the timeout; what fails is an
`EdgeError` with the status (0: no answer) and the edge's reason when it gave one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from ldpstream.contract.auth import Credential, authorization
from ldpstream.contract.clock import now_ms
from ldpstream.contract.signatures import block_from_header

if TYPE_CHECKING:
    import ssl
    import urllib.error

MAX_POINTER_BYTES = 4 * 2**10
MAX_SPEC_BYTES = 256 * 2**10  # a spec is at most 256 KiB (ldpstream.contract.spec)
MAX_STRATEGY_BYTES = 64 * 2**20
MAX_ANSWER_BYTES = 64 * 2**10  # an enrolment's credential, an error's JSON


class EdgeError(RuntimeError):
    """The edge refused or did not answer: `status` (0 for no answer) and its `reason` when it gave one."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


@dataclass(frozen=True)
class Signed:
    """A signed document as served: its exact bytes, its signature block, and the ETag it came with."""

    body: bytes
    block: bytes | None
    etag: str | None


class EdgeClient:
    """Requests of one device to one edge (module docstring)."""

    def __init__(self, base_url: str, timeout_s: float = 30.0, tls: ssl.SSLContext | None = None) -> None:
        self.url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.tls = tls

    def enroll(self, token: str, collection: str) -> Credential:
        """Exchange an enrolment token for a credential of `collection`."""
        body = json.dumps({"token": token, "collection": collection}).encode()
        answer, _ = self._call("POST", "/v1/enroll", body, {"Content-Type": "application/json"}, MAX_ANSWER_BYTES)
        try:
            value: Any = json.loads(answer)
            credential = Credential.from_json(value)
        except (ValueError, TypeError, KeyError, AttributeError):
            raise EdgeError(200, "bad_answer", "the edge's enrolment answer is not a credential") from None
        if credential.collection != collection:
            raise EdgeError(200, "bad_answer", f"the edge enrolled the device in {credential.collection!r}")
        return credential

    def pointer(self, collection: str, etag: str | None = None) -> Signed | None:
        """The collection's signed pointer, or None if it is the one of `etag` still (304)."""
        headers = {} if etag is None else {"If-None-Match": etag}
        answer = self._call("GET", f"/v1/collections/{quote(collection)}", None, headers, MAX_POINTER_BYTES,
                            not_modified=True)
        return None if answer is None else _signed(*answer)

    def spec(self, collection: str, version: int) -> Signed:
        """The signed bytes of a spec version."""
        body, headers = self._call("GET", f"/v1/collections/{quote(collection)}/specs/{int(version)}", None, {},
                                   MAX_SPEC_BYTES)
        return _signed(body, headers)

    def strategy(self, content_hash: str) -> bytes:
        """A factorization strategy's .npz bytes (unchecked: the caller checks them against `content_hash`)."""
        body, _ = self._call("GET", f"/v1/strategies/{quote(content_hash)}", None, {}, MAX_STRATEGY_BYTES)
        return body

    def leave(self, credential: Credential) -> None:
        """Delete the device's enrolment (its credential stops working)."""
        path = f"/v1/collections/{quote(credential.collection)}/devices/{quote(credential.device)}"
        auth = authorization(credential.device, credential.key, "DELETE", path, b"", now_ms())
        self._call("DELETE", path, b"", {"Authorization": auth}, MAX_ANSWER_BYTES)

    def _call(self, method: str, path: str, body: bytes | None, headers: dict[str, str], limit: int,
              not_modified: bool = False) -> Any:
        import urllib.error  # loaded at the first call: an import of the SDK stays light
        import urllib.request

        request = urllib.request.Request(self.url + path, data=body, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s, context=self.tls) as response:
                return _bounded(response, limit), dict(response.headers.items())
        except urllib.error.HTTPError as exc:
            if exc.code == 304 and not_modified:
                return None
            reason, detail = _refusal(exc, limit)
            raise EdgeError(exc.code, reason, f"{method} {path}: {exc.code} {reason}: {detail}") from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise EdgeError(0, "unreachable", f"{method} {path}: no answer from {self.url} ({exc})") from None


def _bounded(response: Any, limit: int) -> bytes:
    data: bytes = response.read(limit + 1)
    if len(data) > limit:
        raise EdgeError(response.status, "too_large", f"the edge's answer exceeds {limit} bytes")
    return data


def _refusal(exc: urllib.error.HTTPError, limit: int) -> tuple[str, str]:
    try:
        value = json.loads(exc.read(limit))
        return str(value.get("reason", "")), str(value.get("error", ""))[:200]
    except (ValueError, AttributeError, OSError):
        return "", exc.reason if isinstance(exc.reason, str) else ""


def _signed(body: bytes, headers: dict[str, str]) -> Signed:
    lowered = {k.lower(): v for k, v in headers.items()}
    try:
        block = block_from_header(lowered.get("ldp-signature"))
    except ValueError:
        block = b""  # not base64: verification refuses it as a malformed signature
    return Signed(body, block, lowered.get("etag"))
