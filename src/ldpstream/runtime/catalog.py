"""Every service the project runs, declared once: who it acts as and what that principal may do (Kafka ACLs, Redis
ACL rule), the process it runs, the `ldp` command that runs it, its metrics (port, Prometheus job, dashboard row),
its health endpoint, its docker compose entry and the topics it needs made.

Everything that needs a list of services reads `SERVICES` (or a principal's rights, `PRINCIPALS`) and lists none
itself: access control (`ldpstream.runtime.access`, `ldpstream.runtime.kafka_access`, the Redis ACL file),
`ldp status`, the announced Prometheus targets (`ldpstream.runtime.targets`), the compose deployment's Prometheus
configuration and service entries (`ldpstream.services.compose`, checked against `deploy/` by tests/deploy), and the
Grafana dashboard (`deploy/grafana/dashboard.py`). Adding a service is one `Service(...)` here, appended to
`SERVICES` (docs/how-to/extend.md).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field

from ldpstream.contract.topics import (
    DLQ_TOPIC,
    GRADIENTS_TOPIC,
    JOBS_PREFIX,
    JOBS_RAW_PREFIX,
    JOBS_TOPIC,
    MODELS_TOPIC,
    RAW_PREFIX,
    REPORTS_PREFIX,
    SETASIDE_TOPIC,
    SHUFFLED_UPDATES_TOPIC,
    SHUFFLER_STATE_TOPIC,
    SPECS_TOPIC,
    STRATEGIES_TOPIC,
    UPDATES_TOPIC,
)

AGGREGATOR_GROUPS = "ldp-aggregator"  # the prefix of every aggregator worker's consumer group (and faust's topics)
COORDINATOR_GROUPS = "ldp-sgd"
SHUFFLER_GROUP = "ldp-shuffler"  # the shuffler's consumer group and transactional id (`ldpstream.shuffler`)
READER_GROUP = "ldp-read-to-end"  # `kafka.read_to_end`'s: assigned partitions, never joined or committed
OPEN, TOKEN = "open", "token"  # how a /metrics is read: without credentials, or with a bearer token of scope metrics


@dataclass(frozen=True)
class Grant:
    """One Kafka ACL: `operation` on a resource (`topic`, `group`, `transactional_id`) named `name` exactly or, with
    `prefixed`, every resource whose name starts with it."""

    resource: str
    name: str
    operation: str
    prefixed: bool = False


def topic(name: str, *operations: str, prefixed: bool = False) -> tuple[Grant, ...]:
    """The grants of `operations` on the topic `name` (with `prefixed`, on every topic whose name starts with it)."""
    return tuple(Grant("topic", name, op, prefixed) for op in operations)


def reads_specs() -> tuple[Grant, ...]:
    """What every service needs to read the published specs and strategies."""
    # specs and strategies topics: `ldp.collections` and the benchmarks' `ldp.collections.<run>` ones
    return (topic(SPECS_TOPIC, "read", "describe", prefixed=True) + topic(STRATEGIES_TOPIC, "read", "describe")
            + (Grant("group", READER_GROUP, "read"),))  # librdkafka looks up a consumer's group coordinator


# Redis ACL rules after the password (key patterns, commands).
WRITER = "+@all -@dangerous -@admin +info"
# what a Redis Cluster client asks to find the slots' nodes (harmless on one server)
CLUSTER_DISCOVERY = "+cluster|slots +cluster|shards +cluster|nodes +cluster|info"


@dataclass(frozen=True)
class Principal:
    """Who a process acts as on Kafka and Redis, and what it may do there (nothing it is not granted)."""

    name: str
    kafka: tuple[Grant, ...] = ()
    redis: str = "resetkeys +@connection"


@dataclass(frozen=True)
class Topic:
    """A topic a service needs that only the admin may create (`ldp up`, `ldp credentials apply`)."""

    name: str
    partitions: int = 1
    compacted: bool = False


@dataclass(frozen=True)
class Metrics:
    """A service's Prometheus metrics: where served (`port` in the compose deployment; `option` sets it on the
    command line), the Prometheus job that scrapes them, how they are read (`OPEN` or `TOKEN`) and the title of the
    service's dashboard row (its panels: `deploy/grafana/dashboard.py`)."""

    job: str
    port: int
    option: str = "--metrics-port"
    access: str = OPEN
    row: str | None = None


@dataclass(frozen=True)
class Compose:
    """The docker compose entry beyond what every service gets (`ldpstream.services.compose.service_entry`): the
    `ldp` arguments after the command, extra environment, extra secrets, volumes and published ports."""

    args: tuple[str, ...] = ()
    environment: Mapping[str, str] = field(default_factory=dict)
    secrets: tuple[str, ...] = ()
    volumes: tuple[str, ...] = ()
    ports: tuple[str, ...] = ()


@dataclass(frozen=True)
class Service:
    """One service of the project (module docstring). `module` is what a supervisor starts (`argv`: `python -m
    module ...`; a service without a child process of its own is run by its `command`, `ldp COMMAND`)."""

    name: str
    principal: Principal
    command: str  # `ldp COMMAND`: the service in the foreground (supervising its processes, if several)
    module: str | None = None
    metrics: Metrics | None = None
    health: str | None = None  # an HTTP path that answers 200 while the process is alive
    compose: Compose | None = None
    topics: tuple[Topic, ...] = ()  # its own topics (the shared ones, specs and dead letters: kafka_access)

    def argv(self, *args: str) -> list[str]:
        """The command line of one process of the service (`module`, else `ldp COMMAND`) with `args`."""
        entry = ["-m", self.module] if self.module else ["-m", "ldpstream", self.command]
        return [sys.executable, *entry, *args]


EDGE = Principal("edge", topic(REPORTS_PREFIX, "write", "describe", prefixed=True)
                 + topic(RAW_PREFIX, "write", "describe", prefixed=True) + reads_specs()
                 + topic(JOBS_PREFIX, "read", "describe", prefixed=True) + topic(UPDATES_TOPIC, "write")
                 + topic(JOBS_RAW_PREFIX, "write", prefixed=True),
                 # the tokens: read, to check its /metrics scrapes; the training jobs' model versions (the
                 # coordinator's): read
                 f"~ldp:edge:* %R~ldp:api:tokens %R~ldp:sgd:jobs:* {WRITER}")
# only the shuffler reads what the edge admitted for a shuffled collection; it writes the shuffled batches, its
# state, and commits its offsets inside its transactions
SHUFFLER = Principal("shuffler", topic(RAW_PREFIX, "read", "describe", prefixed=True)
                     + topic(REPORTS_PREFIX, "write", "describe", prefixed=True)
                     + topic(SHUFFLER_STATE_TOPIC, "read", "write", "describe") + reads_specs()
                     # shuffled training jobs: their specs, what the edge admitted, the batches released
                     + topic(JOBS_TOPIC, "read", "describe") + topic(JOBS_RAW_PREFIX, "read", "describe", prefixed=True)
                     + topic(SHUFFLED_UPDATES_TOPIC, "write", "describe")
                     + (Grant("group", SHUFFLER_GROUP, "read", True),
                        Grant("transactional_id", SHUFFLER_GROUP, "write", True),
                        Grant("transactional_id", SHUFFLER_GROUP, "describe", True)),
                     f"~ldp:shuffle:* {WRITER}")
AGGREGATOR = Principal("aggregator", topic(REPORTS_PREFIX, "read", "describe", prefixed=True)
                       + topic(DLQ_TOPIC, "write", "describe") + topic(SETASIDE_TOPIC, "write", "describe")
                       + reads_specs() + (Grant("group", AGGREGATOR_GROUPS, "read", True),)
                       # faust's internal topics (its assignor's), named after the group
                       + topic(AGGREGATOR_GROUPS, "read", "write", "create", "describe", prefixed=True),
                       f"~ldp:{{* ~ldp:health:* {WRITER}")
API = Principal("api", topic(REPORTS_PREFIX, "describe", prefixed=True) + reads_specs()  # the API only reads
                + topic(JOBS_TOPIC, "read", "describe"),  # the training jobs' specs (`GET /jobs`)
                f"%R~ldp:* +@read +@connection -@dangerous +info {CLUSTER_DISCOVERY}")
COORDINATOR = Principal("coordinator", topic(GRADIENTS_TOPIC, "read", "describe", "create")
                        + topic(MODELS_TOPIC, "write", "describe", "create") + topic(DLQ_TOPIC, "write", "describe")
                        + (Grant("group", COORDINATOR_GROUPS, "read", True),)
                        + topic(JOBS_PREFIX, "read", "describe", "create", prefixed=True)
                        + (Grant("group", READER_GROUP, "read"),),
                        f"~ldp:sgd:* {WRITER}")
# the SGD devices' side (no service of ours: a trusted gateway, `ldp train`'s simulated devices): sends gradients,
# reads models
GATEWAY = Principal("gateway", topic(GRADIENTS_TOPIC, "write", "describe") + topic(MODELS_TOPIC, "read", "describe")
                    + (Grant("group", COORDINATOR_GROUPS, "read", True),))
# the operator's CLI: a Kafka super user (it publishes specs and strategies and creates topics); every Redis key
ADMIN = Principal("admin", (), "~* &* +@all")

SERVICES: tuple[Service, ...] = (
    # aggregator workers: reports from Kafka into Redis, each batch one atomic write
    Service("aggregator", AGGREGATOR, "aggregate", "ldpstream.aggregator",
            Metrics("ldp-aggregator", 9101, row="Aggregator workers"),
            compose=Compose(("--workers", "1", "--metrics-port", "9101"))),
    # the poisoning auditor: audits each window as it closes (`ldp aggregate` runs it beside the workers)
    Service("auditor", AGGREGATOR, "aggregate", "ldpstream.aggregator.auditor"),
    # devices enrol and POST reports: authenticated, admitted once per window, to Kafka (its /metrics on its port)
    Service("edge", EDGE, "edge", "ldpstream.edge", Metrics("ldp-edge", 8080, "--port", TOKEN, "Ingestion edge"),
            "/healthz", Compose(("--host", "0.0.0.0", "--port", "8080"),
                                {"LDP_EDGE_KEY_FILE": "/run/secrets/edge_master_key"}, ("edge_master_key",),
                                ("edge-state:/var/lib/ldpstream",), ("8080:8080",))),
    # shuffled collections: holds each window's raw reports, releases them shuffled (one process: a second fences it)
    Service("shuffler", SHUFFLER, "shuffle", metrics=Metrics("ldp-shuffler", 9102, row="Shuffler"),
            compose=Compose(("--metrics-port", "9102")), topics=(Topic(SHUFFLER_STATE_TOPIC, 1, compacted=True),)),
    # the read API: collections, estimates, series, the console, the store-wide /metrics
    Service("api", API, "serve", metrics=Metrics("ldp-api", 8000, "--port", TOKEN), health="/healthz",
            compose=Compose(("--host", "0.0.0.0", "--port", "8000"))),
    # a training job's coordinator (`ldp train run JOB` for a job devices join, `ldp train --job FILE` for a simulated
    # one; one per job: no compose entry); its row charts both kinds' metrics
    Service("coordinator", COORDINATOR, "train", metrics=Metrics("ldp-sgd", 9103, row="SGD training")),
)
# every principal, each once: the admin, those of the services, the SGD devices' gateway
PRINCIPALS: tuple[Principal, ...] = tuple({p.name: p for p in (ADMIN, *(s.principal for s in SERVICES), GATEWAY)}
                                          .values())


def service(name: str) -> Service:
    """The service named `name` (KeyError naming the known ones)."""
    for s in SERVICES:
        if s.name == name:
            return s
    raise KeyError(f"no service {name!r}; one of {', '.join(s.name for s in SERVICES)}")
