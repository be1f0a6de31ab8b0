"""The SGD wire formats: gradient envelopes on `ldp.sgd.gradients`, model versions on `ldp.sgd.models`.

Both are msgspec msgpack arrays led by their version, with numbers as little-endian numpy bytes (as
`ldpstream.contract.wire`), so that decoding a message is a few `np.frombuffer` calls.

    GradientEnvelope = [version, job, model_version, devices, columns]
    job            the training job's id
    model_version  the model version t the devices computed their gradients at
    devices        uint64 LE device pseudonyms, one per row (never a raw identifier)
    columns        [WireColumn] = [[name, dtype, data]]: the job's vector mechanism's report columns, flat
                   (the mechanism's report schema gives each row's width)

    ModelEnvelope = [version, job, t, params, projection_seed, job_spec, done, stop_reason]
    params         float64 LE model parameters at version t (alpha in R^r with dimension reduction, else beta)
    job_spec       the TrainingJob as JSON, so that a device needs nothing but this message
    done           the final version: devices stop; stop_reason says why ('' while training)

A gradient envelope holds one or many devices (a fleet simulator sends a group per message). Evolution is
append-only, as in `ldpstream.contract.wire`. Only mechanism output can be encoded: `encode_gradients` takes a
`GradientBatch`, which only `ldpstream.sgd.devices` makes from its vector mechanism's `perturb`. The decoders
take outside bytes: whatever they are, they return or raise `WireError`, nothing else
(`ldpstream.contract.untrusted.rejecting`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import msgspec
import numpy as np

from ldpstream.contract.untrusted import rejecting
from ldpstream.contract.wire import (
    ALLOWED_DTYPES,
    Codec,
    SealedBatch,
    WireColumn,
    WireError,
    column_from_bytes,
    encode_column,
)
from ldpstream.mechanisms.base import Reports
from ldpstream.sgd.training import TrainingJob

GRADIENT_WIRE_VERSION = 1
MODEL_WIRE_VERSION = 1


class GradientEnvelope(msgspec.Struct, array_like=True, frozen=True):
    version: int
    job: str
    model_version: int
    devices: bytes
    columns: list[WireColumn]


class ModelEnvelope(msgspec.Struct, array_like=True, frozen=True):
    version: int
    job: str
    t: int
    params: bytes
    projection_seed: int
    job_spec: str
    done: bool
    stop_reason: str


@dataclass(frozen=True)
class GradientBatch(SealedBatch):
    """The perturbed gradients of n devices for one job and model version, ready to encode.

    Made only by `ldpstream.sgd.devices` (the vector mechanism's `perturb` output), never from raw gradients.
    """

    made_by: ClassVar[str] = "ldpstream.sgd.devices"
    _seal: ClassVar[object] = object()

    job: str
    model_version: int
    devices: np.ndarray
    reports: Reports
    _token: object = None


def gradient_batch(job: str, model_version: int, devices: np.ndarray, reports: Reports) -> GradientBatch:
    """For `ldpstream.sgd.devices` only: wrap a vector mechanism's reports as an encodable batch."""
    return GradientBatch(job, model_version, devices, reports, GradientBatch._seal)


@dataclass(frozen=True)
class DecodedGradients:
    """A decoded gradient envelope: flat report columns (the job's mechanism's schema gives the row widths)."""

    job: str
    model_version: int
    devices: np.ndarray
    columns: dict[str, np.ndarray]

    def __len__(self) -> int:
        return len(self.devices)


@dataclass(frozen=True)
class ModelVersion:
    """Model version t of a job, as published on `ldp.sgd.models`."""

    job: TrainingJob
    t: int
    params: np.ndarray
    done: bool = False
    stop_reason: str = ""


GRADIENTS = Codec(GradientEnvelope, GRADIENT_WIRE_VERSION)
MODELS = Codec(ModelEnvelope, MODEL_WIRE_VERSION)


def encode_gradients(batch: GradientBatch) -> bytes:
    """The msgpack bytes of one gradient envelope holding the whole batch."""
    if not isinstance(batch, GradientBatch):
        raise TypeError("only a GradientBatch (mechanism output) can be encoded")
    columns = [encode_column(name, values) for name, values in sorted(batch.reports.items())]
    return GRADIENTS.encode(GradientEnvelope(GRADIENT_WIRE_VERSION, batch.job, batch.model_version,
                                            np.ascontiguousarray(batch.devices, dtype="<u8").tobytes(), columns))


@rejecting(WireError, "malformed envelope")
def decode_gradients(data: bytes) -> DecodedGradients:
    """Decode one gradient message; WireError with the reason if it is not a well-formed envelope."""
    env = GRADIENTS.decode(data)
    devices = column_from_bytes(env.devices, "<u8", "devices")
    if len(devices) == 0:
        raise WireError("empty envelope")
    columns: dict[str, np.ndarray] = {}
    for col in env.columns:
        if col.dtype not in ALLOWED_DTYPES:
            raise WireError(f"column {col.name!r} has dtype {col.dtype!r}")
        if col.name in columns:
            raise WireError(f"column {col.name!r} repeated")
        columns[col.name] = column_from_bytes(col.data, col.dtype, col.name)
    return DecodedGradients(env.job, env.model_version, devices, columns)


def encode_model(model: ModelVersion) -> bytes:
    """The msgpack bytes of one model version."""
    params = np.ascontiguousarray(model.params, dtype="<f8").tobytes()
    return MODELS.encode(ModelEnvelope(MODEL_WIRE_VERSION, model.job.job_id, model.t, params,
                                         model.job.projection_seed, job_spec(model.job), model.done,
                                         model.stop_reason))


@rejecting(WireError, "malformed model")
def decode_model(data: bytes) -> ModelVersion:
    """Decode one model message; WireError with the reason if it is malformed or its job spec is invalid."""
    env = MODELS.decode(data)
    try:
        job = TrainingJob.model_validate_json(env.job_spec)
    except ValueError as exc:
        raise WireError(f"invalid job spec: {exc}") from exc
    if job.job_id != env.job or job.projection_seed != env.projection_seed:
        raise WireError(f"model of job {env.job!r} carries the spec of job {job.job_id!r} or another projection")
    params = column_from_bytes(env.params, "<f8", "params")
    if params.shape != (job.gradient_dims,) or not np.isfinite(params).all() or env.t < 0:
        raise WireError(f"model version {env.t}: expected {job.gradient_dims} finite parameters")
    return ModelVersion(job, env.t, params, env.done, env.stop_reason)


def job_spec(job: TrainingJob) -> str:
    """A job's canonical JSON (the form on the wire and in the checkpoint)."""
    return job.model_dump_json(by_alias=True)
