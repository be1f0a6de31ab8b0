"""What devices and servers share about training jobs: the job spec, the signed model descriptor, the update's wire.

docs/reference/protocol.md section 13 is the contract. A `JobSpec` is canonical JSON signed by a spec key over
`spec_message("job/JOB@VERSION", bytes)`; a `ModelDescriptor` (the current model version: its number, the sha256
and length of its bytes, the model's shape, its validity) is canonical JSON signed by an online (pointer-role) key
over `MODEL_DOMAIN` + bytes; an update is the msgpack array `[1, job, job_version, model_version, columns]` whose
columns are the job's mechanism's report, one row. Every decoder here reads outside bytes: it returns or raises
`TrainingWireError`, nothing else.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import asdict, dataclass
from typing import Annotated, Any, Literal

import msgspec
import numpy as np

from ldpstream.contract.networks import check_dims, make_network
from ldpstream.contract.spec import Shuffle, SpecError
from ldpstream.contract.topics import SHUFFLED_UPDATES_TOPIC, UPDATES_TOPIC, job_raw_topic
from ldpstream.contract.untrusted import rejecting
from ldpstream.contract.wire import ITEMSIZE, WireColumn, encode_column

JOB_PREFIX = "job/"  # a job's key among collections (tokens, ledger, policy): no collection name holds "/"
MODEL_DOMAIN = b"ldpstream model version signature v1\x00"
MAX_JOB_SPEC_BYTES = 64 * 1024
MAX_DESCRIPTOR_BYTES = 4096
MAX_UPDATE_BYTES = 64 * 1024 + 256
MAX_MODEL_BYTES = 64 * 1024 * 1024  # a device never fetches a version longer than this, whatever is announced
UPDATE_WIRE_VERSION = 1
DEVICE_MECHANISMS = ("privunitg", "projunit")  # the mechanisms section 13.5 defines on devices
JOB_ID = re.compile(r"^[a-z][a-z0-9_-]{0,58}$")  # a collection name short enough for its key job/JOB
MAX_INT = 2**53  # JSON integers every SDK reads exactly

PositiveFloat = Annotated[float, msgspec.Meta(gt=0)]
Count = Annotated[int, msgspec.Meta(ge=1, le=MAX_INT)]


class TrainingWireError(ValueError):
    """Outside bytes that are not a valid job spec, model descriptor or update: `code` names the rule."""

    def __init__(self, message: str, code: str = "malformed") -> None:
        super().__init__(message)
        self.code = code


class ModelShape(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    architecture: Literal["softmax", "mlp"]
    dims: list[int]


class MechanismSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    name: str
    p: float
    q: float
    k: int | None = None


class JobShuffle(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A shuffled job (section 13.7): the central `delta` its accounting is stated at and the fewest updates of a
    model version the shuffler holds before it releases B of them (`min_batch`, at most `batch_size`); the ranges are
    a shuffled collection's (`ldpstream.contract.spec.Shuffle`)."""

    delta: float
    min_batch: int


class JobSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """A training job (protocol section 13.1, which defines each field)."""

    job_id: str
    version: Count
    model: ModelShape
    parameters: Count
    mechanism: MechanismSpec
    clip: PositiveFloat
    epsilon: PositiveFloat
    max_rounds: Count
    batch_size: Count
    max_versions: Count
    lr: PositiveFloat
    version_validity_s: Count
    max_examples: Count
    momentum: Annotated[float, msgspec.Meta(ge=0, lt=1)] = 0.0
    expected_population: Count | None = None
    shuffle: JobShuffle | None = None

    @property
    def key(self) -> str:
        """`job/JOB`: the job's name among collections (enrolment, ledger, policy)."""
        return JOB_PREFIX + self.job_id

    @property
    def signed_key(self) -> bytes:
        """`job/JOB@VERSION`: what the spec signature binds the bytes to."""
        return f"{self.key}@{self.version}".encode()

    def canonical_json(self) -> bytes:
        """The bytes that are signed and served: sorted keys, no spaces."""
        return canonical(msgspec.to_builtins(self))

    def model_bytes(self) -> int:
        """The length of a version's bytes (section 13.3)."""
        return snapshot_length(self.model.architecture, self.model.dims, self.parameters)


def edge_topic(spec: JobSpec) -> tuple[str, bool]:
    """Where the edge writes the job's admitted updates, and whether keyed by the device's pseudonym: `ldp.jobs.updates`
    keyed, or for a shuffled job its raw topic without a key (any partition: nothing ties it to a device)."""
    return (UPDATES_TOPIC, True) if spec.shuffle is None else (job_raw_topic(spec.job_id), False)


def coordinator_topic(spec: JobSpec) -> str:
    """The topic the job's coordinator reads: what the edge admitted, or for a shuffled job what the shuffler
    released (`ldp.jobs.shuffled`, shared by shuffled jobs)."""
    return UPDATES_TOPIC if spec.shuffle is None else SHUFFLED_UPDATES_TOPIC


def job_central(spec: JobSpec) -> tuple[float, float, str] | None:
    """The central (epsilon, delta) of one model version of a shuffled job and the bound that gives it; None for a
    job that is not shuffled.

    The shuffler releases exactly B of a version's updates, a uniform subset of those it held, in a uniform order
    (`ldpstream.shuffler`): n = B. The batch is one model version's, not a window's, because every update names its
    model version in the clear: updates of other versions hide nobody's. Which B were chosen does not depend on what
    the updates hold, so a device's update is either absent or one of B shuffled eps-LDP reports. PrivUnitG and
    ProjUnit are eps-LDP vector randomizers, for which the general bounds hold: FMT21 ("Hiding among the clones",
    Thm 3.2 numerically, Thm 3.1 in closed form) bound a shuffle of any eps0-LDP randomizer's outputs.
    `ldpstream.mechanisms.shuffle.central_epsilon` takes the tightest. Per version: a device in r versions composes
    r of them."""
    if spec.shuffle is None:
        return None
    from ldpstream.mechanisms.shuffle import central_epsilon  # scipy, lazily: devices never call this

    return central_epsilon(spec.epsilon, spec.batch_size, spec.shuffle.delta)


def central_fields(spec: JobSpec) -> dict[str, float | None]:
    """What `ldp train publish` and `ldp train status` show of `job_central`: `central_epsilon` and `delta` (None for a
    job that is not shuffled)."""
    central = job_central(spec)
    return {"central_epsilon": None if central is None else central[0],
            "delta": None if central is None else central[1]}


def canonical(value: Any) -> bytes:
    """Canonical JSON: sorted keys, no spaces, UTF-8."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def snapshot_length(architecture: str, dims: list[int], parameters: int) -> int:
    """4 + 3 + len(architecture) + 1 + 4 m + 16 + 8 P (section 13.3, float64 parameters)."""
    return 4 + 3 + len(architecture) + 1 + 4 * len(dims) + 16 + 8 * parameters


def check_job(spec: JobSpec) -> JobSpec:
    """The spec if its fields agree with each other; TrainingWireError (code `malformed_job`) otherwise."""
    def bad(why: str) -> TrainingWireError:
        return TrainingWireError(f"job spec {spec.job_id[:64]!r}: {why}", "malformed_job")

    if not JOB_ID.match(spec.job_id):
        raise bad("job_id must match [a-z][a-z0-9_-]{0,58}")
    try:
        check_dims(spec.model.architecture, tuple(spec.model.dims))
        net = make_network(spec.model.architecture, tuple(spec.model.dims))
    except ValueError as exc:
        raise bad(str(exc)) from None
    if net.size != spec.parameters:
        raise bad(f"{spec.model.architecture} {spec.model.dims} has {net.size} parameters, the spec says "
                  f"{spec.parameters}")
    mech = spec.mechanism
    if mech.name not in DEVICE_MECHANISMS:
        raise bad(f"mechanism {mech.name!r} is not one devices run (known: {list(DEVICE_MECHANISMS)})")
    if (mech.k is None) != (mech.name == "privunitg") or (mech.k is not None and not 1 <= mech.k <= 1 << 20):
        raise bad("projunit takes k (1 .. 2^20), privunitg no k")
    if mech.name == "privunitg" and 4 * spec.parameters > MAX_UPDATE_BYTES - 256:
        raise bad(f"a privunitg update of {spec.parameters} float32 values passes the edge's {MAX_UPDATE_BYTES} bytes: "
                  f"use projunit (k values and a seed, whatever the model's size)")
    if not (0 < mech.p < 1 and 0 < mech.q < 1):
        raise bad(f"cap parameters p, q must lie in (0, 1), got {mech.p}, {mech.q}")
    if not math.isfinite(spec.epsilon) or spec.epsilon > 100:
        raise bad(f"epsilon {spec.epsilon} out of range")
    if not (math.isfinite(spec.clip) and math.isfinite(spec.lr)):  # a YAML .inf: no JSON could carry it
        raise bad(f"clip {spec.clip} and lr {spec.lr} must be finite")
    if spec.shuffle is not None:
        try:  # a shuffled collection's ranges, checked by its own record
            Shuffle(delta=spec.shuffle.delta, min_batch=spec.shuffle.min_batch)
        except SpecError as exc:
            raise bad(f"shuffle: {exc}") from None
        if spec.shuffle.min_batch > spec.batch_size:
            raise bad(f"shuffle.min_batch {spec.shuffle.min_batch} is above batch_size {spec.batch_size}: the "
                      f"shuffler releases B updates per version")
    return spec


@rejecting(TrainingWireError, "malformed job spec")
def parse_job(data: bytes) -> JobSpec:
    """The job spec these outside bytes hold (at most 64 KiB); TrainingWireError otherwise."""
    if len(data) > MAX_JOB_SPEC_BYTES:
        raise TrainingWireError(f"job spec of {len(data)} bytes (at most {MAX_JOB_SPEC_BYTES})", "too_large")
    try:
        spec = msgspec.json.decode(data, type=JobSpec)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:  # msgspec: a string that is not UTF-8
        raise TrainingWireError(f"not a job spec: {exc}", "malformed_job") from None
    return check_job(spec)


def job_from_mapping(data: Any) -> JobSpec:
    """A job spec from a parsed YAML `job:` section; TrainingWireError with the reason otherwise."""
    try:
        spec = msgspec.convert(data, type=JobSpec)
    except msgspec.ValidationError as exc:
        raise TrainingWireError(f"not a job spec: {exc}", "malformed_job") from None
    return check_job(spec)


@dataclass(frozen=True)
class ModelDescriptor:
    """The current model version of a job (section 13.2)."""

    job: str
    job_version: int
    version: int
    architecture: str
    dims: list[int]
    parameters: int
    sha256: str
    size: int
    issued_ms: int
    expires_ms: int
    done: bool

    def canonical_json(self) -> bytes:
        return canonical(asdict(self))


def descriptor_etag(body: bytes) -> str:
    """A descriptor's ETag: the quoted sha256 (hex) of its exact bytes (a version re-issued has another)."""
    return f'"{hashlib.sha256(body).hexdigest()}"'


def model_message(descriptor_bytes: bytes) -> bytes:
    """What a model descriptor's signature covers: the domain, then the descriptor's exact bytes."""
    return MODEL_DOMAIN + descriptor_bytes


def describe_version(spec: JobSpec, version: int, data: bytes, issued_ms: int, done: bool) -> ModelDescriptor:
    """The descriptor of version `version` of `spec`, whose bytes are `data`, issued at `issued_ms`."""
    return ModelDescriptor(spec.job_id, spec.version, version, spec.model.architecture, list(spec.model.dims),
                           spec.parameters, hashlib.sha256(data).hexdigest(), len(data), issued_ms,
                           issued_ms + 1000 * spec.version_validity_s, done)


_DESCRIPTOR_FIELDS = {"job": str, "job_version": int, "version": int, "architecture": str, "dims": list,
                      "parameters": int, "sha256": str, "size": int, "issued_ms": int, "expires_ms": int, "done": bool}


@rejecting(TrainingWireError, "malformed model descriptor")
def parse_descriptor(data: bytes) -> ModelDescriptor:
    """The descriptor these (verified) bytes hold; TrainingWireError `malformed_model` otherwise."""
    if len(data) > MAX_DESCRIPTOR_BYTES:
        raise TrainingWireError(f"model descriptor of {len(data)} bytes", "too_large")
    try:
        raw = json.loads(data)
    except (ValueError, RecursionError):  # RecursionError: nesting deeper than the interpreter's stack
        raise TrainingWireError("the model descriptor is not JSON", "malformed_model") from None
    if not isinstance(raw, dict) or set(raw) != set(_DESCRIPTOR_FIELDS):
        raise TrainingWireError("the model descriptor lacks or adds fields", "malformed_model")
    for name, kind in _DESCRIPTOR_FIELDS.items():
        value = raw[name]
        if not isinstance(value, kind) or (kind is int and (isinstance(value, bool) or not 0 <= raw[name] <= MAX_INT)):
            raise TrainingWireError(f"model descriptor field {name!r} is not a valid {kind.__name__}",
                                    "malformed_model")
    if not all(isinstance(w, int) and not isinstance(w, bool) and 1 <= w <= 1 << 20 for w in raw["dims"]):
        raise TrainingWireError("model descriptor dims are not widths", "malformed_model")
    if not re.fullmatch(r"[0-9a-f]{64}", raw["sha256"]):
        raise TrainingWireError("model descriptor sha256 is not 64 hex digits", "malformed_model")
    return ModelDescriptor(**raw)


class UpdateEnvelope(msgspec.Struct, array_like=True, frozen=True):
    version: int
    job: str
    job_version: int
    model_version: int
    columns: list[WireColumn]


@dataclass(frozen=True)
class Update:
    """A decoded update: one device's report for one model version of one job."""

    job: str
    job_version: int
    model_version: int
    columns: dict[str, np.ndarray]


_encoder = msgspec.msgpack.Encoder()
_update_decoder = msgspec.msgpack.Decoder(UpdateEnvelope)


def report_columns(spec: JobSpec) -> dict[str, tuple[str, int]]:
    """The update's columns for the spec's mechanism: name -> (dtype, width)."""
    if spec.mechanism.name == "projunit":
        k = min(spec.mechanism.k or 0, 1 << (spec.parameters - 1).bit_length())
        return {"seed": ("<u8", 1), "value": ("<f4", k)}
    return {"value": ("<f4", spec.parameters)}


def encode_update(job: str, job_version: int, model_version: int, report: dict[str, np.ndarray]) -> bytes:
    """The msgpack bytes of one update (section 13.4): the mechanism's report columns, sorted by name."""
    columns = [encode_column(name, np.asarray(values).reshape(-1)) for name, values in sorted(report.items())]
    return _encoder.encode(UpdateEnvelope(UPDATE_WIRE_VERSION, job, job_version, model_version, columns))


@rejecting(TrainingWireError, "malformed update")
def decode_update(data: bytes, spec: JobSpec) -> Update:
    """The update these outside bytes hold, its columns checked against `spec`'s mechanism (names, dtypes,
    widths) and finite; TrainingWireError with code `malformed`, `wrong_shape`, `not_finite` or `too_large`."""
    if len(data) > MAX_UPDATE_BYTES:
        raise TrainingWireError(f"an update of {len(data)} bytes", "too_large")
    try:
        env = _update_decoder.decode(data)
    except msgspec.DecodeError as exc:
        raise TrainingWireError(f"not an update: {exc}", "malformed") from None
    if env.version != UPDATE_WIRE_VERSION:
        raise TrainingWireError(f"unknown update version {env.version}", "malformed")
    expected = report_columns(spec)
    if [c.name for c in env.columns] != sorted(expected):
        raise TrainingWireError(f"update columns {[c.name for c in env.columns]}, expected {sorted(expected)}",
                                "wrong_shape")
    columns: dict[str, np.ndarray] = {}
    for col in env.columns:
        dtype, width = expected[col.name]
        if col.dtype != dtype or len(col.data) != ITEMSIZE[dtype] * width:
            raise TrainingWireError(f"column {col.name!r}: {col.dtype} of {len(col.data)} bytes, expected {width} "
                                    f"{dtype}", "wrong_shape")
        values = np.frombuffer(col.data, dtype=dtype)
        if values.dtype.kind == "f" and not np.isfinite(values).all():
            raise TrainingWireError(f"column {col.name!r} holds NaN or infinities", "not_finite")
        columns[col.name] = values.reshape(1, width) if width > 1 or col.name == "value" else values
    return Update(env.job, env.job_version, env.model_version, columns)


def clipped_update_vector(spec: JobSpec, theta: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Section 9.5 steps 1-2: the mean cross-entropy gradient of the first `max_examples` rows at theta, scaled to
    L2 norm <= clip, divided by clip (a vector of the unit ball). ValueError for rows of the wrong shape or labels."""
    net = make_network(spec.model.architecture, tuple(spec.model.dims))
    x = np.asarray(x, dtype=np.float64)[: spec.max_examples]
    y = np.asarray(y)[: spec.max_examples]
    if x.ndim != 2 or x.shape[0] == 0 or x.shape[1] != net.features or y.shape != (x.shape[0],):
        raise ValueError(f"examples must be n >= 1 rows of {net.features} features with a label each, got "
                         f"{x.shape} and {y.shape}")
    if not np.isfinite(x).all():
        raise ValueError("features must be finite")
    g = net.gradients(np.asarray(theta, dtype=np.float64), x, y).sum(axis=0) / x.shape[0]
    norm = math.sqrt(float(np.dot(g, g)))
    if norm > spec.clip:
        g = g * (spec.clip / norm)
    return np.asarray(g / spec.clip, dtype=np.float64)
