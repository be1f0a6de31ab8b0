"""Rotating a principal's generated passwords on the running local services, with no restart of Kafka or Redis."""

from __future__ import annotations

import hashlib
import secrets

from confluent_kafka.admin import ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

from ldpstream.services.redis import RedisService, acl_file
from runtime.access import ADMIN, PRINCIPALS, SCRAM_ITERATIONS, password_file
from runtime.kafka import ADMIN_TIMEOUT_S, admin_client
from runtime.redis import redis_client
from runtime.secrets import replace_secret
from runtime.settings import Settings


def rotate(cfg: Settings, principal: str) -> None:
    """Give `principal` new Kafka and Redis passwords: set them on the servers (as the admin, with its current
    credentials), then replace its password files. Its processes keep their open connections and present the new
    password when they next connect (restart them to be sure nothing uses the old one)."""
    if principal not in PRINCIPALS:
        raise ValueError(f"unknown principal {principal!r}; one of {', '.join(PRINCIPALS)}")
    kafka_password, redis_password = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
    kafka = admin_client(cfg.bootstrap, ADMIN)
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, SCRAM_ITERATIONS)
    upsert = UserScramCredentialUpsertion(principal, info, kafka_password.encode())
    for future in kafka.alter_user_scram_credentials([upsert], request_timeout=ADMIN_TIMEOUT_S).values():
        future.result()
    store = redis_client(cfg.redis, 10.0, principal=ADMIN)
    digest = hashlib.sha256(redis_password.encode()).hexdigest()
    store.execute_command("ACL", "SETUSER", principal, "resetpass", f"#{digest}")
    replace_secret(password_file(cfg, "kafka", principal), kafka_password.encode())
    replace_secret(password_file(cfg, "redis", principal), redis_password.encode())
    service = RedisService(cfg)
    replace_secret(service.users, acl_file(cfg).encode())  # what a restarted Redis loads
