"""Devices talking HTTP to the ingestion edge: signed requests with retries, and a simulated fleet sent through it.

`EdgeClient.post` signs every attempt afresh (`ldpstream.contract.auth`: a new time, so a retry is never a replay) and
retries what a retry can cure (connection errors, 429, 503, 507) with exponential backoff and full jitter, waiting
at least what Retry-After asks. `send_fleet` perturbs a fleet of enrolled devices in vectorised chunks (the same
`ldpstream.simulator.simulator.fleet` as over Kafka, with the pseudonyms of the credentials' device ids) and sends each
device's report as its own request, `concurrency` at a time. `join_fleet` has simulated devices join like phones
(enrol with a token, fetch and verify the spec, hold it against the app's policy) before they report.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import aiohttp
import numpy as np

from ldpstream.contract.auth import Credential, authorization
from ldpstream.contract.clock import now_ms
from ldpstream.contract.collector import pinned_strategies, strategy_from_bytes
from ldpstream.contract.pseudonym import device_pseudonym
from ldpstream.contract.signatures import TrustedKeys, block_from_header
from ldpstream.contract.spec import CollectionSpec, SpecError
from ldpstream.contract.wire import encode
from ldpstream.device.outbox import backoff_s
from ldpstream.device.perturb import single_reports
from ldpstream.device.policy import PrivacyPolicy, Verdict, judge
from ldpstream.device.trust import Seen, TrustError, check_pointer, check_spec
from ldpstream.simulator.population import PopulationTruth
from ldpstream.simulator.simulator import SimulationResult, fleet

RETRYABLE = frozenset({429, 503, 507})
MSGPACK = "application/msgpack"


@dataclass(frozen=True)
class Answer:
    """The edge's final answer to a request: status, JSON body, and how many attempts it took."""

    status: int
    body: dict[str, object]
    attempts: int


class EdgeClient:
    """Signed POSTs of reports to an edge, with retries (see the module docstring)."""

    def __init__(self, session: aiohttp.ClientSession, base_url: str, *, attempts: int = 8,
                 backoff_s: float = 0.1, max_backoff_s: float = 10.0) -> None:
        self.session = session
        self.base_url = base_url.rstrip("/")
        self.attempts = attempts
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s

    async def post(self, credential: Credential, body: bytes, content_type: str = MSGPACK) -> Answer:
        """Send one request's body; the final answer (a retryable status only after the last attempt)."""
        path = f"/v1/collections/{credential.collection}/reports"
        for attempt in range(1, self.attempts + 1):
            headers = {"Content-Type": content_type,
                       "Authorization": authorization(credential.device, credential.key, "POST", path, body, now_ms())}
            retry_after = 0.0
            try:
                async with self.session.post(self.base_url + path, data=body, headers=headers) as response:
                    payload = await response.json(content_type=None)
                    if response.status not in RETRYABLE or attempt == self.attempts:
                        return Answer(response.status, payload, attempt)
                    retry_after = float(response.headers.get("Retry-After", 0) or 0)
            except (TimeoutError, aiohttp.ClientError, ValueError):
                if attempt == self.attempts:
                    raise
            await asyncio.sleep(backoff_s(attempt, retry_after, self.backoff_s, self.max_backoff_s))
        raise AssertionError("unreachable")  # the last attempt returns or raises


@dataclass(frozen=True)
class FleetAnswers:
    """How a fleet's requests ended: per status, the count; per refusal reason (the edge's `reason`, else the status),
    the count of requests refused and the edge's words (`error`) for the first of them."""

    statuses: dict[int, int]
    refused: dict[str, int] = field(default_factory=dict)
    details: dict[str, str] = field(default_factory=dict)

    @property
    def acknowledged(self) -> int:
        return self.statuses.get(200, 0) + self.statuses.get(202, 0)


async def post_all(base_url: str, requests: Sequence[tuple[Credential, bytes]], concurrency: int = 64,
                   timeout_s: float = 60.0, tls: ssl.SSLContext | None = None,
                   on_answer: Callable[[int], None] | None = None) -> FleetAnswers:
    """Send every (credential, body) request, `concurrency` at a time; the count of final answers per status
    (`tls`: how an https edge is verified; default: the system's CAs; `on_answer(1)` after each final answer)."""
    answers = FleetAnswers({})
    queue = iter(requests)
    connector = aiohttp.TCPConnector(limit=concurrency, ssl=tls if tls is not None else True)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=timeout_s)) as session:
        client = EdgeClient(session, base_url)

        async def worker() -> None:
            for credential, body in queue:
                answer = await client.post(credential, body)
                answers.statuses[answer.status] = answers.statuses.get(answer.status, 0) + 1
                if answer.status not in (200, 202):
                    said = answer.body if isinstance(answer.body, dict) else {}
                    reason = str(said.get("reason") or answer.status)[:100]
                    answers.refused[reason] = answers.refused.get(reason, 0) + 1
                    answers.details.setdefault(reason, str(said.get("error", ""))[:300])
                if on_answer is not None:
                    on_answer(1)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return answers


def fleet_requests(spec: CollectionSpec, credentials: Sequence[Credential], seed: int = 0,
                   chunk: int = 10_000) -> tuple[list[tuple[Credential, bytes]], dict[str, object]]:
    """One single-report request per enrolled device (perturbed in vectorised chunks) and the population's truth."""
    pseudonyms = np.fromiter((device_pseudonym(spec.name, c.device) for c in credentials), dtype=np.uint64,
                             count=len(credentials))
    truth = PopulationTruth(spec)
    requests: list[tuple[Credential, bytes]] = []
    for lo, (records, reports) in zip(range(0, len(credentials), chunk),
                                      fleet(spec, len(credentials), seed=seed, chunk=chunk,
                                            devices_of=lambda lo, n: pseudonyms[lo:lo + n]), strict=True):
        truth.add(records)
        requests += [(c, encode(one)) for c, one in zip(credentials[lo:lo + chunk], single_reports(reports),
                                                        strict=True)]
    return requests, truth.to_dict()


def send_fleet(spec: CollectionSpec, credentials: Sequence[Credential], base_url: str, *, seed: int = 0,
               concurrency: int = 64, tls: ssl.SSLContext | None = None,
               on_answer: Callable[[int], None] | None = None) -> tuple[SimulationResult, FleetAnswers]:
    """Every enrolled device's report sent through the edge at `base_url`; the run and its answers (`on_answer(1)`
    after each)."""
    requests, truth = fleet_requests(spec, credentials, seed)
    start = time.perf_counter()
    answers = asyncio.run(post_all(base_url, requests, concurrency, tls=tls, on_answer=on_answer))
    return (SimulationResult(truth, answers.acknowledged, len(requests), sum(len(b) for _, b in requests),
                             time.perf_counter() - start), answers)


@dataclass
class JoinedFleet:
    """How a simulated fleet joined: the credentials of the devices that accepted the spec, the spec they verified,
    and per refusal code how many devices refused it (`reasons`: one reason per code) or could not enrol (by
    status)."""

    credentials: list[Credential]
    spec: CollectionSpec | None
    refused: dict[str, int]
    reasons: dict[str, str]
    enrol_failures: dict[int, int]


async def join_fleet(base_url: str, collection: str, token: str, keys: TrustedKeys, policy: PrivacyPolicy | None,
                     devices: int, concurrency: int = 64, tls: ssl.SSLContext | None = None,
                     timeout_s: float = 60.0, on_device: Callable[[int], None] | None = None) -> JoinedFleet:
    """`devices` simulated devices joining like phones: each fetches the pointer and the spec, verifies both against
    `keys` (`ldpstream.device.trust`), holds the spec against `policy` (`ldpstream.device.policy.judge`, as a device
    that has accepted nothing before), and if it accepts enrols with `token`. Every device checks its
    pointer's signature; a spec's checks and verdict are computed once per distinct (pointer, spec, signature)
    bytes, since every device given the same bytes reaches the same result. `on_device(1)` after each device, joined
    or not."""
    joined = JoinedFleet([], None, {}, {}, {})
    judged: dict[tuple[bytes, bytes, bytes | None], tuple[CollectionSpec, Verdict | None]] = {}
    remaining = iter(range(devices))
    connector = aiohttp.TCPConnector(limit=concurrency, ssl=tls if tls is not None else True)
    base = base_url.rstrip("/")
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=timeout_s)) as session:

        async def fetch(path: str) -> tuple[bytes, bytes | None]:
            async with session.get(base + path) as response:
                if response.status != 200:
                    raise TrustError(f"http_{response.status}", f"GET {path}: {response.status}")
                header = response.headers.get("LDP-Signature")
                try:
                    block = block_from_header(header)
                except ValueError:
                    block = b""
                return await response.read(), block

        async def one() -> None:
            try:
                body, block = await fetch(f"/v1/collections/{collection}")
                pointer = check_pointer(body, block, keys, collection, Seen(), now_ms())
                spec_body, spec_block = await fetch(f"/v1/collections/{collection}/specs/{pointer.version}")
                seen = (body, spec_body, spec_block)
                if seen not in judged:  # identical bytes: every device would reach the same result
                    spec = check_spec(spec_body, spec_block, keys, pointer)
                    strategies = {h: strategy_from_bytes((await fetch(f"/v1/strategies/{h}"))[0], h)
                                  for h in pinned_strategies(spec)}
                    judged[seen] = spec, judge(spec, policy, {}, strategies) if policy is not None else None
                spec, verdict = judged[seen]
            except (TrustError, SpecError) as exc:
                code = getattr(exc, "code", "malformed_strategy")
                joined.refused[code] = joined.refused.get(code, 0) + 1
                joined.reasons.setdefault(code, str(exc))
                return
            if verdict is not None and not verdict.accepted:  # a device that refuses the spec never enrols
                joined.refused[verdict.code] = joined.refused.get(verdict.code, 0) + 1
                joined.reasons.setdefault(verdict.code, verdict.reason)
                return
            async with session.post(base + "/v1/enroll", json={"token": token, "collection": collection}) as answer:
                if answer.status != 201:
                    joined.enrol_failures[answer.status] = joined.enrol_failures.get(answer.status, 0) + 1
                    return
                credential = Credential.from_json(await answer.json())
            joined.spec = spec
            joined.credentials.append(credential)

        async def worker() -> None:
            for _ in remaining:
                await one()
                if on_device is not None:
                    on_device(1)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return joined
