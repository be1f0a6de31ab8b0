"""A Redis Cluster primary SIGKILLed mid-stream after its replica stopped following it: the replica is promoted
by the cluster without the primary's last acknowledged writes (it lagged: the count read back goes down), the
workers wait out the failover and read the lost batches again from Kafka (the offset guard: a batch starting beyond
the applied offset + 1, or the store's offsets behind the worker's, or, after a rebalance, the seek to the applied
offset + 1); the final count is exact and the statistics are those of an uninterrupted run."""

from __future__ import annotations

from pathlib import Path

import pytest
from cluster_support import Workers, accepted, kill, redis_node, serving, stream_through, wait_accepted
from fault_support import wait_for
from pipeline_support import assert_statistics_equal, published_collection, reference_run, send_in_background

from ldpstream.aggregator.store import prefix
from ldpstream.runtime.access import ADMIN, password
from ldpstream.runtime.redis import redis_client
from ldpstream.runtime.settings import Settings

pytestmark = pytest.mark.cluster

DEVICES = 200_000
LOST = 20_000  # reports accepted while the replica does not follow: acknowledged, then lost in the failover


def test_a_redis_primary_killed_its_lagging_replica_promoted_the_count_exact(cluster: Settings,
                                                                             tmp_path: Path) -> None:
    with published_collection(cluster) as c:
        key = f"{prefix(c.spec.name)}:offsets"
        primary, replica = serving(cluster, key, via=0)
        assert replica is not None
        workers = Workers(c, 3, tmp_path)
        fleet = send_in_background(c, DEVICES, rate=20_000, seed=52)

        def fail_over_a_lagging_replica() -> None:
            # the replica stops following (its link cut, a wrong password to log in again): from now on what the
            # primary acknowledges is not replicated
            follower = redis_client(redis_node(cluster, replica).address, 5.0, principal=ADMIN)
            follower.config_set("masterauth", "not-the-password")
            follower.execute_command("CLIENT", "KILL", "TYPE", "master")
            before = accepted(c)
            assert wait_accepted(c, before + LOST, 120, workers) >= before + LOST
            lagged = accepted(c)
            kill(redis_node(cluster, primary).pidfile)
            follower.config_set("masterauth", password(cluster, "redis", ADMIN))
            wait_for(lambda: serving(cluster, key, via=replica)[0] == replica, 60, "the replica's promotion")
            assert accepted(c) < lagged, "the promoted replica did not lag: this test shows nothing"
            redis_node(cluster, primary).start()  # it joins again as the new primary's replica

        stream_through(c, workers, fleet, DEVICES, fail_over_a_lagging_replica, started=40_000)
        assert_statistics_equal(c, reference_run(c))
        wait_for(lambda: serving(cluster, key, via=primary) == (replica, primary), 30, "the old primary to follow")
