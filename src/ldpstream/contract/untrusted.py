"""Decoders of outside bytes: whatever the bytes, a valid object or the project's own rejection error.

Decoders raise more than their libraries document: msgspec a `UnicodeDecodeError` on a msgpack string that is not
UTF-8, yaml a `RecursionError` on deep nesting or a `ValueError` on a timestamp with month 13, `np.load` a
`BadZipFile` or `EOFError` on a cut .npz. A consumer that catches only the documented error crashes on the rest,
and again on the same message after every restart. So each decoder of outside bytes is wrapped once, at its
boundary, with `rejecting`: its own error passes through, anything else becomes its own error, saying what the
original was (and chaining it as the cause). The caller then rejects the message with a reason and goes on.

Examples
--------
>>> class BadInput(ValueError): ...
>>> @rejecting(BadInput, "not a number")
... def parse(data: bytes) -> int:
...     return int(data.decode())
>>> parse(b"12")
12
>>> parse(b"\\xff")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
ldpstream.contract.untrusted.BadInput: not a number: UnicodeDecodeError: 'utf-8' codec can't decode byte 0xff ...
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")

MAX_DETAIL_CHARS = 300  # an exception's message can quote much of the input; a reason stays readable and small


def describe(exc: BaseException) -> str:
    """An exception as a short reason: its type and its message, cut to `MAX_DETAIL_CHARS`."""
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= MAX_DETAIL_CHARS else text[:MAX_DETAIL_CHARS - 3] + "..."


def rejecting(error: type[Exception], what: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorate a decoder of outside bytes so that it returns or raises `error`, nothing else: an `error` passes
    through unchanged, any other exception is raised as `error("<what>: <type>: <message>")` from it."""

    def decorate(decoder: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(decoder)
        def guarded(*args: P.args, **kwargs: P.kwargs) -> R:
            try:
                return decoder(*args, **kwargs)
            except error:
                raise
            except Exception as exc:  # the boundary: whatever the decoder's libraries raise on these bytes
                raise error(f"{what}: {describe(exc)}") from exc

        return guarded

    return decorate
