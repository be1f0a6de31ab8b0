"""Local services without Docker: a KRaft Kafka broker from the Apache jars and a Redis server."""

from ldpstream.services.config import ServicesConfig
from ldpstream.services.kafka import KafkaService
from ldpstream.services.process import ServiceError, ServiceStatus
from ldpstream.services.redis import RedisService

__all__ = ["KafkaService", "RedisService", "ServiceError", "ServiceStatus", "ServicesConfig", "services"]


def services(config: ServicesConfig | None = None) -> list[KafkaService | RedisService]:
    """The local services in start order."""
    cfg = config or ServicesConfig.from_env()
    return [KafkaService(cfg), RedisService(cfg)]
