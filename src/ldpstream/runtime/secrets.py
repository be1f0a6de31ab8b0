"""Secret files of the local deployment: made once, readable by their owner only (0600, in a 0700 directory).

Every generated credential (Kafka and Redis passwords, the spec-signing key, the edge's master key) lives in a file
made by `create_secret`, under `Settings.secrets_dir` unless configured elsewhere.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from ldpstream.contract.files import write_atomically


def create_secret(path: Path, make: Callable[[], bytes]) -> bytes:
    """The content of the secret file `path`, written as `make()` (0600, fsynced) if it does not exist yet.

    Two processes racing to create it agree: the first writer wins (O_EXCL) and the other reads its content.
    """
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass  # made meanwhile by another process
        else:
            try:
                with os.fdopen(fd, "wb") as handle:
                    handle.write(make())
                    handle.flush()
                    os.fsync(handle.fileno())
            except BaseException:
                path.unlink(missing_ok=True)
                raise
    return path.read_bytes()


def replace_secret(path: Path, content: bytes) -> None:
    """Replace the secret file `path` with `content` atomically (0600): a reader sees the old or the new one."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    write_atomically(path, content, 0o600)
