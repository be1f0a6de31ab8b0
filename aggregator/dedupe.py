"""The devices each partition has counted per dedupe window, held by the worker that owns the partition.

A device's reports all go to one partition (`collection.pseudonym.device_partitions`), so "has this device reported
in this window?" is answered from its partition's list alone. `SeenDevices` keeps those lists in memory as
`SortedRuns` (sorted uint64 arrays of geometrically growing sizes, so adding a micro-batch's devices costs
O(log n) copies per device, not a copy of the whole list), loaded from the store on first use together with the
applied offset they match (`synced`). A
micro-batch is checked against them and written with that offset as its `expected` one; the store refuses the
write (`stale`) if another worker applied batches from the partition since, and the caller then `invalidate`s it
and tries again on a fresh load. After a write is applied, `commit` adds its devices and moves `synced` on.

If a later load of another window finds the partition at a different offset than the lists already held, the
partition is marked CONFLICT, so its next write is refused and everything is reloaded at one offset.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np

from aggregator.store import ALL_TIME, BatchUpdate, StatsStore, WindowKey
from collection.spec import window_seconds
from collection.topics import collection_of, source, source_partition

CONFLICT = -2  # never an applied offset: a write expecting it is refused as stale


def sorted_contains(known: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Per value, whether it is in the sorted array `known` (vectorised binary search).

    Examples
    --------
    >>> sorted_contains(np.array([2, 5, 9], dtype=np.uint64), np.array([5, 6, 9, 1], dtype=np.uint64)).tolist()
    [True, False, True, False]
    """
    if not len(known):
        return np.zeros(len(values), dtype=bool)
    at = np.minimum(np.searchsorted(known, values), len(known) - 1)
    return known[at] == values


def sorted_union(known: np.ndarray, new: np.ndarray) -> np.ndarray:
    """The sorted array `known` with the values of `new` (none of them in `known`) inserted in order.

    Examples
    --------
    >>> sorted_union(np.array([2, 9], dtype=np.uint64), np.array([5, 1], dtype=np.uint64)).tolist()
    [1, 2, 5, 9]
    """
    new = np.sort(new)
    return np.insert(known, np.searchsorted(known, new), new)


class SortedRuns:
    """A set of uint64 values as sorted runs, each more than twice the size of the next newer one: O(log n) runs,
    and each value is copied O(log n) times over all the additions.

    Examples
    --------
    >>> runs = SortedRuns(np.array([9, 2], dtype=np.uint64))
    >>> runs.add(np.array([5], dtype=np.uint64))
    >>> runs.contains(np.array([5, 6, 9], dtype=np.uint64)).tolist(), len(runs)
    ([True, False, True], 3)
    """

    def __init__(self, values: np.ndarray | None = None) -> None:
        self.runs: list[np.ndarray] = []
        if values is not None and len(values):
            self.add(np.unique(values))

    def __len__(self) -> int:
        return sum(len(r) for r in self.runs)

    def contains(self, values: np.ndarray) -> np.ndarray:
        """Per value, whether it is in the set (faster when `values` is sorted)."""
        hit = np.zeros(len(values), dtype=bool)
        for run in self.runs:
            hit |= sorted_contains(run, values)
        return hit

    def add(self, new: np.ndarray) -> None:
        """Add values that are distinct and not in the set yet."""
        run = np.sort(new)
        while self.runs and len(self.runs[-1]) <= 2 * len(run):
            run = sorted_union(self.runs.pop(), run)
        if len(run):
            self.runs.append(run)


@dataclass
class _Partition:
    synced: int  # the applied offset the lists match
    windows: dict[WindowKey, SortedRuns] = field(default_factory=dict)


class SeenDevices:
    """The dedupe lists of the partitions of one store's collections that this worker has touched."""

    def __init__(self, store: StatsStore) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._partitions: dict[tuple[str, int], _Partition] = {}

    def devices(self, topic: str, partition: int, key: WindowKey) -> SortedRuns:
        """The devices the partition has counted in the dedupe window `key`, loaded on first use."""
        with self._lock:
            state = self._partitions.get((topic, partition))
            if state is not None and key in state.windows:
                return state.windows[key]
        applied, lists = self.store.seen_devices(collection_of(topic), source(topic, partition), partition, [key])
        with self._lock:
            state = self._partitions.setdefault((topic, partition), _Partition(applied))
            if state.synced != applied:
                state.synced = CONFLICT
            state.windows[key] = SortedRuns(lists[key])
            return state.windows[key]

    def contains(self, topic: str, partition: int, key: WindowKey, devices: np.ndarray) -> np.ndarray:
        """Per device, whether the partition has counted it in the dedupe window `key`."""
        return self.devices(topic, partition, key).contains(devices)

    def synced(self, topic: str, partition: int) -> int:
        """The applied offset the partition's lists match (loaded from the store if nothing is held)."""
        with self._lock:
            state = self._partitions.get((topic, partition))
            if state is not None:
                return state.synced
        applied, _ = self.store.seen_devices(collection_of(topic), source(topic, partition), partition, [])
        with self._lock:
            return self._partitions.setdefault((topic, partition), _Partition(applied)).synced

    def applied(self) -> dict[tuple[str, int], int]:
        """(topic, partition) -> the applied offset its lists match, for the partitions held at one offset."""
        with self._lock:
            return {key: state.synced for key, state in self._partitions.items() if state.synced != CONFLICT}

    def commit(self, topic: str, update: BatchUpdate, now_ms: int) -> None:
        """After `update` was applied: its devices join their lists and each partition is synced to its last
        offset; lists of windows too old to take reports (twice their length) are dropped."""
        with self._lock:
            synced = set()
            for r in update.ranges:
                part = source_partition(r.source)
                if (topic, part) in self._partitions:
                    held = self._partitions[(topic, part)]
                    fresh = held.synced == r.expected  # else it was reloaded meanwhile
                    held.synced = r.last if fresh else CONFLICT
                    synced.update([part] if fresh else [])
            for w in update.windows:
                key = (w.version, w.window, w.start_ms)
                for part, new in (w.dedupe or {}).items():
                    state = self._partitions.get((topic, part))
                    if part in synced and state is not None and key in state.windows:
                        state.windows[key].add(new)
            for state in self._partitions.values():
                for old in [k for k in state.windows if k[1] != ALL_TIME and k[2] + 2 * _length_ms(k[1]) < now_ms]:
                    del state.windows[old]

    def invalidate(self, topic: str, partitions: list[int] | None = None) -> None:
        """Forget the lists of these partitions of `topic` (all of them with None); they are reloaded on use."""
        with self._lock:
            for t, p in list(self._partitions):
                if t == topic and (partitions is None or p in partitions):
                    del self._partitions[(t, p)]

    def clear(self) -> None:
        """Forget everything (on a new partition assignment)."""
        with self._lock:
            self._partitions.clear()


def _length_ms(window: str) -> int:
    return window_seconds(window) * 1000
