"""A device that trains: one device's updates to one training job (docs/reference/protocol.md section 13).

`TrainingDevice.join(edge_url, job, token, trusted_keys, policy)` fetches the job's spec, verifies it against the
pinned spec keys, lets the app's policy judge it (`ldpstream.device.policy.judge_job`: a refusal charges nothing,
sends nothing, and the device never enrols), then enrols with the token as `job/JOB`.

`device.train(examples)` makes one update: (1) the current model descriptor is fetched (ETag, 304), verified against
the pinned online (pointer-role) keys and checked: its job and shape are the spec's (its announced size too, before
anything is fetched or allocated), its version never below one the device accepted (no rollback), not issued in the
future, not past its validity (a frozen coordinator), not done; (2) the version's bytes are fetched (at most the size
announced), checked against the descriptor's sha256 and decoded; (3) the device computes the mean gradient of its
examples at that version, clips and perturbs it with the job's mechanism (`ldpstream.contract.training`,
`ldpstream.mechanisms.gradients.device`); (4) the ledger charges the job's epsilon under `job/JOB` (its budget: epsilon
x max_rounds over the device's lifetime, the policy's daily cap) before (5) the update is queued in the outbox, which
`flush` sends to the edge like reports, with backoff. The examples go no further than step (3). A device sends at most
one update per model version (kept in its state across restarts).

State: the job's `CollectionState` under `job/JOB` keeps the credential, the spec bytes and block, and in `seen`
(version, sequence) the job's spec version and the highest model version accepted; the last model version an update
was made for is kept beside it (`job-JOB.json`).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ldpstream.contract.auth import Credential
from ldpstream.contract.clock import now_ms
from ldpstream.contract.signatures import SignatureError, TrustedKeys, spec_message, verify_block
from ldpstream.contract.snapshot import SnapshotError, decode_snapshot
from ldpstream.contract.training import (
    JOB_PREFIX,
    MAX_MODEL_BYTES,
    JobSpec,
    ModelDescriptor,
    TrainingWireError,
    clipped_update_vector,
    encode_update,
    model_message,
    parse_descriptor,
    parse_job,
)
from ldpstream.contract.validation import MAX_FUTURE_SKEW_MS
from ldpstream.device.edge_api import EdgeClient, EdgeError
from ldpstream.device.http import DEFAULT_TIMEOUT_S
from ldpstream.device.ledger import PrivacyLedger
from ldpstream.device.outbox import DELIVERED, HttpTransport, Outbox
from ldpstream.device.policy import PrivacyPolicy, judge_job
from ldpstream.device.sdk import DEFAULT_POLICY, SpecRefused
from ldpstream.device.state import DeviceState, StateError, write_atomically
from ldpstream.device.trust import Seen

if TYPE_CHECKING:
    import ssl

    from ldpstream.mechanisms.gradients.device import Uniforms

MODEL_CACHE = 4  # model versions kept in memory per process, by sha256 (verified bytes: devices may share them)
_models: OrderedDict[str, bytes] = OrderedDict()
_models_lock = threading.Lock()  # devices of one process (a simulated fleet) share the cache from threads


@dataclass(frozen=True)
class LedgerView:
    """How the ledger sees a job: one all-time window whose budget is what the job may cost (eps x max_rounds),
    charged eps per update; no memos."""

    name: str
    epsilon: float
    windows: tuple[str, ...] = ()
    privacy: None = None


def check_job(data: bytes, block: bytes | None, keys: TrustedKeys, job: str, seen: Seen) -> JobSpec:
    """The job spec of these served bytes: signed by a pinned spec key over `job/JOB@VERSION` (the version read
    from the bytes, then checked against them), the job asked for, not below the version accepted before.
    SpecRefused with the rule's code otherwise."""
    try:
        spec = parse_job(data)
    except TrainingWireError as exc:
        raise SpecRefused("malformed_job", str(exc)) from None
    try:
        verify_block(keys.spec, block, spec_message(spec.signed_key, data), spec.signed_key.decode())
    except SignatureError as exc:
        raise SpecRefused(exc.code, str(exc)) from None
    if spec.job_id != job:
        raise SpecRefused("wrong_job", f"the edge served job {spec.job_id!r} for {job!r}")
    if spec.version < seen.version:
        raise SpecRefused("rollback", f"job {job!r} version {spec.version} is older than version {seen.version}, "
                                      f"which the device accepted")
    return spec


def check_descriptor(data: bytes, block: bytes | None, keys: TrustedKeys, spec: JobSpec, seen: Seen,
                     clock_ms: int) -> ModelDescriptor:
    """A model descriptor the device may train on (protocol section 13.2, the codes in its order); SpecRefused."""
    try:
        verify_block(keys.pointer, block, model_message(data), f"model of {spec.job_id}")
        descriptor = parse_descriptor(data)
    except SignatureError as exc:
        raise SpecRefused(exc.code, str(exc)) from None
    except TrainingWireError as exc:
        raise SpecRefused("malformed_model", str(exc)) from None
    if descriptor.job != spec.job_id or descriptor.job_version != spec.version:
        raise SpecRefused("wrong_job", f"the model is of {descriptor.job}@{descriptor.job_version}, the device "
                                       f"trains {spec.job_id}@{spec.version}")
    if (descriptor.architecture != spec.model.architecture or descriptor.dims != spec.model.dims
            or descriptor.parameters != spec.parameters or descriptor.size != spec.model_bytes()):
        raise SpecRefused("wrong_shape", f"the model announced ({descriptor.architecture} {descriptor.dims}, "
                                         f"{descriptor.parameters} parameters, {descriptor.size} bytes) is not the "
                                         f"job's ({spec.model.architecture} {spec.model.dims}, {spec.parameters}, "
                                         f"{spec.model_bytes()} bytes)")
    if descriptor.version < seen.sequence:
        raise SpecRefused("rollback", f"model version {descriptor.version} is older than version {seen.sequence}, "
                                      f"which the device accepted")
    if descriptor.issued_ms > clock_ms + MAX_FUTURE_SKEW_MS:
        raise SpecRefused("issued_in_future", f"model version {descriptor.version} was issued in the future")
    if descriptor.expires_ms < clock_ms:
        raise SpecRefused("expired", f"model version {descriptor.version} expired at {descriptor.expires_ms} ms "
                                     f"(a frozen coordinator?)")
    if descriptor.done:
        raise SpecRefused("done", f"job {spec.job_id!r} is done (version {descriptor.version} is its last)")
    return descriptor


def examples_arrays(examples: Any) -> tuple[np.ndarray, np.ndarray]:
    """(x (n, d) float64, y (n,) int) from rows [{"features", "label"}] or a pair (x, y); ValueError otherwise."""
    if isinstance(examples, tuple) and len(examples) == 2:
        x, y = np.asarray(examples[0], dtype=np.float64), np.asarray(examples[1])
    elif isinstance(examples, Sequence) and all(isinstance(e, Mapping) for e in examples):
        try:
            x = np.asarray([e["features"] for e in examples], dtype=np.float64)
            y = np.asarray([e["label"] for e in examples])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"examples are rows {{'features': [...], 'label': class}}: {exc}") from None
    else:
        raise ValueError("examples are rows {'features': [...], 'label': class} or a pair (x, y)")
    if y.dtype.kind not in "iu" and not (y.dtype.kind == "f" and np.all(np.mod(y, 1) == 0)):
        raise ValueError("labels are class indices")
    return x, y.astype(np.intp)


class UpdateTransport(HttpTransport):
    """Sends a device's queued updates to `POST /v1/jobs/JOB/updates`, one a request, oldest first, with the
    retries, backoff and deadlines of reports (`HttpTransport`); each answer's verdict settles its update."""

    def __init__(self, base_url: str, credential: Credential, outbox: Outbox, job: str, **sending: Any) -> None:
        super().__init__(base_url, credential, outbox, **sending)
        self.path = f"/v1/jobs/{job}/updates"

    def flush(self) -> int:
        """Send the outbox's updates within `flush_timeout_s`; how many the edge took (admitted or had already).
        Stops early, the rest kept, when the edge stays unavailable through every retry or the time is up."""
        deadline = time.monotonic() + self.flush_timeout_s
        self.outbox.drop_stale()
        taken = 0
        for update in self.outbox.pending():
            try:
                body = update.read_bytes()
            except FileNotFoundError:
                continue
            verdicts = self._send(body, 1, deadline)
            if verdicts is None:
                break
            if verdicts[0] in DELIVERED:
                update.unlink(missing_ok=True)
                self.delivered[verdicts[0]] += 1
                taken += 1
            else:
                self.outbox.discard([update], verdicts[0])
        return taken


class TrainingDevice:
    """One device's updates to one training job (module docstring)."""

    def __init__(self, spec: JobSpec, client: EdgeClient, keys: TrustedKeys, state: DeviceState,
                 ledger: PrivacyLedger, transport: UpdateTransport, policy: PrivacyPolicy | None,
                 source: Uniforms, clock: Callable[[], int]) -> None:
        self.spec, self.client, self.keys, self.state = spec, client, keys, state
        self.ledger, self.transport, self.policy, self.source, self.clock = ledger, transport, policy, source, clock
        self.key = spec.key
        self._etag: str | None = None
        self._descriptor: ModelDescriptor | None = None

    @classmethod
    def join(cls, edge_url: str, job: str, token: str | None, trusted_keys: TrustedKeys | Mapping[str, Any],
             policy: PrivacyPolicy | None = DEFAULT_POLICY, state_dir: str | Path = ".ldpstream-device", *,
             rng: np.random.Generator | None = None, source: Uniforms | None = None,
             tls: ssl.SSLContext | None = None, clock: Callable[[], int] = now_ms,
             outbox: Mapping[str, Any] | None = None, delivery: Mapping[str, Any] | None = None) -> TrainingDevice:
        """The device of training job `job` at the edge `edge_url`: its spec verified against `trusted_keys` and
        accepted by `policy`, then (only then) enrolled with `token` (once). `source` (else `rng`, else a fresh
        generator) is its randomness (`ldpstream.mechanisms.gradients.device.Uniforms`). SpecRefused (nothing charged
        or sent) when the job breaks a trust or policy rule; EdgeError when the edge refuses or cannot be reached."""
        from ldpstream.mechanisms.gradients.device import GeneratorUniforms

        keys = trusted_keys if isinstance(trusted_keys, TrustedKeys) else TrustedKeys.from_json(trusted_keys)
        state = DeviceState.open(state_dir)
        try:
            ledger = PrivacyLedger.open(state.ledger_path)
        except (ValueError, OSError) as exc:
            raise StateError(f"the privacy ledger {state.ledger_path} is damaged or unreadable ({exc})") from None
        sending = dict(delivery or {})
        client = EdgeClient(edge_url, sending.get("timeout_s", DEFAULT_TIMEOUT_S), tls=tls)
        key = JOB_PREFIX + job
        mine = state.of(key)
        fetched = client.job(job)
        try:
            spec = check_job(fetched.body, fetched.block, keys, job, mine.seen)
            if policy is not None:
                verdict = judge_job(spec, policy, ledger.commitments)
                if not verdict.accepted:
                    raise SpecRefused(verdict.code, verdict.reason)
                ledger.commit(key, verdict.commitment)
        except SpecRefused as refused:
            mine.verdict = {"accepted": False, "code": refused.code, "reason": str(refused)}
            state.save()
            raise
        mine.seen = Seen(spec.version, mine.seen.sequence if mine.seen.version == spec.version else 0)
        mine.spec, mine.spec_block = fetched.body, fetched.block
        mine.verdict = {"accepted": True, "code": "", "reason": ""}
        if mine.credential is None:
            if token is None:
                raise EdgeError(0, "no_token", f"the device has not joined {key!r}: an enrolment token is needed")
            mine.credential = client.enroll(token, key)
        state.save()
        transport = UpdateTransport(edge_url, mine.credential, Outbox(state.outbox_path(key), **(outbox or {})), job,
                                    tls=tls, **sending)
        randomness = source if source is not None else GeneratorUniforms(rng or np.random.default_rng())
        return cls(spec, client, keys, state, ledger, transport, policy, randomness, clock)

    @property
    def _sent_path(self) -> Path:
        return self.state.directory / f"job-{self.spec.job_id}.json"

    def _last_sent(self) -> int:
        try:
            return int(json.loads(self._sent_path.read_text())["version"])
        except (OSError, ValueError, KeyError, TypeError):
            return -1

    def model(self) -> tuple[ModelDescriptor, np.ndarray]:
        """The current model version, verified (module docstring, steps 1-2): its descriptor and parameters.
        SpecRefused with the rule's code; EdgeError when the edge does not answer."""
        mine = self.state.of(self.key)
        fetched = self.client.model(self.spec.job_id, self._etag if self._descriptor is not None else None)
        if fetched is not None:
            descriptor = check_descriptor(fetched.body, fetched.block, self.keys, self.spec, mine.seen, self.clock())
            self._descriptor, self._etag = descriptor, fetched.etag
        if self._descriptor is None:
            raise EdgeError(304, "bad_answer", "the edge answered 304 to a device that holds no model")
        descriptor = self._descriptor
        if descriptor.expires_ms < self.clock():  # a kept descriptor ages too
            raise SpecRefused("expired", f"model version {descriptor.version} expired")
        data = _models.get(descriptor.sha256)
        if data is None:
            if descriptor.size > MAX_MODEL_BYTES:
                raise SpecRefused("too_large", f"a model of {descriptor.size} bytes (at most {MAX_MODEL_BYTES})")
            data = self.client.model_bytes(self.spec.job_id, descriptor.version, descriptor.size)
            if hashlib.sha256(data).hexdigest() != descriptor.sha256:
                raise SpecRefused("hash_mismatch", f"model version {descriptor.version}'s bytes are not the ones "
                                                   f"its signed descriptor names")
            with _models_lock:
                _models[descriptor.sha256] = data
                while len(_models) > MODEL_CACHE:
                    _models.popitem(last=False)
        try:
            snapshot = decode_snapshot(data)
        except SnapshotError as exc:
            raise SpecRefused("malformed_model", str(exc)) from None
        if snapshot.version != descriptor.version or list(snapshot.dims) != self.spec.model.dims:
            raise SpecRefused("wrong_shape", "the model's bytes are not the version and shape its descriptor names")
        if descriptor.version > mine.seen.sequence:
            mine.seen = Seen(mine.seen.version, descriptor.version)
            self.state.save()
        return descriptor, snapshot.params

    def train(self, examples: Any) -> bytes | None:
        """One update from the device's own `examples` (rows {"features", "label"} or a pair (x, y)) at the current
        model version, charged and queued (module docstring); the encoded update, or None when the device already
        made one for this version. SpecRefused (nothing charged: the job is refused, done, frozen, or the model is
        not believed), BudgetExceeded (the ledger's caps), ValueError (malformed examples), EdgeError (no answer)."""
        descriptor, theta = self.model()
        if descriptor.version <= self._last_sent():
            return None
        x, y = examples_arrays(examples)
        view = LedgerView(self.key, self.spec.epsilon * self.spec.max_rounds)
        now = self.clock()
        self.ledger.check(view, now, self.spec.epsilon, policy=self.policy, now_ms=now)  # type: ignore[arg-type]
        report = self._perturb(clipped_update_vector(self.spec, theta, x, y))
        self.ledger.charge(view, now, self.spec.epsilon, policy=self.policy, now_ms=now)  # type: ignore[arg-type]
        message = encode_update(self.spec.job_id, self.spec.version, descriptor.version, report)
        self.transport.enqueue(message)
        write_atomically(self._sent_path, json.dumps({"version": descriptor.version}).encode())
        return message

    def _perturb(self, vector: np.ndarray) -> dict[str, np.ndarray]:
        from ldpstream.mechanisms.gradients.device import privunitg_report, projunit_report

        m = self.spec.mechanism
        if m.name == "projunit":
            return projunit_report(vector, m.k or 0, m.p, m.q, self.source)
        return privunitg_report(vector, m.p, m.q, self.source)

    def flush(self) -> int:
        """Send the queued updates to the edge (the outbox's rules); how many the edge took."""
        return self.transport.flush()

    def stats(self) -> dict[str, Any]:
        """What became of this device's updates (`HttpTransport.stats`)."""
        return self.transport.stats()
