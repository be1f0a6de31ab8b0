"""The device's side of the edge's join protocol, over HTTP (the standard library's client: no dependency).

- `enroll`: `POST /v1/enroll` {"token", "collection"} -> 201 and the device's credential;
- `pointer`: `GET /v1/collections/NAME` (If-None-Match: the last ETag) -> 200 the signed pointer, or 304;
- `spec`: `GET /v1/collections/NAME/specs/VERSION` -> the spec's signed bytes;
- `strategy`: `GET /v1/strategies/HASH` -> a factorization strategy's .npz, checked against the hash the spec pins;
- `leave`: `DELETE /v1/collections/NAME/devices/ID`, signed with the device's credential -> 204.

Signatures come in the `LDP-Signature` header (`ldpstream.contract.signatures.block_header`). Every request is one
`ldpstream.device.http.exchange`: within one deadline (`timeout_s`), no redirect followed, the answer read up to a
size bound and its JSON nested boundedly; what fails is an `EdgeError` with the status (0: no answer) and the edge's
reason when it gave one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from ldpstream.contract.auth import Credential, authorization
from ldpstream.contract.clock import now_ms
from ldpstream.contract.signatures import block_from_header
from ldpstream.contract.training import MAX_DESCRIPTOR_BYTES, MAX_JOB_SPEC_BYTES
from ldpstream.device.http import DEFAULT_TIMEOUT_S, Answer, EdgeError, exchange, json_of

__all__ = ["EdgeClient", "EdgeError", "Signed"]

if TYPE_CHECKING:
    import ssl

MAX_POINTER_BYTES = 4 * 2**10
MAX_SPEC_BYTES = 256 * 2**10  # a spec is at most 256 KiB (ldpstream.contract.spec)
MAX_STRATEGY_BYTES = 64 * 2**20
MAX_ANSWER_BYTES = 64 * 2**10  # an enrolment's credential, an error's JSON


@dataclass(frozen=True)
class Signed:
    """A signed document as served: its exact bytes, its signature block, and the ETag it came with."""

    body: bytes
    block: bytes | None
    etag: str | None


class EdgeClient:
    """Requests of one device to one edge (module docstring)."""

    def __init__(self, base_url: str, timeout_s: float = DEFAULT_TIMEOUT_S, tls: ssl.SSLContext | None = None) -> None:
        self.url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.tls = tls

    def enroll(self, token: str, collection: str) -> Credential:
        """Exchange an enrolment token for a credential of `collection`."""
        body = json.dumps({"token": token, "collection": collection}).encode()
        answer, _ = self._call("POST", "/v1/enroll", body, {"Content-Type": "application/json"}, MAX_ANSWER_BYTES)
        value: Any = json_of(answer, 200, "the edge's enrolment answer")
        try:
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

    def job(self, job: str) -> Signed:
        """A training job's signed spec (protocol section 13.1)."""
        body, headers = self._call("GET", f"/v1/jobs/{quote(job)}", None, {}, MAX_JOB_SPEC_BYTES)
        return _signed(body, headers)

    def model(self, job: str, etag: str | None = None) -> Signed | None:
        """The job's signed model descriptor (section 13.2), or None if it is the one of `etag` still (304)."""
        headers = {} if etag is None else {"If-None-Match": etag}
        answer = self._call("GET", f"/v1/jobs/{quote(job)}/model", None, headers, MAX_DESCRIPTOR_BYTES,
                            not_modified=True)
        return None if answer is None else _signed(*answer)

    def model_bytes(self, job: str, version: int, size: int) -> bytes:
        """A model version's bytes, read up to `size` (the descriptor's; more is `too_large`)."""
        body, _ = self._call("GET", f"/v1/jobs/{quote(job)}/model/{int(version)}", None, {}, size)
        return body

    def leave(self, credential: Credential) -> None:
        """Delete the device's enrolment (its credential stops working)."""
        path = f"/v1/collections/{quote(credential.collection)}/devices/{quote(credential.device)}"
        auth = authorization(credential.device, credential.key, "DELETE", path, b"", now_ms())
        self._call("DELETE", path, b"", {"Authorization": auth}, MAX_ANSWER_BYTES)

    def _call(self, method: str, path: str, body: bytes | None, headers: dict[str, str], limit: int,
              not_modified: bool = False) -> Any:
        answer = exchange(self.url, method, path, body, headers, limit, self.timeout_s, self.tls)
        if answer.status == 304 and not_modified:
            return None
        if not 200 <= answer.status < 300:
            reason, detail = refusal(answer)
            raise EdgeError(answer.status, reason, f"{method} {path}: {answer.status} {reason}: {detail}")
        return answer.body, answer.headers


def refusal(answer: Answer) -> tuple[str, str]:
    """The reason code and the detail of a refusal's JSON body ('' where it gives none)."""
    try:
        value = json_of(answer.body, answer.status, "a refusal")
        return str(value.get("reason", ""))[:100], str(value.get("error", ""))[:200]
    except (EdgeError, AttributeError):
        return "", ""


def _signed(body: bytes, headers: dict[str, str]) -> Signed:
    lowered = {k.lower(): v for k, v in headers.items()}
    try:
        block = block_from_header(lowered.get("ldp-signature"))
    except ValueError:
        block = b""  # not base64: verification refuses it as a malformed signature
    return Signed(body, block, lowered.get("etag"))
