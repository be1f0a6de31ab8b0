"""Running the TypeScript training fleet (tests/typescript/train_devices.mjs) from Python: the rows each Node device
holds written as float32 / uint8 files, a manifest, the fleet's JSON summary back. Used by the TypeScript training
tests and by any end-to-end test that runs Node devices beside Python ones."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from ts_support import HERE, run_node


def run_node_fleet(tmp: Path, edge_url: str, job: str, token: str, keys: Any, x: np.ndarray, y: np.ndarray,
                   rows: np.ndarray, *, policy: dict[str, Any] | None = None, seed: int = 0,
                   timeout_s: float = 300.0) -> dict[str, Any]:
    """Join one TypeScript `TrainingDevice` per row of `rows` (device i holds examples x[rows[i]], y[rows[i]]) and
    train through the edge until the job is done, the devices are spent, or `timeout_s`; the fleet's summary
    (devices, joined, refused by code, updates, taken, outcomes, last_version, done, seconds, update_ms)."""
    tmp.mkdir(parents=True, exist_ok=True)
    np.ascontiguousarray(x, dtype="<f4").tofile(tmp / "rows.f32")
    np.ascontiguousarray(y, dtype=np.uint8).tofile(tmp / "labels.u8")
    manifest = {"edge": edge_url, "job": job, "token": token, "keys": keys, "x": str(tmp / "rows.f32"),
                "y": str(tmp / "labels.u8"), "features": int(x.shape[1]), "devices": np.asarray(rows).tolist(),
                "state": str(tmp / "state"), "timeout_s": timeout_s, "seed": seed, "policy": policy or {}}
    (tmp / "manifest.json").write_text(json.dumps(manifest))
    done = run_node(HERE / "train_devices.mjs", str(tmp / "manifest.json"), timeout=timeout_s + 120)
    summary: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return summary
