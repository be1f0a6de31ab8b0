"""The edge's training-job endpoints (docs/reference/protocol.md section 13): specs, model versions, updates.

- `GET /v1/jobs/JOB`: the newest published job spec's exact bytes, with its signature block (`LDP-Signature`) and
  `LDP-Job-Version`;
- `GET /v1/jobs/JOB/model`: the current model descriptor (what the coordinator signed), `ETag` and `304`;
- `GET /v1/jobs/JOB/model/VERSION`: a version's bytes (the last few versions are kept);
- `POST /v1/jobs/JOB/updates`: one device's update, admitted in this order (each refusal counted, nothing changed):
  size (411/413); the job (404 `unknown_job`); the device's signature (`ldpstream.contract.auth`, key of collection
  `job/JOB`: 401); the update's shape against the job's mechanism, NaN and infinities (400: `malformed`,
  `wrong_shape`, `not_finite`); its job version and model version against the current model (409
  `closed_version`: not the current version, or the job is done); enrolment, replay and rate
  (`ldpstream.edge.devices.Admission`: 401, 429); then one Redis script marks the device's update for the version
  (409 `duplicate` if marked before) and its round (409 `round_limit` beyond `max_rounds` versions); then the update
  goes to `ldp.jobs.updates` keyed by the device's pseudonym (a shuffled job's to its raw topic `ldp.jobs.raw.JOB`
  without a key, for the shuffler: the marks above are then the only check of duplicates and rounds), answered 200
  once Kafka has it (its marks released and 503 if Kafka does not take it, so the device sends it again).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from aiohttp import web
from prometheus_client import Counter

from ldpstream.contract.auth import AuthError, parse_authorization, verify
from ldpstream.contract.clock import now_ms
from ldpstream.contract.pseudonym import device_pseudonym
from ldpstream.contract.signatures import block_header
from ldpstream.contract.training import (
    JOB_PREFIX,
    MAX_UPDATE_BYTES,
    ModelDescriptor,
    TrainingWireError,
    decode_update,
    descriptor_etag,
    edge_topic,
    parse_descriptor,
)
from ldpstream.edge.answers import Handler, RequestIds, answered, json_answer
from ldpstream.edge.devices import RATE_LIMITED, REPLAYED, Admission, Admit
from ldpstream.edge.intake import JSON
from ldpstream.runtime.jobs import SignedJob, model_fields, model_prefix, newest, read_jobs
from ldpstream.runtime.kafka import producer_client

log = logging.getLogger(__name__)

REFRESH_S = 2.0  # a job not known here is looked up on the topic at most this often
DEDUPE_TTL_S = 30 * 24 * 3600  # an update's mark outlives any job's versions

EDGE_UPDATES = Counter("ldp_edge_updates_total", "Training updates by outcome and reason", ["outcome", "reason"])

MARK = """
if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 1 then return -1 end
local rounds = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0')
if rounds >= tonumber(ARGV[2]) then return -2 end
redis.call('SADD', KEYS[1], ARGV[1])
redis.call('EXPIRE', KEYS[1], ARGV[3])
redis.call('HINCRBY', KEYS[2], ARGV[1], 1)
return 1
"""
UNMARK = """
if redis.call('SREM', KEYS[1], ARGV[1]) == 1 then redis.call('HINCRBY', KEYS[2], ARGV[1], -1) end
return 1
"""


class Refused(Exception):
    """An update or a request refused: status, reason (the protocol's code) and why."""

    def __init__(self, status: int, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.status, self.reason, self.detail = status, reason, detail


def mark_keys(job: SignedJob, version: int) -> list[str]:
    """The admission marks of one model version and the job's round counts (one hash tag: one cluster slot)."""
    tag = f"ldp:edge:{{jobs:{job.spec.job_id}@{job.spec.version}}}"
    return [f"{tag}:v:{version}:seen", f"{tag}:rounds"]


class Deliveries:
    """A Kafka producer whose deliveries answer asyncio futures (a thread serves its delivery reports)."""

    def __init__(self, bootstrap: str) -> None:
        self._producer = producer_client(bootstrap, None, **{"linger.ms": 2, "message.timeout.ms": 10_000})
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True, name="edge-job-deliveries")
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.is_set():
            self._producer.poll(0.1)

    def send(self, topic: str, key: bytes | None, value: bytes) -> asyncio.Future[None]:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()

        def delivered(err: Any, _msg: Any) -> None:
            def settle() -> None:
                if done.done():
                    return
                if err is None:
                    done.set_result(None)
                else:
                    done.set_exception(Refused(503, "kafka_unavailable", str(err)))
            loop.call_soon_threadsafe(settle)

        try:
            self._producer.produce(topic, value, key, on_delivery=delivered)
        except BufferError:
            done.set_exception(Refused(503, "overloaded", "too many updates in flight"))
        return done

    def close(self) -> None:
        self._producer.flush(10)
        self._stop.set()


class TrainingEdge:
    """The training endpoints of one edge process (module docstring)."""

    def __init__(self, bootstrap: str, redis: Any, admission: Admission) -> None:
        self.bootstrap = bootstrap
        self.redis = redis
        self.admission = admission
        self.jobs: dict[str, SignedJob] = {}
        self._read_at = self._read_done_at = -float("inf")  # the starts of the last read and of the last one done
        self._reading: asyncio.Future[dict[str, SignedJob]] | None = None
        self._deliveries: Deliveries | None = None
        self._mark = redis.register_script(MARK)
        self._unmark = redis.register_script(UNMARK)

    async def job(self, job_id: str) -> SignedJob:
        """The newest published spec of the job, looked for on a miss in a read of the topic begun after it (off the
        loop; misses share reads, one at most every REFRESH_S); Refused 404 `unknown_job`."""
        found = newest(self.jobs, job_id)
        if found is None:
            await self._read_since(time.monotonic())
            found = newest(self.jobs, job_id)
        if found is None:
            raise Refused(404, "unknown_job", f"no published training job {job_id[:80]!r}")
        return found

    async def _read_since(self, arrived: float) -> None:
        """Return once a read of the jobs topic begun at or after `arrived` (monotonic seconds) has finished: a job
        published before then is in `jobs`. Raises what a failed read raised."""
        while self._read_done_at < arrived:
            if self._reading is None:
                wait_s = self._read_at + REFRESH_S - time.monotonic()
                if wait_s > 0:
                    await asyncio.sleep(wait_s)
                    continue
                self._read_at = time.monotonic()
                reading = asyncio.get_running_loop().run_in_executor(None, read_jobs, self.bootstrap)
                reading.add_done_callback(functools.partial(self._read_done, started=self._read_at))
                self._reading = reading
            await asyncio.shield(self._reading)  # a failed read raises here, to every request waiting for it

    def _read_done(self, reading: asyncio.Future[dict[str, SignedJob]], started: float) -> None:
        if self._reading is reading:
            self._reading = None
        if not reading.cancelled() and reading.exception() is None:
            self.jobs, self._read_done_at = reading.result(), started

    async def model(self, job_id: str) -> tuple[bytes, bytes, ModelDescriptor]:
        """The current model's descriptor bytes, signature block and parsed descriptor; Refused 404 before the
        coordinator has published one."""
        raw = model_fields(await self.redis.hmget(model_prefix(job_id) + "model", "descriptor", "signature",
                                                  "version"))
        if raw is None:
            raise Refused(404, "no_model", f"job {job_id!r} has no model version yet (is its coordinator running?)")
        return raw[0], raw[1], parse_descriptor(raw[0])

    def route(self, request: web.BaseRequest, parts: list[str]) -> Callable[[], Awaitable[web.Response]]:
        """The handler of a /v1/jobs/... request (parts: the path split on '/')."""
        method = request.method
        if len(parts) == 4 and parts[3]:
            return self._only(method, "GET", lambda: self.spec(parts[3]))
        if len(parts) == 5 and parts[4] == "model":
            return self._only(method, "GET", lambda: self.descriptor(request, parts[3]))
        if len(parts) == 6 and parts[4] == "model" and parts[5].isdigit() and len(parts[5]) < 20:
            return self._only(method, "GET", lambda: self.version_bytes(parts[3], int(parts[5])))
        if len(parts) == 5 and parts[4] == "updates":
            return self._only(method, "POST", lambda: self.update(request, parts[3]))

        async def not_found() -> web.Response:
            return json_answer({"error": "not found"}, 404)
        return not_found

    def _only(self, method: str, allowed: str, handler: Callable[[], Awaitable[web.Response]]
              ) -> Callable[[], Awaitable[web.Response]]:
        async def answer() -> web.Response:
            if method != allowed:
                return json_answer({"error": "method not allowed"}, 405, {"Allow": allowed})
            try:
                return await handler()
            except Refused as refused:  # an update's refusal carries its verdict, as a report's (section 13.4)
                return json_answer({"reason": refused.reason, "error": refused.detail, "verdicts": [refused.reason]},
                             refused.status)
        return answer

    async def spec(self, job_id: str) -> web.Response:
        job = await self.job(job_id)
        return web.Response(body=job.value, content_type=JSON, headers={
            "LDP-Signature": block_header(job.block), "LDP-Job-Version": str(job.spec.version),
            "Cache-Control": "no-cache"})

    async def descriptor(self, request: web.BaseRequest, job_id: str) -> web.Response:
        await self.job(job_id)
        body, block, _ = await self.model(job_id)
        headers = {"ETag": descriptor_etag(body), "Cache-Control": "no-cache", "LDP-Signature": block_header(block)}
        if request.headers.get("If-None-Match") == headers["ETag"]:
            return web.Response(status=304, headers=headers)
        return web.Response(body=body, content_type=JSON, headers=headers)

    async def version_bytes(self, job_id: str, version: int) -> web.Response:
        await self.job(job_id)
        data = await self.redis.get(f"{model_prefix(job_id)}bytes:{version}")
        if data is None:
            raise Refused(404, "no_version", f"job {job_id!r} has no version {version} (kept: the last few)")
        return web.Response(body=data, content_type="application/octet-stream",
                            headers={"Cache-Control": "public, max-age=31536000, immutable"})

    async def update(self, request: web.BaseRequest, job_id: str) -> web.Response:
        try:
            version = await self._admit(request, job_id)
        except Refused as refused:
            EDGE_UPDATES.labels("refused", refused.reason).inc()
            raise
        EDGE_UPDATES.labels("admitted", "").inc()
        return json_answer({"accepted": 1, "version": version, "verdicts": ["admitted"]})

    async def _admit(self, request: web.BaseRequest, job_id: str) -> int:
        """The module docstring's steps; the admitted update's model version."""
        if request.content_length is None:
            raise Refused(411, "too_large", "a Content-Length is required")
        if request.content_length > MAX_UPDATE_BYTES:
            raise Refused(413, "too_large", f"an update is at most {MAX_UPDATE_BYTES} bytes")
        body = await request.read()
        key = JOB_PREFIX + job_id
        job = await self.job(job_id)
        try:
            signed = parse_authorization(request.headers.get("Authorization"))
            verify(self.admission.key_of(key, signed.device), signed, request.method, request.path, body, now_ms())
        except AuthError as exc:
            raise Refused(401, "unauthorized", str(exc)) from None
        try:
            update = decode_update(body, job.spec)
        except TrainingWireError as exc:
            raise Refused(400, exc.code, str(exc)) from None
        _, _, current = await self.model(job_id)
        if (update.job != job_id or update.job_version != job.spec.version or current.job_version != job.spec.version
                or update.model_version != current.version or current.done):
            raise Refused(409, "closed_version", f"the current version of {job_id}@{job.spec.version} is "
                                                 f"{current.version}{' (done)' if current.done else ''}; the update "
                                                 f"is for {update.job}@{update.job_version} version "
                                                 f"{update.model_version}")
        code = (await self.admission.admit([Admit(key, signed.device, signed.signature, "1h")]))[0]
        if isinstance(code, int) and code < 0:
            if code == REPLAYED:
                raise Refused(401, "replayed", "this signature was used before (replayed request)")
            if code == RATE_LIMITED:
                raise Refused(429, "rate_limited", "too many requests")
            raise Refused(401, "unauthorized", "unknown or revoked device")
        pseudonym = device_pseudonym(key, signed.device)
        keys = mark_keys(job, update.model_version)
        marked = int(await self._mark(keys=keys, args=[pseudonym, job.spec.max_rounds, DEDUPE_TTL_S]))
        if marked == -1:
            raise Refused(409, "duplicate", f"this device already sent an update for version {update.model_version}")
        if marked == -2:
            raise Refused(409, "round_limit", f"this device took part in {job.spec.max_rounds} version(s) of "
                                              f"{job_id}, the job's max_rounds")
        if self._deliveries is None:
            self._deliveries = Deliveries(self.bootstrap)
        topic, keyed = edge_topic(job.spec)  # a shuffled job's: no key, any partition (section 13.7)
        try:
            await self._deliveries.send(topic, pseudonym.to_bytes(8, "little") if keyed else None, body)
        except BaseException:
            await self._unmark(keys=keys, args=[pseudonym])  # not admitted: the device may send it again
            raise
        return update.model_version

    def close(self) -> None:
        if self._deliveries is not None:
            self._deliveries.close()


class TrainingHost(Protocol):
    """What the training routes need of the edge process (`ldpstream.edge.app.Edge`)."""

    training: TrainingEdge


class TrainingRoutes:
    """The training jobs' routes (`/v1/jobs/...`, `TrainingEdge.route`), each answer with its request id, counted
    like the join's (`ldpstream.edge.routes.Router`)."""

    def __init__(self, edge: TrainingHost, ids: RequestIds) -> None:
        self.training, self.ids = edge.training, ids

    def match(self, request: web.BaseRequest, parts: list[str]) -> Handler | None:
        if len(parts) < 4 or parts[:3] != ["", "v1", "jobs"]:
            return None
        handler = self.training.route(request, parts)
        return lambda: answered(self.ids.next(), handler)
