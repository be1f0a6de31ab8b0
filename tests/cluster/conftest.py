"""The cluster tests' own clusters: a 3-node Kafka and a Redis Cluster of 3 primaries with a replica each, started
once per session with `ldp up --cluster`'s code in a temporary state dir with its own credentials, on ports of
their own (Kafka 29092-29094, controllers 29192-29194, Redis 21001-21006 and their cluster bus 31001-31006: clear
of the single-node services, of a developer's `ldp up --cluster`, of the chaos benchmark's free ports and of the
kernel's ephemeral range, 32768-60999, where an outgoing connection once held bus port 36006 and a run failed), and
stopped at the end. Run them with `make test-cluster` (`pytest -m cluster tests/cluster`)."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path

import pytest

from ldpstream.runtime.settings import CLUSTER, TOPOLOGY_FILE, Settings
from ldpstream.runtime.signing import ensure_signing_keys
from ldpstream.services import LocalKafkaCluster, LocalRedisCluster
from ldpstream.services.cluster import NodeGroup
from tests.lanes import link_kafka_jars

# the pipeline helpers (a published collection, a fleet in the background, a reference run) are the integration
# tests'; these tests use them on the cluster
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))

PORTS = {"KAFKA_PORT": "29092", "KAFKA_CONTROLLER_PORT": "29192", "REDIS_PORT": "21001"}


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    """The running test clusters' settings; this process's environment points every client (and every worker it
    starts) at them."""
    live = Settings.from_env()  # the developer's state dir: its Kafka jars are reused, not fetched again
    state = tmp_path_factory.mktemp("cluster")
    saved = {k: os.environ.get(k) for k in (*PORTS, "LDP_STATE_DIR", "LDP_SECRETS_DIR", "LDP_CLUSTER",
                                            "KAFKA_BOOTSTRAP", "REDIS_URL", "REDIS_CLUSTER_NODES")}
    os.environ.update({**PORTS, "LDP_STATE_DIR": str(state), "LDP_SECRETS_DIR": str(state / "secrets")})
    for name in ("LDP_CLUSTER", "KAFKA_BOOTSTRAP", "REDIS_URL", "REDIS_CLUSTER_NODES"):
        os.environ.pop(name, None)
    (state / TOPOLOGY_FILE).write_text(CLUSTER + "\n")
    cfg = Settings.from_env()
    link_kafka_jars(live, state)
    ensure_signing_keys(cfg.spec_signing_key, cfg.spec_trusted_keys)
    groups = [LocalKafkaCluster(cfg), LocalRedisCluster(cfg)]
    try:
        for group in groups:
            group.start()
        yield cfg
    finally:
        for group in reversed(groups):
            stop_together(group)
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def stop_together(group: NodeGroup) -> None:
    """SIGTERM every node of the group at once, then wait for each (`NodeGroup.stop`). One after the other, the last
    Kafka node has no controller quorum left to grant its controlled shutdown and hangs until it is killed (60 s);
    together, each broker's shutdown is granted while the controllers still run."""
    for node in group.nodes:
        if (pid := node.running_pid()) is not None:
            with suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGTERM)
    group.stop()
