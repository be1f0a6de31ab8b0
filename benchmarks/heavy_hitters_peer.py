"""The peer of bench_heavy_hitters.py: pure-LDP 1.2.0's PEM, TreeHist and Apple SFP on the same items.

Runs under the peer's interpreter (a venv with `pure-ldp==1.2.0`, see bench_heavy_hitters.py), imports nothing of
ldpstream, and prints one JSON object: {"results": [{"peer", "epsilon", "top", "devices", "perturb_s",
"aggregate_s", "decode_s", "found"}]}. Every peer uses pure-LDP's Apple CMS as its frequency oracle (its OLH
allocates the whole domain, 26^8 counters for 8 letters); PEM at the full epsilon per group, TreeHist and SFP at
eps/2 per part, as pure-LDP implements them. One process per run; the caller bounds its time.
"""

from __future__ import annotations

import argparse
import json
import random
import string
import time
import warnings

import numpy as np

ALPHABET = list(string.ascii_lowercase)


def index_of(word: str) -> int:
    """A word as an integer in base 27 (digits 1..26), for pure-LDP's index mappers."""
    value = 0
    for ch in word:
        value = value * 27 + (ord(ch) - 96)
    return value


def build(peer: str, epsilon: float, length: int, step: int, hashes: int, width: int):  # type: ignore[no-untyped-def]
    from pure_ldp.frequency_oracles.apple_cms import CMSClient, CMSServer
    from pure_ldp.heavy_hitters.apple_sfp import SFPClient, SFPServer
    from pure_ldp.heavy_hitters.prefix_extending import PEMClient, PEMServer
    from pure_ldp.heavy_hitters.treehistogram import TreeHistClient, TreeHistServer

    server_fo = CMSServer(epsilon, hashes, width)
    client_fo = CMSClient(epsilon, server_fo.get_hash_funcs(), width)
    if peer == "pem":
        return (PEMClient(epsilon, 0, length, step, alphabet=ALPHABET, index_mapper=index_of, fo_client=client_fo),
                PEMServer(epsilon, 0, length, step, alphabet=ALPHABET, index_mapper=index_of, fo_server=server_fo))
    if peer == "treehist":
        return (TreeHistClient(epsilon, step, length, alphabet=ALPHABET, index_mapper=index_of, fo_client=client_fo),
                TreeHistServer(epsilon, length, step, alphabet=ALPHABET, index_mapper=index_of, fo_server=server_fo))
    if peer == "sfp":
        return (SFPClient(epsilon, step, length, alphabet=set(ALPHABET), index_mapper=index_of, fo_client=client_fo),
                SFPServer(epsilon, step, length, alphabet=set(ALPHABET), index_mapper=index_of, fo_server=server_fo))
    raise ValueError(f"unknown peer {peer!r}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--items", required=True)
    parser.add_argument("--devices", type=int, required=True)
    parser.add_argument("--peer", required=True, choices=["pem", "treehist", "sfp"])
    parser.add_argument("--epsilon", type=float, required=True)
    parser.add_argument("--tops", type=int, nargs="+", required=True)
    parser.add_argument("--length", type=int, default=8)
    parser.add_argument("--step", type=int, default=2)
    parser.add_argument("--hashes", type=int, default=128)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    with open(args.items) as f:
        words = [line.rstrip("\n") for _, line in zip(range(args.devices), f, strict=False)]
    random.seed(args.seed)
    np.random.seed(args.seed)  # pure-LDP draws from the global random and numpy.random states
    client, server = build(args.peer, args.epsilon, args.length, args.step, args.hashes, args.width)
    start = time.perf_counter()
    reports = [client.privatise(word) for word in words]
    perturb_s = time.perf_counter() - start
    start = time.perf_counter()
    for report in reports:
        server.aggregate(report)
    aggregate_s = time.perf_counter() - start
    results = []
    for top in args.tops:
        start = time.perf_counter()
        found, frequencies = server.find_heavy_hitters(k=top)
        decode_s = time.perf_counter() - start
        # the k best of the peer's candidates by its own estimates (SFP may return more than k, any may return fewer)
        order = np.argsort(-np.asarray(frequencies, dtype=float), kind="stable")[:top]
        found = [list(found)[i] for i in order]
        results.append({"peer": args.peer, "epsilon": args.epsilon, "top": top, "devices": len(words),
                        "perturb_s": perturb_s, "aggregate_s": aggregate_s, "decode_s": decode_s,
                        "found": [str(w).replace("*", "") for w in list(found)]})
    print(json.dumps({"results": results}))


if __name__ == "__main__":
    main()
