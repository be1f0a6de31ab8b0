"""Producing what confluent-kafka's Python API cannot: a message whose header name is arbitrary bytes (a name that is
not UTF-8, which any other Kafka client can send), through librdkafka's C API (`rd_kafka_produceva`) with ctypes."""

from __future__ import annotations

import ctypes
import ctypes.util
from pathlib import Path
from typing import Any

import confluent_kafka

VTYPE_TOPIC, VTYPE_VALUE, VTYPE_KEY, VTYPE_HEADER = 1, 4, 5, 9  # rd_kafka_vtype_t
PRODUCER = 0  # RD_KAFKA_PRODUCER


class _Memory(ctypes.Structure):
    _fields_ = [("ptr", ctypes.c_void_p), ("size", ctypes.c_size_t)]


class _Header(ctypes.Structure):
    _fields_ = [("name", ctypes.c_void_p), ("val", ctypes.c_void_p), ("size", ctypes.c_ssize_t)]


class _Union(ctypes.Union):
    _fields_ = [("cstr", ctypes.c_char_p), ("mem", _Memory), ("header", _Header), ("_pad", ctypes.c_char * 64)]


class _VU(ctypes.Structure):  # rd_kafka_vu_t
    _fields_ = [("vtype", ctypes.c_int), ("u", _Union)]


def librdkafka() -> ctypes.CDLL | None:
    """The librdkafka that confluent-kafka's wheel bundles (else a system one); None if there is none."""
    bundled = sorted((Path(confluent_kafka.__file__).parent.parent / "confluent_kafka.libs").glob("librdkafka*"))
    name = str(bundled[0]) if bundled else ctypes.util.find_library("rdkafka")
    return ctypes.CDLL(name) if name else None


def produce_raw(lib: ctypes.CDLL, config: dict[str, Any], topic: str, key: bytes, value: bytes,
                header_name: bytes, header_value: bytes) -> None:
    """Produce one message with one header named `header_name` (NUL-free bytes) and wait for it."""
    lib.rd_kafka_conf_new.restype = ctypes.c_void_p
    lib.rd_kafka_conf_set.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                                      ctypes.c_size_t]
    lib.rd_kafka_new.restype = ctypes.c_void_p
    lib.rd_kafka_new.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.rd_kafka_produceva.restype = ctypes.c_void_p
    lib.rd_kafka_produceva.argtypes = [ctypes.c_void_p, ctypes.POINTER(_VU), ctypes.c_size_t]
    lib.rd_kafka_error_string.restype = ctypes.c_char_p
    lib.rd_kafka_error_string.argtypes = [ctypes.c_void_p]
    lib.rd_kafka_flush.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.rd_kafka_destroy.argtypes = [ctypes.c_void_p]
    errstr = ctypes.create_string_buffer(512)
    conf = lib.rd_kafka_conf_new()
    for name, setting in config.items():
        if name == "logger":  # confluent-kafka's, not librdkafka's: this raw client logs to stderr
            continue
        text = str(setting).lower() if isinstance(setting, bool) else str(setting)
        if lib.rd_kafka_conf_set(conf, name.encode(), text.encode(), errstr, len(errstr)) != 0:
            raise ValueError(f"librdkafka refuses {name}: {errstr.value.decode()}")
    handle = lib.rd_kafka_new(PRODUCER, conf, errstr, len(errstr))
    if not handle:
        raise RuntimeError(f"rd_kafka_new: {errstr.value.decode()}")
    topic_c, key_c, value_c, name_c, header_c = (ctypes.create_string_buffer(b, len(b)) for b in (
        topic.encode() + b"\0", key, value, header_name + b"\0", header_value))  # names end with a NUL
    vus = (_VU * 4)()
    vus[0].vtype, vus[0].u.cstr = VTYPE_TOPIC, ctypes.cast(topic_c, ctypes.c_char_p)
    vus[1].vtype, vus[1].u.mem = VTYPE_KEY, _Memory(ctypes.addressof(key_c), len(key))
    vus[2].vtype, vus[2].u.mem = VTYPE_VALUE, _Memory(ctypes.addressof(value_c), len(value))
    vus[3].vtype, vus[3].u.header = VTYPE_HEADER, _Header(ctypes.addressof(name_c), ctypes.addressof(header_c),
                                                          len(header_value))
    try:
        error = lib.rd_kafka_produceva(handle, vus, 4)
        if error:
            raise RuntimeError(f"rd_kafka_produceva: {lib.rd_kafka_error_string(error).decode()}")
        if lib.rd_kafka_flush(handle, 30_000) != 0:
            raise RuntimeError("rd_kafka_flush: the message was not delivered in 30 s")
    finally:
        lib.rd_kafka_destroy(handle)
