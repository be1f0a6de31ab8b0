"""The local services' configuration and their error paths (no services are started here)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from ldpstream.runtime.process import port_in_use, read_pid
from ldpstream.runtime.settings import Settings
from ldpstream.services import KafkaService, RedisService, ServiceError
from ldpstream.services.kafka import kafka_cluster_id


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A loopback port held by a listening socket for the duration of the test."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def config(tmp_path: Path, **env: str) -> Settings:
    return Settings.from_env({"LDP_STATE_DIR": str(tmp_path / "state"), **env})


def test_defaults_and_environment(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    assert (cfg.bootstrap, cfg.redis) == ("127.0.0.1:9092", "redis://127.0.0.1:6379/0")
    cfg = config(tmp_path, KAFKA_PORT="19092", REDIS_PORT="16379", KAFKA_VERSION="4.2.1")
    assert (cfg.bootstrap, cfg.redis, cfg.kafka_version) == ("127.0.0.1:19092", "redis://127.0.0.1:16379/0", "4.2.1")
    cfg = config(tmp_path, KAFKA_BOOTSTRAP="kafka:9092", REDIS_URL="redis://redis:6379/1")
    assert not KafkaService(cfg).managed and not RedisService(cfg).managed
    assert (cfg.bootstrap, cfg.redis) == ("kafka:9092", "redis://redis:6379/1")


def test_kafka_port_in_use_is_a_clear_error(tmp_path: Path, busy_port: int) -> None:
    svc = KafkaService(config(tmp_path, KAFKA_PORT=str(busy_port), KAFKA_CONTROLLER_PORT=str(free_port())))
    with pytest.raises(ServiceError, match=f"port {busy_port} .* already in use"):
        svc.start()
    assert read_pid(svc.pidfile) is None


def test_kafka_controller_port_in_use_is_a_clear_error(tmp_path: Path, busy_port: int) -> None:
    svc = KafkaService(config(tmp_path, KAFKA_PORT=str(free_port()), KAFKA_CONTROLLER_PORT=str(busy_port)))
    with pytest.raises(ServiceError, match=f"port {busy_port} .* already in use"):
        svc.start()


def test_redis_port_in_use_is_a_clear_error(tmp_path: Path, busy_port: int) -> None:
    with pytest.raises(ServiceError, match=f"port {busy_port} .* already in use"):
        RedisService(config(tmp_path, REDIS_PORT=str(busy_port))).start()


def test_missing_java_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ServiceError, match="`java` is not on PATH"):
        KafkaService(config(tmp_path, KAFKA_PORT=str(free_port()))).start()


def test_missing_maven_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "java").symlink_to("/bin/true")
    monkeypatch.setenv("PATH", str(bin_dir))
    svc = KafkaService(config(tmp_path, KAFKA_PORT=str(free_port()), KAFKA_CONTROLLER_PORT=str(free_port())))
    with pytest.raises(ServiceError, match="`mvn` is not on PATH"):
        svc.start()


def test_unreachable_external_services_are_clear_errors(tmp_path: Path) -> None:
    port = free_port()
    cfg = config(tmp_path, KAFKA_BOOTSTRAP=f"127.0.0.1:{port}", REDIS_URL=f"redis://127.0.0.1:{port}/0")
    with pytest.raises(ServiceError, match="does not answer a metadata request"):
        KafkaService(cfg).start()
    with pytest.raises(ServiceError, match="does not answer PING"):
        RedisService(cfg).start()
    assert KafkaService(cfg).stop() == "external: not stopped"


def test_stale_pidfile_is_ignored(tmp_path: Path) -> None:
    pidfile = tmp_path / "x.pid"
    pidfile.write_text("999999999")
    assert read_pid(pidfile) is None and not pidfile.exists()


def test_port_in_use_detects_a_listener(busy_port: int) -> None:
    assert port_in_use(busy_port)
    assert not port_in_use(free_port())


def test_cluster_ids_are_kafka_uuids() -> None:
    ids = {kafka_cluster_id() for _ in range(200)}
    assert len(ids) == 200
    assert all(len(i) == 22 and not i.startswith("-") for i in ids)
