"""A training job's status as people see it: `ldp train status JOB --json` prints it and the read API serves it
(`GET /jobs/{job}`), the same JSON from the same function.

It is the coordinator's state in Redis (`ldpstream.sgd.jobrun.state_key`) read under the published spec of the job
version that state runs (`ldpstream.sgd.jobrun.status`): the model version, whether the job is done, updates accepted
and refused by reason, the held-out accuracy and loss of the current version and their curve (one point per evaluated
version, oldest first, at most `jobrun.MAX_CURVE` of them), epsilon per report, the most participations of any device
and the lifetime epsilon they add up to.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ldpstream.runtime.jobs import SignedJob
from ldpstream.sgd.jobrun import state_key, status


def job_status(client: Any, jobs: Callable[[], Mapping[str, SignedJob]], job_id: str) -> dict[str, Any] | None:
    """The status of `job_id` (a sync Redis client; `jobs()`: the published specs by `job/JOB@VERSION`, called only if
    the job has a state), or None while no coordinator has run it (or the spec of the version its state runs is not
    among them)."""
    raw = client.hgetall(state_key(job_id))
    if not raw:
        return None
    found = jobs().get(f"job/{job_id}@{int(raw[b'job_version'])}")
    return None if found is None else status(found.spec, raw)
