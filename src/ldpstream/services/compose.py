"""The secrets of the docker compose deployment, generated on the host once (`ldp credentials generate`); its
one-shot `setup` service then applies them to the compose Kafka (`ldp credentials apply`,
`ldpstream.runtime.kafka_access.apply_access`).

Compose mounts each file into only the containers that need it (`deploy/docker-compose.yml`, `secrets:`). A file
secret is a bind mount that keeps the host file's mode and the containers run as other users (Kafka as appuser,
Redis as redis), so the files are 0644 inside a 0700 directory: on the host only the owner reaches them.
"""

from __future__ import annotations

import secrets
from dataclasses import replace
from pathlib import Path

from ldpstream.runtime.access import ADMIN, SCRAM_MECHANISM, generate_passwords, password
from ldpstream.runtime.join_keys import ensure_join_keys
from ldpstream.runtime.secrets import create_secret, replace_secret
from ldpstream.runtime.settings import Settings
from ldpstream.runtime.signing import ensure_signing_keys
from ldpstream.services.kafka import scram_jaas, server_properties
from ldpstream.services.redis import acl_file

COMPOSE_KAFKA = "kafka"  # the broker's service name: the address every container advertises and dials
COMPOSE_KAFKA_DATA = "/var/lib/kafka/data"


def generate(directory: Path) -> list[Path]:
    """Make every secret of the compose deployment under `directory` that does not exist yet (passwords are
    kept; derived files are rewritten from them); the files, sorted."""
    cfg = replace(Settings.from_env(), secrets_dir_override=directory.resolve(), security=True)
    generate_passwords(cfg)
    ensure_signing_keys(cfg.secrets_dir / "spec-signing.key", cfg.secrets_dir / "spec-signing.pub")
    ensure_join_keys(cfg)
    create_secret(cfg.secrets_dir / "edge" / "master.key", lambda: secrets.token_bytes(32))
    create_secret(cfg.secrets_dir / "grafana-admin.password", lambda: secrets.token_urlsafe(24).encode())
    replace_secret(cfg.secrets_dir / "redis" / "users.acl", acl_file(cfg).encode())
    replace_secret(cfg.secrets_dir / "kafka" / "server.properties", server_properties(
        cfg, data_dir=COMPOSE_KAFKA_DATA, port=9092, controller_port=9093, listen_host="0.0.0.0",
        advertised_host=COMPOSE_KAFKA).encode())
    admin = "\n".join(["security.protocol=SASL_PLAINTEXT", f"sasl.mechanism={SCRAM_MECHANISM}",
                       f"sasl.jaas.config={scram_jaas(ADMIN, password(cfg, 'kafka', ADMIN))}", ""])
    replace_secret(cfg.secrets_dir / "kafka" / "admin-client.properties", admin.encode())
    files = sorted(p for p in cfg.secrets_dir.rglob("*") if p.is_file())
    for path in files:
        path.chmod(0o644)
    for path in [cfg.secrets_dir, *(p for p in cfg.secrets_dir.rglob("*") if p.is_dir())]:
        path.chmod(0o700)
    return files

