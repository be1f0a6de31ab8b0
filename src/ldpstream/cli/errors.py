"""Errors a person can act on: what is wrong and what to run, in one line.

`explain(exc)` turns the errors a command meets at its edges (a missing file, Kafka or Redis not answering,
refused credentials, an unpublished collection, a bad spec) into that line, or None for a bug, which keeps its
traceback. `require_services` checks Kafka and Redis before a command waits on them, so a stopped stack is one
line after at most a few seconds instead of a client's retries. The client libraries' own logs go to the logging
module (`client_logs`), never a library's raw lines on the terminal.
"""

from __future__ import annotations

import difflib
import logging
import sys
from collections.abc import Collection
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ldpstream.aggregator.plans import Plan

START_STACK = "start the local services with `ldp up` (or point KAFKA_BOOTSTRAP and REDIS_URL at yours)"
CLIENT_LOGGERS = ("ldpstream.kafka.client", "aiokafka", "kafka", "redis")
SERVER_MODULES = ("confluent_kafka", "faust", "aiokafka", "redis", "aiohttp", "scipy", "prometheus_client", "uvloop",
                  "pydantic")


class CliError(Exception):
    """An error whose message already says what is wrong and what to do."""


class NotPublished(CliError):
    """A command named a collection that has no published spec."""

    def __init__(self, name: str, version: int | None = None, published: Collection[str] = ()) -> None:
        which = f"{name!r}" + (f" version {version}" if version is not None else "")
        near = [] if name in published else nearest(name, published)
        hint = f"did you mean {' or '.join(near)}? If not, " if near else ""
        super().__init__(f"no published collection {which}: {hint}publish its spec with `ldp spec publish FILE`")


def nearest(name: str, names: Collection[str], most: int = 3) -> list[str]:
    """The published names a mistyped `name` may have meant: those it begins (newest first by name: a demo's
    `diagnostics-demo-TIME`), then the closest spellings.

    Examples
    --------
    >>> nearest("diagnostic", ["diagnostics", "latency", "diagnostics-demo-20260101-120000"])
    ['diagnostics-demo-20260101-120000', 'diagnostics']
    """
    longer = sorted((n for n in names if n.startswith(name) and n != name), reverse=True)
    close = difflib.get_close_matches(name, list(names), n=most, cutoff=0.75)
    return list(dict.fromkeys([*longer, *close]))[:most]


def published_plan(bootstrap: str, name: str, version: int | None = None) -> Plan:
    """The aggregator's plan of a published collection: its newest version, or `version`; NotPublished otherwise
    (with the published names it may have meant)."""
    from ldpstream.aggregator.plans import PlanRegistry

    plans = PlanRegistry(bootstrap)
    plan = plans.latest(name) if version is None else plans.get(name, version)
    if plan is None:
        raise NotPublished(name, version, {p.spec.name for p in plans.plans()})
    return plan


def require_services(kafka: bool = True, redis: bool = True, timeout_s: float = 3.0) -> None:
    """CliError unless the configured Kafka (and Redis) answer within `timeout_s` (each)."""
    from ldpstream.runtime.settings import Settings

    cfg = Settings.from_env()
    missing = []
    if kafka:
        from ldpstream.runtime.kafka import metadata_answers

        if not metadata_answers(cfg.bootstrap, timeout_s):
            missing.append(f"Kafka at {cfg.bootstrap}")
    if redis:
        from ldpstream.runtime.redis import redis_answers

        if not redis_answers(cfg.redis, timeout_s):
            missing.append(f"Redis at {redacted(cfg.redis)}")
    if missing:
        raise CliError(f"{' and '.join(missing)} not answering: {START_STACK}")


def redacted(url: str) -> str:
    """A Redis URL without its password."""
    head, at, tail = url.rpartition("@")
    return f"{head.split('//')[0]}//***@{tail}" if at else url


def explain(exc: BaseException) -> str | None:
    """One line for an error a person can act on, None for anything else (a bug: keep its traceback)."""
    if isinstance(exc, CliError):
        return str(exc)
    if isinstance(exc, ModuleNotFoundError) and (exc.name or "").split(".")[0] in SERVER_MODULES:
        return (f"this command needs the server install ({exc.name} is missing): "
                f"pip install 'ldpstream[server]'")
    if isinstance(exc, FileNotFoundError):
        return f"{exc.filename or exc}: no such file or directory"
    if isinstance(exc, PermissionError):
        return f"{exc.filename or exc}: permission denied"
    module = type(exc).__module__.split(".")[0]
    if module == "redis":
        return _redis(exc)
    if module in ("confluent_kafka", "cimpl"):
        return _kafka(exc)
    names = {cls.__name__ for cls in type(exc).__mro__}
    if names & {"SpecError", "LDPError", "SigningError", "TopicError", "DeliveryError", "WireError"}:
        return str(exc)
    return None


def _redis(exc: BaseException) -> str | None:
    import redis.exceptions as rex

    if isinstance(exc, rex.AuthenticationError | rex.NoPermissionError):
        return f"Redis refused this process's credentials ({exc}): check LDP_SECRETS_DIR, or run `ldp up`"
    if isinstance(exc, rex.ConnectionError | rex.TimeoutError):
        return f"Redis does not answer ({exc}): {START_STACK}"
    return None


def _kafka(exc: BaseException) -> str | None:
    from confluent_kafka import KafkaError

    error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
    if error is None:
        return None
    code = error.code()
    if code in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._TIMED_OUT, KafkaError._RESOLVE):
        return f"Kafka does not answer ({error.str()}): {START_STACK}"
    if code in (KafkaError.SASL_AUTHENTICATION_FAILED, KafkaError._AUTHENTICATION):
        return f"Kafka refused this process's credentials ({error.str()}): check LDP_SECRETS_DIR, or run `ldp up`"
    if code in (KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED,
                KafkaError.CLUSTER_AUTHORIZATION_FAILED):
        return f"Kafka refused this principal ({error.str()}): see LDP_PRINCIPAL and the ACLs `ldp up` applies"
    return None


def client_logs(verbose: bool) -> None:
    """Where the client libraries' own log lines go (librdkafka through `ldpstream.runtime.kafka.CLIENT_LOG`,
    aiokafka, redis). Quiet (not `verbose`) in a command's output, whose errors are exceptions the boundary explains
    (a transient "broker transport failure" that the client retries is noise to the person reading); `verbose`
    (`--debug`, and the services run in the foreground: `ldp serve`, `ldp train --job`): warnings and worse, each
    behind its logger's name, on standard error."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(name)s: %(levelname)s: %(message)s"))
    for name in CLIENT_LOGGERS:
        logger = logging.getLogger(name)
        logger.handlers = [handler]
        logger.setLevel(logging.WARNING if verbose else logging.CRITICAL + 1)
        logger.propagate = False
