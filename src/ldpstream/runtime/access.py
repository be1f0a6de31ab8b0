"""Who may do what: the principals of a deployment, their Kafka ACLs and Redis ACL rules, and the credentials each
process presents.

A process acts as one principal: `LDP_PRINCIPAL`, else the one its entry point names (`act_as`: the aggregator
worker, the edge, the API, the SGD coordinator), else `admin` (the operator's CLI). With security on (the default;
`LDP_SECURITY=off` turns it off for a comparison run), `ldp up` generates a password per principal and service
under `Settings.secrets_dir` (`kafka/<principal>.password`, `redis/<principal>.password`, 0600), and every Kafka and
Redis client of the process presents its principal's. Clients of an external cluster take standard librdkafka
properties from the file `LDP_KAFKA_CONFIG` (security.protocol, sasl.*, ssl.*) and Redis credentials from the URL.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ldpstream.contract.topics import (
    DLQ_TOPIC,
    GRADIENTS_TOPIC,
    JOBS_PREFIX,
    MODELS_TOPIC,
    RAW_PREFIX,
    REPORTS_PREFIX,
    SETASIDE_TOPIC,
    SHUFFLER_STATE_TOPIC,
    SPECS_TOPIC,
    STRATEGIES_TOPIC,
    UPDATES_TOPIC,
)
from ldpstream.runtime.secrets import create_secret
from ldpstream.runtime.settings import Settings

ADMIN = "admin"
GATEWAY = "gateway"  # the SGD devices' side: sends gradients, reads models
SCRAM_MECHANISM = "SCRAM-SHA-512"
SCRAM_ITERATIONS = 8192
# Broker-internal identities: the broker's own connections (SCRAM) and the controller listener's (PLAIN: a KRaft
# controller cannot read SCRAM credentials before it has the metadata log).
BROKER, CONTROLLER = "broker", "controller"
AGGREGATOR_GROUPS = "ldp-aggregator"  # the prefix of every aggregator worker's consumer group (and faust's topics)
COORDINATOR_GROUPS = "ldp-sgd"
SHUFFLER_GROUP = "ldp-shuffler"  # the shuffler's consumer group and transactional id (`ldpstream.shuffler`)
READER_GROUP = "ldp-read-to-end"  # `kafka.read_to_end`'s: assigned partitions, never joined or committed

_default: list[str] = [ADMIN]


@dataclass(frozen=True)
class Grant:
    """One Kafka ACL: `operation` on a resource (`topic`, `group`, `transactional_id`) named `name` exactly or, with
    `prefixed`, every resource whose name starts with it."""

    resource: str
    name: str
    operation: str
    prefixed: bool = False


def _topic(name: str, *operations: str, prefixed: bool = False) -> list[Grant]:
    return [Grant("topic", name, op, prefixed) for op in operations]


def _reads_specs() -> list[Grant]:
    # specs and strategies topics: `ldp.collections` and the benchmarks' `ldp.collections.<run>` ones
    return (_topic(SPECS_TOPIC, "read", "describe", prefixed=True) + _topic(STRATEGIES_TOPIC, "read", "describe")
            + [Grant("group", READER_GROUP, "read")])  # librdkafka looks up a consumer's group coordinator


# Kafka: what each service principal may do (the admin is a super user: it publishes specs and strategies and creates
# topics). Report topics are written by the edge (and by `ldp simulate`, a trusted gateway, with its credentials).
KAFKA_GRANTS: Mapping[str, list[Grant]] = {
    "edge": (_topic(REPORTS_PREFIX, "write", "describe", prefixed=True)
             + _topic(RAW_PREFIX, "write", "describe", prefixed=True) + _reads_specs()
             + _topic(JOBS_PREFIX, "read", "describe", prefixed=True) + _topic(UPDATES_TOPIC, "write")),
    # only the shuffler reads what the edge admitted for a shuffled collection; it writes the shuffled batches, its
    # state, and commits its offsets inside its transactions
    "shuffler": (_topic(RAW_PREFIX, "read", "describe", prefixed=True)
                 + _topic(REPORTS_PREFIX, "write", "describe", prefixed=True)
                 + _topic(SHUFFLER_STATE_TOPIC, "read", "write", "describe") + _reads_specs()
                 + [Grant("group", SHUFFLER_GROUP, "read", True),
                    Grant("transactional_id", SHUFFLER_GROUP, "write", True),
                    Grant("transactional_id", SHUFFLER_GROUP, "describe", True)]),
    "aggregator": (_topic(REPORTS_PREFIX, "read", "describe", prefixed=True) + _topic(DLQ_TOPIC, "write", "describe")
                   + _topic(SETASIDE_TOPIC, "write", "describe")
                   + _reads_specs() + [Grant("group", AGGREGATOR_GROUPS, "read", True)]
                   # faust's internal topics (its assignor's), named after the group
                   + _topic(AGGREGATOR_GROUPS, "read", "write", "create", "describe", prefixed=True)),
    "api": _topic(REPORTS_PREFIX, "describe", prefixed=True) + _reads_specs(),
    "coordinator": (_topic(GRADIENTS_TOPIC, "read", "describe", "create") + _topic(MODELS_TOPIC, "write", "describe",
                                                                                   "create")
                    + _topic(DLQ_TOPIC, "write", "describe") + [Grant("group", COORDINATOR_GROUPS, "read", True)]
                    + _topic(JOBS_PREFIX, "read", "describe", "create", prefixed=True) + [Grant(
                        "group", READER_GROUP, "read")]),
    GATEWAY: (_topic(GRADIENTS_TOPIC, "write", "describe") + _topic(MODELS_TOPIC, "read", "describe")
                + [Grant("group", COORDINATOR_GROUPS, "read", True)]),
}
PRINCIPALS = (ADMIN, *KAFKA_GRANTS)

# Redis ACL rules after the password (key patterns, commands). The API only reads; the edge writes only its keys.
_WRITER = "+@all -@dangerous -@admin +info"
# what a Redis Cluster client asks to find the slots' nodes (harmless on one server)
_CLUSTER_DISCOVERY = "+cluster|slots +cluster|shards +cluster|nodes +cluster|info"
REDIS_RULES: Mapping[str, str] = {
    ADMIN: "~* &* +@all",
    "aggregator": f"~ldp:{{* ~ldp:health:* {_WRITER}",
    "api": f"%R~ldp:* +@read +@connection -@dangerous +info {_CLUSTER_DISCOVERY}",
    # the tokens: read, to check its /metrics scrapes; the training jobs' model versions (the coordinator's): read
    "edge": f"~ldp:edge:* %R~ldp:api:tokens %R~ldp:sgd:jobs:* {_WRITER}",
    "coordinator": f"~ldp:sgd:* {_WRITER}",
    "shuffler": f"~ldp:shuffle:* {_WRITER}",
    GATEWAY: "resetkeys +@connection",
}


def act_as(principal: str) -> None:
    """Make `principal` this process's default (an entry point's call; `LDP_PRINCIPAL` still wins)."""
    if principal not in PRINCIPALS:
        raise ValueError(f"unknown principal {principal!r}; one of {', '.join(PRINCIPALS)}")
    _default[0] = principal


def current_principal(env: Mapping[str, str] | None = None) -> str:
    """The principal this process acts as: LDP_PRINCIPAL, else the entry point's, else `admin`."""
    e = os.environ if env is None else env
    return e.get("LDP_PRINCIPAL") or _default[0]


def password_file(cfg: Settings, service: str, principal: str) -> Path:
    """Where the generated password of `principal` for `service` ("kafka" or "redis") lives."""
    return cfg.secrets_dir / service / f"{principal}.password"


def generate_passwords(cfg: Settings) -> None:
    """Make every principal's passwords that do not exist yet (the broker-internal ones too)."""
    cfg.secrets_dir.mkdir(parents=True, exist_ok=True)
    cfg.secrets_dir.chmod(0o700)
    for principal in (*PRINCIPALS, BROKER, CONTROLLER):
        for service in ("kafka", "redis"):
            if service == "redis" and principal in (BROKER, CONTROLLER):
                continue
            create_secret(password_file(cfg, service, principal), lambda: secrets.token_urlsafe(32).encode())


def password(cfg: Settings, service: str, principal: str) -> str:
    """A generated password; FileNotFoundError (with what to do) when `ldp up` has not made it."""
    path = password_file(cfg, service, principal)
    try:
        return path.read_text().strip()
    except FileNotFoundError as exc:
        raise FileNotFoundError(f"no {service} credentials for {principal!r} at {path}: run `ldp up` (it generates "
                                f"them), or set LDP_SECRETS_DIR to where they are") from exc


def kafka_security(cfg: Settings, principal: str | None = None) -> dict[str, str]:
    """The librdkafka security properties of this process's Kafka clients: the file LDP_KAFKA_CONFIG when set, else
    SASL/SCRAM with the generated password of `principal` (default: this process's) when security is on (for an
    external cluster, when the secrets directory holds that password: compose mounts it there)."""
    if cfg.kafka_config is not None:
        return read_properties(cfg.kafka_config)
    who = principal or current_principal()
    if not cfg.security or (cfg.kafka_bootstrap is not None and not password_file(cfg, "kafka", who).exists()):
        return {}  # an external cluster without our credentials is configured with LDP_KAFKA_CONFIG or is open
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": SCRAM_MECHANISM, "sasl.username": who,
            "sasl.password": password(cfg, "kafka", who)}


def redis_credentials(cfg: Settings, principal: str | None = None) -> dict[str, str]:
    """Username and password for a Redis client of this process when security is on (for an external Redis, when
    the secrets directory holds the password)."""
    who = principal or current_principal()
    if not cfg.security or (cfg.redis_url is not None and not password_file(cfg, "redis", who).exists()):
        return {}  # an external Redis takes its credentials in REDIS_URL
    return {"username": who, "password": password(cfg, "redis", who)}


def read_properties(path: Path) -> dict[str, str]:
    """`key=value` lines of a Java/librdkafka properties file (blank lines and # comments skipped)."""
    out: dict[str, str] = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise ValueError(f"{path}:{number}: expected key=value, got {line!r}")
        out[key.strip()] = value.strip()
    return out


def aiokafka_auth(properties: Mapping[str, str]) -> dict[str, str]:
    """librdkafka security properties as aiokafka's (faust's) names: security protocol, SASL mechanism and
    credentials, CA file; ValueError for a setting aiokafka cannot honour.

    Examples
    --------
    >>> aiokafka_auth({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
    ...                "sasl.username": "u", "sasl.password": "p"})["sasl_mechanism"]
    'SCRAM-SHA-512'
    """
    names = {"security.protocol": "security_protocol", "sasl.mechanism": "sasl_mechanism",
             "sasl.mechanisms": "sasl_mechanism", "sasl.username": "username", "sasl.password": "password",
             "ssl.ca.location": "cafile"}
    unknown = sorted(k for k in properties if k.startswith(("security.", "sasl.", "ssl.")) and k not in names)
    if unknown:
        raise ValueError(f"the aggregator's Kafka client (aiokafka) does not support {', '.join(unknown)}")
    return {names[k]: v for k, v in properties.items() if k in names}
