"""The offline trainer of networks (`ldp train --offline --dataset ...`): rounds of B devices, in process.

Each epoch deals the devices of a `DeviceSplit` in a fresh random order into rounds of B (`accounting`). In a round,
every device computes the gradient of the cross-entropy on its own examples at the current model (their mean when it
holds several), clips it to the unit ball of the mechanism's norm (L2: scaled to norm <= 1; L-infinity: each
coordinate to [-1, 1]), and perturbs it with the job's gradient randomizer; the server takes the randomizer's
unbiased mean of the B reports and makes one step of `ServerOptimizer` (SGD with momentum, serving the bias-corrected
exponential moving average of its iterates: `server_optimizer`). The served model is the one evaluated and saved. The
B devices' per-example gradients are one vectorised pass (`Network.gradients`), their reports one `perturb` call.

Mechanisms: every gradient randomizer of `ldpstream.mechanisms.gradients` (pure eps-LDP), `gaussian` (the
(eps, delta)-LDP analytic Gaussian reference, `ldpstream.mechanisms.gaussian`) and `none` (the same clipping, no
noise). The server's step size, momentum and averaging act on the reports only: post-processing, free of privacy
cost.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ldpstream.contract.networks import Network
from ldpstream.contract.snapshot import Snapshot
from ldpstream.contract.training import JobSpec, MechanismSpec
from ldpstream.sgd.accounting import job_privacy, rounds_per_epoch
from ldpstream.sgd.images import DeviceSplit, LabelledSet
from ldpstream.sgd.models import TrainingError
from ldpstream.sgd.server_optimizer import DEFAULT_EMA, DEFAULT_LR, DEFAULT_MOMENTUM, ServerOptimizer

if TYPE_CHECKING:
    from ldpstream.mechanisms.gradients.device import Uniforms

GAUSSIAN_DELTA = 1e-5
CHUNK_ELEMENTS = 1 << 24  # per-example gradients computed in chunks of at most this many numbers (128 MiB)


class Randomizer(Protocol):
    """What the trainer needs of a gradient randomizer (the contract of `ldpstream.mechanisms.gradients`)."""

    @property
    def norm(self) -> str: ...

    def perturb(self, vectors: np.ndarray, rng: np.random.Generator) -> Any: ...

    def mean(self, reports: Any) -> np.ndarray: ...


class NoNoise:
    """The non-private run: reports are the clipped gradients themselves."""

    norm = "l2"

    def perturb(self, vectors: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return vectors

    def mean(self, reports: np.ndarray) -> np.ndarray:
        return np.asarray(reports).mean(axis=0)


def randomizer(name: str, dims: int, epsilon: float, k: int | None = None) -> Randomizer:
    """The randomizer called `name`: 'none', 'gaussian' (at delta 1e-5) or a gradient mechanism (`k`: ProjUnit's
    projected dimension, None for its default)."""
    if name == "none":
        return NoNoise()
    if name == "gaussian":
        from ldpstream.mechanisms.gaussian import GaussianVector

        return GaussianVector(dims, epsilon, GAUSSIAN_DELTA)
    from ldpstream.mechanisms.gradients import gradient_mechanism

    mechanism: Randomizer = gradient_mechanism(name, dims=dims, epsilon=epsilon, **({} if k is None else {"k": k}))
    return mechanism


def clip(gradients: np.ndarray, norm: str) -> np.ndarray:
    """Each row scaled into the unit L2 ball ('l2'), or each coordinate clipped to [-1, 1] ('linf'), in place."""
    if norm == "l2":
        lengths = np.sqrt(np.einsum("ij,ij->i", gradients, gradients))
        gradients /= np.maximum(lengths, 1.0)[:, None]
        return gradients
    if norm == "linf":
        return np.clip(gradients, -1.0, 1.0, out=gradients)
    raise TrainingError(f"unknown clipping norm {norm!r}")


def device_gradients(net: Network, theta: np.ndarray, data: LabelledSet, rows: np.ndarray) -> np.ndarray:
    """Per device (row of `rows`, its example indices): the mean gradient over its examples, shape (B, size)."""
    out = net.gradients(theta, data.x[rows[:, 0]], data.y[rows[:, 0]])
    for j in range(1, rows.shape[1]):
        out += net.gradients(theta, data.x[rows[:, j]], data.y[rows[:, j]])
    return out / rows.shape[1] if rows.shape[1] > 1 else out


@dataclass(frozen=True)
class Evaluation:
    accuracy: float
    accuracy_stderr: float
    loss: float
    loss_stderr: float


def evaluate(net: Network, theta: np.ndarray, test: LabelledSet) -> Evaluation:
    """Held-out accuracy and mean cross-entropy, each with its standard error over the n test examples."""
    n = len(test.y)
    step = max(1, CHUNK_ELEMENTS // max(net.size, 1))
    losses = np.concatenate([net.loss(theta, test.x[i : i + step], test.y[i : i + step]) for i in range(0, n, step)])
    right = np.concatenate([net.predict(theta, test.x[i : i + step]) == test.y[i : i + step]
                            for i in range(0, n, step)])
    acc = float(right.mean())
    return Evaluation(acc, math.sqrt(acc * (1 - acc) / n), float(losses.mean()), float(losses.std() / math.sqrt(n)))


@dataclass(frozen=True)
class FederatedJob:
    """One offline job: network, randomizer and its epsilon per report, B devices a round, T epochs, the server's
    learning rate, momentum and EMA decay (`ServerOptimizer`), the seed of the device order and the noise, the clip
    C (a device's gradient is scaled to L2 norm <= C; the server's step takes C times the reports' unbiased mean, as
    a device job's coordinator does) and ProjUnit's projected dimension k (None: its default)."""

    mechanism: str
    epsilon: float
    clients_per_round: int
    epochs: int
    lr: float = DEFAULT_LR
    momentum: float = DEFAULT_MOMENTUM
    seed: int = 0
    ema: float = DEFAULT_EMA
    clip: float = 1.0
    k: int | None = None

    def __post_init__(self) -> None:
        if not (math.isfinite(self.epsilon) and self.epsilon > 0):
            raise TrainingError(f"epsilon must be finite and > 0, got {self.epsilon}")
        if not (math.isfinite(self.clip) and self.clip > 0):
            raise TrainingError(f"the clip must be finite and > 0, got {self.clip}")
        if self.epochs < 1 or self.clients_per_round < 1:
            raise TrainingError(f"need epochs >= 1 and clients per round >= 1, got {self.epochs}, "
                                f"{self.clients_per_round}")
        ServerOptimizer(self.lr, self.momentum, self.ema)  # TrainingError on a bad lr, momentum or EMA decay

    @property
    def optimizer(self) -> ServerOptimizer:
        return ServerOptimizer(self.lr, self.momentum, self.ema)


def device_job_twin(spec: JobSpec, split: DeviceSplit, seed: int = 0) -> tuple[FederatedJob, DeviceSplit]:
    """The offline trainer's job and devices with the same settings as the device job `spec` (protocol section 13)
    whose fleet deals devices in `split`'s order: its mechanism (and k), epsilon per report, clip, B = batch_size, the
    server's lr and momentum without EMA (a job's coordinator serves its last iterate: `jobrun`), T = max_rounds epochs;
    and the split's first N = B max_versions / max_rounds devices, each with its first max_examples rows (what a
    device trains on), so that the trainer's T N / B rounds are the job's versions, each device in one round an epoch
    as a fleet runs them (`ldpstream.sgd.fleet`). The cap parameters are the optimal ones at (eps, P) on both sides
    (`jobfile.complete_job` derives the job's). TrainingError if no whole number of devices fits."""
    b, rounds = spec.batch_size, spec.max_rounds
    devices, extra = divmod(b * spec.max_versions, rounds)
    if extra or devices % b:
        raise TrainingError(f"{spec.max_versions} versions of {b} updates are no whole number of devices taking "
                            f"{rounds} rounds of {b} each")
    if devices > split.devices:
        raise TrainingError(f"the job needs {devices} devices, the split has {split.devices}")
    job = FederatedJob(spec.mechanism.name, spec.epsilon, b, rounds, spec.lr, spec.momentum, seed, ema=0.0,
                       clip=spec.clip, k=spec.mechanism.k)
    return job, DeviceSplit(split.kind, split.rows[:devices, : spec.max_examples])


class DeviceReports:
    """The devices' own update randomizer (protocol section 13.5: `privunitg_report` or `projunit_report` of
    `ldpstream.mechanisms.gradients.device`, the cap (p, q) of the job's `mechanism`), each device drawing from its own
    `sources[device]`, and the reports decoded as a job's coordinator decodes updates (`ldpstream.sgd.jobrun`: the
    float32 wire values, ProjUnit's seeded projection undone; `mean`: their float64 mean)."""

    norm = "l2"

    def __init__(self, mechanism: MechanismSpec, dims: int, sources: Sequence[Uniforms]) -> None:
        from ldpstream.mechanisms.gradients.projunit import ProjUnit

        self.mechanism, self.sources = mechanism, sources
        self.projection = ProjUnit(dims, 1.0, k=mechanism.k) if mechanism.name == "projunit" else None

    def perturb(self, vectors: np.ndarray, devices: np.ndarray) -> np.ndarray:
        """The decoded reports (float64, one row per vector) of `vectors`, row i perturbed by device `devices[i]`."""
        from ldpstream.mechanisms.gradients.device import privunitg_report, projunit_report

        m, rows = self.mechanism, []
        for x, device in zip(vectors, devices.tolist(), strict=True):
            source = self.sources[device]
            if self.projection is None:
                rows.append(privunitg_report(x, m.p, m.q, source)["value"].reshape(-1).astype(np.float64))
            else:
                report = projunit_report(x, m.k or 0, m.p, m.q, source)
                rows.append(self.projection.decode({"seed": report["seed"], "value": report["value"]})[0])
        return np.stack(rows)

    def mean(self, reports: np.ndarray) -> np.ndarray:
        return reports.mean(axis=0)


@dataclass(frozen=True)
class Replay:
    """What a device job's fleet did, for `train_federated` to replay: per epoch, the split's devices in the order
    they were dealt into rounds (`dealt`, shape (epochs, devices): round r of an epoch is its devices r B to r B + B -
    1, the model version they sent their updates for), their randomizer and randomness (`reports`), and the job's
    version 0 (`theta0`: `Network.init(jobrun.initial_rng(spec))`)."""

    dealt: np.ndarray
    reports: DeviceReports
    theta0: np.ndarray


@dataclass(frozen=True)
class FederatedRun:
    """An offline job's outcome: the JSON `ldp train --offline --dataset ...` prints, and the final model version."""

    summary: dict[str, Any]
    snapshot: Snapshot


def train_federated(job: FederatedJob, net: Network, train: LabelledSet, split: DeviceSplit,
                    test: LabelledSet, replay: Replay | None = None) -> FederatedRun:
    """Run `job` (module docstring): the JSON summary and the model after its last round (version = rounds). With a
    `replay`, its device order, reports and version 0 stand for the seeded ones (`Replay`)."""
    if train.dims != net.features or train.classes != net.classes:
        raise TrainingError(f"{net.name} {net.dims} does not fit {train.dims} features and {train.classes} classes")
    started = time.perf_counter()
    per_epoch = rounds_per_epoch(split.devices, job.clients_per_round)
    init_seed, order_seed, noise_seed = np.random.SeedSequence(job.seed).spawn(3)
    order_rng, noise_rng = np.random.default_rng(order_seed), np.random.default_rng(noise_seed)
    mechanism = randomizer(job.mechanism, net.size, job.epsilon, job.k)
    server = job.optimizer
    if replay is not None and replay.dealt.shape != (job.epochs, split.devices):
        raise TrainingError(f"a replay deals {job.epochs} epochs of {split.devices} devices, got {replay.dealt.shape}")
    state = server.start(net.init(np.random.default_rng(init_seed)) if replay is None else replay.theta0.copy())
    b = job.clients_per_round
    for epoch in range(job.epochs):
        order = order_rng.permutation(split.devices) if replay is None else replay.dealt[epoch]
        for r in range(per_epoch):
            devices = order[r * b : (r + 1) * b]
            gradients = device_gradients(net, state.theta, train, split.rows[devices])
            gradients = clip(gradients / job.clip, mechanism.norm)
            if replay is None:
                mean = mechanism.mean(mechanism.perturb(gradients, noise_rng))
            else:
                mean = replay.reports.mean(replay.reports.perturb(gradients, devices))
            state = server.step(state, job.clip * mean)
        if not np.isfinite(state.theta).all():
            raise TrainingError("the model diverged (non-finite parameters): lower --lr or --momentum")
    theta = server.served(state)
    result = evaluate(net, theta, test)
    last = evaluate(net, state.theta, test) if job.ema else result
    private = job.mechanism != "none"
    privacy = job_privacy(job.epsilon, job.epochs, b / split.devices,
                          GAUSSIAN_DELTA if job.mechanism == "gaussian" else 0.0) if private else {
        "epsilon_per_report": None, "participations_per_device": job.epochs, "sampling_rate": b / split.devices,
        "lifetime_epsilon": None}
    summary = {
        "dataset": train.name, "model": net.name, "dims": list(net.dims), "parameters": net.size,
        "mechanism": job.mechanism, "split": split.kind, "devices": split.devices,
        "examples_per_device": int(split.rows.shape[1]), "clients_per_round": b, "epochs": job.epochs,
        "rounds": job.epochs * per_epoch, "lr": job.lr, "momentum": job.momentum, "ema": job.ema, "clip": job.clip,
        "seed": job.seed,
        "accuracy": result.accuracy, "accuracy_stderr": result.accuracy_stderr, "loss": result.loss,
        "loss_stderr": result.loss_stderr, "last_iterate_accuracy": last.accuracy, "test_examples": len(test.y),
        **privacy,
        "seconds": time.perf_counter() - started,
    }
    return FederatedRun(summary, Snapshot(net.name, net.dims, job.epochs * per_epoch, theta))
