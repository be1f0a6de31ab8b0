"""Programs from Debian packages: found on PATH, or installed with apt-get on first use when we are root (CI)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from ldpstream.runtime.process import ServiceError


def debian_program(program: str, package: str, alternative: str = "") -> str:
    """The path of `program`: from PATH, else from Debian's `package` installed now (root only).

    ServiceError if it is missing and cannot be installed; `alternative` is appended to that message.
    """
    found = shutil.which(program)
    if found:
        return found
    advice = f"install it (Debian: `apt-get install {package}`)" + (f" {alternative}" if alternative else "")
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise ServiceError(f"`{program}` is not on PATH: {advice}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "--no-install-recommends", package]):
        result = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if result.returncode != 0:
            raise ServiceError(f"`{' '.join(cmd)}` failed:\n{tail_text(result.stdout + result.stderr)}")
    found = shutil.which(program) or next((str(p) for p in (Path("/usr/bin") / program, Path("/usr/sbin") / program)
                                           if p.exists()), None)
    if not found:
        raise ServiceError(f"Debian's {package} was installed but `{program}` is not on PATH")
    return found


def tail_text(text: str, lines: int = 20) -> str:
    """The last `lines` lines of a text."""
    return "\n".join(text.splitlines()[-lines:])
