"""Settings and client addresses of a cluster: the topology a state dir records, the ports, the Redis Cluster URL."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis
from hypothesis import given
from hypothesis import strategies as st

from ldpstream.runtime.redis import cluster_nodes, redis_client
from ldpstream.runtime.settings import CLUSTER, TOPOLOGY_FILE, Settings, cluster_url


def test_a_state_dir_that_holds_a_cluster_gives_every_client_its_nodes(tmp_path: Path) -> None:
    single = Settings.from_env({"LDP_STATE_DIR": str(tmp_path)})
    assert (single.cluster, single.bootstrap, single.redis) == (False, "127.0.0.1:9092", "redis://127.0.0.1:6379/0")
    assert single.kafka_replication is None
    (tmp_path / TOPOLOGY_FILE).write_text(CLUSTER + "\n")
    cfg = Settings.from_env({"LDP_STATE_DIR": str(tmp_path)})
    assert cfg.cluster and cfg.kafka_replication == 3 and cfg.kafka_heap == "384m"
    assert cfg.bootstrap == "127.0.0.1:19092,127.0.0.1:19093,127.0.0.1:19094"
    assert cluster_nodes(cfg.redis) == [("127.0.0.1", 17001 + i) for i in range(6)]
    off = Settings.from_env({"LDP_STATE_DIR": str(tmp_path), "LDP_CLUSTER": "off"})
    assert not off.cluster
    external = Settings.from_env({"LDP_STATE_DIR": str(tmp_path), "REDIS_CLUSTER_NODES": "10.0.0.1:7000,10.0.0.2:7000",
                                  "KAFKA_BOOTSTRAP": "k1:9092,k2:9092", "KAFKA_REPLICATION": "2"})
    assert external.redis == "redis+cluster://10.0.0.1:7000,10.0.0.2:7000" and external.redis_url == external.redis
    assert external.bootstrap == "k1:9092,k2:9092" and external.kafka_replication == 2
    with pytest.raises(ValueError, match="LDP_CLUSTER"):
        Settings.from_env({"LDP_CLUSTER": "yes"})


def test_a_cluster_url_names_its_seeds_and_an_unreachable_cluster_is_a_connection_error() -> None:
    with pytest.raises(redis.ConnectionError, match=r"redis\+cluster://127.0.0.1:1,127.0.0.1:2 answers") as caught:
        redis_client("redis+cluster://u:secret@127.0.0.1:1,127.0.0.1:2", 1.0)
    assert "secret" not in str(caught.value)
    assert cluster_nodes("rediss+cluster://h:1") == [("h", 1)]
    for bad in ("redis+cluster://", "redis+cluster://h", "redis+cluster://h:x", "redis+cluster://h:1,"):
        with pytest.raises(ValueError, match="host:port"):
            cluster_nodes(bad)
    assert cluster_url("") is None


@given(st.text(max_size=60))
def test_any_url_is_parsed_or_refused_with_a_clear_error(text: str) -> None:
    for url in (text, "redis+cluster://" + text):
        try:
            nodes = cluster_nodes(url)
        except ValueError as exc:
            assert "host:port" in str(exc)
            continue
        assert nodes is None or all(isinstance(h, str) and isinstance(p, int) for h, p in nodes)
