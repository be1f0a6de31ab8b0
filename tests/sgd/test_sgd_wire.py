"""The SGD wire formats: golden bytes, append-only evolution, reasons for bad messages, mechanism output only."""

from __future__ import annotations

import msgspec
import numpy as np
import pytest

from ldpstream.contract.wire import WireError
from ldpstream.sgd.devices import perturb_gradients
from ldpstream.sgd.training import Trainer, TrainingJob, gradient_mechanism
from ldpstream.sgd.wire import (
    GradientBatch,
    ModelVersion,
    decode_gradients,
    decode_model,
    encode_gradients,
    encode_model,
    gradient_batch,
)

JOB = TrainingJob(job_id="golden", model="logistic", dims=2, epsilon=1.0, batch_size=4, projection_seed=7)

# encode_gradients(golden_gradients()) and encode_model(golden_model()) under wire version 1: a change here
# breaks every device and coordinator in the field.
GOLDEN_GRADIENTS_V1 = bytes.fromhex(
    "9501a6676f6c64656e03c410050000000000000000000000000000809293a5696e646578a33c6938c41001000000000000000000"
    "00000000000093a576616c7565a33c6638c410000000000000f83f000000000000f8bf"
)
GOLDEN_MODEL_V1 = bytes.fromhex(
    "9801a6676f6c64656e0cc410000000000000d03f00000000000000c007d9f57b226a6f625f6964223a22676f6c64656e222c226d6f"
    "64656c223a226c6f676973746963222c2264696d73223a322c226c616d626461223a302e303030312c22657073696c6f6e223a312e"
    "302c226d656368616e69736d223a22686d222c2262617463685f73697a65223a342c2265787065637465645f706f70756c6174696f"
    "6e223a6e756c6c2c2267616d6d6130223a312e302c22726564756365645f64696d73223a6e756c6c2c2270726f6a656374696f6e5f"
    "73656564223a372c226d61785f697465726174696f6e73223a6e756c6c2c22746f6c6572616e6365223a302e302c226d61785f7374"
    "616c656e657373223a307dc3ae6d61785f697465726174696f6e73"
)


def golden_gradients() -> GradientBatch:
    return gradient_batch("golden", 3, np.array([5, 2**63], dtype=np.uint64),
                          {"index": np.array([1, 0]), "value": np.array([1.5, -1.5])})


def golden_model() -> ModelVersion:
    return ModelVersion(JOB, 12, np.array([0.25, -2.0]), done=True, stop_reason="max_iterations")


def test_gradients_encode_to_the_golden_bytes_and_back() -> None:
    assert encode_gradients(golden_gradients()) == GOLDEN_GRADIENTS_V1
    decoded = decode_gradients(GOLDEN_GRADIENTS_V1)
    assert decoded.job == "golden" and decoded.model_version == 3
    np.testing.assert_array_equal(decoded.devices, np.array([5, 2**63], dtype=np.uint64))
    assert decoded.columns["index"].dtype == np.dtype("<i8") and decoded.columns["index"].tolist() == [1, 0]
    assert decoded.columns["value"].tolist() == [1.5, -1.5]


def test_model_encodes_to_the_golden_bytes_and_back() -> None:
    assert encode_model(golden_model()) == GOLDEN_MODEL_V1
    decoded = decode_model(GOLDEN_MODEL_V1)
    assert decoded.job == JOB and decoded.t == 12 and decoded.done and decoded.stop_reason == "max_iterations"
    assert decoded.params.tolist() == [0.25, -2.0]


def test_trailing_fields_from_a_later_version_are_ignored() -> None:
    envelope = msgspec.msgpack.decode(GOLDEN_GRADIENTS_V1)
    envelope.append({"added": "later"})
    envelope[4][0].append(None)  # a column field
    decoded = decode_gradients(msgspec.msgpack.encode(envelope))
    assert decoded.model_version == 3 and decoded.columns["index"].tolist() == [1, 0]
    envelope = msgspec.msgpack.decode(GOLDEN_MODEL_V1)
    envelope.append(42)
    model = decode_model(msgspec.msgpack.encode(envelope))
    assert model.t == 12 and model.params.tolist() == [0.25, -2.0]


@pytest.mark.parametrize("data", [GOLDEN_GRADIENTS_V1, GOLDEN_MODEL_V1])
def test_unknown_versions_and_truncation_are_named(data: bytes) -> None:
    decode = decode_gradients if data is GOLDEN_GRADIENTS_V1 else decode_model
    envelope = msgspec.msgpack.decode(data)
    envelope[0] = 2
    with pytest.raises(WireError, match="unknown wire version 2"):
        decode(msgspec.msgpack.encode(envelope))
    with pytest.raises(WireError, match="malformed envelope"):
        decode(data[: len(data) // 2])


def test_bad_gradient_envelopes_give_reasons() -> None:
    envelope = msgspec.msgpack.decode(GOLDEN_GRADIENTS_V1)
    envelope[3] = b""
    with pytest.raises(WireError, match="empty envelope"):
        decode_gradients(msgspec.msgpack.encode(envelope))
    envelope = msgspec.msgpack.decode(GOLDEN_GRADIENTS_V1)
    envelope[4][1][2] = envelope[4][1][2][:-1]
    with pytest.raises(WireError, match="not a whole number"):
        decode_gradients(msgspec.msgpack.encode(envelope))
    envelope = msgspec.msgpack.decode(GOLDEN_GRADIENTS_V1)
    envelope[4][1][1] = "<c16"
    with pytest.raises(WireError, match="dtype"):
        decode_gradients(msgspec.msgpack.encode(envelope))


def test_a_model_must_carry_its_own_job_and_finite_parameters() -> None:
    envelope = msgspec.msgpack.decode(GOLDEN_MODEL_V1)
    envelope[1] = "another"
    with pytest.raises(WireError, match="carries the spec"):
        decode_model(msgspec.msgpack.encode(envelope))
    envelope = msgspec.msgpack.decode(GOLDEN_MODEL_V1)
    envelope[3] = np.array([np.nan, 1.0]).tobytes()
    with pytest.raises(WireError, match="finite parameters"):
        decode_model(msgspec.msgpack.encode(envelope))
    envelope = msgspec.msgpack.decode(GOLDEN_MODEL_V1)
    envelope[5] = '{"model": "logistic"}'
    with pytest.raises(WireError, match="invalid job spec"):
        decode_model(msgspec.msgpack.encode(envelope))


def test_only_mechanism_output_can_be_encoded() -> None:
    with pytest.raises(TypeError, match="only by ldpstream.sgd.devices"):
        GradientBatch("golden", 0, np.zeros(1, np.uint64), {"value": np.zeros(1)})
    with pytest.raises(TypeError, match="only a GradientBatch"):
        encode_gradients({"job": "golden", "gradient": [0.1, 0.2]})  # type: ignore[arg-type]
    trainer = Trainer.start(JOB)
    batch = perturb_gradients(trainer, gradient_mechanism(JOB), np.array([[0.5, -0.5]]), np.array([1.0]),
                              np.array([9], dtype=np.uint64), np.random.default_rng(0))
    decoded = decode_gradients(encode_gradients(batch))
    assert set(decoded.columns) == {"index", "value"} and decoded.model_version == 0
