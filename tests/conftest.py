"""Fixtures shared by the whole suite: the running local services for integration tests."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest

from ldpstream.contract.topics import SPECS_TOPIC
from ldpstream.runtime.join_keys import ensure_join_keys
from ldpstream.runtime.kafka import TopicError, delete_topic, metadata_answers
from ldpstream.runtime.redis import redis_answers
from ldpstream.runtime.settings import Settings
from ldpstream.runtime.signing import ensure_signing_keys
from ldpstream.services import ServiceError, services
from tests.lanes import WEIGHTS, lane_option, link_kafka_jars, module_of, split_into_lanes


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--own-services", type=int, metavar="PORT", default=None,
                     help="start a Kafka (client port PORT, controller PORT + 1) and a Redis (PORT + 2) of this "
                          "session's own, in a temporary state dir with its own credentials, and stop them at the "
                          "end: several pytest processes can then run integration tests side by side")
    parser.addoption("--lane", type=lane_option, metavar="K/N", default=None,
                     help="keep only the integration tests of lane K of N (whole modules, balanced by "
                          "tests/lane_weights.json): see tests/lanes.py")
    parser.addoption("--module-times", metavar="PATH", default=None,
                     help="write the seconds each test module took (setup, call, teardown) to PATH as JSON")


def pytest_configure(config: pytest.Config) -> None:
    port = config.getoption("own_services")
    if port is not None:
        state = Path(tempfile.mkdtemp(prefix=f"ldp-services-{port}-"))
        config.add_cleanup(lambda: shutil.rmtree(state, ignore_errors=True))  # after the services have stopped
        live = Settings.from_env()  # the developer's state dir: its Kafka jars are reused, not fetched again
        os.environ.update({"LDP_STATE_DIR": str(state), "LDP_SECRETS_DIR": str(state / "secrets"),
                           "KAFKA_PORT": str(port), "KAFKA_CONTROLLER_PORT": str(port + 1),
                           "REDIS_PORT": str(port + 2)})
        for name in ("LDP_CLUSTER", "KAFKA_BOOTSTRAP", "REDIS_URL", "REDIS_CLUSTER_NODES"):
            os.environ.pop(name, None)
        link_kafka_jars(live, state)
    # Tests that move LDP_STATE_DIR (a fresh cache, a broker of their own) keep the running services' credentials,
    # and so do the processes they start.
    os.environ.setdefault("LDP_SECRETS_DIR", str(Settings.from_env().secrets_dir))


@pytest.fixture(scope="session")
def live_services(request: pytest.FixtureRequest) -> Iterator[Settings]:
    """The Kafka and Redis the project points at (or this session's own, `--own-services`); fails (not skips) with a
    hint if they do not answer."""
    cfg = Settings.from_env()
    if request.config.getoption("own_services") is not None:
        with own_services(cfg):
            yield cfg
        return
    missing = [name for name, ok in (("Kafka at " + cfg.bootstrap, metadata_answers(cfg.bootstrap, 10.0)),
                                     ("Redis at " + cfg.redis, redis_answers(cfg.redis))) if not ok]
    if missing:
        pytest.fail(f"{' and '.join(missing)} not answering: run `ldp up` (or `make test`, which does it)")
    yield cfg


@contextmanager
def own_services(cfg: Settings) -> Iterator[None]:
    """What `ldp up` does, in the session's own state dir; the services stopped at the end."""
    ensure_signing_keys(cfg.spec_signing_key, cfg.spec_trusted_keys)
    ensure_join_keys(cfg)
    started = []
    try:
        for svc in services(cfg):
            svc.start()
            started.append(svc)
        yield
    finally:
        for svc in reversed(started):
            with suppress(ServiceError):
                svc.stop()


@pytest.fixture(scope="module", autouse=True)
def specs_topic_of_the_module(request: pytest.FixtureRequest) -> Iterator[None]:
    """A module that uses the running services publishes its collection specs to a specs topic of its own,
    `ldp.collections.test-<id>` (`LDP_SPECS_TOPIC`, inherited by every process its tests start; the prefix the
    readers' ACLs allow, as benchmarks/bench_pipeline.py does), removed afterwards. Every worker, edge, `ldp serve`
    and publish reads and parses each spec of its specs topic when it starts, and a worker subscribes to each one's
    report topic: in the shared topic, that was every spec the session had published so far."""
    module_items = [item for item in request.session.items if getattr(item, "module", None) is request.module]
    if not any("live_services" in getattr(item, "fixturenames", ()) for item in module_items):
        yield
        return
    topic = f"{SPECS_TOPIC}.test-{uuid.uuid4().hex[:10]}"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LDP_SPECS_TOPIC", topic)
        yield
    with suppress(Exception):  # cleanup only: the services may be gone
        delete_topic(Settings.from_env().bootstrap, topic)


@pytest.fixture
def topics(live_services: Settings) -> Iterator[list[str]]:
    """Names of topics a test creates; deleted after the test."""
    created: list[str] = []
    yield created
    for name in created:
        try:
            delete_topic(live_services.bootstrap, name)
        except TopicError:
            pass  # already gone, or never created because the test failed first


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test that uses the running services (the `live_services` fixture, directly or through another fixture) is
    an integration test, whatever its module says: `make check` (-m 'not integration') runs without them. With
    `--lane K/N`, the integration tests of the other lanes' modules are deselected."""
    for item in items:
        if "live_services" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.integration)
    integration = [item for item in items if item.get_closest_marker("integration")]
    if (lane := config.getoption("lane")) is None:
        return
    modules = sorted({module_of(item.nodeid) for item in integration})
    weights = json.loads(WEIGHTS.read_text())
    mine = set(split_into_lanes(modules, weights, lane[1])[lane[0] - 1])
    other = [item for item in integration if module_of(item.nodeid) not in mine]
    if other:
        config.hook.pytest_deselected(items=other)
        dropped = set(map(id, other))
        items[:] = [item for item in items if id(item) not in dropped]


MODULE_TIMES: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    module = module_of(report.nodeid)
    MODULE_TIMES[module] = MODULE_TIMES.get(module, 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    if path := session.config.getoption("module_times"):
        Path(path).write_text(json.dumps({m: round(s, 1) for m, s in sorted(MODULE_TIMES.items())}, indent=2) + "\n")
