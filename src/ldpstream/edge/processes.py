"""Edge processes: start one (the catalog's `edge`: `python -m ldpstream.edge`) and wait until it answers, stop it."""

from __future__ import annotations

import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from ldpstream.runtime.catalog import service
from ldpstream.runtime.supervisor import start, stop


def start_edge(port: int, spool_dir: Path, *args: str, host: str = "127.0.0.1", log_file: Path | None = None,
               env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """One edge process in its own process group, dying with this process (`args`: more of its options)."""
    return start(service("edge"), "--host", host, "--port", str(port), "--spool-dir", str(spool_dir), *args,
                 log_file=log_file, env=env)


def wait_live(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 30.0, probe: str | None = None) -> None:
    """Wait until the edge at `url` answers `probe` (default: its health endpoint, /healthz: alive; /readyz: ready)
    with 200 (RuntimeError if it exits or time runs out)."""
    probe = probe or service("edge").health or "/healthz"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the edge exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"{url}{probe}", timeout=1.0) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            time.sleep(0.1)
    raise RuntimeError(f"the edge at {url} did not answer within {timeout_s:g} s")


def stop_edge(proc: subprocess.Popen[bytes], timeout_s: float = 30.0) -> None:
    """SIGTERM the edge's process group and wait (SIGKILL if it hangs)."""
    stop(proc, timeout_s)
