"""Local services without Docker: a KRaft Kafka broker from the Apache jars and a Redis server."""

from ldpstream.services.kafka import KafkaService
from ldpstream.services.redis import RedisService
from runtime.process import ServiceError, ServiceStatus
from runtime.settings import Settings

__all__ = ["KafkaService", "RedisService", "ServiceError", "ServiceStatus", "services"]


def services(config: Settings | None = None) -> list[KafkaService | RedisService]:
    """The local services in start order."""
    cfg = config or Settings.from_env()
    return [KafkaService(cfg), RedisService(cfg)]
