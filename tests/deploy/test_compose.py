"""deploy/docker-compose.yml is well-formed (no Docker engine here, so the file is parsed and cross-checked)."""

from __future__ import annotations

from pathlib import Path

import yaml

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def test_compose_file_is_well_formed() -> None:
    compose = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    services = compose["services"]
    assert {"kafka", "redis", "prometheus", "grafana"} <= set(services)
    for name, svc in services.items():
        assert ("image" in svc) != ("build" in svc), f"{name}: exactly one of image/build"
        depends = svc.get("depends_on", [])
        assert set(depends) <= set(services), f"{name} depends on an unknown service"
        for volume in svc.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (DEPLOY / source).exists(), f"{name}: mounts missing {source}"
            else:
                assert source in compose.get("volumes", {}), f"{name}: undeclared volume {source}"
        if "build" in svc:
            assert (DEPLOY / svc["build"]["context"] / svc["build"]["dockerfile"]).exists()
    kafka_env = services["kafka"]["environment"]
    assert kafka_env["KAFKA_PROCESS_ROLES"] == "broker,controller"


def test_every_reader_of_specs_trusts_the_admin_key_and_only_the_publisher_holds_it() -> None:
    services = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())["services"]
    ours = {name: svc for name, svc in services.items() if "build" in svc}
    trust = "/etc/ldpstream/trust/spec-signing.pub"
    for name, svc in ours.items():
        mounts = {v.split(":")[0]: v for v in svc.get("volumes", [])}
        assert svc["environment"]["LDP_SPEC_TRUSTED_KEYS"] == trust and "spec-trust" in mounts, name
        assert ("spec-admin" in mounts) == (name in ("spec-keys", "demo")), name
        if name != "spec-keys":
            assert mounts["spec-trust"].endswith(":ro"), name
            assert svc["depends_on"]["spec-keys"] == {"condition": "service_completed_successfully"}, name


def test_prometheus_config_parses() -> None:
    config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    assert config["scrape_configs"]


def test_prometheus_reads_the_api_token_that_the_setup_service_writes() -> None:
    services = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())["services"]
    config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    (api_job,) = [job for job in config["scrape_configs"] if job["job_name"] == "ldp-api"]
    credentials = Path(api_job["authorization"]["credentials_file"])
    mounts = {name: {target: source for source, target, *_ in (v.split(":") for v in services[name]["volumes"])}
              for name in ("prometheus", "prometheus-token")}
    volume = mounts["prometheus"][str(credentials.parent)]
    assert mounts["prometheus-token"][str(credentials.parent)] == volume
    command = " ".join(services["prometheus-token"]["command"]).split()
    assert command[:3] == ["ldp", "tokens", "create"] and command[command.index("--out") + 1] == str(credentials)
    assert command[command.index("--scope") + 1] == "metrics"
