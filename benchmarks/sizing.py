"""The sizing guide's table (docs/how-to/sizing.md), computed from a soak's JSON line (`benchmarks/soak.py`).

For D devices reporting K times a day (default 10), reports arrive at r = D K / 86,400 per second on average and at
`--peak` times that in the busiest hour (default 3). Each stage's cores at the peak are its idle cores (the soak's
`cpu_idle_cores`) plus r_peak times its marginal CPU seconds per report (`cpu_s_per_1k_marginal` / 1,000), and a
stage is given processes so that none runs above `--utilisation` of a core (default 0.5: headroom for bursts, a
rebalance, a lost member's share):

    edge processes      = ceil(cores_edge / u)
    aggregator workers  = max(2, ceil(cores_aggregator / u))             (2: one may fail)
    Kafka partitions    = max(8, 2 x workers, ceil(26 B x r_peak / 1 MB/s))   (a partition per worker at least,
                          room to add workers without repartitioning; 26 B per report of the soak's spec)
    Kafka broker cores  = cores_kafka (one broker; each of the cluster's 3 brokers writes every byte at RF 3)
    shuffler cores      = r_peak / 1.0M reports per CPU-second (README: `benchmarks/bench_shuffler.py`) / u
    Redis memory        = statistics 8.3 B x devices per window x 2 windows
                          + edge admission 83 B x enrolled + 150 B x devices per window x 2 + 150 B x r x 600 s
                          (the per-device and per-request costs measured by `benchmarks/capacity.py`,
                          docs/reference/capacity.md); devices per window = min(D, r x window length)
    Redis cores         = cores_redis (the soak's: admission and statistics together)
    read API cores      = what it used in the soak (it works per scrape and per query, not per report)

One machine: the sum of the stages' cores. The cluster layout (`ldp up --cluster`: 3 Kafka brokers at RF 3, a
Redis Cluster of 3 primaries with a replica each): every broker does the single broker's work (it writes every
byte), the Redis memory is spread over the 3 primaries (and copied once to the replicas).

Prints a Markdown table, then its numbers as the last line (JSON).
Run: .venv/bin/python benchmarks/sizing.py SOAK.json [--per-day 10] [--peak 3] [--window-s 3600]
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

DEVICES = (10**6, 10**7, 10**8)
REPORT_BYTES = 26  # the diagnostics spec's report in a 1000-report envelope (docs/reference/capacity.md)
PARTITION_BYTES_S = 1e6  # what we plan one partition to carry (a broker's measured 17 MB/s over 16+ partitions)
SHUFFLER_REPORTS_PER_CPU_S = 1.0e6  # README: benchmarks/bench_shuffler.py
STATS_B, ENROLLED_B, MARK_B, SIGNATURE_B, SIGNATURE_S = 8.3, 83, 150, 150, 600  # capacity.md


def size(soak: dict[str, Any], devices: int, per_day: float, peak: float, window_s: float, u: float) -> dict[str, Any]:
    """One column of the table: what `devices` reporting `per_day` times a day need."""
    r = devices * per_day / 86_400
    r_peak = r * peak
    idle, marginal = soak["cpu_idle_cores"], soak["cpu_s_per_1k_marginal"]

    def cores(stage: str) -> float:
        return float(idle.get(stage, 0.0) + r_peak * marginal[stage] / 1000)

    workers = max(2, math.ceil(cores("aggregator") / u))
    per_window = min(devices, r * window_s)
    redis_bytes = (STATS_B * per_window * 2 + ENROLLED_B * devices + MARK_B * per_window * 2
                   + SIGNATURE_B * r * SIGNATURE_S)
    stage_cores = {stage: round(cores(stage), 2) for stage in ("edge", "kafka", "aggregator", "redis")}
    # the read API works per scrape and per request, not per report: what it used during the soak, at any scale
    stage_cores["api"] = round(idle.get("api", 0.0) + soak["rates"]["counted_per_s"] * marginal["api"] / 1000, 2)
    shuffler = r_peak / SHUFFLER_REPORTS_PER_CPU_S
    return {
        "devices": devices, "reports_per_s": round(r, 1), "peak_reports_per_s": round(r_peak, 1),
        "edge_processes": max(1, math.ceil(cores("edge") / u)),
        "aggregator_workers": workers,
        "kafka_partitions": max(8, 2 * workers, math.ceil(REPORT_BYTES * r_peak / PARTITION_BYTES_S)),
        "shuffler_cores": round(shuffler / u, 3),
        "redis_memory_gb": round(redis_bytes / 1e9, 2),
        "redis_memory_gb_per_primary_cluster": round(redis_bytes / 3 / 1e9, 2),
        "cores": stage_cores,
        "one_machine_cores": round(sum(stage_cores.values()) / u + shuffler / u, 1),
    }


def table(columns: list[dict[str, Any]]) -> str:
    rows = [("reports/s (mean; peak)", lambda c: f"{c['reports_per_s']:,.0f}; {c['peak_reports_per_s']:,.0f}"),
            ("edge processes", lambda c: f"{c['edge_processes']:,}"),
            ("aggregator workers", lambda c: f"{c['aggregator_workers']:,}"),
            ("Kafka partitions (per collection)", lambda c: f"{c['kafka_partitions']:,}"),
            ("Kafka broker cores (each broker, single or cluster)", lambda c: f"{c['cores']['kafka']:.2f}"),
            ("Redis cores", lambda c: f"{c['cores']['redis']:.2f}"),
            ("Redis memory, one server", lambda c: f"{c['redis_memory_gb']:.2f} GB"),
            ("Redis memory per primary (cluster: 3 primaries + replicas)",
             lambda c: f"{c['redis_memory_gb_per_primary_cluster']:.2f} GB"),
            ("shuffler cores (a shuffled collection)", lambda c: f"{c['shuffler_cores']:.3f}"),
            ("one machine: cores at the utilisation", lambda c: f"{c['one_machine_cores']:,.1f}")]
    head = "| | " + " | ".join(f"{c['devices']:.0e} devices" for c in columns) + " |"
    lines = [head, "| --- |" + " --- |" * len(columns)]
    lines += [f"| {name} | " + " | ".join(cell(c) for c in columns) + " |" for name, cell in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("soak", type=Path, help="a file whose last line is the soak's JSON")
    parser.add_argument("--per-day", type=float, default=10.0)
    parser.add_argument("--peak", type=float, default=3.0)
    parser.add_argument("--window-s", type=float, default=3600.0)
    parser.add_argument("--utilisation", type=float, default=0.5)
    args = parser.parse_args()
    soak = json.loads(args.soak.read_text().strip().splitlines()[-1])
    columns = [size(soak, d, args.per_day, args.peak, args.window_s, args.utilisation) for d in DEVICES]
    print(table(columns))
    print(json.dumps({"inputs": {k: soak[k] for k in ("cpu_idle_cores", "cpu_s_per_1k_marginal", "rates")},
                      "columns": columns}))


if __name__ == "__main__":
    main()
