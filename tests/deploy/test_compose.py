"""deploy/docker-compose.yml is well-formed and secure (no Docker engine here, so the file is parsed and
cross-checked against what `ldp credentials generate` makes and what each principal may hold)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from ldpstream.runtime.catalog import PRINCIPALS, SERVICES
from ldpstream.services.compose import generate, prometheus_text, service_entry

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
COMPOSED = [svc for svc in SERVICES if svc.compose is not None]
OURS = ("setup", "demo", *(svc.name for svc in COMPOSED))


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())


def mounted(svc: dict[str, Any]) -> dict[str, str]:
    """A service's secrets: source -> path in the container."""
    out = {}
    for entry in svc.get("secrets", []):
        source, target = (entry, entry) if isinstance(entry, str) else (entry["source"], entry.get("target", ""))
        out[source] = target if target.startswith("/") else f"/run/secrets/{target or source}"
    return out


def test_compose_file_is_well_formed(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert {"kafka", "redis", "prometheus", "grafana", *OURS} <= set(services)
    for name, svc in services.items():
        assert ("image" in svc) != ("build" in svc), f"{name}: exactly one of image/build"
        assert set(svc.get("depends_on", [])) <= set(services), f"{name} depends on an unknown service"
        assert set(mounted(svc)) <= set(compose["secrets"]), f"{name}: undeclared secret"
        for volume in svc.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (DEPLOY / source).exists(), f"{name}: mounts missing {source}"
            else:
                assert source in compose.get("volumes", {}), f"{name}: undeclared volume {source}"
        if "build" in svc:
            assert (DEPLOY / svc["build"]["context"] / svc["build"]["dockerfile"]).exists()


def test_every_secret_is_a_file_that_ldp_credentials_generate_makes(compose: dict[str, Any], tmp_path: Path) -> None:
    made = {p.relative_to(tmp_path / "secrets").as_posix() for p in generate(tmp_path / "secrets")}
    declared = {spec["file"].removeprefix("./secrets/") for spec in compose["secrets"].values()}
    assert declared <= made, declared - made
    assert (tmp_path / "secrets").stat().st_mode & 0o777 == 0o700
    properties = (tmp_path / "secrets" / "kafka" / "server.properties").read_text()
    assert "advertised.listeners=BROKER://kafka:9092" in properties and "StandardAuthorizer" in properties
    assert "allow.everyone.if.no.acl.found=false" in properties


def test_nothing_is_published_but_the_edge_and_a_loopback_grafana(compose: dict[str, Any]) -> None:
    published = {name: svc["ports"] for name, svc in compose["services"].items() if svc.get("ports")}
    assert set(published) == {"edge", "grafana"}
    assert all(port.startswith("127.0.0.1:") for port in published["grafana"])
    assert compose["services"]["grafana"]["environment"]["GF_AUTH_ANONYMOUS_ENABLED"] == "false"


def test_each_service_holds_only_its_principals_credentials(compose: dict[str, Any]) -> None:
    services = compose["services"]
    expected = {**{svc.name: {svc.principal.name} for svc in COMPOSED}, "demo": {"admin", "aggregator", "gateway"},
                "setup": {p.name for p in PRINCIPALS}}  # setup makes every principal's Kafka user
    for name, principals in expected.items():
        paths = mounted(services[name]).values()
        held = {Path(p).stem for p in paths if p.startswith("/run/ldp-secrets/kafka/")}
        assert held == principals, (name, held)
        assert services[name]["environment"]["LDP_SECRETS_DIR"] == "/run/ldp-secrets"
    for name in OURS:
        holds_key = "/run/ldp-secrets/spec-signing.key" in mounted(services[name]).values()
        assert holds_key == (name == "demo"), name  # only the publisher signs
        if name in ("demo", "aggregator", "api", "edge", "shuffler"):
            assert "/run/ldp-secrets/spec-signing.pub" in mounted(services[name]).values(), name
    assert services["aggregator"]["environment"]["LDP_PRINCIPAL"] == "aggregator"


def test_the_brokers_own_secrets_stay_with_the_broker(compose: dict[str, Any]) -> None:
    for name, svc in compose["services"].items():
        for secret in ("kafka_server_properties", "kafka_broker_password", "redis_users"):
            assert (secret in mounted(svc)) == (name in ("kafka", "redis") and secret.startswith(name)), (name, secret)


@pytest.mark.parametrize("svc", COMPOSED, ids=lambda svc: svc.name)
def test_each_service_entry_is_the_catalogs(compose: dict[str, Any], svc: Any) -> None:
    expected = service_entry(svc)
    assert compose["services"][svc.name] == expected, (
        f"deploy/docker-compose.yml's {svc.name} differs from src/ldpstream/runtime/catalog.py's; it should read:\n"
        + yaml.safe_dump({svc.name: expected}, sort_keys=False))


def test_every_principals_credentials_are_declared(compose: dict[str, Any]) -> None:
    declared = set(compose["secrets"])
    assert {f"kafka_{p.name}" for p in PRINCIPALS} <= declared
    assert {f"redis_{svc.principal.name}" for svc in COMPOSED} <= declared


def test_prometheus_config_is_the_catalogs() -> None:
    text = (DEPLOY / "prometheus" / "prometheus.yml").read_text()
    assert text == prometheus_text(), "regenerate it: python -m ldpstream.services.compose"
    jobs = {job["job_name"] for job in yaml.safe_load(text)["scrape_configs"]}
    assert jobs == {"prometheus"} | {svc.metrics.job for svc in COMPOSED if svc.metrics is not None}


def test_prometheus_reads_the_api_token_that_the_setup_service_writes(compose: dict[str, Any]) -> None:
    services = compose["services"]
    config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    (api_job,) = [job for job in config["scrape_configs"] if job["job_name"] == "ldp-api"]
    credentials = Path(api_job["authorization"]["credentials_file"])
    volume = {target: source for source, target, *_ in (v.split(":") for v in services["prometheus"]["volumes"])}[
        str(credentials.parent)]
    setup_mounts = {source: target for source, target, *_ in (v.split(":") for v in services["setup"]["volumes"])}
    command = " ".join(services["setup"]["command"]).split()
    written = Path(command[command.index("--out") + 1].rstrip(")"))
    assert setup_mounts[volume] == str(written.parent) and written.name == credentials.name
    assert command[command.index("--scope") + 1] == "metrics"
