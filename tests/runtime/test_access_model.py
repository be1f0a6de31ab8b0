"""Which credentials a process presents (`ldpstream.runtime.access`): its principal, the generated passwords, an
external
cluster's librdkafka properties file, and their aiokafka form."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from ldpstream.runtime.access import (
    KAFKA_GRANTS,
    PRINCIPALS,
    REDIS_RULES,
    act_as,
    aiokafka_auth,
    current_principal,
    generate_passwords,
    kafka_security,
    password,
    read_properties,
    redis_credentials,
)
from ldpstream.runtime.settings import Settings, security_setting


@pytest.fixture
def cfg(tmp_path: Path) -> Settings:
    settings = Settings.from_env({"LDP_STATE_DIR": str(tmp_path / "state")})
    generate_passwords(settings)
    return settings


def test_every_principal_gets_its_own_passwords_once(cfg: Settings) -> None:
    first = {(s, p): password(cfg, s, p) for p in PRINCIPALS for s in ("kafka", "redis")}
    assert len(set(first.values())) == len(first)  # no two alike
    generate_passwords(cfg)
    assert first == {(s, p): password(cfg, s, p) for p in PRINCIPALS for s in ("kafka", "redis")}
    assert (cfg.secrets_dir.stat().st_mode & 0o777) == 0o700
    assert all((f.stat().st_mode & 0o777) == 0o600 for f in cfg.secrets_dir.rglob("*.password"))


def test_a_process_presents_its_principals_scram_credentials(cfg: Settings) -> None:
    props = kafka_security(cfg, "edge")
    assert props == {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
                     "sasl.username": "edge", "sasl.password": password(cfg, "kafka", "edge")}
    assert redis_credentials(cfg, "api") == {"username": "api", "password": password(cfg, "redis", "api")}


def test_security_off_presents_nothing(cfg: Settings) -> None:
    off = replace(cfg, security=False)
    assert kafka_security(off, "edge") == {} and redis_credentials(off, "edge") == {}
    assert security_setting(" OFF ") is False and security_setting("on") is True
    with pytest.raises(ValueError, match="LDP_SECURITY"):
        Settings.from_env({"LDP_SECURITY": "maybe"})


def test_missing_local_credentials_say_how_to_make_them(tmp_path: Path) -> None:
    bare = Settings.from_env({"LDP_STATE_DIR": str(tmp_path)})
    with pytest.raises(FileNotFoundError, match="ldp up"):
        kafka_security(bare, "aggregator")
    external = replace(bare, kafka_bootstrap="kafka:9092", redis_url="redis://redis:6379/0")
    assert kafka_security(external, "aggregator") == {} and redis_credentials(external, "aggregator") == {}


def test_an_external_clusters_properties_file_wins(cfg: Settings, tmp_path: Path) -> None:
    path = tmp_path / "client.properties"
    path.write_text("# a managed cluster\n\nsecurity.protocol = SASL_SSL\nsasl.mechanism=SCRAM-SHA-256\n"
                    "sasl.username=svc\nsasl.password=a=b\nssl.ca.location=/etc/ca.pem\n")
    props = kafka_security(replace(cfg, kafka_config=path), "edge")
    assert props["security.protocol"] == "SASL_SSL" and props["sasl.password"] == "a=b"
    assert aiokafka_auth(props) == {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-256",
                                    "username": "svc", "password": "a=b", "cafile": "/etc/ca.pem"}
    path.write_text("ssl.keystore.location=/x.p12\n")
    with pytest.raises(ValueError, match="ssl.keystore.location"):
        aiokafka_auth(read_properties(path))
    path.write_text("no equals sign\n")
    with pytest.raises(ValueError, match="key=value"):
        read_properties(path)


def test_the_principal_is_the_environments_then_the_entry_points(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LDP_PRINCIPAL", raising=False)
    before = current_principal()
    try:
        act_as("api")
        assert current_principal() == "api"
        assert current_principal({"LDP_PRINCIPAL": "edge"}) == "edge"
        with pytest.raises(ValueError, match="unknown principal"):
            act_as("root")
    finally:
        act_as(before)


def test_the_model_names_every_service_principal_in_both_stores() -> None:
    assert set(REDIS_RULES) == set(PRINCIPALS) == {"admin", *KAFKA_GRANTS}
    assert REDIS_RULES["api"].startswith("%R~")  # read-only keys
    assert all("+@all" not in rules or principal == "admin" or "-@dangerous" in rules
               for principal, rules in REDIS_RULES.items())
