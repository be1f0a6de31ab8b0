"""The docker compose deployment: its secrets, generated on the host once (`ldp credentials generate`; its one-shot
`setup` service then applies them to the compose Kafka: `ldp credentials apply`,
`ldpstream.runtime.kafka_access.apply_access`), and what the service catalog (`ldpstream.runtime.catalog`) says its
services' entries and its Prometheus configuration are (`service_entry`, `prometheus_config`: tests/deploy checks
`deploy/` against them).

Compose mounts each file into only the containers that need it (`deploy/docker-compose.yml`, `secrets:`). A file
secret is a bind mount that keeps the host file's mode and the containers run as other users (Kafka as appuser,
Redis as redis), so the files are 0644 inside a 0700 directory: on the host only the owner reaches them.
"""

from __future__ import annotations

import secrets
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from ldpstream.runtime.access import ADMIN, SCRAM_MECHANISM, generate_passwords, password
from ldpstream.runtime.catalog import SERVICES, TOKEN, Service
from ldpstream.runtime.join_keys import ensure_join_keys
from ldpstream.runtime.secrets import create_secret, replace_secret
from ldpstream.runtime.settings import PROJECT_ROOT, Settings
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



# What every service of ours gets in the compose file (the `x-ldp-env` and `x-ready` anchors there).
COMPOSE_ENV = {"KAFKA_BOOTSTRAP": f"{COMPOSE_KAFKA}:9092", "REDIS_URL": "redis://redis:6379/0",
               "LDP_SECRETS_DIR": "/run/ldp-secrets"}
COMPOSE_READY = {"kafka": {"condition": "service_healthy"}, "redis": {"condition": "service_healthy"},
                 "setup": {"condition": "service_completed_successfully"}}
PROMETHEUS_TOKEN = "/run/secrets/api_metrics_token"  # where the compose Prometheus finds the metrics-scope token
PROMETHEUS_HEADER = """\
# Prometheus of deploy/docker-compose.yml, generated from the service catalog (src/ldpstream/runtime/catalog.py):
# `python -m ldpstream.services.compose` writes it, tests/deploy/test_compose.py checks it. One job per service that
# serves metrics, its replicas found by DNS; the token jobs read the metrics-scope token the `setup` service writes.
# (`ldp up --prometheus` generates its own configuration: src/ldpstream/services/prometheus.py.)
"""


def credential(kind: str, principal: str) -> dict[str, str]:
    """The compose secret of `principal`'s `kind` ("kafka", "redis") password, mounted where LDP_SECRETS_DIR has it."""
    return {"source": f"{kind}_{principal}", "target": f"/run/ldp-secrets/{kind}/{principal}.password"}


def service_entry(svc: Service) -> dict[str, Any]:
    """The compose entry of a service of the catalog, as `yaml.safe_load` reads it from the compose file: its `ldp`
    command, its principal's credentials and nothing else, the trusted spec keys, what its `Compose` adds."""
    if svc.compose is None:
        raise ValueError(f"the service {svc.name} has no compose entry")
    c, who = svc.compose, svc.principal.name
    environment = {**COMPOSE_ENV, "LDP_PRINCIPAL": who}
    if svc.metrics is not None and svc.metrics.option == "--metrics-port":  # its own metrics server, scraped by DNS
        environment["LDP_METRICS_ADDR"] = "0.0.0.0"
    entry: dict[str, Any] = {
        "build": {"context": "..", "dockerfile": "Dockerfile"}, "command": [svc.command, *c.args],
        "environment": {**environment, **c.environment},
        "secrets": [credential("kafka", who), credential("redis", who),
                    {"source": "spec_trusted_keys", "target": "/run/ldp-secrets/spec-signing.pub"}, *c.secrets]}
    if c.volumes:
        entry["volumes"] = list(c.volumes)
    if c.ports:
        entry["ports"] = list(c.ports)
    return entry | {"depends_on": COMPOSE_READY}


def prometheus_config() -> dict[str, Any]:
    """The compose Prometheus' configuration: itself, and a job per compose service that serves metrics."""
    jobs: list[dict[str, Any]] = [{"job_name": "prometheus", "static_configs": [{"targets": ["localhost:9090"]}]}]
    for svc in SERVICES:
        if svc.metrics is None or svc.compose is None:
            continue
        job: dict[str, Any] = {"job_name": svc.metrics.job}
        if svc.metrics.access == TOKEN:
            job["authorization"] = {"type": "Bearer", "credentials_file": PROMETHEUS_TOKEN}
        jobs.append(job | {"dns_sd_configs": [{"names": [svc.name], "type": "A", "port": svc.metrics.port}]})
    return {"global": {"scrape_interval": "5s"}, "rule_files": ["/etc/prometheus/rules.yml"],
            "scrape_configs": jobs}


def prometheus_text() -> str:
    """deploy/prometheus/prometheus.yml's text."""
    return PROMETHEUS_HEADER + yaml.safe_dump(prometheus_config(), sort_keys=False, width=120)


if __name__ == "__main__":
    target = PROJECT_ROOT / "deploy" / "prometheus" / "prometheus.yml"
    target.write_text(prometheus_text())
    print(f"wrote {target}")
