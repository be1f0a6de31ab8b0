"""Outside bytes into the training codecs (`ldpstream.contract.training`): whatever they are, a job spec, a model
descriptor or an update decodes or raises TrainingWireError with a code, nothing else."""

from __future__ import annotations

import numpy as np
import pytest

from ldpstream.contract.training import (
    TrainingWireError,
    decode_update,
    encode_update,
    job_from_mapping,
    parse_descriptor,
    parse_job,
)

JOB = {"job_id": "fuzz", "version": 1, "model": {"architecture": "mlp", "dims": [3, 4, 2]}, "parameters": 26,
       "mechanism": {"name": "privunitg", "p": 0.7, "q": 0.1}, "clip": 1.0, "epsilon": 4.0, "max_rounds": 1,
       "batch_size": 2, "max_versions": 3, "lr": 1.0, "version_validity_s": 60, "max_examples": 5}


def test_random_and_mutated_bytes_are_refused_with_a_code() -> None:
    spec = job_from_mapping(JOB)
    good = encode_update("fuzz", 1, 0, {"value": np.zeros((1, 26), dtype="<f4")})
    samples = [spec.canonical_json(), good, b'{"done":true}', b"[" * 5000, b"\x00" * 70_000]
    rng = np.random.default_rng(0)
    for _ in range(300):
        base = bytearray(samples[rng.integers(len(samples))])
        if base:
            for _ in range(rng.integers(1, 4)):
                base[rng.integers(len(base))] = rng.integers(256)
        data = bytes(base[: rng.integers(len(base) + 1)])
        for decode in (parse_job, parse_descriptor, lambda b: decode_update(b, spec)):
            try:
                decode(data)
            except TrainingWireError as exc:
                assert exc.code


@pytest.mark.parametrize(("change", "fragment"), [
    ({"parameters": 25}, "has 26 parameters"), ({"job_id": "Job/x"}, "job_id"),
    ({"mechanism": {"name": "hm", "p": 0.5, "q": 0.5}}, "not one devices run"),
    ({"mechanism": {"name": "projunit", "p": 0.5, "q": 0.5}}, "projunit takes k"),
    ({"model": {"architecture": "softmax", "dims": [3, 4, 2]}}, "softmax takes"),
    ({"lr": float("inf")}, "must be finite"), ({"clip": float("inf")}, "must be finite"),
])
def test_inconsistent_job_specs_are_refused(change: dict[str, object], fragment: str) -> None:
    with pytest.raises(TrainingWireError, match=fragment):
        job_from_mapping({**JOB, **change})
