"""The devices each partition has counted per dedupe window, held by the worker that owns the partition.

A device's reports all go to one partition (`ldpstream.contract.pseudonym.device_partitions`), so "has this device
reported in this window?" is answered from its partition's list alone. `SeenDevices` keeps those lists in memory as
`DeviceSet`s (vectorised hash tables: a micro-batch's lookups and additions cost O(1) per device), loaded from the store
on first use together with the applied offset they match (`synced`). A micro-batch is checked against them and written
with that offset as its `expected` one; the store refuses the write (`stale`) if another worker applied batches from the
partition since, and the caller then `invalidate`s it and tries again on a fresh load. After a write is applied,
`commit` adds its devices and moves `synced` on.

If a later load of another window finds the partition at a different offset than the lists already held, the
partition is marked CONFLICT, so its next write is refused and everything is reloaded at one offset.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np

from ldpstream.aggregator.store import ALL_TIME, BatchUpdate, StatsStore, WindowKey
from ldpstream.contract.spec import window_seconds
from ldpstream.contract.topics import collection_of, source, source_partition

CONFLICT = -2  # never an applied offset: a write expecting it is refused as stale


EMPTY = np.uint64(0)  # a free slot; the device id 0 is kept apart (`DeviceSet.has_zero`)
FIBONACCI = np.uint64(0x9E3779B97F4A7C15)  # 2^64 / golden ratio: multiplicative hashing, the high bits as the slot
MIGRATE_SLOTS = 1 << 17  # slots of a replaced table moved per addition: a resize is spread, never one long stall
PREPARE_FROM, PREPARED_BY = 1 / 4, 0.45  # load factors between which the next (twice as large) table is zeroed, a
# share per addition (it is needed at 1/2)


class HashTable:
    """Open addressing with linear probing over uint64 ids (never 0), vectorised over a batch of ids."""

    def __init__(self, capacity: int, slots: np.ndarray | None = None) -> None:
        self.slots = np.zeros(capacity, dtype=np.uint64) if slots is None else slots  # `slots`: zeroed already
        self.mask = capacity - 1
        self.shift = np.uint64(64 - (capacity.bit_length() - 1))

    def home(self, ids: np.ndarray) -> np.ndarray:
        return ((ids * FIBONACCI) >> self.shift).astype(np.int64)  # uint64 products wrap: the hash is mod 2^64

    def contains(self, ids: np.ndarray) -> np.ndarray:
        """Per id (none 0), whether it is in the table."""
        hit = np.zeros(len(ids), dtype=bool)
        todo, at = np.arange(len(ids)), self.home(ids)
        while len(todo):
            found = self.slots[at]
            match = found == ids[todo]
            hit[todo[match]] = True
            on = ~match & (found != EMPTY)  # an occupied slot holding another id: look at the next one
            todo, at = todo[on], (at[on] + 1) & self.mask
        return hit

    def place(self, ids: np.ndarray) -> None:
        """Insert ids (distinct, none 0, not in the table; the table must stay below full)."""
        at = self.home(ids)
        while len(ids):
            free = np.flatnonzero(self.slots[at] == EMPTY)
            self.slots[at[free]] = ids[free]  # ids wanting the same free slot: one of them lands
            rest = np.ones(len(ids), dtype=bool)
            rest[free[self.slots[at[free]] == ids[free]]] = False
            ids, at = ids[rest], (at[rest] + 1) & self.mask  # every slot they wanted is taken now


class DeviceSet:
    """A set of uint64 device ids: a hash table at most half full whose every operation is vectorised over a
    micro-batch's ids, so a lookup costs about two probes per id whatever the set's size. Growing moves the old
    table's ids over the next additions, MIGRATE_SLOTS at a time (meanwhile lookups ask both tables), into a table
    whose memory was zeroed over the additions before, from load PREPARE_FROM on: the first touch of a fresh 32 MB
    table costs 20-85 ms of page faults on this machine, and every partition of a steady stream reaches its
    threshold within a few micro-batches of the others (8 at once stalled a worker for 0.4-0.6 s: p99 freshness
    0.45 s at 10% load, benchmarks/bench_pipeline.py). (Sorted runs,
    before, cost a binary search per id in each of log n runs: at millions of devices per partition the dedupe was
    most of a worker's time, benchmarks/bench_pipeline.py.)

    Examples
    --------
    >>> seen = DeviceSet(np.array([9, 2, 0], dtype=np.uint64))
    >>> seen.add(np.array([5], dtype=np.uint64))
    >>> seen.contains(np.array([5, 6, 9, 0], dtype=np.uint64)).tolist(), len(seen)
    ([True, False, True, True], 4)
    """

    def __init__(self, values: np.ndarray | None = None) -> None:
        self.table = HashTable(16)
        self.old: HashTable | None = None  # the table being moved into `table`, from slot `moved` on
        self.moved = 0
        self.next: np.ndarray | None = None  # the next table's slots, zeroed up to `zeroed`
        self.zeroed = 0
        self.size = 0
        self.has_zero = False
        if values is not None and len(values):
            ordered = np.sort(np.asarray(values, dtype=np.uint64))  # (np.unique hashes: 4x slower at millions)
            self.add(ordered[np.concatenate(([True], ordered[1:] != ordered[:-1]))])

    @property
    def nbytes(self) -> int:
        """The memory its tables hold (the table, the one being moved out of, the next one being zeroed)."""
        return sum(a.nbytes for a in (self.table.slots, self.old.slots if self.old else None, self.next)
                   if a is not None)

    def __len__(self) -> int:
        return self.size

    def values(self) -> np.ndarray:
        """The ids, sorted."""
        tables = [self.table.slots] + ([self.old.slots[self.moved:]] if self.old is not None else [])
        kept = [t[t != EMPTY] for t in tables]
        return np.sort(np.concatenate([*kept, np.zeros(int(self.has_zero), dtype=np.uint64)]))

    def contains(self, values: np.ndarray) -> np.ndarray:
        """Per id, whether it is in the set."""
        values = np.asarray(values, dtype=np.uint64)
        hit = (values == 0) & self.has_zero
        rest = np.flatnonzero(values != 0)
        found = self.table.contains(values[rest])
        if self.old is not None:  # ids not moved yet are in the old table only (moved ones are in both)
            found |= self.old.contains(values[rest])
        hit[rest] = found
        return hit

    def add(self, new: np.ndarray) -> None:
        """Add ids that are distinct and not in the set yet."""
        new = np.asarray(new, dtype=np.uint64)
        if (new == 0).any():
            self.has_zero, self.size, new = True, self.size + 1, new[new != 0]
        self.size += len(new)
        self._prepare(len(new))
        if 2 * self.size > len(self.table.slots):
            self._finish_move()  # (a second growth before the last was spread out: rare, done at once)
            capacity = len(self.table.slots)
            while 2 * self.size > capacity:
                capacity *= 2
            slots = None
            if self.next is not None and len(self.next) == capacity:
                self.next[self.zeroed:] = 0  # (growth came sooner than the zeroing planned for: the rest now)
                slots = self.next
            self.next = None
            self.old, self.moved, self.table = self.table, 0, HashTable(capacity, slots)
        self.table.place(new)
        self._move(MIGRATE_SLOTS)

    def _prepare(self, added: int) -> None:
        """Zero a share of the next table, sized so that it is done when the load reaches PREPARED_BY."""
        capacity = len(self.table.slots)
        if self.next is None:
            if self.size <= PREPARE_FROM * capacity:
                return
            self.next, self.zeroed = np.empty(2 * capacity, dtype=np.uint64), 0
        window = (PREPARED_BY - PREPARE_FROM) * capacity  # additions from the start of the zeroing to its end
        share = max(1 << 16, int(len(self.next) * added / window))
        self.next[self.zeroed:self.zeroed + share] = 0
        self.zeroed = min(len(self.next), self.zeroed + share)

    def _move(self, count: int) -> None:
        if self.old is None:
            return
        chunk = self.old.slots[self.moved:self.moved + count]
        self.table.place(chunk[chunk != EMPTY])
        self.moved += count
        if self.moved >= len(self.old.slots):
            self.old = None

    def _finish_move(self) -> None:
        if self.old is not None:
            self._move(len(self.old.slots))


@dataclass
class _Partition:
    synced: int  # the applied offset the lists match
    windows: dict[WindowKey, DeviceSet] = field(default_factory=dict)


class SeenDevices:
    """The dedupe lists of the partitions of one store's collections that this worker has touched."""

    def __init__(self, store: StatsStore) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._partitions: dict[tuple[str, int], _Partition] = {}

    def devices(self, topic: str, partition: int, key: WindowKey) -> DeviceSet:
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
            state.windows[key] = DeviceSet(lists[key])
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

    def nbytes(self) -> int:
        """The memory the lists of every partition and window held here take."""
        with self._lock:
            return sum(d.nbytes for state in self._partitions.values() for d in state.windows.values())

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
