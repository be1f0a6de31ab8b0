"""`TrainingEdge.job`: a job published before a device asks is found (a miss waits for a read begun after it), and
misses share reads."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

import pytest

import ldpstream.edge.training as training
from ldpstream.edge.training import Refused, TrainingEdge


class Redis:
    def register_script(self, _: str) -> None:
        return None


def test_a_job_published_just_after_a_read_is_found_and_misses_share_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    published: dict[str, Any] = {}
    reads: list[float] = []

    def read_jobs(bootstrap: str) -> dict[str, Any]:
        reads.append(time.monotonic())
        return dict(published)
    monkeypatch.setattr(training, "read_jobs", read_jobs)
    monkeypatch.setattr(training, "REFRESH_S", 0.3)

    async def scenario() -> None:
        edge = TrainingEdge("unused:9092", Redis(), None)  # type: ignore[arg-type]
        with pytest.raises(Refused):
            await edge.job("mnist")
        job = SimpleNamespace(spec=SimpleNamespace(job_id="mnist", version=1))
        published["job/mnist@1"] = job  # within REFRESH_S of the read: the next miss waits for the next read
        assert await edge.job("mnist") is job
        assert len(reads) == 2
        answers = await asyncio.gather(*(edge.job("other") for _ in range(8)), return_exceptions=True)
        assert all(isinstance(a, Refused) for a in answers) and len(reads) == 3  # eight misses, one read
        assert await edge.job("mnist") is job and len(reads) == 3  # a hit reads nothing
    asyncio.run(scenario())
