"""The one atomic file write of the project (device state, outbox reports, secrets, cached strategies, Prometheus
targets): a reader sees the old file or the new one, never a part, and a crash leaves one of them whole."""

from __future__ import annotations

import os
from pathlib import Path


def write_atomically(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Replace `path` with `data` (permissions `mode`): written and fsynced in a temporary file beside it, then
    renamed over it. OSError if that fails; the old file is then left as it was and the temporary file removed."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
