"""Exactly once without Kafka: releases, crashes at any point, the state and offsets a restart resumes from."""

from __future__ import annotations

import random

import numpy as np
import pytest

from ldpstream.contract.wire import AttributeColumns, concatenate, envelope_of
from ldpstream.shuffler.state import (
    Pending,
    Release,
    ShufflerState,
    decode_state,
    encode_state,
    releases,
    threshold,
)
from tests.fuzzing import mutate

HOUR = 3_600_000


def raw_message(ids: np.ndarray, windows: np.ndarray):
    """A raw message as the edge writes it: devices 0, times the window starts, one attribute carrying each row's
    id (so a test can tell which rows were released)."""
    return envelope_of("c", 1, np.zeros(len(ids), dtype=np.uint64), windows.astype(np.int64),
                       {0: AttributeColumns(np.arange(len(ids)), {"v": ids.astype(np.int64)})})


class Run:
    """One shuffler's life over a raw log of (partition, offset, envelope): hold, close, commit (all in memory)."""

    def __init__(self, state: ShufflerState, committed: dict[int, int]) -> None:
        self.state, self.pending, self.read_next = state, Pending(), dict(committed)
        self.committed = dict(committed)

    def read(self, log: list[tuple[int, int, object]], upto: int) -> None:
        """Read the log's messages at positions < upto that are at or after the resume offsets."""
        for p, o, env in log[:upto]:
            if o >= self.read_next.get(p, 0):
                self.pending.add(self.state, 1, concatenate([env]), np.array([p]), np.array([o]))
                self.read_next[p] = o + 1

    def close(self, window: int, draw: int) -> list[int]:
        """A close at `window` committed: the ids it released."""
        out: list[int] = []
        new = []
        for at, group in list(releases(self.pending, 1, window, draw)):
            rows = self.pending.take(1, group)
            out += [int(v) for part in rows.shuffled() for v in part.attributes[0].columns["v"]]
            new.append(Release(1, at, dict(self.read_next)))
        self.committed = self.pending.committed(self.read_next)
        self.state = ShufflerState(self.state.releases + new, {**self.state.closed, 1: window},
                                   self.state.figures).trimmed(self.committed)
        return out


def make_log(rng: np.random.Generator, messages: int, partitions: int) -> tuple[list, list[int]]:
    """Messages on random partitions whose rows fall in hours 0-5, a few late (an earlier hour after later ones)."""
    log, ids, offsets = [], [], dict.fromkeys(range(partitions), 0)
    next_id = 0
    for k in range(messages):
        n = int(rng.integers(1, 6))
        hour = min(5, k * 6 // messages) - int(rng.random() < 0.1)
        windows = np.array([max(hour, 0) - int(rng.random() < 0.2) for _ in range(n)]).clip(0) * HOUR
        p = int(rng.integers(partitions))
        env = raw_message(np.arange(next_id, next_id + n), windows)
        log.append((p, offsets[p], env))
        offsets[p] += 1 + int(rng.random() < 0.3)  # gaps: the markers of transactions, aborted writes
        ids += list(range(next_id, next_id + n))
        next_id += n
    return log, ids


@pytest.mark.parametrize("seed", range(40))
def test_every_row_is_released_once_whatever_the_crashes(seed: int) -> None:
    rng = np.random.default_rng(seed)
    log, ids = make_log(rng, 60, int(rng.integers(1, 4)))
    released: list[int] = []
    durable = (ShufflerState(), {})  # what the last committed transaction left: state, offsets
    run = Run(*durable)
    position = 0
    for hour in range(7):
        position = min(len(log), position + int(rng.integers(5, 15)))
        run.read(log, position)
        if rng.random() < 0.3:  # a crash before the close: start over from what was committed
            run = Run(*durable)
            run.read(log, position)
        out = run.close(hour * HOUR, draw=int(rng.integers(1, 30)) if hour < 6 else 1)
        if rng.random() < 0.2:  # a crash mid-transaction: nothing of it counts
            run = Run(*durable)
            run.read(log, position)
            out = run.close(hour * HOUR, draw=1 if hour == 6 else int(rng.integers(1, 30)))
        released += out
        durable = (decode_state(encode_state(run.state)), dict(run.committed))
    run.read(log, len(log))
    released += run.close(10 * HOUR, draw=1)
    assert sorted(released) == ids


def test_a_small_window_rolls_into_the_next() -> None:
    run = Run(ShufflerState(), {})
    log = [(0, 0, raw_message(np.arange(3), np.zeros(3))), (0, 1, raw_message(np.arange(3, 8), np.full(5, HOUR)))]
    run.read(log, 1)
    assert run.close(0, draw=4) == []  # 3 < 4: held
    assert run.committed == {0: 0}  # the held rows' message is read again after a crash
    run.read(log, 2)
    assert sorted(run.close(HOUR, draw=4)) == list(range(8))  # window 0's rows go out with window 1's
    assert run.committed == {0: 2} and run.state.releases == []  # nothing re-read can precede it: trimmed


def test_threshold_is_randomized_above_min_batch() -> None:
    draws = {threshold(1000) for _ in range(2000)}
    assert min(draws) >= 1000 and max(draws) <= 1100 and len(draws) > 50


def test_trimmed_drops_releases_no_reread_message_precedes() -> None:
    state = ShufflerState([Release(1, 0, {0: 5, 1: 2}), Release(1, HOUR, {0: 9, 1: 4})], {1: HOUR})
    assert state.trimmed({0: 5, 1: 2}).releases == state.releases[1:]
    assert state.trimmed({0: 4, 1: 2}).releases == state.releases


def test_state_round_trips_and_refuses_other_bytes() -> None:
    state = ShufflerState([Release(2, HOUR, {0: 5})], {2: HOUR})
    assert decode_state(encode_state(state)) == state
    rng = random.Random(1)
    for _ in range(500):  # a mutated record decodes to some state or raises ValueError: nothing else
        try:
            decode_state(mutate(encode_state(state), rng))
        except ValueError:
            pass
