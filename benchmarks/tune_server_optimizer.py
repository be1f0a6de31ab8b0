"""Choosing the server's optimizer (`ldpstream.sgd.server_optimizer`) for softmax on Fashion-MNIST, on a validation
split carved from the training set (the test set is not looked at), under the full protocol's noise.

    python benchmarks/tune_server_optimizer.py --lr 0.125 0.25 0.5 1 --momentum 0.5   # about 1 min a setting, quiet

Training: 50,000 of the 60,000 training images, one per device, 600 devices a round for `--rounds` (1,000) rounds;
validation: the other 10,000. To screen many settings quickly, the mean of a round's 600 PrivUnitG reports is drawn
from its law's Gaussian approximation rather than by running the randomizer 600 times: PrivUnitG's report is
(alpha v + w) / m with w a standard Gaussian orthogonal to v (`ldpstream.mechanisms.gradients.privunit`), so the mean
of B reports is the clipped gradients' mean plus noise that is Gaussian in every direction but the B inputs' own,
of per-coordinate variance (MSE + 1 - r^2) / (d B) on average (r the clipped norm, about 1 here: the gradients'
norms are about 10 before clipping); we draw N(0, (MSE + 1) / (d B)) per coordinate. The final numbers
(`bench_training.py`) run the real randomizer. Each setting's trajectory is evaluated with several EMA decays at
once (the decay does not change the iterates). Prints one JSON line per setting.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from ldpstream.contract.networks import make_network
from ldpstream.mechanisms.gradients import gradient_mechanism
from ldpstream.sgd.federated import clip
from ldpstream.sgd.images import LabelledSet, fashion_mnist
from ldpstream.sgd.server_optimizer import ServerOptimizer

VALIDATION = 10_000
CLIENTS_PER_ROUND = 600
EMAS = (0.0, 0.98, 0.995, 0.998, 0.999)


def validation_split(seed: int = 123) -> tuple[LabelledSet, LabelledSet]:
    full = fashion_mnist("train")
    order = np.random.default_rng(seed).permutation(len(full.y))
    train, held = order[VALIDATION:], order[:VALIDATION]
    return (LabelledSet("fashion-mnist-train-part", full.x[train], full.y[train], full.classes),
            LabelledSet("fashion-mnist-validation", full.x[held], full.y[held], full.classes))


def screen(lr: float, momentum: float, rounds: int, private: bool, epsilon: float, seed: int,
           train: LabelledSet, validation: LabelledSet) -> dict[str, float]:
    """Validation accuracy per EMA decay after `rounds` rounds of one trajectory."""
    net = make_network("softmax", (train.dims, train.classes))
    sd = np.sqrt((gradient_mechanism("privunitg", dims=net.size, epsilon=epsilon).mse(net.size) + 1)
                 / (net.size * CLIENTS_PER_ROUND))
    rng = np.random.default_rng(seed)
    servers = [ServerOptimizer(lr, momentum, ema) for ema in EMAS]
    states = [s.start(net.init(rng)) for s in servers]
    order, at = rng.permutation(len(train.y)), 0
    for _ in range(rounds):
        if at + CLIENTS_PER_ROUND > len(order):
            order, at = rng.permutation(len(train.y)), 0
        rows = order[at : at + CLIENTS_PER_ROUND]
        at += CLIENTS_PER_ROUND
        mean = clip(net.gradients(states[0].theta, train.x[rows], train.y[rows]), "l2").mean(axis=0)
        if private:
            mean += sd * rng.standard_normal(net.size)
        states = [s.step(state, mean) for s, state in zip(servers, states, strict=True)]
    return {f"ema {s.ema:g}": net.accuracy(s.served(state), validation.x, validation.y)
            for s, state in zip(servers, states, strict=True)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lr", nargs="+", type=float, default=[0.125, 0.25, 0.5, 1.0])
    parser.add_argument("--momentum", nargs="+", type=float, default=[0.5])
    parser.add_argument("--rounds", type=int, default=1000)
    parser.add_argument("--epsilon", type=float, default=8.0)
    parser.add_argument("--non-private", action="store_true", help="no noise (the same clipping)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    train, validation = validation_split()
    for momentum in args.momentum:
        for lr in args.lr:
            started = time.perf_counter()
            out = screen(lr, momentum, args.rounds, not args.non_private, args.epsilon, args.seed, train, validation)
            print(json.dumps({"lr": lr, "momentum": momentum, "rounds": args.rounds, "private": not args.non_private,
                              "epsilon": args.epsilon, "validation_accuracy": out,
                              "seconds": round(time.perf_counter() - started, 1)}), flush=True)


if __name__ == "__main__":
    main()
