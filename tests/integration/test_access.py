"""Every boundary inside the deployment refuses whoever does not belong there, asserted on the errors the real
Kafka and Redis return: no credentials, a wrong password, and each service principal trying another's rights
(`ldpstream.runtime.access`). Each refusal has its positive control: the rightful principal does the same thing."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator

import pytest
import redis
from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from redis.backoff import NoBackoff
from redis.retry import Retry

from ldpstream.contract.topics import DLQ_TOPIC, GRADIENTS_TOPIC, MODELS_TOPIC, report_topic
from ldpstream.edge.devices import devices_key
from ldpstream.runtime.access import ADMIN, GATEWAY, aiokafka_auth, kafka_security
from ldpstream.runtime.kafka import consumer_client, ensure_topic, producer_client
from ldpstream.runtime.redis import redis_client
from ldpstream.runtime.settings import Settings
from ldpstream.services import LocalRedisCluster, RedisService

pytestmark = pytest.mark.usefixtures("secured")


@pytest.fixture(scope="module")
def secured(live_services: Settings) -> Settings:
    if not live_services.security or live_services.kafka_bootstrap or live_services.redis_url:
        pytest.skip("the local services run with LDP_SECURITY=off, or external services are configured")
    return live_services


@pytest.fixture
def report_topic_name(secured: Settings, topics: list[str]) -> str:
    name = report_topic(f"access-{uuid.uuid4().hex[:8]}")
    ensure_topic(secured.bootstrap, name, 2)
    topics.append(name)
    return name


def produce_error(principal: str, topic: str, bootstrap: str) -> KafkaError | None:
    """The error of one message produced to `topic` as `principal` (None: delivered): its delivery report's, or the
    producer's fatal error (a principal that may write no topic at all is refused an idempotent producer id)."""
    errors: list[KafkaError | None] = []
    producer = producer_client(bootstrap, principal, **{"message.timeout.ms": 10_000, "log_level": 0})
    producer.produce(topic, b"x", on_delivery=lambda err, _msg: errors.append(err))
    try:
        producer.flush(15)
    except (KafkaException, SystemError) as exc:  # confluent-kafka raises a fatal error through the callback
        cause = exc if isinstance(exc, KafkaException) else exc.__cause__
        assert isinstance(cause, KafkaException), exc
        return cause.args[0]
    assert len(errors) == 1, "no delivery report"
    return errors[0]


REFUSED_WRITE = (KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.CLUSTER_AUTHORIZATION_FAILED)


def consume_error(principal: str, topic: str, bootstrap: str, group: str) -> KafkaError | None:
    """The first error (or None once a message arrives) reading `topic` from its start as `principal`."""
    consumer = consumer_client(bootstrap, group, principal, **{"auto.offset.reset": "earliest", "log_level": 0})
    try:
        consumer.subscribe([topic])
        for _ in range(40):
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            return msg.error()
        raise AssertionError(f"{principal} got neither a message nor an error from {topic}")
    finally:
        consumer.close()


# ---------------------------------------------------------------------------------------------------------------
# Kafka: authentication
def test_a_client_without_credentials_is_refused(secured: Settings) -> None:
    client = AdminClient({"bootstrap.servers": secured.bootstrap, "log_level": 0})
    with pytest.raises(KafkaException) as err:
        client.list_topics(timeout=5)
    assert err.value.args[0].code() == KafkaError._TRANSPORT  # the SASL listener drops a plaintext client


def test_a_wrong_password_is_refused(secured: Settings) -> None:
    config = {**kafka_security(secured, "edge"), "sasl.password": "not-the-password"}
    producer = Producer({"bootstrap.servers": secured.bootstrap, "log_level": 0, **config})
    with pytest.raises(KafkaException) as err:
        producer.list_topics(timeout=5)
    assert err.value.args[0].code() in (KafkaError._AUTHENTICATION, KafkaError._TRANSPORT)
    errors: list[KafkaError] = []
    probe = Producer({"bootstrap.servers": secured.bootstrap, "log_level": 0, **config,
                      "error_cb": errors.append})
    probe.poll(3)
    assert any(e.code() == KafkaError._AUTHENTICATION and "SCRAM-SHA-512" in e.str() for e in errors), errors


# ---------------------------------------------------------------------------------------------------------------
# Kafka: authorisation, principal by principal
def test_only_the_edge_writes_report_topics(secured: Settings, report_topic_name: str) -> None:
    assert produce_error("edge", report_topic_name, secured.bootstrap) is None
    for other in ("aggregator", "api", "coordinator", GATEWAY):
        err = produce_error(other, report_topic_name, secured.bootstrap)
        assert err is not None and err.code() in REFUSED_WRITE, (other, err)


def test_only_the_admin_publishes_specs_and_strategies(secured: Settings) -> None:
    for topic in (secured.specs_topic, "ldp.strategies"):
        for other in ("edge", "aggregator", "api", "coordinator", GATEWAY):
            err = produce_error(other, topic, secured.bootstrap)
            assert err is not None and err.code() in REFUSED_WRITE, (topic, other, err)


def test_only_the_aggregator_reads_report_topics(secured: Settings, report_topic_name: str) -> None:
    assert produce_error("edge", report_topic_name, secured.bootstrap) is None
    group = f"ldp-aggregator-access-{uuid.uuid4().hex[:8]}"
    assert consume_error("aggregator", report_topic_name, secured.bootstrap, group) is None
    for other in ("api", "edge", "coordinator"):
        err = consume_error(other, report_topic_name, secured.bootstrap, f"ldp-aggregator-{other}")
        assert err is not None and err.code() in (KafkaError.TOPIC_AUTHORIZATION_FAILED,
                                                  KafkaError.GROUP_AUTHORIZATION_FAILED), (other, err)


def test_the_aggregator_joins_only_its_own_consumer_groups(secured: Settings, report_topic_name: str) -> None:
    assert produce_error("edge", report_topic_name, secured.bootstrap) is None
    err = consume_error("aggregator", report_topic_name, secured.bootstrap, "someone-elses-group")
    assert err is not None and err.code() == KafkaError.GROUP_AUTHORIZATION_FAILED


def test_the_dead_letter_topic_is_written_by_the_aggregator_and_not_the_edge(secured: Settings) -> None:
    assert produce_error("aggregator", DLQ_TOPIC, secured.bootstrap) is None
    err = produce_error("edge", DLQ_TOPIC, secured.bootstrap)
    assert err is not None and err.code() in REFUSED_WRITE


def test_the_training_topics_belong_to_the_coordinator_and_its_gateway(secured: Settings) -> None:
    ensure_topic(secured.bootstrap, GRADIENTS_TOPIC, 4, exact=False)
    ensure_topic(secured.bootstrap, MODELS_TOPIC, 1, compacted=True, exact=False)
    models = produce_error(GATEWAY, MODELS_TOPIC, secured.bootstrap)  # devices never publish a model
    assert models is not None and models.code() in REFUSED_WRITE
    for other in ("edge", "aggregator", "api"):
        err = produce_error(other, GRADIENTS_TOPIC, secured.bootstrap)
        assert err is not None and err.code() in REFUSED_WRITE, (other, err)


def test_a_service_principal_cannot_create_topics(secured: Settings) -> None:
    name = report_topic(f"access-create-{uuid.uuid4().hex[:8]}")
    admin = AdminClient({"bootstrap.servers": secured.bootstrap, "log_level": 0, **kafka_security(secured, "edge")})
    from confluent_kafka.admin import NewTopic
    future = admin.create_topics([NewTopic(name, 1)], request_timeout=15)[name]
    with pytest.raises(KafkaException) as err:
        future.result()
    assert err.value.args[0].code() in (KafkaError.TOPIC_AUTHORIZATION_FAILED,
                                        KafkaError.CLUSTER_AUTHORIZATION_FAILED)


def test_the_api_sees_report_offsets_but_not_their_messages(secured: Settings, report_topic_name: str) -> None:
    assert produce_error("edge", report_topic_name, secured.bootstrap) is None
    consumer = consumer_client(secured.bootstrap, "ldp-api-offsets", "api", log_level=0)
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(report_topic_name, 0), timeout=10)
        low1, high1 = consumer.get_watermark_offsets(TopicPartition(report_topic_name, 1), timeout=10)
    finally:
        consumer.close()
    assert high + high1 == 1


def test_the_aggregator_credentials_map_to_aiokafka(secured: Settings) -> None:
    auth = aiokafka_auth(kafka_security(secured, "aggregator"))
    assert auth["security_protocol"] == "SASL_PLAINTEXT" and auth["sasl_mechanism"] == "SCRAM-SHA-512"
    assert auth["username"] == "aggregator" and auth["password"]


# ---------------------------------------------------------------------------------------------------------------
# Redis
@pytest.fixture
def stats_key(secured: Settings) -> Iterator[str]:
    key = f"ldp:{{access-{uuid.uuid4().hex[:8]}}}:outcomes"
    yield key
    redis_client(secured.redis, principal=ADMIN).delete(key)


def bare_client(cfg: Settings, **credentials: str) -> redis.Redis:
    """A plain client of the Redis, one attempt per command (redis-py retries an AuthenticationError, a
    ConnectionError, with backoff: about 4 s to be refused)."""
    return redis.Redis(host="127.0.0.1", port=cfg.redis_port, socket_timeout=5, retry=Retry(NoBackoff(), 0),
                       **credentials)


def test_redis_refuses_a_client_without_credentials(secured: Settings) -> None:
    with pytest.raises(redis.AuthenticationError):
        bare_client(secured).ping()
    with pytest.raises(redis.AuthenticationError):
        bare_client(secured, username="aggregator", password="wrong").ping()


def test_the_api_reads_statistics_and_cannot_write_them(secured: Settings, stats_key: str) -> None:
    redis_client(secured.redis, principal="aggregator").hincrby(stats_key, "accepted", 5)
    api = redis_client(secured.redis, principal="api")
    assert api.hget(stats_key, "accepted") == b"5"
    for write in (lambda: api.hincrby(stats_key, "accepted", 1), lambda: api.delete(stats_key),
                  lambda: api.eval("return redis.call('HSET', KEYS[1], 'a', 1)", 1, stats_key)):
        with pytest.raises(redis.exceptions.NoPermissionError):
            write()
    assert redis_client(secured.redis, principal=ADMIN).hget(stats_key, "accepted") == b"5"


def test_the_edge_reaches_only_its_own_keys(secured: Settings, stats_key: str) -> None:
    edge = redis_client(secured.redis, principal="edge")
    with pytest.raises(redis.exceptions.NoPermissionError):
        edge.hincrby(stats_key, "accepted", 1)
    with pytest.raises(redis.exceptions.NoPermissionError):
        edge.get(stats_key)
    key = devices_key(f"access-{uuid.uuid4().hex[:8]}", "device")
    try:
        edge.hset(key, "device", 1)
        assert edge.hget(key, "device") == b"1"
    finally:
        redis_client(secured.redis, principal=ADMIN).delete(key)


def test_no_service_principal_may_reconfigure_redis(secured: Settings) -> None:
    for principal in ("aggregator", "api", "edge", "coordinator"):
        client = redis_client(secured.redis, principal=principal)
        for command in (("CONFIG", "SET", "appendonly", "no"), ("FLUSHALL",), ("ACL", "LIST"), ("CONFIG", "GET", "*")):
            with pytest.raises(redis.exceptions.NoPermissionError):
                client.execute_command(*command)


def test_rotating_a_principal_retires_its_old_passwords(secured: Settings) -> None:
    from ldpstream.runtime.access import password
    from ldpstream.services.rotation import rotate

    old_kafka, old_redis = password(secured, "kafka", "coordinator"), password(secured, "redis", "coordinator")
    rotate(secured, "coordinator")
    new_kafka, new_redis = password(secured, "kafka", "coordinator"), password(secured, "redis", "coordinator")
    assert new_kafka != old_kafka and new_redis != old_redis
    with pytest.raises(redis.AuthenticationError):
        bare_client(secured, username="coordinator", password=old_redis).ping()
    assert bare_client(secured, username="coordinator", password=new_redis).ping()
    for secret, works in ((old_kafka, False), (new_kafka, True)):
        config = {**kafka_security(secured, "coordinator"), "sasl.password": secret}
        client = AdminClient({"bootstrap.servers": secured.bootstrap, "log_level": 0, **config})
        if works:
            assert client.list_topics(timeout=10).brokers
        else:
            with pytest.raises(KafkaException):
                client.list_topics(timeout=5)
    nodes = LocalRedisCluster(secured).nodes if secured.cluster else [RedisService(secured)]
    assert all(f"#{hashlib.sha256(new_redis.encode()).hexdigest()}" in node.users.read_text() for node in nodes)
