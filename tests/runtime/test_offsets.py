"""Where a reader resumes a partition: after its applied offset, or where Kafka's log starts, reporting the loss."""

from __future__ import annotations

import logging

import pytest
from prometheus_client import REGISTRY

from ldpstream.runtime.offsets import NOT_APPLIED, resume_offset


def lost(topic: str, partition: int) -> float:
    return REGISTRY.get_sample_value("ldp_lost_messages_total", {"topic": topic, "partition": str(partition)}) or 0.0


def never(applied: int, log_start: int) -> bool:
    raise AssertionError("nothing was lost: the store's offset must not move")


def test_a_partition_resumes_after_its_applied_offset() -> None:
    assert resume_offset("t", 0, 41, 0, never) == 42
    assert resume_offset("t", 0, 41, 42, never) == 42  # retention deleted only applied messages
    assert resume_offset("t", 0, NOT_APPLIED, 0, never) == 0


def test_messages_deleted_before_they_were_applied_are_skipped_and_reported_once(
        caplog: pytest.LogCaptureFixture) -> None:
    applied = {"x:3": 99}

    def skip_lost(expected: int, log_start: int) -> bool:  # the store's conditional move
        if applied["x:3"] != expected:
            return False
        applied["x:3"] = log_start - 1
        return True

    before = lost("x", 3)
    with caplog.at_level(logging.ERROR, logger="ldpstream.runtime.offsets"):
        assert resume_offset("x", 3, 99, 150, skip_lost) == 150
        assert resume_offset("x", 3, 99, 150, skip_lost) == 150  # a second reader with the old view: no report
    assert applied == {"x:3": 149}
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "x:3: offsets 100 to 149" in errors[0] and "50 message(s) lost" in errors[0]
    assert lost("x", 3) == before + 50
