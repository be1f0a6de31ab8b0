"""Heavy hitters of strings: ours (hcms_tree, sfp, pem) against pure-LDP 1.2.0's PEM, TreeHist and Apple SFP, same run.

Population: `--distinct` (1e5) random 8-letter words over a-z, Zipf(1.1) over their ranks, one word per device
(`ldpstream.simulator.strings.zipf_words`), `--devices` (1e6) devices. The words all have 8 letters because pure-LDP's
PEM and TreeHist extend prefixes over the alphabet only (a shorter word, padded, is unreachable to them); ours take any
length up to the maximum. For each eps in `--epsilons`: ours perturb all devices once (`perturb_s`), then accumulate and
decode the top 20 and the top 100 (`decode_s`: accumulate + breadth-first decode), and the precision (= recall, a top-k
list against the true top k) is computed; the peers run on the first `--peer-devices` devices of the same list (their
per-device Python is too slow for 1e6) under `--peer-python` in a subprocess with a time limit, and ours run again on
exactly those devices for a like-for-like recall.

Prints {"config", "runs": [{"mechanism", "epsilon", "top", "devices", "recall", "perturb_s", "accumulate_s",
"decode_s", "seconds"}], "comparisons": [{"epsilon", "top", "ours", "peer", "devices", "ours_recall",
"peer_recall", "speedup_measured", "peer_s_at_full_n", "ours_s_at_full_n", "speedup_at_full_n"}]}:
speedup_measured is the peer's end-to-end seconds (perturb + accumulate + decode) over ours, both at the peers' n;
speedup_at_full_n compares ours measured at --devices with the peer's run extrapolated there (its per-device
perturb and accumulate times n, plus its decode, which does not grow with n). `--peer-python ''` runs ours only.
Every run is bounded: ours by their size, each peer process by --peer-timeout.

    python benchmarks/bench_heavy_hitters.py --peer-python /work/venv-hh/bin/python
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from ldpstream.mechanisms.open_domain import PEM, SFP, HCMSTree, StringDomain
from ldpstream.simulator.strings import StringPopulation, zipf_words

ALPHABET = "abcdefghijklmnopqrstuvwxyz"
LENGTH = 8
SEED = 20240603
OURS = {"hcms_tree": HCMSTree, "sfp": SFP, "pem": PEM}  # pem last: the peers run next to it, after all ours
PEERS = ("pem", "treehist", "sfp")


def recall(found: list[str], truth: list[str]) -> float:
    return len(set(found) & set(truth)) / len(truth)


def run_ours(name: str, eps: float, rows: np.ndarray, truths: dict[int, list[str]], seed: int) -> list[dict[str, Any]]:
    """Perturb once, then accumulate and decode for every top k."""
    domain = StringDomain(LENGTH, ALPHABET)
    rng = np.random.default_rng(seed)
    start = time.perf_counter()
    reports = OURS[name](eps, domain, seed=seed).perturb(rows, rng)
    perturb_s = time.perf_counter() - start
    runs = []
    for top, truth in truths.items():
        tree = OURS[name](eps, domain, seed=seed, top=top)
        start = time.perf_counter()
        stats = tree.accumulate(reports)
        accumulate_s = time.perf_counter() - start
        found = tree.heavy_hitters(stats)
        decode_s = time.perf_counter() - start - accumulate_s
        runs.append(_run(name, eps, top, rows.shape[0], recall(list(found.items), truth), perturb_s, accumulate_s,
                         decode_s))
    return runs


def _run(name: str, eps: float, top: int, devices: int, found_recall: float, perturb_s: float, accumulate_s: float,
         decode_s: float) -> dict[str, Any]:
    return {"mechanism": name, "epsilon": eps, "top": top, "devices": int(devices), "recall": found_recall,
            "perturb_s": round(perturb_s, 3), "accumulate_s": round(accumulate_s, 3), "decode_s": round(decode_s, 3),
            "seconds": round(perturb_s + accumulate_s + decode_s, 3)}


def run_peer(python: str, peer: str, eps: float, items: Path, devices: int, truths: dict[int, list[str]],
             timeout_s: float) -> list[dict[str, Any]]:
    """One peer process for all tops; a run past the time limit is reported as such."""
    script = Path(__file__).with_name("heavy_hitters_peer.py")
    command = [python, str(script), "--items", str(items), "--devices", str(devices), "--peer", peer,
               "--epsilon", str(eps), "--tops", *map(str, truths), "--seed", str(SEED)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=True)
    except subprocess.TimeoutExpired:
        return [{"mechanism": f"pure-ldp {peer}", "epsilon": eps, "top": top, "devices": devices,
                 "timed_out_s": timeout_s} for top in truths]
    return [_run(f"pure-ldp {peer}", eps, r["top"], r["devices"], recall(r["found"], truths[r["top"]]),
                 r["perturb_s"], r["aggregate_s"], r["decode_s"]) for r in json.loads(done.stdout)["results"]]


def at_scale(run: dict[str, Any], devices: int) -> float:
    """A run's seconds extrapolated to `devices`: perturbing and accumulating grow with n, decoding does not."""
    return (run["perturb_s"] + run["accumulate_s"]) * devices / run["devices"] + run["decode_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devices", type=int, default=1_000_000)
    parser.add_argument("--distinct", type=int, default=100_000)
    parser.add_argument("--epsilons", type=float, nargs="+", default=[2.0, 4.0, 8.0])
    parser.add_argument("--tops", type=int, nargs="+", default=[20, 100])
    parser.add_argument("--peer-python", default="/work/venv-hh/bin/python",
                        help="an interpreter with pure-ldp==1.2.0 ('' for ours only)")
    parser.add_argument("--peer-devices", type=int, default=20_000)
    parser.add_argument("--peer-timeout", type=float, default=240.0, help="seconds per peer process")
    parser.add_argument("--sfp-epsilons", type=float, nargs="*", default=[4.0],
                        help="SFP's decoder takes minutes per run: only these epsilons")
    args = parser.parse_args()

    pop: StringPopulation = zipf_words(args.distinct, 1.1, args.devices, np.random.default_rng(SEED),
                                       alphabet=ALPHABET, min_length=LENGTH, max_length=LENGTH)
    items = pop.items()
    rows = StringDomain(LENGTH, ALPHABET).encode(items)
    truths = {top: pop.top(top) for top in args.tops}
    peer_n = min(args.peer_devices, args.devices)
    peer_pop = StringPopulation(pop.words, np.bincount(pop.device_words[:peer_n], minlength=args.distinct),
                                pop.device_words[:peer_n])
    peer_truths = {top: peer_pop.top(top) for top in args.tops}

    runs: list[dict[str, Any]] = []
    comparisons: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "items.txt"
        path.write_bytes(b"\n".join(items[:peer_n].tolist()) + b"\n")
        for eps in args.epsilons:
            for name in OURS:
                runs += run_ours(name, eps, rows, truths, SEED)
                small = run_ours(name, eps, rows[:peer_n], peer_truths, SEED)
                runs += small
                if not args.peer_python:
                    continue
                for peer in PEERS:
                    if name != "pem" or (peer == "sfp" and eps not in args.sfp_epsilons):
                        continue  # each peer once per epsilon, next to all of ours
                    peer_runs = run_peer(args.peer_python, peer, eps, path, peer_n, peer_truths, args.peer_timeout)
                    runs += peer_runs
                    for p in (p for p in peer_runs if "recall" in p):
                        for ours in (r for r in runs if r["epsilon"] == eps and r["top"] == p["top"]
                                     and r["mechanism"] in OURS and r["devices"] == peer_n):
                            full = next(r for r in runs if r["epsilon"] == eps and r["top"] == p["top"]
                                        and r["mechanism"] == ours["mechanism"] and r["devices"] == args.devices)
                            comparisons.append({
                                "epsilon": eps, "top": p["top"], "ours": ours["mechanism"], "peer": p["mechanism"],
                                "devices": peer_n, "ours_recall": ours["recall"], "peer_recall": p["recall"],
                                "speedup_measured": round(p["seconds"] / ours["seconds"], 1),
                                "peer_s_at_full_n": round(at_scale(p, args.devices), 1),
                                "ours_s_at_full_n": full["seconds"],
                                "speedup_at_full_n": round(at_scale(p, args.devices) / full["seconds"], 1),
                            })
                print(json.dumps({"progress": eps, "mechanism": name}), file=sys.stderr, flush=True)
    config = {"devices": args.devices, "distinct": args.distinct, "zipf": 1.1, "length": LENGTH,
              "alphabet": ALPHABET, "peer_devices": peer_n, "seed": SEED}
    print(json.dumps({"config": config, "runs": runs, "comparisons": comparisons}))


if __name__ == "__main__":
    main()
