"""LDP SGD over the real Kafka and Redis: a synthetic logistic job per gradient mechanism, coordinator and simulated
fleet in this process, against non-private SGD with the same devices, order and schedule (offline driver).

Prints JSON: {"devices", "dims", "epsilon", "batch_size", "load_average", "runs": [{"mechanism", "iterations",
"seconds", "seconds_per_iteration", "gradients_per_s", "held_out_loss", "misclassification", "non_private_loss",
"non_private_misclassification", "stale", "messages"}]}. Needs the services (`ldp up`); each run's checkpoint is
deleted afterwards.
Run: .venv/bin/python benchmarks/bench_sgd_kafka.py [--devices 200000] [--mechanisms hm pm duchi laplace]
"""

from __future__ import annotations

import argparse
import json
import os
import uuid

from ldpstream.runtime.settings import Settings
from ldpstream.sgd import GRADIENT_MECHANISMS
from ldpstream.sgd.checkpoint import RedisCheckpoint
from ldpstream.sgd.devices import Simulation
from ldpstream.sgd.jobs import run_with_fleet
from ldpstream.sgd.offline import train_offline
from ldpstream.sgd.training import TrainingJob


def run(cfg: Settings, mechanism: str, devices: int, dims: int, epsilon: float, g: int) -> dict[str, object]:
    job = TrainingJob(job_id=f"bench-sgd-{mechanism}-{uuid.uuid4().hex[:8]}", model="logistic", dims=dims,
                      epsilon=epsilon, mechanism=mechanism, batch_size=g, gamma0=2.0,  # type: ignore[arg-type]
                      expected_population=devices)
    checkpoint = RedisCheckpoint(cfg.redis)
    try:
        result = run_with_fleet(job, Simulation(devices=devices, test_rows=20_000, seed=0), cfg, checkpoint)
        stale = checkpoint.outcomes(job.job_id).get("dropped:stale", 0)
    finally:
        checkpoint.delete(job.job_id)
    trainer = result.result.state.trainer()
    baseline = train_offline(job, result.train.x, result.train.y, 0, private=False).trainer
    x, y = result.test.x, result.test.y
    return {
        "mechanism": mechanism, "iterations": trainer.t, "seconds": round(result.seconds, 2),
        "seconds_per_iteration": round(result.seconds / max(trainer.t, 1), 4),
        "gradients_per_s": round(trainer.t * g / result.seconds),
        "held_out_loss": round(float(trainer.model.loss(trainer.beta, x, y).mean()), 4),
        "misclassification": round(trainer.evaluate(x, y), 4),
        "non_private_loss": round(float(baseline.model.loss(baseline.beta, x, y).mean()), 4),
        "non_private_misclassification": round(baseline.evaluate(x, y), 4),
        "stale": stale, "messages": result.fleet.messages if result.fleet else 0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=200_000)
    parser.add_argument("--dims", type=int, default=10)
    parser.add_argument("--epsilon", type=float, default=2.0)
    parser.add_argument("--batch-size", type=int, default=2000)
    parser.add_argument("--mechanisms", nargs="+", default=["hm", "pm", "duchi", "laplace"],
                        choices=GRADIENT_MECHANISMS)
    args = parser.parse_args()
    cfg = Settings.from_env()
    runs = [run(cfg, m, args.devices, args.dims, args.epsilon, args.batch_size) for m in args.mechanisms]
    print(json.dumps({"devices": args.devices, "dims": args.dims, "epsilon": args.epsilon,
                      "batch_size": args.batch_size, "load_average": os.getloadavg()[0], "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
