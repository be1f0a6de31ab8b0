"""Fashion-MNIST test accuracy of devices' private gradients: softmax regression and the MLP 784-64-10, under the
protocol of apple/ml-projunit (Asi et al., NeurIPS 2023, Sec. 6): one example per device, 600 devices per round.

    python benchmarks/bench_training.py                       # every cell: hours on 2 cores
    python benchmarks/bench_training.py --models softmax --mechanisms none privunitg --epsilons 8 --protocols full

Protocols: `full` = 10 epochs (1,000 rounds; each device reports 10 times, lifetime eps = 10 eps), `one-epoch` =
1 epoch (100 rounds; each device reports once). Mechanisms: `none` (non-private, the same L2 clipping), `gaussian`
((eps, 1e-5)-LDP analytic Gaussian: the reference point of (eps, delta) privacy), `privunitg`, `projunit` (L2
clipping) and `pm`, `hm` (k-of-d sampling, L-infinity clipping); eps per report in {1, 4, 8, 16}. The server's step
size is post-processing: `--lr` (default 1.0: better than 0.2 for PrivUnitG at eps 8 too), `--momentum` (0.5).

Prints one JSON object: per cell the accuracy with its standard error, the rounds, and a device's lifetime epsilon
(`ldpstream.sgd.accounting`), and beside them the reference numbers of an independent simulation of the protocol
(600 per round, 1,000 rounds, learning rate 1.0, 2 seeds) so a reader compares them in one place.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from ldpstream.contract.networks import make_network
from ldpstream.sgd.federated import FederatedJob, train_federated
from ldpstream.sgd.images import fashion_mnist, iid_split

MODELS = {"softmax": (784, 10), "mlp": (784, 64, 10)}
MECHANISMS = ("none", "gaussian", "privunitg", "projunit", "pm", "hm")
EPSILONS = (1.0, 4.0, 8.0, 16.0)
PROTOCOLS = {"full": 10, "one-epoch": 1}
CLIENTS_PER_ROUND = 600
LR = 1.0
MOMENTUM = 0.5
# the independent simulation, eps 8 per report, full protocol (Gaussian at delta 1e-5; PM with sampling)
REFERENCE = {"softmax": {"none": 0.829, "privunitg": 0.746, "gaussian": 0.620, "pm": 0.155},
             "mlp": {"none": 0.843, "privunitg": 0.702, "gaussian": 0.451, "pm": 0.167}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", choices=sorted(MODELS), default=list(MODELS))
    parser.add_argument("--mechanisms", nargs="+", choices=MECHANISMS, default=list(MECHANISMS))
    parser.add_argument("--epsilons", nargs="+", type=float, default=list(EPSILONS))
    parser.add_argument("--protocols", nargs="+", choices=sorted(PROTOCOLS), default=list(PROTOCOLS))
    parser.add_argument("--lr", type=float, default=LR, help="the server's learning rate")
    parser.add_argument("--momentum", type=float, default=MOMENTUM)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    train, test = fashion_mnist("train"), fashion_mnist("test")
    split = iid_split(len(train.y), args.seed)
    cells = []
    for protocol in args.protocols:
        for model in args.models:
            net = make_network(model, MODELS[model])
            for mechanism in args.mechanisms:
                for eps in [1.0] if mechanism == "none" else args.epsilons:
                    lr = args.lr
                    job = FederatedJob(mechanism, eps, CLIENTS_PER_ROUND, PROTOCOLS[protocol], lr, args.momentum,
                                       args.seed)
                    out = train_federated(job, net, train, split, test).summary
                    cell = {"protocol": protocol, "model": model, "mechanism": mechanism,
                            "epsilon_per_report": out["epsilon_per_report"], "lr": lr, "momentum": args.momentum,
                            "accuracy": out["accuracy"], "accuracy_stderr": out["accuracy_stderr"],
                            "loss": out["loss"], "rounds": out["rounds"],
                            "participations_per_device": out["participations_per_device"],
                            "lifetime_epsilon": out["lifetime_epsilon"], "seconds": round(out["seconds"], 1)}
                    print(json.dumps(cell), file=sys.stderr, flush=True)  # progress: cells can take many minutes
                    cells.append(cell)
    print(json.dumps({"benchmark": "training", "dataset": "fashion-mnist", "clients_per_round": CLIENTS_PER_ROUND,
                      "seed": args.seed, "cells": cells, "reference_full_protocol_eps8": REFERENCE,
                      "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}, indent=1))


if __name__ == "__main__":
    main()
