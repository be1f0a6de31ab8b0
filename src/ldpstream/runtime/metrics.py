"""Every per-process Prometheus metric of the system, defined once (prefix `ldp_`, base units, bounded labels; the
label values are listed in `ldpstream.readapi.metrics`, which also defines the store-wide metrics the API serves)."""

from __future__ import annotations

import os

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, start_http_server
from prometheus_client.multiprocess import MultiProcessCollector

from ldpstream.runtime.catalog import Service
from ldpstream.runtime.settings import Settings
from ldpstream.runtime.targets import announce

MULTIPROCESS_DIR = "PROMETHEUS_MULTIPROC_DIR"  # set (before this module is imported) by a parent of processes that
# share one /metrics, such as `ldp edge --workers N`: each writes its values there and any of them serves the sum

REPORTS = Counter("ldp_worker_reports", "Reports processed by this worker, by outcome",
                  ["collection", "outcome", "reason"])
BATCHES = Counter("ldp_worker_batches", "Partition micro-batches by their fate in the store", ["status"])
BATCH_SECONDS = Histogram("ldp_worker_batch_duration_seconds", "Decode+validate+accumulate+apply time of an "
                          "applied partition micro-batch", buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                                    0.25, 0.5, 1.0, 2.5))
DEAD_LETTERS = Counter("ldp_worker_dead_letters", "Dead letters sent to ldp.dlq by this worker")
OUTAGE_RETRIES = Counter("ldp_worker_outage_retries", "Batch attempts retried because Redis or Kafka was unreachable")
# Aggregator workers and SGD coordinators alike (`ldpstream.runtime.offsets.resume_offset`).
LOST_MESSAGES = Counter("ldp_lost_messages", "Messages Kafka deleted (retention) before they were applied: no "
                        "outcome counts them", ["topic", "partition"])

# The SGD coordinator process (one per training job) serves these.
SGD_ITERATION = Gauge("ldp_sgd_iteration", "Current model version t of a training job", ["job"])
SGD_GRADIENTS = Counter("ldp_sgd_gradients", "Device gradients by outcome (accepted, dropped: stale, rejected: "
                        "sent to ldp.dlq) as checkpointed by this coordinator", ["job", "outcome", "reason"])
SGD_HELD_OUT_LOSS = Gauge("ldp_sgd_held_out_loss", "Mean loss of the current model on held-out rows (simulated "
                          "jobs only)", ["job"])
SGD_HELD_OUT_ERROR = Gauge("ldp_sgd_held_out_error", "The current model's error on held-out rows (simulated jobs "
                           "only): metric misclassification (a ratio: 1 - accuracy) or mse", ["job", "metric"])
SGD_MODEL_NORM = Gauge("ldp_sgd_model_norm", "L2 norm of the current model's parameters beta", ["job"])


def serve(port: int, cfg: Settings, service: Service) -> None:
    """Serve this process's metrics on `cfg.metrics_addr`:`port` (a background thread), announced to the local
    Prometheus as a target of the service's job (`ldpstream.runtime.targets`)."""
    start_http_server(port, addr=cfg.metrics_addr)
    announce(cfg, service, port)


def metrics_text() -> bytes:
    """The exposition text: this process's metrics, or every process's of its group (`MULTIPROCESS_DIR`)."""
    if not os.environ.get(MULTIPROCESS_DIR):
        return generate_latest()
    registry = CollectorRegistry()
    MultiProcessCollector(registry)
    return generate_latest(registry)

# The ingestion edge (`ldp edge`: summed over its processes, `MULTIPROCESS_DIR`). Reasons are
# ldpstream.edge.intake.REASONS; no collection label (the path is outside input, and a label per made-up name would grow
# without bound).
EDGE_REQUESTS = Counter("ldp_edge_requests", "Report requests answered by the edge, by status and reason",
                        ["status", "reason"])
EDGE_REPORTS = Counter("ldp_edge_reports", "Reports answered by the edge: accepted (to Kafka or the spool) "
                       "or rejected with a reason", ["outcome", "reason"])
EDGE_ENROLMENTS = Counter("ldp_edge_enrolments", "Device enrolments (POST /v1/enroll): enrolled, or refused with a "
                          "reason of ldpstream.edge.join", ["outcome", "reason"])
EDGE_SECONDS = Histogram("ldp_edge_request_duration_seconds", "Time from a report request's arrival to its answer",
                         buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0))
EDGE_SPOOL_BYTES = Gauge("ldp_edge_spool_bytes", "Bytes in the edge processes' on-disk spools",
                         multiprocess_mode="livesum")
EDGE_IN_FLIGHT = Gauge("ldp_edge_reports_in_flight", "Reports the edge processes hold, not yet acknowledged",
                       multiprocess_mode="livesum")

# The shuffler (`ldp shuffle --metrics-port P`); its central epsilon per release is on the API's /metrics
# (`ldp_shuffle_central_epsilon`), read from the figures it publishes.
SHUFFLER_HELD = Gauge("ldp_shuffler_held_reports", "Reports the shuffler holds for windows not released yet",
                      ["collection"])
SHUFFLER_BATCHES = Counter("ldp_shuffler_released_batches", "Shuffled batches released (one per window group "
                           "committed)", ["collection"])
SHUFFLER_REPORTS = Counter("ldp_shuffler_released_reports", "Reports released in shuffled batches", ["collection"])
SHUFFLER_READ = Counter("ldp_shuffler_read_reports", "Reports read from the raw topic and held (a report read again "
                        "after a restart counts again; it is released once)", ["collection"])
SHUFFLER_SKIPPED = Counter("ldp_shuffler_skipped_messages", "Raw messages left out (logged): malformed, not of a "
                           "published shuffled spec, or not anonymised by the edge", ["collection"])
SHUFFLER_LAG = Gauge("ldp_shuffler_raw_lag_messages", "Raw messages the edge wrote that the shuffler has not read "
                     "yet (the broker's high watermark as last fetched, less the next offset to read)", ["collection"])
SHUFFLER_LAST_RELEASE = Gauge("ldp_shuffler_last_release_timestamp_seconds", "When the newest shuffled batch of a "
                              "collection was committed (Unix time)", ["collection"])
SHUFFLER_RELEASE_SECONDS = Gauge("ldp_shuffler_release_duration_seconds", "From the newest release's window close "
                                 "to its commit (catching up, shuffling, the transaction)", ["collection"])
