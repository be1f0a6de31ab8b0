"""Running the TypeScript training fleet (tests/typescript/train_devices.mjs) from Python: the rows each Node device
holds written as float32 / uint8 files, a manifest, the fleet's JSON summary back. Used by the TypeScript training
tests and by any end-to-end test that runs Node devices beside Python ones."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from ts_support import HERE, run_node

from ldpstream.mechanisms.hashing import mix64

GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # SplitMix64's increment


class SplitMix64:
    """A device's randomness (`ldpstream.mechanisms.gradients.device.Uniforms`) from SplitMix64's stream seeded by
    `seed`: words mix64(seed + (j + 1) golden), j = 0, 1, ...; a uniform is (word >> 11) 2^-53. The stream
    train_devices.mjs gives a Node device whose manifest names its seed, so a replay draws what the device drew."""

    def __init__(self, seed: int) -> None:
        self.seed, self.at = np.uint64(seed), 0

    def _words(self, count: int) -> np.ndarray:
        j = np.arange(self.at + 1, self.at + count + 1, dtype=np.uint64)
        self.at += count
        with np.errstate(over="ignore"):
            return mix64(self.seed + j * GOLDEN)

    def uniforms(self, count: int) -> np.ndarray:
        return (self._words(count) >> np.uint64(11)).astype(np.float64) * 2.0**-53

    def word64(self) -> int:
        return int(self._words(1)[0])


def run_node_fleet(tmp: Path, edge_url: str, job: str, token: str, keys: Any, x: np.ndarray, y: np.ndarray,
                   rows: np.ndarray, *, policy: dict[str, Any] | None = None, seed: int = 0,
                   timeout_s: float = 300.0, seeds: list[int] | None = None) -> dict[str, Any]:
    """Join one TypeScript `TrainingDevice` per row of `rows` (device i holds examples x[rows[i]], y[rows[i]]) and
    train through the edge until the job is done, the devices are spent, or `timeout_s`; the fleet's summary
    (devices, joined, refused by code, updates, taken, outcomes, last_version, done, seconds, update_ms, and `sent`:
    [device, model version] per update made). With `seeds`, device i's noise is `SplitMix64(seeds[i])`'s stream."""
    tmp.mkdir(parents=True, exist_ok=True)
    np.ascontiguousarray(x, dtype="<f4").tofile(tmp / "rows.f32")
    np.ascontiguousarray(y, dtype=np.uint8).tofile(tmp / "labels.u8")
    manifest = {"edge": edge_url, "job": job, "token": token, "keys": keys, "x": str(tmp / "rows.f32"),
                "y": str(tmp / "labels.u8"), "features": int(x.shape[1]), "devices": np.asarray(rows).tolist(),
                "state": str(tmp / "state"), "timeout_s": timeout_s, "seed": seed, "policy": policy or {},
                **({"seeds": seeds} if seeds is not None else {})}
    (tmp / "manifest.json").write_text(json.dumps(manifest))
    done = run_node(HERE / "train_devices.mjs", str(tmp / "manifest.json"), timeout=timeout_s + 120)
    summary: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return summary
