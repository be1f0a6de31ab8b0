"""Applying the access model (`ldpstream.runtime.access`) to a Kafka cluster as its admin: SCRAM users with the
generated passwords, exactly the ACLs of `KAFKA_GRANTS` for the service principals (stale ones of theirs are removed),
and
the topics every service uses but only the admin may create."""

from __future__ import annotations

from collections.abc import Mapping

from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialAlteration,
    UserScramCredentialUpsertion,
)

from ldpstream.contract.topics import DLQ_TOPIC, SETASIDE_TOPIC, STRATEGIES_TOPIC
from ldpstream.runtime.access import (
    ADMIN,
    KAFKA_GRANTS,
    PRINCIPALS,
    SCRAM_ITERATIONS,
    Grant,
    generate_passwords,
    password,
)
from ldpstream.runtime.catalog import SERVICES
from ldpstream.runtime.dlq import DLQ_PARTITIONS
from ldpstream.runtime.kafka import ADMIN_TIMEOUT_S, admin_client, ensure_topic
from ldpstream.runtime.settings import Settings

RESOURCES = {"topic": ResourceType.TOPIC, "group": ResourceType.GROUP,
             "transactional_id": ResourceType.TRANSACTIONAL_ID}


def binding(principal: str, grant: Grant) -> AclBinding:
    """The Kafka ACL allowing `principal` the `grant` from any host."""
    return AclBinding(RESOURCES[grant.resource], grant.name,
                      ResourcePatternType.PREFIXED if grant.prefixed else ResourcePatternType.LITERAL,
                      f"User:{principal}", "*", AclOperation[grant.operation.upper()], AclPermissionType.ALLOW)


def apply_users(cfg: Settings, principals: tuple[str, ...] = PRINCIPALS) -> None:
    """Create or update the SCRAM credentials of `principals` with their generated passwords."""
    set_passwords(cfg, {p: password(cfg, "kafka", p) for p in principals})


def set_passwords(cfg: Settings, passwords: Mapping[str, str]) -> None:
    """As the admin: create or update each user's SCRAM-SHA-512 credentials with its password."""
    client = admin_client(cfg.bootstrap, ADMIN)
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, SCRAM_ITERATIONS)
    alterations: list[UserScramCredentialAlteration] = [UserScramCredentialUpsertion(user, info, secret.encode())
                                                         for user, secret in passwords.items()]
    for user, future in client.alter_user_scram_credentials(alterations, request_timeout=ADMIN_TIMEOUT_S).items():
        try:
            future.result()
        except KafkaException as exc:
            raise RuntimeError(f"cannot set the Kafka credentials of {user!r}: {exc.args[0].str()}") from exc


def apply_acls(cfg: Settings) -> int:
    """Make the service principals' ACLs exactly those of the model; the number of ACLs removed as stale."""
    client = admin_client(cfg.bootstrap, ADMIN)
    wanted = {binding(p, g) for p, grants in KAFKA_GRANTS.items() for g in grants}
    # confluent-kafka types the filter's name, principal and host as str (AclBinding's), though None matches any
    everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,  # type: ignore[arg-type]
                                  AclOperation.ANY, AclPermissionType.ANY)
    present = set(client.describe_acls(everything, request_timeout=ADMIN_TIMEOUT_S).result())
    ours = {f"User:{p}" for p in KAFKA_GRANTS}
    stale = [b for b in present if b.principal in ours and b not in wanted]
    if stale:
        filters = [AclBindingFilter(b.restype, b.name, b.resource_pattern_type, b.principal, b.host, b.operation,
                                    b.permission_type) for b in stale]
        for future in client.delete_acls(filters, request_timeout=ADMIN_TIMEOUT_S).values():
            future.result()
    missing = [b for b in wanted if b not in present]
    if missing:
        for acl, future in client.create_acls(missing, request_timeout=ADMIN_TIMEOUT_S).items():
            try:
                future.result()
            except KafkaException as exc:
                raise RuntimeError(f"cannot create the ACL {acl}: {exc.args[0].str()}") from exc
    return len(stale)


def apply_access(cfg: Settings) -> None:
    """Users and ACLs (when security is on), then the shared topics (specs, strategies, the dead-letter and set-aside
    topics) and those the catalog's services declare (the shuffler's state)."""
    if cfg.security:
        generate_passwords(cfg)  # a principal an upgrade added has none yet
        apply_users(cfg)
        apply_acls(cfg)
    ensure_topic(cfg.bootstrap, cfg.specs_topic, 1, compacted=True)
    ensure_topic(cfg.bootstrap, STRATEGIES_TOPIC, 1, compacted=True)
    ensure_topic(cfg.bootstrap, DLQ_TOPIC, DLQ_PARTITIONS, exact=False)
    ensure_topic(cfg.bootstrap, SETASIDE_TOPIC, DLQ_PARTITIONS, exact=False)
    for topic in {t for svc in SERVICES for t in svc.topics}:
        ensure_topic(cfg.bootstrap, topic.name, topic.partitions, compacted=topic.compacted)
