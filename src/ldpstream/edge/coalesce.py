"""Calls made in the same event-loop turn, answered by one call over all of them (how the edge checks and admits
the requests that arrive together with one vectorised pass and one Redis round trip)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

A = TypeVar("A")
R = TypeVar("R")


class Coalesce(Generic[A, R]):
    """`await coalesce(arg)` -> what `many([..., arg, ...])` answered for `arg`: the args given before the loop
    turns go to one call of `many`, which answers each with a result or an exception (raised to its caller)."""

    def __init__(self, many: Callable[[Sequence[A]], Awaitable[Sequence[R | BaseException]]]) -> None:
        self.many = many
        self._args: list[A] = []
        self._waiters: list[asyncio.Future[R]] = []

    async def __call__(self, arg: A) -> R:
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[R] = loop.create_future()
        self._args.append(arg)
        self._waiters.append(waiter)
        if len(self._args) == 1:
            loop.call_soon(lambda: asyncio.ensure_future(self._flush()))
        return await waiter

    async def _flush(self) -> None:
        args, waiters = self._args, self._waiters
        self._args, self._waiters = [], []
        try:
            results = await self.many(args)
        except BaseException as exc:  # noqa: BLE001 - every caller gets the failure (Redis down: 503)
            results = [exc] * len(args)
        for waiter, result in zip(waiters, results, strict=True):
            if waiter.done():
                continue
            if isinstance(result, BaseException):
                waiter.set_exception(result)
            else:
                waiter.set_result(result)
