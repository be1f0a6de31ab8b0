"""Runs the integration tests in N pytest processes side by side (`make test` does), and the cluster tests beside
them with `--cluster`.

The integration tier mostly waits: on JVM restarts, on Kafka group joins, on an edge re-reading its specs. One
process keeps about one of this machine's two cores busy. Lane 1 uses the running services (`ldp up`); every other
lane starts a Kafka and a Redis of its own (`--own-services`, ports 29300 + 3 (K - 2) ...), so a test that kills or
restarts a service only affects its own lane. Lanes split whole modules, balanced by tests/lane_weights.json.

Each lane's output is printed when the lane ends (its log is in .local/test-lanes/). The exit status is 0 only if
every lane passed. `--update-weights` averages the times this run measured into tests/lane_weights.json.

Run: .venv/bin/python tests/lanes.py [--lanes 2] [--cluster] [--update-weights] [-- PYTEST_ARGS...]
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ldpstream.runtime.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
LOGS = ROOT / ".local" / "test-lanes"
WEIGHTS = ROOT / "tests" / "lane_weights.json"
OWN_SERVICES_PORT = 29300  # lane K > 1: Kafka on 29300 + 3 (K - 2), its controller + 1, Redis + 2; clear of the
# cluster tests' ports (tests/cluster/conftest.py) and of the kernel's ephemeral range (32768-60999)
UNKNOWN_MODULE_S = 10.0  # the weight of a module the file does not list yet
# A lane with services of its own starts them under load and stops them at the end: its modules' times summed came
# to 19-57 s more than their weights in three fresh-clone runs, lane 1's to -36 to +1 s
OWN_SERVICES_S = 40.0


def lane_option(text: str) -> tuple[int, int]:
    """'K/N' as (K, N), 1 <= K <= N."""
    k, sep, n = text.partition("/")
    if not (sep and k.isdigit() and n.isdigit() and 1 <= int(k) <= int(n)):
        raise ValueError(f"--lane wants K/N with 1 <= K <= N, got {text!r}")
    return int(k), int(n)


def module_of(nodeid: str) -> str:
    """The test module of a test id: its path relative to the repository root, as tests/lane_weights.json names it."""
    return nodeid.split("::", 1)[0]


def split_into_lanes(modules: list[str], weights: dict[str, float], lanes: int) -> list[list[str]]:
    """Modules in `lanes` groups of about equal total weight, the lanes after the first counting OWN_SERVICES_S
    more: heaviest first, each to the lightest lane so far (ties to the lower lane, so every process computes the
    same split)."""
    split: list[list[str]] = [[] for _ in range(lanes)]
    totals = [0.0] + [OWN_SERVICES_S] * (lanes - 1)
    for module in sorted(modules, key=lambda m: (-weights.get(m, UNKNOWN_MODULE_S), m)):
        lightest = min(range(lanes), key=lambda i: (totals[i], i))
        split[lightest].append(module)
        totals[lightest] += weights.get(module, UNKNOWN_MODULE_S)
    return split


def link_kafka_jars(live: Settings, state_dir: Path) -> None:
    """Let services started in `state_dir` use the Kafka jars `ldp up` fetched into `live`'s state dir (if it has
    them) instead of fetching them again."""
    jars = live.state_dir / "kafka" / f"lib-{live.kafka_version}"
    if (jars / ".complete").exists():
        (state_dir / "kafka").mkdir(exist_ok=True)
        (state_dir / "kafka" / jars.name).symlink_to(jars, target_is_directory=True)


@dataclass
class Lane:
    """One pytest process and where its output goes."""

    name: str
    argv: list[str]
    log: Path
    times: Path
    process: subprocess.Popen[bytes] | None = None
    started: float = 0.0


def lanes(count: int, cluster: bool, pytest_args: list[str]) -> list[Lane]:
    """The pytest processes of the run: `count` integration lanes, then the cluster tests if asked."""
    runs = []
    for k in range(1, count + 1):
        own = [f"--own-services={OWN_SERVICES_PORT + 3 * (k - 2)}"] if k > 1 else []
        runs.append((f"lane-{k}", ["-m", "integration and not cluster", f"--lane={k}/{count}", *own]))
    if cluster:
        runs.append(("cluster", ["-m", "cluster", "tests/cluster"]))
    return [Lane(name, [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args,
                        f"--module-times={LOGS / (name + '.times.json')}", *pytest_args],
                 LOGS / f"{name}.log", LOGS / f"{name}.times.json")
            for name, args in runs]


def run(runs: list[Lane]) -> int:
    """Start every lane, print each one's output as it ends; the worst exit status."""
    LOGS.mkdir(parents=True, exist_ok=True)
    for lane in runs:
        lane.times.unlink(missing_ok=True)
        with lane.log.open("wb") as out:
            lane.process = subprocess.Popen(lane.argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
        lane.started = time.monotonic()
        print(f"{lane.name}: started ({' '.join(lane.argv[1:])})", flush=True)
    worst, waiting = 0, list(runs)
    try:
        while waiting:
            time.sleep(0.5)
            for lane in [lane for lane in waiting if lane.process is not None and lane.process.poll() is not None]:
                waiting.remove(lane)
                code = lane.process.returncode if lane.process else 1
                worst = worst or code
                print(f"\n===== {lane.name}: exit {code} after {time.monotonic() - lane.started:.0f} s =====",
                      flush=True)
                sys.stdout.write(lane.log.read_text(errors="replace"))
                sys.stdout.flush()
    finally:  # interrupted: pytest's own teardown stops what each lane started
        for lane in waiting:
            if lane.process is not None:
                lane.process.send_signal(signal.SIGINT)
                lane.process.wait()
    return worst


def update_weights(runs: list[Lane]) -> None:
    """Average the modules' measured times into tests/lane_weights.json (the cluster tests are not split): a module's
    time moves by tens of percent with what runs beside it, so one run alone balances the next one poorly."""
    weights = json.loads(WEIGHTS.read_text())
    for lane in runs:
        if lane.name.startswith("lane-") and lane.times.exists():
            for module, seconds in json.loads(lane.times.read_text()).items():
                weights[module] = round((weights[module] + seconds) / 2, 1) if module in weights else seconds
    WEIGHTS.write_text(json.dumps(dict(sorted(weights.items())), indent=2) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lanes", type=int, default=2, help="integration lanes (processes), default 2")
    parser.add_argument("--cluster", action="store_true", help="also run the cluster tests, beside the lanes")
    parser.add_argument("--update-weights", action="store_true",
                        help="average this run's times into tests/lane_weights.json")
    parser.add_argument("pytest_args", nargs="*", help="passed to every pytest (after --)")
    args = parser.parse_args()
    if args.lanes < 1:
        parser.error("--lanes must be at least 1")
    runs = lanes(args.lanes, args.cluster, args.pytest_args)
    code = run(runs)
    if args.update_weights:
        update_weights(runs)
    sys.exit(code)


if __name__ == "__main__":
    main()
