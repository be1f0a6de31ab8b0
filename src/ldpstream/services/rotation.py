"""Rotating a principal's generated passwords on the running local services, with no restart of Kafka or Redis."""

from __future__ import annotations

import secrets

from redis.cluster import RedisCluster

from ldpstream.runtime.access import ADMIN, PRINCIPALS, password_file
from ldpstream.runtime.kafka_access import set_passwords
from ldpstream.runtime.redis import redis_client
from ldpstream.runtime.secrets import replace_secret
from ldpstream.runtime.settings import Settings
from ldpstream.services.cluster import LocalRedisCluster
from ldpstream.services.redis import RedisService, acl_file, password_hash


def rotate(cfg: Settings, principal: str) -> None:
    """Give `principal` new Kafka and Redis passwords: set them on the servers (as the admin, with its current
    credentials), then replace its password files. Its processes keep their open connections and present the new
    password when they next connect (restart them to be sure nothing uses the old one)."""
    if principal not in PRINCIPALS:
        raise ValueError(f"unknown principal {principal!r}; one of {', '.join(PRINCIPALS)}")
    kafka_password, redis_password = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
    set_passwords(cfg, {principal: kafka_password})
    store = redis_client(cfg.redis, 10.0, principal=ADMIN)
    setuser = ("ACL", "SETUSER", principal, "resetpass", password_hash(redis_password))
    if isinstance(store, RedisCluster):  # every node checks its own users
        store.execute_command(*setuser, target_nodes=RedisCluster.ALL_NODES)
    else:
        store.execute_command(*setuser)
    replace_secret(password_file(cfg, "kafka", principal), kafka_password.encode())
    replace_secret(password_file(cfg, "redis", principal), redis_password.encode())
    for service in LocalRedisCluster(cfg).nodes if cfg.cluster else [RedisService(cfg)]:
        replace_secret(service.users, acl_file(cfg).encode())  # what a restarted Redis loads
