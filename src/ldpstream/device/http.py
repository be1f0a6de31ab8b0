"""One HTTP exchange of a device with its edge, in bounded time and size, with nobody but the edge.

- One deadline per request (`timeout_s`, default `DEFAULT_TIMEOUT_S`): connecting, sending, the status line, the
  headers and the body together. A server that answers one byte every few seconds fails at the deadline (a timer
  shuts the socket down), never later.
- No redirect is followed (the standard library's `http.client` follows none): a 3xx other than 304 is an
  `EdgeError` with reason `redirected`, so a device never sends its reports, or its `Authorization`, to a stranger,
  and never takes a pointer or a spec from one.
- Every answer is read up to a size bound (a hostile server cannot fill the device's memory), and a JSON answer is
  parsed only if it nests at most `MAX_JSON_DEPTH` deep (`json_of`; a deeply nested body cannot raise
  RecursionError).
What fails is an `EdgeError`: the status (0: no answer), a bounded reason code and a message.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import ssl

DEFAULT_TIMEOUT_S = 30.0  # one request's deadline, by default
MAX_JSON_DEPTH = 32  # how deep a JSON answer may nest (the edge's nest 2 or 3 deep)
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKET = re.compile(rb"[\[\]{}]")


class EdgeError(RuntimeError):
    """The edge refused or did not answer: `status` (0 for no answer) and its `reason` when it gave one."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


@dataclass(frozen=True)
class Answer:
    """An answer: its status, its headers (names in lower case) and its body (at most the limit asked)."""

    status: int
    headers: dict[str, str]
    body: bytes


def exchange(base_url: str, method: str, path: str, body: bytes | None, headers: dict[str, str], limit: int,
             timeout_s: float = DEFAULT_TIMEOUT_S, tls: ssl.SSLContext | None = None) -> Answer:
    """`method` `path` on the edge at `base_url`, answered within `timeout_s` (module docstring): the answer,
    whatever its status but a redirect; EdgeError when there is no answer in time, a redirect, or a body over
    `limit`."""
    import http.client  # loaded at the first request: an import of the SDK stays light
    import socket
    import threading
    from urllib.parse import urlsplit

    url = urlsplit(base_url)
    if url.scheme not in ("http", "https") or not url.hostname:
        raise EdgeError(0, "unreachable", f"{base_url!r} is not an http(s) URL")
    deadline = time.monotonic() + timeout_s
    target = url.path.rstrip("/") + path
    conn: http.client.HTTPConnection = (
        http.client.HTTPSConnection(url.hostname, url.port, timeout=timeout_s, context=tls)
        if url.scheme == "https" else http.client.HTTPConnection(url.hostname, url.port, timeout=timeout_s))
    cut = threading.Event()

    def shut() -> None:  # at the deadline: every blocked read or write of the request returns or fails now
        cut.set()
        sock = conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    timer = threading.Timer(timeout_s, shut)
    timer.daemon = True
    timer.start()
    try:
        conn.connect()  # within timeout_s (the socket's own timeout); the timer covers what follows
        if cut.is_set():
            shut()
        conn.request(method, target, body=body, headers=headers)
        response = conn.getresponse()
        data = response.read(limit + 1)
        answer = Answer(response.status, {k.lower(): v for k, v in response.getheaders()}, data)
    except (OSError, http.client.HTTPException) as exc:
        if cut.is_set() or time.monotonic() >= deadline:
            raise EdgeError(0, "timeout", f"{method} {path}: no whole answer from {base_url} within "
                                          f"{timeout_s:g} s") from None
        raise EdgeError(0, "unreachable", f"{method} {path}: no answer from {base_url} ({exc})") from None
    finally:
        timer.cancel()
        conn.close()
    if cut.is_set():  # the deadline came as the body was read: what arrived is not the whole answer
        raise EdgeError(0, "timeout", f"{method} {path}: no whole answer from {base_url} within {timeout_s:g} s")
    if len(answer.body) > limit:
        raise EdgeError(answer.status, "too_large", f"{method} {path}: the edge's answer exceeds {limit} bytes")
    if 300 <= answer.status < 400 and answer.status != 304:
        where = answer.headers.get("location", "")[:200]
        raise EdgeError(answer.status, "redirected", f"{method} {path}: the edge answered {answer.status} to "
                                                     f"{where!r}: a device follows no redirect")
    return answer


def json_of(data: bytes, status: int, what: str) -> Any:
    """The JSON value of an answer's body if it nests at most MAX_JSON_DEPTH deep; EdgeError(status,
    'bad_answer') otherwise (not JSON, or nested deeper)."""
    depth = deepest = 0
    for bracket in _BRACKET.findall(_STRING.sub(b'""', data)):
        depth += 1 if bracket in b"[{" else -1
        deepest = max(deepest, depth)
    if deepest > MAX_JSON_DEPTH:
        raise EdgeError(status, "bad_answer", f"{what} nests deeper than {MAX_JSON_DEPTH}")
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        raise EdgeError(status, "bad_answer", f"{what} is not JSON") from None
