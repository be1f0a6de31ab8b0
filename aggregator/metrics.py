"""Every Prometheus metric of the system, defined once. Prefix `ldp_`, base units, bounded label values.

Labels and their values (no device ids, no free text):
- collection: a published collection name (as many as there are collections);
- outcome: accepted | rejected; reason: '' or one of `aggregator.processing.REASONS` (8 values);
- status: applied | skipped | overlap | duplicates (a micro-batch's fate in the store);
- attribute / value: a spec's attribute names and categorical values (bounded by the published specs);
- window: all (the all-time window), or a window length such as 1h for the newest window of that length.
Worker processes serve the per-process metrics (batches, latency, rejects seen by that worker); the API serves
the store-wide ones (exact report totals, freshness, estimates) computed from Redis at scrape time.
"""

from __future__ import annotations

from prometheus_client import Counter, Histogram, start_http_server

REPORTS = Counter("ldp_worker_reports", "Reports processed by this worker, by outcome",
                  ["collection", "outcome", "reason"])
BATCHES = Counter("ldp_worker_batches", "Partition micro-batches by their fate in the store", ["status"])
BATCH_SECONDS = Histogram("ldp_worker_batch_duration_seconds", "Decode+validate+accumulate+apply time of an "
                          "applied partition micro-batch", buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                                    0.25, 0.5, 1.0, 2.5))
DEAD_LETTERS = Counter("ldp_worker_dead_letters", "Dead letters sent to ldp.dlq by this worker")


def serve(port: int) -> None:
    """Serve this process's metrics on 127.0.0.1:port (a background thread)."""
    start_http_server(port, addr="127.0.0.1")
