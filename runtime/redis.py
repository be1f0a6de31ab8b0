"""Redis clients, built in one place."""

from __future__ import annotations

from typing import Any

import redis
import redis.asyncio


def redis_client(url: str, timeout_s: float | None = None, **overrides: Any) -> redis.Redis:
    """A client of the Redis at `url` (bytes replies; `timeout_s` bounds each command and the connection)."""
    return redis.Redis.from_url(url, **{**_timeouts(timeout_s), **overrides})


def redis_answers(url: str, timeout_s: float = 2.0) -> bool:
    """True if the Redis server at `url` answers PING."""
    try:
        return bool(redis_client(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s).ping())
    except redis.RedisError:
        return False


def async_redis_client(url: str, timeout_s: float | None = None, **overrides: Any) -> redis.asyncio.Redis:
    """An asyncio client of the Redis at `url` (for services on an event loop; same settings as `redis_client`)."""
    return redis.asyncio.Redis.from_url(url, **{**_timeouts(timeout_s), **overrides})


def _timeouts(timeout_s: float | None) -> dict[str, float]:
    return {} if timeout_s is None else {"socket_timeout": timeout_s, "socket_connect_timeout": min(timeout_s, 5.0)}
