"""Poison-pill quarantine: messages that were in hand when a worker crashed, counted by offset.

An unexpected exception while a worker handles a micro-batch must not leave a live process that does nothing, nor
a worker that crashes on the same message after every restart. So the worker records each message it had in hand
(`record`: one count per (partition, offset) of the collection, in Redis) and exits non-zero; its supervisor
starts it again, and on every partition assignment the worker loads the counts of the partitions it now owns
(`load`). Then, for each message of a micro-batch:
- count 0: handled with the others, in one batch;
- count 1 (in hand at one crash, maybe innocent): handled alone, so a second crash names it exactly;
- count >= QUARANTINE_AFTER (2): not handled at all; dead-lettered whole with reason `poison` and its original
  bytes (`ldp.dlq` keeps them for inspection or replay), and its offset counts as applied.
A message that caused nothing is applied on its next try and its count is dropped once its partition's applied
offset passes it. The counts live in one Redis hash per collection (`ldp:{NAME}:crashes`, field "partition:offset").
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections import defaultdict
from collections.abc import Iterable, Mapping

from ldpstream.aggregator.store import prefix
from ldpstream.runtime.redis import SyncRedis

QUARANTINE_AFTER = 2

Marks = dict[tuple[int, int], int]  # (partition, offset) -> crashes it was in hand for


class CrashMarks(ABC):
    """The contract both backends implement."""

    @abstractmethod
    def record(self, collection: str, in_hand: Iterable[tuple[int, int]]) -> None:
        """Add one crash to each (partition, offset) that was in hand."""

    @abstractmethod
    def load(self, collection: str, applied: Mapping[int, int]) -> Marks:
        """The counts of messages above their partition's applied offset (`applied`: partition -> offset; a
        partition missing from it has applied nothing); counts at or below it are dropped."""


def _field(partition: int, offset: int) -> str:
    return f"{partition}:{offset}"


def _parse(field: str) -> tuple[int, int]:
    partition, _, offset = field.partition(":")
    return int(partition), int(offset)


class RedisCrashMarks(CrashMarks):
    """The counts in one Redis hash per collection."""

    def __init__(self, client: SyncRedis) -> None:
        self.redis = client

    def record(self, collection: str, in_hand: Iterable[tuple[int, int]]) -> None:
        key = f"{prefix(collection)}:crashes"
        with self.redis.pipeline(transaction=False) as pipe:
            for partition, offset in in_hand:
                pipe.hincrby(key, _field(partition, offset), 1)
            pipe.execute()

    def load(self, collection: str, applied: Mapping[int, int]) -> Marks:
        key = f"{prefix(collection)}:crashes"
        raw: dict[bytes, bytes] = self.redis.hgetall(key)  # type: ignore[assignment]
        marks = {_parse(k.decode()): int(v) for k, v in raw.items()}
        done = [m for m in marks if m[1] <= applied.get(m[0], -1)]
        if done:
            self.redis.hdel(key, *(_field(*m) for m in done))
        return {m: n for m, n in marks.items() if m not in done}


class MemoryCrashMarks(CrashMarks):
    """The same contract in process memory (unit tests)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._marks: dict[str, Marks] = defaultdict(dict)

    def record(self, collection: str, in_hand: Iterable[tuple[int, int]]) -> None:
        with self._lock:
            for mark in in_hand:
                self._marks[collection][mark] = self._marks[collection].get(mark, 0) + 1

    def load(self, collection: str, applied: Mapping[int, int]) -> Marks:
        with self._lock:
            marks = self._marks[collection]
            for mark in [m for m in marks if m[1] <= applied.get(m[0], -1)]:
                del marks[mark]
            return dict(marks)
