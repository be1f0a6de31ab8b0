"""Where the local services live and listen; every field can be set from the environment."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class ServicesConfig:
    """Ports, directories and versions of the local services.

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
    start_timeout_s: float = 90.0

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> ServicesConfig:
        """Read LDP_STATE_DIR, LDP_DEPLOY_DIR, KAFKA_PORT, KAFKA_CONTROLLER_PORT, KAFKA_VERSION, LOG4J2_VERSION,
        KAFKA_HEAP, REDIS_PORT, KAFKA_BOOTSTRAP, REDIS_URL (defaults: `.local/` and `deploy/local/` of the project)."""
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
        )

    @property
    def bootstrap(self) -> str:
        """The Kafka bootstrap address the project uses."""
        return self.kafka_bootstrap or f"127.0.0.1:{self.kafka_port}"

    @property
    def redis(self) -> str:
        """The Redis URL the project uses."""
        return self.redis_url or f"redis://127.0.0.1:{self.redis_port}/0"
