"""The local cluster of `ldp up --cluster`: 3 Kafka nodes (each a broker and a KRaft controller: a quorum of 3, so
one node may die) with 3 replicas per topic and min.insync.replicas 2, and a Redis Cluster of 3 primaries with one
replica each, all on loopback with their data under the state dir (`kafka/node-<i>/`, `redis/node-<i>/`).

Steps of `start` for Kafka: (1) start every node that is not running without waiting (a node is ready only once a
majority of the controllers run); (2) wait until each answers; (3) apply the access model and shared topics once.
For Redis: (1) start every node that is not running (each waits until it answers PING); (2) unless the nodes
already form a cluster, create it with `redis-cli --cluster create ... --cluster-replicas 1` (the admin's
credentials, its password in the environment, never on the command line); (3) wait until every node reports
cluster_state:ok. Either, with KAFKA_BOOTSTRAP or REDIS_URL / REDIS_CLUSTER_NODES set, is an external cluster that
is only checked.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Generic, TypeVar

import redis

from ldpstream.runtime.access import ADMIN, password
from ldpstream.runtime.kafka_access import apply_access
from ldpstream.runtime.process import ServiceError, ServiceStatus
from ldpstream.runtime.redis import redis_answers, redis_client
from ldpstream.runtime.settings import Settings
from ldpstream.services.base import LocalService
from ldpstream.services.debian import debian_program
from ldpstream.services.kafka import KafkaService
from ldpstream.services.redis import RedisService

CLUSTER_CREATE_TIMEOUT_S = 60.0
Node = TypeVar("Node", bound=LocalService)  # the kind of server a group has


class NodeGroup(Generic[Node]):
    """Servers started, stopped and shown together: what `ldp up`, `down` and `status` do with a cluster."""

    name: str

    def __init__(self, nodes: list[Node]) -> None:
        self.nodes = nodes

    @property
    def managed(self) -> bool:
        return self.nodes[0].managed

    @property
    def purgeable(self) -> list[Path]:
        return [p for node in self.nodes for p in node.purgeable]

    def statuses(self) -> list[ServiceStatus]:
        if not self.managed:  # one row: the external cluster
            return self.nodes[0].statuses()
        return [node.status() for node in self.nodes]

    def stop(self) -> str:
        """Stop every node (in reverse order); what was done to each."""
        return "; ".join(f"node {i + 1}: {node.stop()}" for i, node in reversed(list(enumerate(self.nodes))))


class LocalKafkaCluster(NodeGroup[KafkaService]):
    """The local 3-node Kafka cluster."""

    name = "kafka"

    def __init__(self, cfg: Settings) -> None:
        super().__init__([KafkaService(cfg, i) for i in range(len(cfg.kafka_ports))])
        self.cfg = cfg

    def start(self) -> str:
        """Start the nodes that are not running and wait for all (idempotent); ServiceError if one cannot."""
        if not self.managed:
            return self.nodes[0].start()
        started = {i: node.spawn() for i, node in enumerate(self.nodes) if node.running_pid() is None}
        for i, proc in started.items():
            self.nodes[i].wait_ready(proc)
        for node in self.nodes:
            if not node.answers(10.0):
                raise ServiceError(f"Kafka node at {node.address} does not answer; `ldp down` and retry")
        apply_access(self.cfg)
        return (f"{len(started)} of {len(self.nodes)} node(s) started; 3 replicas per topic, min.insync.replicas 2, "
                f"at {self.cfg.bootstrap}")


class LocalRedisCluster(NodeGroup[RedisService]):
    """The local Redis Cluster: 6 nodes, 3 primaries with a replica each."""

    name = "redis"

    def __init__(self, cfg: Settings) -> None:
        super().__init__([RedisService(cfg, i) for i in range(len(cfg.redis_ports))])
        self.cfg = cfg

    def start(self) -> str:
        """Start the nodes that are not running, create the cluster once, wait until it is ok (idempotent)."""
        if not self.managed:
            return self.nodes[0].start()
        started = sum(node.running_pid() is None for node in self.nodes)
        for node in self.nodes:
            node.start()
        created = not self.formed()
        if created:
            self.create()
        self.wait_ok()
        return (f"{started} of {len(self.nodes)} node(s) started{'; cluster created' if created else ''}; "
                f"3 primaries with a replica each, at {self.cfg.redis}")

    def formed(self) -> bool:
        """True if the first node already knows the others (the cluster was created before)."""
        info = redis_client(self.nodes[0].address, 5.0, principal=ADMIN).execute_command("CLUSTER", "INFO")
        text = info.decode() if isinstance(info, bytes) else str(info)
        known = dict(line.split(":", 1) for line in text.split() if ":" in line).get("cluster_known_nodes", "1")
        return int(known) > 1

    def create(self) -> None:
        cli = debian_program("redis-cli", "redis-tools", "or point REDIS_URL at an existing cluster")
        hosts = [f"127.0.0.1:{node.port}" for node in self.nodes]
        env = dict(os.environ)
        cmd = [cli, "--cluster", "create", *hosts, "--cluster-replicas", "1", "--cluster-yes"]
        if self.cfg.security:
            cmd += ["--user", ADMIN]
            env["REDISCLI_AUTH"] = password(self.cfg, "redis", ADMIN)
        result = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=CLUSTER_CREATE_TIMEOUT_S)
        if result.returncode != 0 or "[OK]" not in result.stdout:
            raise ServiceError(f"`redis-cli --cluster create` failed:\n{(result.stdout + result.stderr)[-3000:]}")

    def wait_ok(self) -> None:
        """Wait until every node reports cluster_state:ok and the cluster client answers."""
        deadline = time.monotonic() + CLUSTER_CREATE_TIMEOUT_S
        while not all(cluster_ok(node.address) for node in self.nodes) or not redis_answers(self.cfg.redis):
            if time.monotonic() > deadline:
                raise ServiceError(f"the Redis Cluster at {self.cfg.redis} is not ok after "
                                   f"{CLUSTER_CREATE_TIMEOUT_S:.0f} s; see the logs under {self.nodes[0].home.parent}")
            time.sleep(0.25)


def cluster_ok(url: str) -> bool:
    """True if the Redis node at `url` reports cluster_state:ok."""
    try:
        info = redis_client(url, 2.0, principal=ADMIN).execute_command("CLUSTER", "INFO")
    except (redis.RedisError, OSError):
        return False
    return "cluster_state:ok" in (info.decode() if isinstance(info, bytes) else str(info))
