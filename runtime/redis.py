"""Redis clients, built in one place."""

from __future__ import annotations

from typing import Any

import redis


def redis_client(url: str, timeout_s: float | None = None, **overrides: Any) -> redis.Redis:
    """A client of the Redis at `url` (bytes replies; `timeout_s` bounds each command and the connection)."""
    timeouts = {} if timeout_s is None else {"socket_timeout": timeout_s,
                                             "socket_connect_timeout": min(timeout_s, 5.0)}
    return redis.Redis.from_url(url, **{**timeouts, **overrides})


def redis_answers(url: str, timeout_s: float = 2.0) -> bool:
    """True if the Redis server at `url` answers PING."""
    try:
        return bool(redis_client(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s).ping())
    except redis.RedisError:
        return False
