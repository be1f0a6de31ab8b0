"""Redis clients, built in one place: each presents this process's principal's credentials (`ldpstream.runtime.access`)
unless its URL carries some.

A URL `redis+cluster://[user:password@]host:port,host:port,...` (`rediss+cluster://` with TLS; REDIS_CLUSTER_NODES
makes one) names a Redis Cluster: the client is redis-py's cluster client, which finds every node from those it is
given and follows the slots when they move (a failover). Every key a script or transaction of the project touches
shares one hash tag, so it runs on one slot. While a primary fails over, its slots answer with the errors of
`OUTAGES`: callers wait them out as they wait out a lost connection.
"""

from __future__ import annotations

from typing import Any, TypeAlias
from urllib.parse import unquote, urlsplit

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster
from redis.exceptions import (
    ClusterDownError,
    MasterDownError,
    RedisClusterException,
    SlotNotCoveredError,
    TryAgainError,
)

from ldpstream.runtime.access import redis_credentials
from ldpstream.runtime.settings import CLUSTER_SCHEME, Settings

SyncRedis: TypeAlias = redis.Redis | redis.cluster.RedisCluster
AsyncRedis: TypeAlias = redis.asyncio.Redis | redis.asyncio.cluster.RedisCluster
# What a Redis client raises while its server is unreachable or its cluster fails over (no slot owner yet, a replica
# being promoted, a slot in migration): transient, retried by the callers that wait out an outage.
OUTAGES = (redis.ConnectionError, redis.TimeoutError, ClusterDownError, TryAgainError, MasterDownError,
           SlotNotCoveredError)
# Every error a Redis or Redis Cluster client raises (the cluster client's own are not all `RedisError`s: no node
# of a cluster reachable, a slot no node covers)
ERRORS = (redis.RedisError, RedisClusterException)


def cluster_nodes(url: str) -> list[tuple[str, int]] | None:
    """The (host, port) seeds of a Redis Cluster URL; None for a single server's URL; ValueError if malformed.

    Examples
    --------
    >>> cluster_nodes("redis+cluster://u:p@127.0.0.1:7001,127.0.0.1:7002")
    [('127.0.0.1', 7001), ('127.0.0.1', 7002)]
    >>> cluster_nodes("redis://127.0.0.1:6379/0") is None
    True
    """
    scheme, sep, rest = url.partition("://")
    if scheme not in (CLUSTER_SCHEME, "rediss+cluster"):
        return None
    hosts = rest.rpartition("@")[2].split("/", 1)[0]
    nodes = []
    for node in hosts.split(","):
        host, colon, port = node.strip().rpartition(":")
        if not (sep and colon and host and port.isdigit()):
            raise ValueError(f"a Redis Cluster URL lists host:port seeds, like {CLUSTER_SCHEME}://10.0.0.1:7000,"
                             f"10.0.0.2:7000; not {node.strip()!r} of {_without_password(url)}")
        nodes.append((host.strip("[]"), int(port)))
    return nodes


def _cluster_options(url: str) -> dict[str, Any]:
    """The credentials and TLS setting a cluster URL carries."""
    userinfo = url.partition("://")[2].rpartition("@")[0]
    user, colon, secret = userinfo.partition(":")
    options: dict[str, Any] = {"ssl": True} if url.startswith("rediss+") else {}
    if colon:
        options.update(username=unquote(user) or None, password=unquote(secret))
    return options


def _without_password(url: str) -> str:
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{rest.rpartition('@')[2]}"


def redis_client(url: str, timeout_s: float | None = None, principal: str | None = None,
                 **overrides: Any) -> SyncRedis:
    """A client of the Redis (or Redis Cluster) at `url` (bytes replies; `timeout_s` bounds each command and the
    connection)."""
    options = {**_credentials(url, principal), **_timeouts(timeout_s), **overrides}
    nodes = cluster_nodes(url)
    if nodes is None:
        return redis.Redis.from_url(url, **options)
    options.pop("retry_on_timeout", None)  # the cluster client's own retries decide (the setting is deprecated there)
    try:  # it asks a seed for the slots' nodes now
        return redis.cluster.RedisCluster(startup_nodes=[redis.cluster.ClusterNode(h, p) for h, p in nodes],
                                          **{**options, **_cluster_options(url)})
    except RedisClusterException as exc:
        raise redis.ConnectionError(f"no node of the Redis Cluster at {_without_password(url)} answers with its "
                                    f"slots: {exc}") from exc


def redis_answers(url: str, timeout_s: float = 2.0) -> bool:
    """True if the Redis server at `url` answers PING."""
    try:
        return bool(redis_client(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s).ping())
    except (redis.RedisError, OSError, ValueError):  # OSError: no credentials generated yet
        return False


# KEYS: 1 a hash of applied offsets per "topic:partition". ARGV: 1 the partition, 2 its applied offset expected (a
# partition without one is at -1), 3 the new applied offset.
MOVE_OFFSET_SCRIPT = """
if tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '-1') ~= tonumber(ARGV[2]) then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
return 1
"""


def move_applied_offset(client: SyncRedis, key: str, source: str, applied: int, new: int) -> bool:
    """Set a partition's applied offset in the hash `key` from `applied` to `new` in one atomic step; False (nothing
    written) if it is not `applied` any more."""
    return bool(client.register_script(MOVE_OFFSET_SCRIPT)(keys=[key], args=[source, applied, new]))


def async_redis_client(url: str, timeout_s: float | None = None, principal: str | None = None,
                       **overrides: Any) -> AsyncRedis:
    """An asyncio client of the Redis (or Redis Cluster) at `url` (for services on an event loop; same settings as
    `redis_client`)."""
    options = {**_credentials(url, principal), **_timeouts(timeout_s), **overrides}
    nodes = cluster_nodes(url)
    if nodes is None:
        return redis.asyncio.Redis.from_url(url, **options)
    return redis.asyncio.cluster.RedisCluster(
        startup_nodes=[redis.asyncio.cluster.ClusterNode(h, p) for h, p in nodes],
        **{**options, **_cluster_options(url)})


def _credentials(url: str, principal: str | None) -> dict[str, str]:
    if cluster_nodes(url) is not None:
        if _cluster_options(url).get("password") is not None:
            return {}
    elif urlsplit(url).password is not None:
        return {}
    return redis_credentials(Settings.from_env(), principal)


def _timeouts(timeout_s: float | None) -> dict[str, float]:
    return {} if timeout_s is None else {"socket_timeout": timeout_s, "socket_connect_timeout": min(timeout_s, 5.0)}
