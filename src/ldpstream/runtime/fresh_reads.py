"""What the caches of published specs and jobs do on a miss: wait for a read of the topic begun after the request
arrived, so what was published before it is found, while reads begin at most every `gap_s` and misses share them."""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any


def read_since(lock: AbstractContextManager[Any], last_start: Callable[[], float], read: Callable[[], None],
               arrived: float, gap_s: float) -> None:
    """Return once a read begun at or after `arrived` (monotonic seconds) is done. `last_start()`: when the last
    read began, asked with `lock` held (a read in progress holds it, so that read is done); `read()`, called with
    `lock` held, reads the topic and records its start. If no such read has begun, one begins `gap_s` after the
    last, unless another caller's begins first. Blocking."""
    while True:
        with lock:
            started = last_start()
            if started >= arrived:
                return
            wait_s = started + gap_s - time.monotonic()
            if wait_s <= 0:
                read()
                return
        time.sleep(wait_s)
