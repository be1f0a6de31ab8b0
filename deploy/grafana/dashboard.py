"""The ldpstream Grafana dashboard as code: `python deploy/grafana/dashboard.py` writes dashboards/ldpstream.json.

A dashboard is a list of rows (`Row`), each a list of panels (`Panel`) laid out two per line. The store-wide rows
come first and last; between them, one row per service of the catalog (`ldpstream.runtime.catalog`) that names one
(`Metrics.row`), in the catalog's order: a service's row is one more function returning a `Row` of that title, listed
in `SERVICE_ROWS`. Every query names metrics of `ldpstream.runtime.metrics`, `ldpstream.readapi.metrics` and the
coordinator's of `ldpstream.sgd.jobrun` (tests/deploy/test_grafana.py checks it, and that the committed JSON is this
output).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ldpstream.runtime.catalog import SERVICES

HERE = Path(__file__).resolve().parent
OUTPUT = HERE / "dashboards" / "ldpstream.json"
DATASOURCE = {"type": "prometheus", "uid": "prometheus"}  # provisioning/datasources/prometheus.yml
COLUMNS, PANEL_HEIGHT = 24, 8
RATE = "$__rate_interval"
ESTIMATE = 'ldp_estimate{collection="$collection",window="$window",attribute="$attribute"}'
ESTIMATE_STDERR = 'ldp_estimate_stderr{collection="$collection",window="$window",attribute="$attribute"}'


@dataclass(frozen=True)
class Query:
    """A PromQL expression and the legend of its series."""

    expr: str
    legend: str = ""


@dataclass(frozen=True)
class Panel:
    """A time-series (or stat) panel; `repeat` names a variable to repeat the panel over, one per value."""

    title: str
    queries: tuple[Query, ...]
    unit: str = "short"
    description: str = ""
    kind: str = "timeseries"
    width: int = COLUMNS // 2
    repeat: str | None = None
    overrides: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class Row:
    """A titled row of panels."""

    title: str
    panels: tuple[Panel, ...] = field(default_factory=tuple)


def ingestion_row() -> Row:
    return Row("Ingestion", (
        Panel("Accepted reports per second", (Query(
            f'sum by (collection) (rate(ldp_reports_total{{outcome="accepted"}}[{RATE}]))', "{{collection}}"),),
            unit="reqps", description="Reports applied to the store (exact totals from Redis, via the API)"),
        Panel("Rejected reports per second by reason", (Query(
            f'sum by (collection, reason) (rate(ldp_reports_total{{outcome="rejected"}}[{RATE}]))',
            "{{collection}} {{reason}}"),), unit="reqps", description="Every rejected report is in ldp.dlq"),
        Panel("Consumer lag", (Query("sum by (collection) (ldp_consumer_lag_messages)", "{{collection}}"),),
              unit="short", description="Kafka high watermark - (offset applied in Redis + 1), summed over "
                                        "partitions"),
        Panel("Freshness", (Query("ldp_freshness_seconds", "{{collection}}"),), unit="s",
              description="Age of the newest report applied to the store"),
        Panel("Messages lost to Kafka retention", (Query(
            f"sum by (topic, partition) (increase(ldp_lost_messages_total[{RATE}]))", "{{topic}}:{{partition}}"),),
            unit="short", description="Zero unless Kafka's retention deleted messages before they were applied "
                                      "(the worker logs the offsets at ERROR; README: the delivery guarantee)"),
    ))


def estimates_row() -> Row:
    return Row("Estimates", (
        Panel("$attribute (estimate, 95% band)", (
            Query(ESTIMATE, "{{value}} estimate"),
            Query(f"{ESTIMATE} + 1.96 * {ESTIMATE_STDERR}", "{{value}} upper"),
            Query(f"{ESTIMATE} - 1.96 * {ESTIMATE_STDERR}", "{{value}} lower"),
        ), description="Unbiased estimate (mean, or frequency per value) and estimate +- 1.96 standard errors",
            width=COLUMNS // 3, repeat="attribute",
            overrides=({"matcher": {"id": "byRegexp", "options": "/ (upper|lower)$/"},
                        "properties": [{"id": "custom.lineStyle", "value": {"fill": "dash", "dash": [6, 4]}},
                                       {"id": "custom.lineWidth", "value": 1}]},)),
        Panel("Standard errors", (Query('ldp_estimate_stderr{collection="$collection",window="$window"}',
                                        "{{attribute}} {{value}}"),), width=COLUMNS,
              description="Shrink as 1/sqrt(reports) within a window"),
    ))


def worker_row() -> Row:
    latency = f"sum by (le) (rate(ldp_worker_batch_duration_seconds_bucket[{RATE}]))"
    return Row("Aggregator workers", (
        Panel("Batch latency", (Query(f"histogram_quantile(0.5, {latency})", "p50"),
                                Query(f"histogram_quantile(0.99, {latency})", "p99")), unit="s",
              description="Decode, validate, accumulate and apply one partition micro-batch"),
        Panel("Reports per second by worker", (Query(
            f'sum by (instance) (rate(ldp_worker_reports_total{{outcome="accepted"}}[{RATE}]))', "{{instance}}"),),
            unit="reqps"),
        Panel("Micro-batches by fate", (Query(f"sum by (status) (rate(ldp_worker_batches_total[{RATE}]))",
                                              "{{status}}"),), unit="ops",
              description="applied; skipped (a replay); overlap (retried without the replayed part), gap (the "
                          "store went back in time: the partition is read again) and stale (retried after "
                          "reloading the dedupe lists)"),
        Panel("Dead letters per second", (Query(f"sum(rate(ldp_worker_dead_letters_total[{RATE}]))", "dead letters"),),
              unit="ops"),
    ))


def edge_row() -> Row:
    latency = f"sum by (le) (rate(ldp_edge_request_duration_seconds_bucket[{RATE}]))"
    return Row("Ingestion edge", (
        Panel("Requests per second by status", (Query(
            f"sum by (status) (rate(ldp_edge_requests_total[{RATE}]))", "{{status}}"),), unit="reqps",
            description="200: in Kafka; 202: fsynced in the spool; 4xx refused with a reason; 429/503/507 with "
                        "Retry-After"),
        Panel("Reports per second by outcome and reason", (Query(
            f"sum by (outcome, reason) (rate(ldp_edge_reports_total[{RATE}]))", "{{outcome}} {{reason}}"),),
            unit="reqps", description="accepted (to Kafka or the spool) or rejected with its reason; rejected "
                                      "reports never reach Kafka"),
        Panel("Request latency", (Query(f"histogram_quantile(0.5, {latency})", "p50"),
                                  Query(f"histogram_quantile(0.99, {latency})", "p99")), unit="s",
              description="From a report request's arrival to its answer (Kafka's acknowledgement included)"),
        Panel("Spool and reports in flight", (Query("sum(ldp_edge_spool_bytes)", "spool bytes"),
                                              Query("sum(ldp_edge_reports_in_flight)", "reports in flight")),
              description="A non-empty spool means Kafka was unreachable: it drains oldest first when Kafka is "
                          "back; a full spool answers 507"),
        Panel("Enrolments per second", (Query(
            f"sum by (outcome, reason) (rate(ldp_edge_enrolments_total[{RATE}]))", "{{outcome}} {{reason}}"),),
            unit="reqps", description="POST /v1/enroll: devices enrolled with a token, or refused with the reason "
                                      "(bad_token, used_up, rate_limited, ...)"),
        Panel("4xx answers per second by reason", (Query(
            f'sum by (status, reason) (rate(ldp_edge_requests_total{{status=~"4.."}}[{RATE}]))',
            "{{status}} {{reason}}"),), unit="reqps",
            description="Requests the edge refused as the client's fault, by status and reason"),
    ))


def sgd_row() -> Row:
    # a coordinator's metrics label the training job `job`, which Prometheus keeps as `exported_job` (its own `job`
    # label, the scrape job's, wins: tests/integration/test_prometheus_scrape.py)
    return Row("SGD training", (
        Panel("Jobs devices join: model version", (Query("max by (exported_job) (ldp_job_model_version)",
                                                         "{{exported_job}}"),),
              description="Current model version of each training job devices join through the edge (`ldp train "
                          "run JOB`, one coordinator per job)"),
        Panel("Jobs devices join: updates per second by outcome", (Query(
            f"sum by (exported_job, outcome) (rate(ldp_job_updates_total[{RATE}]))",
            "{{exported_job}} {{outcome}}"),), unit="reqps",
            description="Updates the coordinator read: accepted (B per version), or refused:<reason> (malformed, "
                        "wrong_shape, not_finite, closed_version, duplicate, round_limit)"),
        Panel("Jobs devices join: held-out accuracy and loss", (
            Query("max by (exported_job) (ldp_job_held_out_accuracy)", "{{exported_job}} accuracy"),
            Query("max by (exported_job) (ldp_job_held_out_loss)", "{{exported_job}} loss")),
            description="The current version's accuracy and mean cross-entropy on the coordinator's held-out rows "
                        "(jobs whose file has an evaluation section); the curve per version: the console's job page"),
        Panel("Jobs devices join: most participations of a device", (Query(
            "max by (exported_job) (ldp_job_max_participations)", "{{exported_job}}"),),
            description="The most versions any device sent an accepted update for: its lifetime epsilon is this "
                        "times the job's epsilon per report"),
        Panel("Model version", (Query("max by (exported_job) (ldp_sgd_iteration)", "{{exported_job}}"),),
              description="Current model version t of each simulated training job (one coordinator per job)"),
        Panel("Gradients per second by outcome", (Query(
            f"sum by (exported_job, outcome, reason) (rate(ldp_sgd_gradients_total[{RATE}]))",
            "{{exported_job}} {{outcome}} {{reason}}"),), unit="reqps",
            description="accepted (g per version); dropped: stale (computed on an older version); rejected: sent "
                        "to ldp.dlq with the reason"),
        Panel("Held-out loss and accuracy", (
            Query("max by (exported_job) (ldp_sgd_held_out_loss)", "{{exported_job}} loss"),
            Query('1 - max by (exported_job) (ldp_sgd_held_out_error{metric="misclassification"})',
                  "{{exported_job}} accuracy")),
            description="Mean loss of the current model on held-out rows and, for a classifier, its accuracy "
                        "(simulated jobs)"),
        Panel("Model norm", (Query("max by (exported_job) (ldp_sgd_model_norm)", "{{exported_job}}"),),
              description="L2 norm of the current parameters beta"),
    ))


def shuffler_row() -> Row:
    return Row("Shuffler", (
        Panel("Reports held", (Query("sum by (collection) (ldp_shuffler_held_reports)", "{{collection}}"),),
              description="Reports of windows not released yet: a window is released when it closes with at least "
                          "the spec's min_batch reports, else rolled into the next"),
        Panel("Released batches and reports per second", (
            Query(f"sum by (collection) (rate(ldp_shuffler_released_batches_total[{RATE}]))",
                  "{{collection}} batches"),
            Query(f"sum by (collection) (rate(ldp_shuffler_released_reports_total[{RATE}]))",
                  "{{collection}} reports")), unit="ops"),
        Panel("Central epsilon of the newest batch", (Query("ldp_shuffle_central_epsilon", "{{collection}}"),),
              description="Each released batch's (epsilon, delta)-DP guarantee after shuffling, at the spec's delta"),
        Panel("Window close overdue", (Query("ldp_shuffle_window_overdue_seconds", "{{collection}}"),), unit="s",
              description="How long the next window has been due to close: 0 unless the shuffler is stopped or "
                          "stuck (alert LdpShuffleWindowOverdue)"),
        Panel("Reports read and messages skipped per second", (
            Query(f"sum by (collection) (rate(ldp_shuffler_read_reports_total[{RATE}]))", "{{collection}} read"),
            Query(f"sum by (collection) (rate(ldp_shuffler_skipped_messages_total[{RATE}]))",
                  "{{collection}} skipped")), unit="ops",
            description="Reports read from the raw topic and held; raw messages left out (malformed, or not the "
                        "edge's: the shuffler's log says why)"),
        Panel("Raw topic lag", (Query("sum by (collection) (ldp_shuffler_raw_lag_messages)", "{{collection}}"),),
              description="Messages the edge admitted that the shuffler has not read yet"),
        Panel("Since the last release", (Query("time() - max by (collection) "
                                               "(ldp_shuffler_last_release_timestamp_seconds)", "{{collection}}"),),
              unit="s", description="Age of the newest released batch: grows by one window between releases"),
        Panel("Release duration", (Query("max by (collection) (ldp_shuffler_release_duration_seconds)",
                                         "{{collection}}"),), unit="s",
              description="From the newest release's window close to its commit: catching up on the raw topic, "
                          "shuffling, the Kafka transaction"),
    ))


def poisoning_row() -> Row:
    return Row("Poisoning", (
        Panel("Set-aside ratio", (Query("ldp_poisoning_set_aside_ratio", "{{collection}} {{window}}"),
                                  Query("ldp_poisoning_alert_threshold", "{{collection}} threshold")),
              unit="percentunit", description="The share of a window's reports its detectors set aside, and the "
                                              "threshold above which the window raises the alert"),
        Panel("Suspected poisoning", (Query("max by (collection, window) (ldp_poisoning_alert)",
                                            "{{collection}} {{window}}"),),
              description="1 while a window's set-aside ratio is above the threshold (alert LdpSuspectedPoisoning): "
                          "`ldp poisoning status NAME`"),
    ))


def privacy_row() -> Row:
    return Row("Devices' privacy", (
        Panel("Epsilon per report and per window", (Query("ldp_privacy_epsilon", "{{collection}} per {{scope}}"),),
              width=COLUMNS, description="What a device spends as the newest published spec states it: per report, "
                                         "per window (one report a window) and over its lifetime (a spec's privacy "
                                         "block); a shuffled collection's central epsilon is in the Shuffler row"),
    ))


SERVICE_ROWS: dict[str, Callable[[], Row]] = {make().title: make for make in (worker_row, edge_row, shuffler_row,
                                                                              sgd_row)}


def service_rows() -> list[Callable[[], Row]]:
    """The rows the catalog's services name, in its order (KeyError for a row named but not written here)."""
    named = [svc.metrics.row for svc in SERVICES if svc.metrics is not None and svc.metrics.row is not None]
    missing = [title for title in named if title not in SERVICE_ROWS]
    if missing:
        raise KeyError(f"the service catalog names dashboard rows that SERVICE_ROWS lacks: {', '.join(missing)}")
    return [SERVICE_ROWS[title] for title in named]


ROWS: list[Callable[[], Row]] = [ingestion_row, estimates_row, *service_rows(), poisoning_row, privacy_row]


def variable(name: str, query: str, multi: bool = False) -> dict[str, Any]:
    """A templating variable filled from a label's values."""
    return {"name": name, "label": name, "type": "query", "datasource": DATASOURCE, "refresh": 2, "sort": 1,
            "query": {"query": query, "refId": f"var-{name}"}, "definition": query, "multi": multi,
            "includeAll": multi, "current": {}, "options": [], "hide": 0}


def panel_json(panel: Panel, panel_id: int, x: int, y: int) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": panel_id, "type": panel.kind, "title": panel.title, "description": panel.description,
        "datasource": DATASOURCE, "gridPos": {"h": PANEL_HEIGHT, "w": panel.width, "x": x, "y": y},
        "targets": [{"refId": chr(ord("A") + i), "datasource": DATASOURCE, "expr": q.expr, "legendFormat": q.legend,
                     "range": True} for i, q in enumerate(panel.queries)],
        "fieldConfig": {"defaults": {"unit": panel.unit, "custom": {"lineWidth": 2, "fillOpacity": 0}},
                        "overrides": list(panel.overrides)},
        "options": {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                    "tooltip": {"mode": "multi", "sort": "desc"}},
    }
    if panel.repeat:
        out |= {"repeat": panel.repeat, "repeatDirection": "h", "maxPerRow": COLUMNS // panel.width}
    return out


def dashboard(rows: Sequence[Row]) -> dict[str, Any]:
    """The dashboard JSON (Grafana's schema) of these rows, panels laid out left to right, top to bottom."""
    panels: list[dict[str, Any]] = []
    y = 0
    for row in rows:
        panels.append({"id": len(panels) + 1, "type": "row", "title": row.title, "collapsed": False, "panels": [],
                       "gridPos": {"h": 1, "w": COLUMNS, "x": 0, "y": y}})
        y += 1
        x = 0
        for panel in row.panels:
            if x + panel.width > COLUMNS:
                x, y = 0, y + PANEL_HEIGHT
            panels.append(panel_json(panel, len(panels) + 1, x, y))
            x += panel.width
        y += PANEL_HEIGHT
    return {
        "uid": "ldpstream", "title": "ldpstream", "tags": ["ldpstream"], "editable": True, "schemaVersion": 41,
        "version": 1, "time": {"from": "now-30m", "to": "now"}, "refresh": "5s", "timezone": "browser",
        "templating": {"list": [
            variable("collection", "label_values(ldp_reports_total, collection)"),
            variable("window", 'label_values(ldp_estimate{collection="$collection"}, window)'),
            variable("attribute", 'label_values(ldp_estimate{collection="$collection"}, attribute)', multi=True),
        ]},
        "panels": panels,
    }


def render(rows: Sequence[Row] | None = None) -> str:
    """The dashboard file's text."""
    return json.dumps(dashboard([make() for make in ROWS] if rows is None else rows), indent=2, sort_keys=True) + "\n"


def main() -> None:
    OUTPUT.parent.mkdir(parents=True, exist_ok=True)
    OUTPUT.write_text(render())
    print(f"wrote {OUTPUT}")


if __name__ == "__main__":
    main()
