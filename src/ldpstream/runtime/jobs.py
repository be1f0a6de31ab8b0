"""Training jobs on the server side: their signed specs on `ldp.jobs.specs`, their model versions in Redis.

A job spec is published like a collection spec (`ldpstream.runtime.specs`): on the compacted topic
`ldp.jobs.specs`, keyed `job/JOB@VERSION`, its canonical JSON as the value and the admin's signature of both in the
`ldp-sig` header (the spec key, over `spec_message(key, value)`: the bytes and block a device verifies, protocol
section 13.1). A published version is immutable. `publish_job` also creates the topics its updates pass through.

The current model version of a job lives in Redis under `ldp:sgd:jobs:JOB:` (the coordinator writes it, the edge
reads it): `model` holds the descriptor's bytes, its signature block and the version; `bytes:V` the version's bytes
(the last KEEP_VERSIONS versions are kept, so that a device that read the descriptor just before a step still gets
its bytes). The coordinator writes them in the same atomic step as its state (`ldpstream.sgd.jobrun`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ldpstream.contract.spec import SpecError
from ldpstream.contract.topics import DLQ_TOPIC, JOBS_TOPIC, SHUFFLER_STATE_TOPIC
from ldpstream.contract.training import JOB_PREFIX, JobSpec, TrainingWireError, coordinator_topic, edge_topic, parse_job
from ldpstream.runtime.dlq import DLQ_PARTITIONS
from ldpstream.runtime.fresh_reads import read_since
from ldpstream.runtime.kafka import ReportProducer, TopicError, ensure_topic, existing_topics, read_to_end
from ldpstream.runtime.settings import Settings
from ldpstream.runtime.signing import (
    SIGNATURE_HEADER,
    SigningError,
    TrustedKeys,
    key_id,
    load_signing_key,
    load_trusted_keys,
    sign,
    verify,
)

UPDATES_PARTITIONS = 4
KEEP_VERSIONS = 3


@dataclass(frozen=True)
class SignedJob:
    """A published job spec: the spec, its exact bytes and its signature block (what the edge serves)."""

    spec: JobSpec
    value: bytes
    block: bytes


def model_prefix(job_id: str) -> str:
    """The Redis key prefix of a job's model versions (the coordinator's keys: `ldp:sgd:*`)."""
    return f"ldp:sgd:jobs:{job_id}:"


def read_jobs(bootstrap: str, trusted: TrustedKeys | None = None,
              invalid: list[str] | None = None) -> dict[str, SignedJob]:
    """Every published job spec by `job/JOB@VERSION`: only messages signed by a trusted spec key whose bytes are a
    valid spec of that key count (the first one of a key wins); the reasons for the others go to `invalid`."""
    cfg = Settings.from_env()
    trusted = load_trusted_keys(cfg.spec_trusted_keys) if trusted is None else trusted
    ensure_topic(bootstrap, JOBS_TOPIC, 1, compacted=True)
    jobs: dict[str, SignedJob] = {}
    for key, value, headers in read_to_end(bootstrap, JOBS_TOPIC):
        if key is None or value is None:
            continue
        name = key.decode(errors="replace")
        if name in jobs:
            continue
        try:
            verify(trusted, key, value, headers, f"{JOBS_TOPIC}[{name}]")
            spec = parse_job(value)
            if spec.signed_key != key:
                raise SpecError(f"{JOBS_TOPIC}: the message keyed {name!r} holds {spec.signed_key.decode()!r}")
        except (SpecError, TrainingWireError) as exc:
            if invalid is not None:
                invalid.append(str(exc))
            continue
        block = next(v for k, v in headers or () if k == SIGNATURE_HEADER and v is not None)
        jobs[name] = SignedJob(spec, value, block)
    return jobs


def newest(jobs: dict[str, SignedJob], job_id: str) -> SignedJob | None:
    """The highest published version of `job_id` among `jobs`."""
    mine = [j for j in jobs.values() if j.spec.job_id == job_id]
    return max(mine, key=lambda j: j.spec.version, default=None)


class PublishedJobs:
    """The published job specs (`read_jobs`) for a reader that answers many requests (the read API): re-read at most
    every `max_age_s`; a job asked for that is not known yet (it may have just been published) is looked for in a
    read begun after the request, reads at most every `miss_age_s`. Before any job is published the topic may not
    exist, and a reader that may not create it (the API's principal) sees no job. Blocking (Kafka); thread-safe: a
    request during a re-read waits for it."""

    def __init__(self, bootstrap: str, max_age_s: float = 5.0, miss_age_s: float = 1.0,
                 read: Callable[[str], dict[str, SignedJob]] = read_jobs) -> None:
        self.bootstrap, self.max_age_s, self.miss_age_s, self.read = bootstrap, max_age_s, miss_age_s, read
        self._jobs: dict[str, SignedJob] = {}
        self._read_at = -float("inf")  # when the last read began (monotonic)
        self._lock = threading.Lock()

    def all(self, max_age_s: float | None = None) -> dict[str, SignedJob]:
        """Every published job spec by `job/JOB@VERSION`, the topic read at most `max_age_s` (default: the set
        one) ago."""
        with self._lock:
            if time.monotonic() - self._read_at >= (self.max_age_s if max_age_s is None else max_age_s):
                self._read()
            return self._jobs

    def newest(self, job_id: str) -> SignedJob | None:
        """The job's highest published version (None if it is not published)."""
        arrived = time.monotonic()
        found = newest(self.all(), job_id)
        if found is None:
            read_since(self._lock, lambda: self._read_at, self._read, arrived, self.miss_age_s)
            found = newest(self._jobs, job_id)
        return found

    def _read(self) -> None:
        """Read the topic (the lock held)."""
        started = time.monotonic()
        try:
            self._jobs = self.read(self.bootstrap)
        except TopicError:
            if JOBS_TOPIC in existing_topics(self.bootstrap):
                raise
            self._jobs = {}
        self._read_at = started


def publish_job(spec: JobSpec, bootstrap: str) -> tuple[str, bool]:
    """Publish `spec` once, signed with the admin's spec key; create the updates topic. (key, created): publishing
    the same bytes again is a no-op; SpecError if that version holds another spec; SigningError without a key the
    readers trust."""
    cfg = Settings.from_env()
    signer = load_signing_key(cfg.spec_signing_key)
    trusted = load_trusted_keys(cfg.spec_trusted_keys)
    if key_id(signer.public_key()) not in trusted:
        raise SigningError(f"the spec-signing key {key_id(signer.public_key()).hex()} is not among the trusted keys "
                           f"in {cfg.spec_trusted_keys}: readers would refuse its jobs")
    key, value = spec.signed_key, spec.canonical_json()
    existing = read_jobs(bootstrap, trusted).get(key.decode())
    if existing is not None and existing.value != value:
        raise SpecError(f"{key.decode()} is already published with other content; a published version is "
                        f"immutable: publish a new version")
    for topic in {edge_topic(spec)[0], coordinator_topic(spec)}:
        ensure_topic(bootstrap, topic, UPDATES_PARTITIONS, exact=False)
    if spec.shuffle is not None:
        ensure_topic(bootstrap, SHUFFLER_STATE_TOPIC, 1, compacted=True)
    ensure_topic(bootstrap, DLQ_TOPIC, DLQ_PARTITIONS, exact=False)
    if existing is None:
        producer = ReportProducer(bootstrap, linger_ms=0)
        producer.produce(JOBS_TOPIC, value, key, headers=((SIGNATURE_HEADER, sign(signer, key, value)),))
        producer.flush()
    return key.decode(), existing is None


def job_name(key: str) -> str:
    """`job/JOB` -> `JOB` (ValueError for another key)."""
    if not key.startswith(JOB_PREFIX):
        raise ValueError(f"not a job key: {key!r}")
    return key[len(JOB_PREFIX):]


def current_model(client: Any, job_id: str) -> tuple[bytes, bytes, int] | None:
    """(descriptor bytes, signature block, version) of the job's current model version, or None (sync or async
    clients: the caller awaits an async one's `hmget` itself through `model_fields`)."""
    raw = client.hmget(model_prefix(job_id) + "model", "descriptor", "signature", "version")
    return model_fields(raw)


def model_fields(raw: list[bytes | None]) -> tuple[bytes, bytes, int] | None:
    """`current_model`'s answer from the `model` hash's fields."""
    descriptor, signature, version = raw
    if descriptor is None or signature is None or version is None:
        return None
    return descriptor, signature, int(version)
