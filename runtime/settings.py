"""Settings from the environment: where Kafka and Redis are, where local state lives, the local services' ports and
versions. Every process reads them once with `Settings.from_env()`."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from collection.topics import SPECS_TOPIC

PROJECT_ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Settings:
    """Ports, directories and versions of the local services, and the addresses every client uses.

    `kafka_bootstrap` / `redis_url` (env `KAFKA_BOOTSTRAP` / `REDIS_URL`) point the project at existing services:
    then nothing is started for that service.
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
    edge_key_file: Path | None = None
    spec_signing_key_file: Path | None = None
    spec_trusted_keys_file: Path | None = None
    secrets_dir_override: Path | None = None
    security: bool = True
    kafka_config: Path | None = None
    start_timeout_s: float = 90.0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Read LDP_STATE_DIR, LDP_DEPLOY_DIR, KAFKA_PORT, KAFKA_CONTROLLER_PORT, KAFKA_VERSION, LOG4J2_VERSION,
        KAFKA_HEAP, REDIS_PORT, KAFKA_BOOTSTRAP, REDIS_URL, LDP_SPECS_TOPIC, LDP_METRICS_ADDR, LDP_EDGE_KEY_FILE,
        LDP_SECRETS_DIR, LDP_SECURITY, LDP_KAFKA_CONFIG, LDP_SPEC_SIGNING_KEY, LDP_SPEC_TRUSTED_KEYS
        (defaults: `.local/` and `deploy/local/` of the project)."""
        e = os.environ if env is None else env
        return cls(
            state_dir=Path(e.get("LDP_STATE_DIR", PROJECT_ROOT / ".local")).resolve(),
            deploy_dir=Path(e.get("LDP_DEPLOY_DIR", PROJECT_ROOT / "deploy" / "local")).resolve(),
            kafka_port=int(e.get("KAFKA_PORT", 9092)),
            kafka_controller_port=int(e.get("KAFKA_CONTROLLER_PORT", 9093)),
            kafka_version=e.get("KAFKA_VERSION", "4.3.1"),
            log4j2_version=e.get("LOG4J2_VERSION", "2.25.4"),
            kafka_heap=e.get("KAFKA_HEAP", "1g"),
            redis_port=int(e.get("REDIS_PORT", 6379)),
            kafka_bootstrap=e.get("KAFKA_BOOTSTRAP") or None,
            redis_url=e.get("REDIS_URL") or None,
            specs_topic=e.get("LDP_SPECS_TOPIC") or SPECS_TOPIC,
            metrics_addr=e.get("LDP_METRICS_ADDR") or "127.0.0.1",
            edge_key_file=_path(e, "LDP_EDGE_KEY_FILE"),
            spec_signing_key_file=_path(e, "LDP_SPEC_SIGNING_KEY"),
            spec_trusted_keys_file=_path(e, "LDP_SPEC_TRUSTED_KEYS"),
            secrets_dir_override=_path(e, "LDP_SECRETS_DIR"),
            security=security_setting(e.get("LDP_SECURITY", "on")),
            kafka_config=_path(e, "LDP_KAFKA_CONFIG"),
        )

    @property
    def bootstrap(self) -> str:
        """The Kafka bootstrap address the project uses."""
        return self.kafka_bootstrap or f"127.0.0.1:{self.kafka_port}"

    @property
    def edge_key(self) -> Path:
        """The ingestion edge's master key file (device keys derive from it): LDP_EDGE_KEY_FILE, else in the
        state directory."""
        return self.edge_key_file or self.state_dir / "edge" / "master.key"

    @property
    def spec_signing_key(self) -> Path:
        """The admin's spec-signing private key (`runtime.signing`): LDP_SPEC_SIGNING_KEY, else in the secrets
        directory."""
        return self.spec_signing_key_file or self.secrets_dir / "spec-signing.key"

    @property
    def spec_trusted_keys(self) -> Path:
        """The public keys a reader accepts spec signatures from: LDP_SPEC_TRUSTED_KEYS, else in the secrets
        directory."""
        return self.spec_trusted_keys_file or self.secrets_dir / "spec-signing.pub"

    @property
    def secrets_dir(self) -> Path:
        """Where generated credentials live (`runtime.secrets`): LDP_SECRETS_DIR, else `secrets/` in the state
        directory."""
        return self.secrets_dir_override or self.state_dir / "secrets"

    @property
    def redis(self) -> str:
        """The Redis URL the project uses."""
        return self.redis_url or f"redis://127.0.0.1:{self.redis_port}/0"


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
