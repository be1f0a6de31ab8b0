"""`PublishedJobs`, the read API's cache of the published job specs: the topic is read again only when the copy is
older than `max_age_s`, or, for a job not known yet (just published), older than `miss_age_s`."""

from __future__ import annotations

from ldpstream.runtime.jobs import PublishedJobs, SignedJob
from tests.readapi.job_support import tiny_job


def test_the_topic_is_read_again_only_when_old_or_for_a_job_not_known() -> None:
    spec = tiny_job()
    topic = {f"job/{spec.job_id}@1": SignedJob(spec, b"", b"")}
    reads: list[str] = []

    def read(bootstrap: str) -> dict[str, SignedJob]:
        reads.append(bootstrap)
        return dict(topic)

    jobs = PublishedJobs("kafka:9092", max_age_s=3600.0, miss_age_s=0.0, read=read)
    assert jobs.newest(spec.job_id) is not None and len(reads) == 1  # the first read
    assert jobs.newest(spec.job_id) is not None and list(jobs.all()) == list(topic) and len(reads) == 1  # cached
    later = tiny_job(version=2, job_id=spec.job_id)
    topic[f"job/{spec.job_id}@2"] = SignedJob(later, b"", b"")
    assert jobs.newest(spec.job_id).spec.version == 1  # type: ignore[union-attr]  # known: not read again
    assert jobs.newest("not-yet") is None and len(reads) == 2  # a miss reads again
    assert jobs.newest(spec.job_id).spec.version == 2 and reads == ["kafka:9092"] * 2  # type: ignore[union-attr]


def test_a_job_published_just_after_a_read_is_found_by_the_next_miss() -> None:
    spec = tiny_job()
    topic: dict[str, SignedJob] = {}
    reads: list[str] = []

    def read(bootstrap: str) -> dict[str, SignedJob]:
        reads.append(bootstrap)
        return dict(topic)

    jobs = PublishedJobs("kafka:9092", max_age_s=3600.0, miss_age_s=0.3, read=read)
    assert jobs.newest(spec.job_id) is None and len(reads) == 1
    topic[f"job/{spec.job_id}@1"] = SignedJob(spec, b"", b"")  # within miss_age_s: the miss waits for a read
    assert jobs.newest(spec.job_id) is not None and len(reads) == 2
