"""Redis clients, built in one place: each presents this process's principal's credentials (`runtime.access`)
unless its URL carries some."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import redis
import redis.asyncio

from runtime.access import redis_credentials
from runtime.settings import Settings


def redis_client(url: str, timeout_s: float | None = None, principal: str | None = None,
                 **overrides: Any) -> redis.Redis:
    """A client of the Redis at `url` (bytes replies; `timeout_s` bounds each command and the connection)."""
    return redis.Redis.from_url(url, **{**_credentials(url, principal), **_timeouts(timeout_s), **overrides})


def redis_answers(url: str, timeout_s: float = 2.0) -> bool:
    """True if the Redis server at `url` answers PING."""
    try:
        return bool(redis_client(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s).ping())
    except (redis.RedisError, OSError):  # OSError: no credentials generated yet
        return False


# KEYS: 1 a hash of applied offsets per "topic:partition". ARGV: 1 the partition, 2 its applied offset expected (a
# partition without one is at -1), 3 the new applied offset.
MOVE_OFFSET_SCRIPT = """
if tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '-1') ~= tonumber(ARGV[2]) then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
return 1
"""


def move_applied_offset(client: redis.Redis, key: str, source: str, applied: int, new: int) -> bool:
    """Set a partition's applied offset in the hash `key` from `applied` to `new` in one atomic step; False (nothing
    written) if it is not `applied` any more."""
    return bool(client.register_script(MOVE_OFFSET_SCRIPT)(keys=[key], args=[source, applied, new]))


def async_redis_client(url: str, timeout_s: float | None = None, principal: str | None = None,
                       **overrides: Any) -> redis.asyncio.Redis:
    """An asyncio client of the Redis at `url` (for services on an event loop; same settings as `redis_client`)."""
    return redis.asyncio.Redis.from_url(url, **{**_credentials(url, principal), **_timeouts(timeout_s),
                                                **overrides})


def _credentials(url: str, principal: str | None) -> dict[str, str]:
    if urlsplit(url).password is not None:
        return {}
    return redis_credentials(Settings.from_env(), principal)


def _timeouts(timeout_s: float | None) -> dict[str, float]:
    return {} if timeout_s is None else {"socket_timeout": timeout_s, "socket_connect_timeout": min(timeout_s, 5.0)}
