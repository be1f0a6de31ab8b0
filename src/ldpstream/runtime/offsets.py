"""Where a reader resumes a partition: after the offset its store applied, or where Kafka's log now starts.

Both offset guards (the aggregator's statistics store, the SGD coordinator's checkpoint) read a partition from its
applied offset + 1. If Kafka's retention has deleted messages after the applied offset (the partition's log start
offset, its low watermark, is beyond applied + 1), those messages can never be read: the reader starts at the log
start offset instead, the store moves its applied offset over the lost ones (so the guard accepts the next batch
and a reader does not wait for them forever), and the loss is reported loudly: an ERROR naming the partition and
the offset range, and `ldp_lost_messages_total{topic,partition}`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from ldpstream.contract.topics import source
from ldpstream.runtime import metrics

log = logging.getLogger(__name__)

NOT_APPLIED = -1  # the applied offset of a partition nothing was applied from
SkipLost = Callable[[int, int], bool]  # (applied, log start) -> whether this call moved the store's offset


def resume_offset(topic: str, partition: int, applied: int, log_start: int, skip_lost: SkipLost) -> int:
    """The offset to read a partition from when its store has applied up to `applied` (NOT_APPLIED: nothing) and
    Kafka's log starts at `log_start`: applied + 1, or `log_start` when retention deleted messages in between.

    `skip_lost(applied, log_start)` moves the store's applied offset to log_start - 1 if it is still `applied`
    (atomic); the reader whose call moved it reports the loss, so a loss is reported once however many look.

    Examples
    --------
    >>> resume_offset("t", 0, 41, 10, lambda applied, start: True)
    42
    """
    if log_start <= applied + 1:
        return applied + 1
    if skip_lost(applied, log_start):
        log.error("%s: offsets %d to %d were deleted by Kafka's retention before they were applied: %d message(s) "
                  "lost, never counted (retention must outlive every store loss window and consumer lag; README)",
                  source(topic, partition), applied + 1, log_start - 1, log_start - applied - 1)
        metrics.LOST_MESSAGES.labels(topic, str(partition)).inc(log_start - applied - 1)
    return log_start
