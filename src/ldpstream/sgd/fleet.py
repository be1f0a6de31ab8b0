"""A fleet of Python devices that train through the edge (`ldp simulate --join URL --token F --train JOB ...`).

Each simulated device is a real `ldpstream.device.training.TrainingDevice` with its own state directory (ledger,
outbox, credential) and its own rows of the dataset (`ldpstream.sgd.images.device_split`: IID, one example per
device, or non-IID, ten examples from two classes). The fleet runs the devices in rounds: the next B devices (the
job's batch size) in a random order make their update at the current version and flush it, `concurrency` at a time;
then the fleet waits for the coordinator's next version (bounded) before the next round, so that few updates come
too late for their version. It stops when the job is done, every device has taken its rounds, or `timeout_s` passed.
Device i's noise is drawn from `device_source(seed, i)`, and the run lists which device sent an update for which
version (`FleetRun.sent`): with both, `ldpstream.sgd.federated.Replay` re-runs the fleet's updates offline.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ldpstream.contract.training import decode_update
from ldpstream.device.edge_api import EdgeError
from ldpstream.device.ledger import BudgetExceeded
from ldpstream.device.policy import PrivacyPolicy
from ldpstream.device.sdk import DEFAULT_POLICY, SpecRefused
from ldpstream.device.training import TrainingDevice
from ldpstream.mechanisms.gradients.device import GeneratorUniforms
from ldpstream.sgd.images import LabelledSet, device_split

VERSION_WAIT_S = 30.0  # the longest a round waits for the coordinator's next version


@dataclass
class FleetRun:
    """What a training fleet did: devices joined or refused (by code), updates made and taken, outcomes, and the
    (device, model version) of each update made (`sent`, in the order made; not in the JSON summary)."""

    devices: int
    joined: int = 0
    refused: Counter[str] = field(default_factory=Counter)
    updates: int = 0
    taken: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    last_version: int = -1
    done: bool = False
    seconds: float = 0.0
    sent: list[tuple[int, int]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"devices": self.devices, "joined": self.joined, "refused": dict(self.refused),
                "updates": self.updates, "taken": self.taken, "outcomes": dict(self.outcomes),
                "last_version": self.last_version, "done": self.done, "seconds": self.seconds}


def device_source(seed: int, device: int) -> GeneratorUniforms:
    """The randomness of a fleet's device `device` (`ldpstream.mechanisms.gradients.device.Uniforms`)."""
    return GeneratorUniforms(np.random.default_rng([seed, device]))


def train_fleet(url: str, job: str, token: str, keys: Any, data: LabelledSet, devices: int, split: str,
                state_dir: Path, *, policy: PrivacyPolicy | None = DEFAULT_POLICY, seed: int = 0,
                concurrency: int = 8, timeout_s: float = 3600.0, tls: Any = None,
                on_round: Callable[[FleetRun], None] | None = None) -> FleetRun:
    """Join `devices` devices to `job` and train until the job is done, the devices are spent, or `timeout_s`."""
    started = time.monotonic()
    rows = device_split(split, data.y, seed).rows[:devices]
    run = FleetRun(len(rows))
    rng = np.random.default_rng(seed)

    def join(i: int) -> TrainingDevice | None:
        try:
            return TrainingDevice.join(url, job, token, keys, policy, state_dir / f"device-{i}",
                                       source=device_source(seed, i), tls=tls)
        except SpecRefused as refused:
            run.refused[refused.code] += 1
        except EdgeError as exc:
            run.refused[f"edge_{exc.reason or exc.status}"] += 1
        return None

    with ThreadPoolExecutor(concurrency) as pool:
        fleet = list(pool.map(join, range(len(rows))))
        run.joined = sum(d is not None for d in fleet)
        live = [i for i, d in enumerate(fleet) if d is not None]
        if not live:
            return run
        batch = fleet[live[0]].spec.batch_size  # type: ignore[union-attr]

        def step(i: int) -> tuple[str, int, int]:
            device = fleet[i]
            assert device is not None
            try:
                made = device.train((data.x[rows[i]], data.y[rows[i]]))
            except SpecRefused as refused:
                return f"refused:{refused.code}", 0, -1
            except BudgetExceeded:
                return "spent", 0, -1
            except EdgeError as exc:
                return f"edge:{exc.reason or exc.status}", 0, -1
            if made is None:
                return "waiting", 0, -1
            return "sent", device.flush(), decode_update(made, device.spec).model_version

        version = _wait_for_version(fleet[live[0]], -1, started + timeout_s)  # type: ignore[arg-type]
        while time.monotonic() - started < timeout_s and live:
            order = rng.permutation(live)
            for start in range(0, len(order), batch):
                dealt = order[start : start + batch].tolist()
                results = list(pool.map(step, dealt))
                for i, (outcome, taken, made_for) in zip(dealt, results, strict=True):
                    run.outcomes[outcome] += 1
                    run.updates += outcome == "sent"
                    run.taken += taken
                    if outcome == "sent":
                        run.sent.append((i, made_for))
                if any(o.startswith("refused:done") for o, _, _ in results):
                    run.done = True
                    break
                version = _wait_for_version(fleet[live[0]], version, started + timeout_s)  # type: ignore[arg-type]
                run.last_version = version
                if on_round is not None:
                    on_round(run)
            if run.done:
                break
            live = [i for i in live if _can_train(fleet[i])]  # type: ignore[arg-type]
    run.seconds = time.monotonic() - started
    return run


def _can_train(device: TrainingDevice) -> bool:
    """Whether the device may still send an update (its ledger has room for one more)."""
    return device.ledger.lifetime_spent(device.key) + device.spec.epsilon <= device.spec.epsilon * \
        device.spec.max_rounds * (1 + 1e-9)


def _wait_for_version(device: TrainingDevice, version: int, deadline: float) -> int:
    """The model version once it is past `version` (or the job is done, or VERSION_WAIT_S or the deadline pass)."""
    until = min(deadline, time.monotonic() + VERSION_WAIT_S)
    current = version
    while time.monotonic() < until:
        try:
            current = device.model()[0].version
        except SpecRefused as refused:
            if refused.code == "done":
                return version + 1
            raise
        except EdgeError:
            pass
        if current > version:
            return current
        time.sleep(0.05)
    return current
