"""Local services without Docker: a KRaft Kafka broker from the Apache jars and a Redis server, or (`ldp up
--cluster`) a 3-node Kafka cluster and a Redis Cluster of 3 primaries with their replicas."""

from ldpstream.runtime.process import ServiceError, ServiceStatus
from ldpstream.runtime.settings import Settings
from ldpstream.services.cluster import LocalKafkaCluster, LocalRedisCluster
from ldpstream.services.kafka import KafkaService
from ldpstream.services.redis import RedisService

__all__ = ["LocalKafkaCluster", "KafkaService", "LocalRedisCluster", "RedisService", "ServiceError", "ServiceStatus",
           "services"]


Service = KafkaService | RedisService | LocalKafkaCluster | LocalRedisCluster


def services(config: Settings | None = None) -> list[Service]:
    """The local services in start order: single servers, or clusters when `config.cluster`."""
    cfg = config or Settings.from_env()
    if cfg.cluster:
        return [LocalKafkaCluster(cfg), LocalRedisCluster(cfg)]
    return [KafkaService(cfg), RedisService(cfg)]
