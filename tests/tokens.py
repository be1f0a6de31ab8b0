"""API tokens for tests: issued in the live Redis, their records deleted afterwards."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from ldpstream.contract.clock import now_ms
from ldpstream.runtime.redis import redis_client
from ldpstream.runtime.tokens import TOKENS_KEY, Issued, Scope, TokenStore


class ApiTokens:
    """Issue tokens (`issue`), remembering their ids so `clear` deletes exactly those."""

    def __init__(self, redis_url: str) -> None:
        self.store = TokenStore(redis_client(redis_url, 10.0))
        self.ids: list[str] = []

    def issue(self, scopes: Iterable[Scope], ttl_ms: int | None = 3_600_000, name: str = "test",
              created_ms: int | None = None) -> Issued:
        """A new token with these scopes, made at `created_ms` (default: now)."""
        issued = self.store.issue(scopes, name, now_ms() if created_ms is None else created_ms, ttl_ms)
        self.ids.append(issued.record.id)
        return issued

    def clear(self) -> None:
        """Delete the records of the tokens issued here."""
        if self.ids:
            self.store.redis.hdel(TOKENS_KEY, *self.ids)
        self.ids.clear()


@contextmanager
def api_tokens(redis_url: str) -> Iterator[ApiTokens]:
    """Tokens issued in the Redis at `redis_url` within the block, deleted when it ends."""
    tokens = ApiTokens(redis_url)
    try:
        yield tokens
    finally:
        tokens.clear()
