"""What the TypeScript SDK's tests share: where the SDK is, and running Node on it. The SDK is built by
`make install-test` (npm ci, tsc, the browser bundle); a test that finds it unbuilt fails and says so."""

from __future__ import annotations

import json
import shutil
import subprocess
import zlib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SDK = ROOT / "sdk" / "typescript"
HERE = Path(__file__).resolve().parent
BUNDLE = SDK / "dist" / "browser" / "ldpstream-device.js"


def node() -> str:
    found = shutil.which("node")
    assert found is not None, "Node.js 20+ is needed for the TypeScript SDK's tests (`make install-test`)"
    return found


def require_built() -> None:
    """Fail, saying what to run, unless the SDK is built."""
    assert (SDK / "dist" / "index.js").exists() and BUNDLE.exists(), (
        "the TypeScript SDK is not built: run `make install-test` (npm ci and npm run build in sdk/typescript)")


def run_node(script: Path | str, *args: str, timeout: float = 600, env: dict[str, str] | None = None,
             cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    require_built()
    done = subprocess.run([node(), str(script), *args], capture_output=True, text=True, timeout=timeout, env=env,
                          cwd=cwd or ROOT, check=False)
    assert done.returncode == 0, (f"node {script} failed ({done.returncode}):\n{done.stdout[-4000:]}\n"
                                  f"{done.stderr[-4000:]}")
    return done


def perturb_with_typescript(tmp: Path, spec: str, records: list[dict[str, Any]],
                            strategy: dict[str, str] | None = None) -> bytes:
    """One envelope of reports made by the TypeScript SDK for these records (one device each), its randomness seeded
    by the spec and the records, so that a statistical check sees the same reports on every run."""
    job, out = tmp / "job.json", tmp / "reports.msgpack"
    seed = zlib.crc32(json.dumps([spec, records]).encode())
    job.write_text(json.dumps({"spec": spec, "records": records, "strategy": strategy, "seed": seed}))
    run_node(HERE / "perturb_reports.mjs", str(job), str(out))
    return out.read_bytes()
