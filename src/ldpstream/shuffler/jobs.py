"""A shuffled training job's updates in the shuffler (docs/reference/protocol.md section 13.7), pure: no Kafka.

The shuffler holds a job's updates as it holds a collection's reports (`ldpstream.shuffler.state.Pending`), each
update one row of one attribute (its mechanism's columns), the job version in place of the spec version and the
model version in place of the window: so the same exactly-once state (`Release`, `ShufflerState.closed`) and the
same shuffle (`ldpstream.shuffler.batch`) serve both. What differs is when a batch goes and what is written:

- a model version is released once it holds `release_size` updates (at least B, and at least the shuffle's drawn
  threshold, `ldpstream.shuffler.state.threshold` of `min_batch`), never grouped with another version (an update
  names its model version in the clear: other versions hide nobody);
- exactly B of them go out, the first B of a uniform permutation (a uniform subset, in a uniform order), each
  re-encoded canonically (`encode_update`) without a key; the rest are dropped: the coordinator would take no more
  than B (`ldpstream.contract.training.job_central` states the bound at n = B);
- an update of a model version already released is dropped when it is read: it could only be refused.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from ldpstream.contract.training import JobSpec, TrainingWireError, Update, decode_update, encode_update
from ldpstream.contract.wire import AttributeColumns, Concatenation
from ldpstream.shuffler.batch import WindowRows
from ldpstream.shuffler.state import threshold


def decoded(value: bytes | None, specs: dict[int, JobSpec]) -> Update:
    """The update a raw message holds, checked against the published spec of its job version (`specs`, by version);
    TrainingWireError otherwise (the raw topic is the edge's to write, but its bytes are checked as any outside
    bytes)."""
    data = value or b""
    for spec in sorted(specs.values(), key=lambda s: -s.version):
        try:
            update = decode_update(data, spec)
        except TrainingWireError:
            continue
        if update.job == spec.job_id and update.job_version == spec.version:
            return update
    raise TrainingWireError("not an update of a published shuffled version of the job", "malformed")


def as_rows(updates: list[Update]) -> Concatenation:
    """Updates of one job version as a concatenation of one-row messages (model versions as the windows), for
    `Pending.add`."""
    n = len(updates)
    names = sorted(updates[0].columns) if updates else []
    columns = {k: np.concatenate([u.columns[k].reshape(-1) for u in updates]) for k in names}
    rows = np.arange(n, dtype=np.int64)
    return Concatenation(rows, np.ones(n, dtype=np.int64), np.zeros(n, dtype=np.uint64),
                         np.array([u.model_version for u in updates], dtype=np.int64),
                         {0: AttributeColumns(rows, columns)} if n else {}, {})


def release_size(spec: JobSpec) -> int:
    """How many updates of a model version the shuffler waits for: max(B, the threshold drawn from min_batch)."""
    assert spec.shuffle is not None
    return max(spec.batch_size, threshold(spec.shuffle.min_batch))


def released_messages(spec: JobSpec, model_version: int, rows: WindowRows) -> Iterator[bytes]:
    """The first B of the rows in a uniformly random order, each an update of `model_version` re-encoded."""
    left = spec.batch_size
    for part in rows.shuffled():
        if left == 0:
            break
        take = min(left, part.n)
        columns = part.attributes[0].columns
        widths = {k: len(v) // part.n for k, v in columns.items()}
        for i in range(take):
            yield encode_update(spec.job_id, spec.version, model_version,
                                {k: v[i * widths[k]:(i + 1) * widths[k]] for k, v in columns.items()})
        left -= take
    rows.discard()
