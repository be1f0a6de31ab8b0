"""Settings from the environment: where Kafka and Redis are, where local state lives, the local services' ports and
versions. Every process reads them once with `Settings.from_env()`."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ldpstream.contract.topics import SPECS_TOPIC

PROJECT_ROOT = Path(__file__).resolve().parents[3]  # the checkout: src/ldpstream/runtime/settings.py
SINGLE, CLUSTER = "single", "cluster"
TOPOLOGY_FILE = "topology"  # in the state dir: what `ldp up` started there
CLUSTER_SCHEME = "redis+cluster"  # REDIS_URL of a Redis Cluster: redis+cluster://[user:password@]host:port,host:port
KAFKA_BROKERS = 3  # a local cluster's brokers (each also a KRaft controller)
REDIS_NODES = 6  # a local Redis Cluster's servers: 3 primaries, a replica each
# (Kafka client port, controller port, Redis port) defaults: a local cluster's do not clash with a single node's
SINGLE_NODE_PORTS = (9092, 9093, 6379)
CLUSTER_PORTS = (19092, 19192, 17001)
CLUSTER_KAFKA_HEAP = "384m"


@dataclass(frozen=True)
class Settings:
    """Ports, directories and versions of the local services, and the addresses every client uses.

    `kafka_bootstrap` / `redis_url` (env `KAFKA_BOOTSTRAP` / `REDIS_URL`, or `REDIS_CLUSTER_NODES`) point the
    project at existing services: then nothing is started for that service.

    `cluster` (env `LDP_CLUSTER`, else the topology `ldp up --cluster` recorded in the state dir): the local services
    are a 3-broker Kafka (brokers on `kafka_port` + i, controllers on `kafka_controller_port` + i) and a Redis Cluster
    of 3 primaries with a replica each (`redis_port` + i, i < 6), on other default ports than the single node's.
    """

    state_dir: Path
    deploy_dir: Path
    kafka_port: int = 9092
    kafka_controller_port: int = 9093
    kafka_version: str = "4.3.1"
    log4j2_version: str = "2.25.4"
    kafka_heap: str = "1g"
    redis_port: int = 6379
    kafka_bootstrap: str | None = None
    redis_url: str | None = None
    specs_topic: str = SPECS_TOPIC
    metrics_addr: str = "127.0.0.1"
    prometheus_port: int = 9090
    edge_key_file: Path | None = None
    spec_signing_key_file: Path | None = None
    spec_trusted_keys_file: Path | None = None
    pointer_signing_key_file: Path | None = None
    enrolment_token_key_file: Path | None = None
    enrolment_trusted_keys_file: Path | None = None
    secrets_dir_override: Path | None = None
    security: bool = True
    kafka_config: Path | None = None
    start_timeout_s: float = 90.0
    cluster: bool = False
    replication_override: int | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Read LDP_STATE_DIR, LDP_DEPLOY_DIR, KAFKA_PORT, KAFKA_CONTROLLER_PORT, KAFKA_VERSION, LOG4J2_VERSION,
        KAFKA_HEAP, REDIS_PORT, KAFKA_BOOTSTRAP, REDIS_URL, LDP_SPECS_TOPIC, LDP_METRICS_ADDR, PROMETHEUS_PORT,
        LDP_EDGE_KEY_FILE,
        LDP_SECRETS_DIR, LDP_SECURITY, LDP_KAFKA_CONFIG, LDP_SPEC_SIGNING_KEY, LDP_SPEC_TRUSTED_KEYS,
        LDP_POINTER_SIGNING_KEY, LDP_ENROLMENT_TOKEN_KEY, LDP_ENROLMENT_TRUSTED_KEYS,
        REDIS_CLUSTER_NODES (host:port,host:port,...), KAFKA_REPLICATION, LDP_CLUSTER (defaults: `.local/` and
        `deploy/local/` of the project; the topology `ldp up` recorded there)."""
        e = os.environ if env is None else env
        state_dir = Path(e.get("LDP_STATE_DIR", PROJECT_ROOT / ".local")).resolve()
        cluster = (cluster_setting(e["LDP_CLUSTER"]) if e.get("LDP_CLUSTER")
                   else recorded_topology(state_dir) == CLUSTER)
        ports = CLUSTER_PORTS if cluster else SINGLE_NODE_PORTS
        return cls(
            state_dir=state_dir,
            deploy_dir=Path(e.get("LDP_DEPLOY_DIR", PROJECT_ROOT / "deploy" / "local")).resolve(),
            kafka_port=int(e.get("KAFKA_PORT", ports[0])),
            kafka_controller_port=int(e.get("KAFKA_CONTROLLER_PORT", ports[1])),
            kafka_version=e.get("KAFKA_VERSION", "4.3.1"),
            log4j2_version=e.get("LOG4J2_VERSION", "2.25.4"),
            kafka_heap=e.get("KAFKA_HEAP", CLUSTER_KAFKA_HEAP if cluster else "1g"),
            redis_port=int(e.get("REDIS_PORT", ports[2])),
            kafka_bootstrap=e.get("KAFKA_BOOTSTRAP") or None,
            redis_url=e.get("REDIS_URL") or cluster_url(e.get("REDIS_CLUSTER_NODES") or ""),
            specs_topic=e.get("LDP_SPECS_TOPIC") or SPECS_TOPIC,
            metrics_addr=e.get("LDP_METRICS_ADDR") or "127.0.0.1",
            prometheus_port=int(e.get("PROMETHEUS_PORT", 9090)),
            edge_key_file=_path(e, "LDP_EDGE_KEY_FILE"),
            spec_signing_key_file=_path(e, "LDP_SPEC_SIGNING_KEY"),
            spec_trusted_keys_file=_path(e, "LDP_SPEC_TRUSTED_KEYS"),
            pointer_signing_key_file=_path(e, "LDP_POINTER_SIGNING_KEY"),
            enrolment_token_key_file=_path(e, "LDP_ENROLMENT_TOKEN_KEY"),
            enrolment_trusted_keys_file=_path(e, "LDP_ENROLMENT_TRUSTED_KEYS"),
            secrets_dir_override=_path(e, "LDP_SECRETS_DIR"),
            security=security_setting(e.get("LDP_SECURITY", "on")),
            kafka_config=_path(e, "LDP_KAFKA_CONFIG"),
            cluster=cluster,
            replication_override=int(e["KAFKA_REPLICATION"]) if e.get("KAFKA_REPLICATION") else None,
        )

    @property
    def bootstrap(self) -> str:
        """The Kafka bootstrap address the project uses."""
        if self.kafka_bootstrap:
            return self.kafka_bootstrap
        return ",".join(f"127.0.0.1:{port}" for port in self.kafka_ports)

    @property
    def kafka_replication(self) -> int | None:
        """The replication factor of the topics the project creates: KAFKA_REPLICATION, else KAFKA_BROKERS with
        `cluster`, else None (the broker's `default.replication.factor`)."""
        return self.replication_override or (KAFKA_BROKERS if self.cluster else None)

    @property
    def kafka_ports(self) -> list[int]:
        """The client ports of the local brokers (one, or KAFKA_BROKERS with `cluster`)."""
        return [self.kafka_port + i for i in range(KAFKA_BROKERS if self.cluster else 1)]

    @property
    def redis_ports(self) -> list[int]:
        """The ports of the local Redis servers (one, or REDIS_NODES with `cluster`)."""
        return [self.redis_port + i for i in range(REDIS_NODES if self.cluster else 1)]

    @property
    def edge_key(self) -> Path:
        """The ingestion edge's master key file (device keys derive from it): LDP_EDGE_KEY_FILE, else in the
        state directory."""
        return self.edge_key_file or self.state_dir / "edge" / "master.key"

    @property
    def spec_signing_key(self) -> Path:
        """The admin's spec-signing private key (`ldpstream.runtime.signing`): LDP_SPEC_SIGNING_KEY, else in the secrets
        directory."""
        return self.spec_signing_key_file or self.secrets_dir / "spec-signing.key"

    @property
    def spec_trusted_keys(self) -> Path:
        """The public keys a reader accepts spec signatures from: LDP_SPEC_TRUSTED_KEYS, else in the secrets
        directory."""
        return self.spec_trusted_keys_file or self.secrets_dir / "spec-signing.pub"

    @property
    def pointer_signing_key(self) -> Path:
        """The edge's online key for pointers to current spec versions (`ldpstream.runtime.join_keys`):
        LDP_POINTER_SIGNING_KEY, else in the secrets directory."""
        return self.pointer_signing_key_file or self.secrets_dir / "pointer-signing.key"

    @property
    def enrolment_token_key(self) -> Path:
        """The private key that mints enrolment tokens: LDP_ENROLMENT_TOKEN_KEY, else in the secrets directory."""
        return self.enrolment_token_key_file or self.secrets_dir / "enrolment-token.key"

    @property
    def enrolment_trusted_keys(self) -> Path:
        """The public keys the edge accepts enrolment tokens from: LDP_ENROLMENT_TRUSTED_KEYS, else in the secrets
        directory."""
        return self.enrolment_trusted_keys_file or self.secrets_dir / "enrolment-token.pub"

    @property
    def secrets_dir(self) -> Path:
        """Where generated credentials live (`ldpstream.runtime.secrets`): LDP_SECRETS_DIR, else `secrets/` in the state
        directory."""
        return self.secrets_dir_override or self.state_dir / "secrets"

    @property
    def redis(self) -> str:
        """The Redis URL the project uses."""
        if self.redis_url:
            return self.redis_url
        if self.cluster:
            return cluster_url(",".join(f"127.0.0.1:{port}" for port in self.redis_ports)) or ""
        return f"redis://127.0.0.1:{self.redis_port}/0"


def cluster_url(nodes: str) -> str | None:
    """REDIS_CLUSTER_NODES ("host:port,host:port") as the project's Redis Cluster URL, None when empty.

    Examples
    --------
    >>> cluster_url("10.0.0.1:7000, 10.0.0.2:7000")
    'redis+cluster://10.0.0.1:7000,10.0.0.2:7000'
    """
    names = [n.strip() for n in nodes.split(",") if n.strip()]
    return f"{CLUSTER_SCHEME}://{','.join(names)}" if names else None


def recorded_topology(state_dir: Path) -> str:
    """The topology `ldp up` recorded in a state dir (`single` or `cluster`); `single` if none was."""
    try:
        return (state_dir / TOPOLOGY_FILE).read_text().strip() or SINGLE
    except FileNotFoundError:
        return SINGLE


def cluster_setting(value: str) -> bool:
    """LDP_CLUSTER: "on" (the local services are the 3-broker Kafka and the Redis Cluster) or "off"."""
    v = value.strip().lower()
    if v not in ("on", "off"):
        raise ValueError(f"LDP_CLUSTER must be 'on' or 'off', not {value!r}")
    return v == "on"


def security_setting(value: str) -> bool:
    """LDP_SECURITY: "on" (the default: credentials and ACLs everywhere) or "off" (open services, for comparison
    runs on a trusted machine)."""
    v = value.strip().lower()
    if v not in ("on", "off"):
        raise ValueError(f"LDP_SECURITY must be 'on' or 'off', not {value!r}")
    return v == "on"


def _path(env: Mapping[str, str], name: str) -> Path | None:
    """The absolute path an environment variable names, or None when it is unset or empty."""
    return Path(env[name]).resolve() if env.get(name) else None
