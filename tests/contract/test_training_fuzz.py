"""The training decoders on hostile bytes (docs/reference/protocol.md section 13): whatever a job spec, a model
descriptor, a version's bytes (`LDPM`) or an update holds, its decoder returns a valid object (one that survives its
own encoding) or raises its own error (`TrainingWireError` with a refusal code, `SnapshotError`), nothing else; and
a size announced in the bytes is checked before anything of that size is allocated."""

from __future__ import annotations

import copy
import hashlib
import json
import random
import struct
import tracemalloc
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ldpstream.contract.snapshot import Snapshot, SnapshotError, decode_snapshot
from ldpstream.contract.training import (
    MAX_DESCRIPTOR_BYTES,
    JobSpec,
    ModelDescriptor,
    TrainingWireError,
    decode_update,
    describe_version,
    encode_update,
    job_from_mapping,
    model_message,
    parse_descriptor,
    parse_job,
    report_columns,
)
from tests.fuzzing import tree_paths, untrusted

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
CODES = {"job": {"malformed_job", "too_large"}, "descriptor": {"malformed_model", "too_large"},
         "update": {"malformed", "wrong_shape", "not_finite", "too_large"}}  # each decoder's refusal codes
BASE = {"job_id": "fuzz", "version": 1, "clip": 1.0, "epsilon": 4.0, "max_rounds": 2, "batch_size": 2,
        "max_versions": 3, "lr": 1.0, "version_validity_s": 60, "max_examples": 5}
JOBS = [job_from_mapping({**BASE, **fields}) for fields in [
    {"model": {"architecture": "mlp", "dims": [3, 4, 2]}, "parameters": 26,
     "mechanism": {"name": "privunitg", "p": 0.7, "q": 0.1}},
    {"model": {"architecture": "softmax", "dims": [5, 3]}, "parameters": 18, "momentum": 0.5,
     "mechanism": {"name": "projunit", "k": 8, "p": 0.6, "q": 0.2}, "expected_population": 1000},
]]
SPECS = [job.canonical_json() for job in JOBS]


def snapshot_of(seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    job = JOBS[seed % len(JOBS)]
    snap = Snapshot(job.model.architecture, tuple(job.model.dims), int(rng.integers(0, 2**40)),
                    rng.normal(size=job.parameters))
    return snap.encode("float64" if seed % 3 else "float32")


def descriptor_of(seed: int) -> bytes:
    job = JOBS[seed % len(JOBS)]
    return describe_version(job, seed % 1000, snapshot_of(seed), 1_795_788_000_000 + seed, seed % 5 == 0
                            ).canonical_json()


def update_of(seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    job = JOBS[seed % len(JOBS)]
    report = {name: (rng.integers(0, 2**63, width, dtype=np.uint64) if dtype == "<u8"
                     else rng.normal(size=(1, width)).astype(dtype))
              for name, (dtype, width) in report_columns(job).items()}
    return encode_update(job.job_id, job.version, int(rng.integers(0, 100)), report)


def outcome(decode: Callable[[bytes], Any], data: bytes, error: type[Exception] = TrainingWireError,
            codes: str = "update") -> Any:
    """decode(data), or None if it raises `error` (for TrainingWireError, with one of the `codes` decoder's refusal
    codes); anything else fails the test."""
    try:
        return decode(data)
    except error as exc:
        if isinstance(exc, TrainingWireError):
            assert exc.code in CODES[codes], (codes, exc.code, str(exc))
        return None


HOSTILE: list[Any] = [None, True, False, -1, 0, 1.0, 0.5, 2**53 + 1, 2**64, -(2**63), 1e308, "", "é" * 500, "a" * 70,
                      [], [[[[]]]], {}, {"name": []}, list(range(2000)), [1] * 20, [2**20 + 1, 2], [0, 2],
                      "0" * 64, "f" * 63, "softmax", "mlp", "privunitg", "projunit"]
RAW_NUMBERS = ["1e999", "-1e999", "1.0", "1e0", "-0", "-0.0", "9" * 400, "0.1e-400", "NaN", "Infinity"]
PLACEHOLDER = "hostile-placeholder-0x"


def json_mutation(data: bytes, rng: random.Random) -> bytes:
    """A JSON object with one node replaced by a hostile value or a raw number literal (integers written as floats,
    out-of-range exponents, NaN), a key dropped or added, or a key repeated with another value."""
    tree = json.loads(data)
    action = rng.randrange(4)
    if action == 3:  # a repeated key: the last one is the value every JSON parser reads
        key = rng.choice(sorted(tree))
        return data[:-1] + f',"{key}":{json.dumps(copy.deepcopy(rng.choice(HOSTILE)))}}}'.encode()
    if action == 2:
        if rng.random() < 0.5:
            del tree[rng.choice(sorted(tree))]
        else:
            key = rng.choice(["extra", "k", "momentum", "expected_population", "sha256"])
            tree[key] = copy.deepcopy(rng.choice(HOSTILE))
        return json.dumps(tree, separators=(",", ":")).encode()
    raw = action == 1
    path = rng.choice(tree_paths(tree)[1:])
    parent = tree
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = PLACEHOLDER if raw else copy.deepcopy(rng.choice(HOSTILE))  # a copy: never shared
    text = json.dumps(tree, sort_keys=rng.random() < 0.5, separators=(",", ":"))
    return text.replace(f'"{PLACEHOLDER}"', rng.choice(RAW_NUMBERS)).encode()


def json_inputs(valid: st.SearchStrategy[bytes]) -> st.SearchStrategy[bytes]:
    return st.one_of(untrusted(valid), st.builds(json_mutation, valid, st.randoms(use_true_random=True)))


def valid_job(spec: JobSpec) -> None:
    assert parse_job(spec.canonical_json()) == spec
    assert spec.model_bytes() == len(Snapshot(spec.model.architecture, tuple(spec.model.dims), 0,
                                              np.zeros(spec.parameters)).encode("float64"))


@FUZZ
@given(json_inputs(st.sampled_from(SPECS)))
def test_a_job_spec_decodes_to_a_valid_spec_or_is_refused_with_a_code(data: bytes) -> None:
    spec = outcome(parse_job, data, codes="job")
    if spec is not None:
        valid_job(spec)


@FUZZ
@given(json_inputs(st.integers(0, 2**32 - 1).map(descriptor_of)))
def test_a_model_descriptor_decodes_or_is_refused_with_a_code(data: bytes) -> None:
    descriptor = outcome(parse_descriptor, data, codes="descriptor")
    if descriptor is not None:
        assert isinstance(descriptor, ModelDescriptor) and len(descriptor.sha256) == 64
        assert parse_descriptor(descriptor.canonical_json()) == descriptor
        assert all(isinstance(w, int) and w >= 1 for w in descriptor.dims)


HOSTILE_FLOATS = [float("nan"), float("inf"), -float("inf"), -0.0, 1e-320]


@FUZZ
@given(st.sampled_from(SPECS), st.randoms(use_true_random=True))
def test_a_job_files_section_with_hostile_values_is_a_valid_spec_or_refused(spec: bytes, rng: random.Random) -> None:
    """`ldp train publish` reads YAML, which carries what JSON cannot (.inf, .nan): `job_from_mapping` returns a
    spec whose canonical JSON parses back to it, or refuses with `malformed_job`."""
    tree = json.loads(json_mutation(spec, rng)) if rng.random() < 0.5 else json.loads(spec)
    path = rng.choice(tree_paths(tree)[1:])
    parent = tree
    for key in path[:-1]:
        parent = parent[key] if isinstance(parent, (dict, list)) else {}
    if isinstance(parent, dict) or (isinstance(parent, list) and isinstance(path[-1], int)):
        parent[path[-1]] = copy.deepcopy(rng.choice([*HOSTILE_FLOATS, *HOSTILE]))
    try:
        job = job_from_mapping(tree)
    except TrainingWireError as exc:
        assert exc.code == "malformed_job"
        return
    valid_job(job)


def header_mutation(data: bytes, rng: random.Random) -> bytes:
    """A snapshot whose header announces something else: another dtype, name length, width count, widths, version
    or parameter count (up to 2^64 - 1), the parameters left as they are."""
    name_len = data[6]
    at_m = 7 + name_len
    m = data[at_m]
    at_count = at_m + 1 + 4 * m + 8
    out = bytearray(data)
    field = rng.randrange(6)
    if field == 0:
        out[5] = rng.choice([0, 2, 4, 8, 16, 255])
    elif field == 1:
        out[6] = rng.choice([0, 1, 3, 33, 255])
    elif field == 2:
        out[at_m] = rng.choice([0, 1, 2, 10, 255])
    elif field == 3:
        i = rng.randrange(m)
        struct.pack_into("<I", out, at_m + 1 + 4 * i, rng.choice([0, 1, 2**20, 2**20 + 1, 2**32 - 1]))
    elif field == 4:
        struct.pack_into("<Q", out, at_count - 8, rng.choice([0, 2**63, 2**64 - 1]))
    else:
        struct.pack_into("<Q", out, at_count, rng.choice([0, 1, 2**26, 2**26 + 1, 2**61, 2**64 - 1]))
    return bytes(out)


@FUZZ
@given(st.one_of(untrusted(st.integers(0, 2**32 - 1).map(snapshot_of)),
                 st.builds(header_mutation, st.integers(0, 2**32 - 1).map(snapshot_of),
                           st.randoms(use_true_random=True))))
def test_version_bytes_decode_to_a_finite_snapshot_or_a_snapshot_error(data: bytes) -> None:
    snap = outcome(decode_snapshot, data, SnapshotError)
    if snap is not None:
        assert snap.params.shape == (snap.network.size,) and np.isfinite(snap.params).all()
        size = 8 if len(data) == len(snap.encode("float64")) else 4
        assert snap.encode("float64" if size == 8 else "float32") == data


def valid_update(data: bytes, job: JobSpec) -> None:
    update = decode_update(data, job)
    columns = report_columns(job)
    assert sorted(update.columns) == sorted(columns)
    for name, (dtype, width) in columns.items():
        values = update.columns[name]
        assert values.dtype == np.dtype(dtype) and values.size == width
        assert values.dtype.kind != "f" or np.isfinite(values).all()
    again = encode_update(update.job, update.job_version, update.model_version, update.columns)
    assert decode_update(again, job).columns.keys() == update.columns.keys()


@FUZZ
@given(untrusted(st.integers(0, 2**32 - 1).map(update_of)), st.sampled_from(JOBS))
def test_an_update_decodes_against_the_jobs_mechanism_or_is_refused_with_a_code(data: bytes, job: JobSpec) -> None:
    if outcome(lambda b: decode_update(b, job), data) is not None:
        valid_update(data, job)


def test_each_byte_of_a_valid_update_flipped_or_cut_decodes_or_is_refused() -> None:
    """Exhaustive over one update per mechanism: every byte xor 0xff, every prefix."""
    for seed, job in enumerate(JOBS):
        good = update_of(seed)
        assert outcome(lambda b, job=job: decode_update(b, job), good) is not None
        for i in range(len(good)):
            flipped = bytearray(good)
            flipped[i] ^= 0xFF
            for data in (bytes(flipped), good[:i]):
                if outcome(lambda b, job=job: decode_update(b, job), data) is not None:
                    valid_update(data, job)


@FUZZ
@given(st.sampled_from(JOBS), st.integers(0, 2**53), st.binary(max_size=64), st.integers(0, 2**50), st.booleans())
def test_a_described_version_parses_back_and_its_signed_message_binds_its_bytes(
        job: JobSpec, version: int, data: bytes, issued_ms: int, done: bool) -> None:
    descriptor = describe_version(job, version, data, issued_ms, done)
    body = descriptor.canonical_json()
    if len(body) <= MAX_DESCRIPTOR_BYTES and descriptor.expires_ms <= 2**53:
        assert parse_descriptor(body) == descriptor
        assert descriptor.sha256 == hashlib.sha256(data).hexdigest() and descriptor.size == len(data)
    else:
        with pytest.raises(TrainingWireError):
            parse_descriptor(body)
    assert model_message(body).endswith(body) and model_message(body) != body


GIB = 1 << 30
MSGPACK_ANNOUNCING = [
    b"\x95\x01\xa4fuzz\x01\x00\xdd\xff\xff\xff\xff",  # 2^32 - 1 columns announced
    b"\x95\x01\xa4fuzz\x01\x00\x91\x93\xa5value\xa3<f4\xc6\xff\xff\xff\xff",  # a 4 GiB bin announced
    b"\x95\x01\xdb\xff\xff\xff\xff",  # a 4 GiB job name announced
    b"\xdf\xff\xff\xff\xff", b"\x91" * 60_000,
]


def snapshot_announcing(count: int, dims: list[int]) -> bytes:
    head = b"LDPM" + struct.pack("<BBB", 1, 8, 3) + b"mlp" + struct.pack(f"<B{len(dims)}I", len(dims), *dims)
    return head + struct.pack("<QQ", 0, count) + b"\x00" * 64


@pytest.mark.parametrize("decode", ["update", "snapshot", "job", "descriptor"])
def test_a_huge_announced_size_is_refused_before_anything_of_its_size_is_allocated(decode: str) -> None:
    inputs: list[tuple[Callable[..., Any], bytes]] = {
        "update": [(lambda b: decode_update(b, JOBS[0]), m) for m in MSGPACK_ANNOUNCING],
        "snapshot": [(decode_snapshot, snapshot_announcing(c, d)) for c, d in [
            (2**26, [8192, 8191, 2]), (2**64 - 1, [3, 4, 2]), (26, [3, 4, 2]), (2**26, [2**20, 64, 2])]],
        "job": [(parse_job, SPECS[0].replace(b"[3,4,2]", b"[1048576,64,10]")),
                (parse_job, SPECS[0].replace(b"[3,4,2]", b"[" + b"1048576," * 8 + b"2]"))],
        "descriptor": [(parse_descriptor, descriptor_of(1).replace(b'"size":', b'"size":1' + b"0" * 9))],
    }[decode]
    for fn, data in inputs:
        tracemalloc.start()
        try:
            if fn is decode_snapshot:
                outcome(fn, data, SnapshotError)
            else:
                outcome(fn, data, codes=decode if decode in ("job", "descriptor") else "update")
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 4 * len(data) + (1 << 20), (decode, peak)


@pytest.mark.parametrize("data", [b"[" * 1500 + b"]" * 1500, b'{"job":' * 500 + b"1" + b"}" * 500])
def test_json_nested_deeper_than_the_stack_is_a_malformed_descriptor(data: bytes) -> None:
    with pytest.raises(TrainingWireError) as refused:
        parse_descriptor(data)
    assert refused.value.code == "malformed_model"
