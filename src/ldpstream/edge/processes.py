"""Edge processes: start one (`python -m ldpstream.edge`) and wait until it answers, stop it."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from ldpstream.runtime.supervisor import launch, stop


def start_edge(port: int, spool_dir: Path, *args: str, host: str = "127.0.0.1", log_file: Path | None = None,
               env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """One `python -m ldpstream.edge` process in its own process group, dying with this process (`args`: more of
    its options)."""
    argv = [sys.executable, "-m", "ldpstream.edge", "--host", host, "--port", str(port), "--spool-dir", str(spool_dir),
            *args]
    return launch(argv, log_file, env)


def wait_live(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 30.0, probe: str = "/healthz") -> None:
    """Wait until the edge at `url` answers `probe` (/healthz: alive; /readyz: ready) with 200 (RuntimeError if it
    exits or time runs out)."""
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
