"""The Grafana dashboard, checked without Grafana: it is what deploy/grafana/dashboard.py generates, every query
is balanced PromQL naming metrics (and labels) that src/ldpstream/runtime/metrics.py,
src/ldpstream/readapi/metrics.py and the coordinator (src/ldpstream/sgd/jobrun.py) define, and provisioning fits
compose."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from prometheus_client.metrics import MetricWrapperBase

from ldpstream.aggregator.store import MemoryStore
from ldpstream.readapi.metrics import StoreCollector
from ldpstream.runtime import metrics
from ldpstream.runtime.catalog import SERVICES
from ldpstream.sgd import jobrun

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
GRAFANA = DEPLOY / "grafana"
FUNCTIONS = {"sum", "avg", "min", "max", "count", "rate", "irate", "increase", "histogram_quantile", "clamp_min",
             "clamp_max", "abs", "topk", "bottomk", "label_values", "time"}
KEYWORDS = {"and", "or", "unless", "bool", "offset"}
TARGET_LABELS = {"job", "instance"}  # added by Prometheus to every scraped series
SUFFIXES = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count")}
CLAUSE = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^()]*)\)")
SELECTOR = re.compile(r"([A-Za-z_:][A-Za-z0-9_:]*)?\s*\{([^{}]*)\}")
IDENTIFIER = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
LABEL_VALUES = re.compile(r"^label_values\((.*),\s*([A-Za-z_][A-Za-z0-9_]*)\)$")


def load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ldp_dashboard", GRAFANA / "dashboard.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve the module's annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def defined_series() -> dict[str, set[str]]:
    """Every series name ldpstream.runtime.metrics, ldpstream.readapi.metrics and the coordinator expose, with its
    label names as Prometheus stores them: a label that a target label overrides is kept as `exported_<label>`."""
    wrappers = [m for module in (metrics, jobrun) for m in vars(module).values() if isinstance(m, MetricWrapperBase)]
    families = [(m._name, str(m._type), set(m._labelnames)) for m in wrappers]
    store_wide = StoreCollector(MemoryStore(), lambda: [], lambda topics: {})
    families += [(f.name, str(f.type), set(f._labelnames)) for f in store_wide.describe()]  # type: ignore[attr-defined]
    out = {}
    for name, kind, labels in families:
        for suffix in SUFFIXES[kind]:
            out[name + suffix] = (labels - TARGET_LABELS | {f"exported_{label}" for label in labels & TARGET_LABELS}
                                  | ({"le"} if suffix == "_bucket" else set()) | TARGET_LABELS)
    return out


def check_balanced(expr: str) -> None:
    pairs, stack = {")": "(", "]": "[", "}": "{"}, []
    for ch in re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr):
        if ch in "([{":
            stack.append(ch)
        elif ch in pairs:
            assert stack and stack.pop() == pairs[ch], f"unbalanced {ch!r} in {expr!r}"
    assert not stack, f"unclosed {stack} in {expr!r}"


def metric_names(expr: str) -> dict[str, set[str]]:
    """{metric: label names its selectors match on} of a PromQL expression; asserts it is well formed."""
    check_balanced(expr)
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\[[^\[\]]*\]", "", text)  # range selectors
    grouped = {label.strip() for _, labels in CLAUSE.findall(text) for label in labels.split(",") if label.strip()}
    text = CLAUSE.sub("", text)
    found: dict[str, set[str]] = {}
    for metric, matchers in SELECTOR.findall(text):
        assert metric, f"a selector without a metric name in {expr!r}"
        found.setdefault(metric, set()).update(m.split("=")[0].strip(" !~") for m in matchers.split(",") if m)
    bare = SELECTOR.sub(lambda m: m.group(1), text)
    for m in IDENTIFIER.finditer(bare):
        if bare[m.end():].lstrip().startswith("("):
            assert m.group() in FUNCTIONS, f"unknown function {m.group()!r} in {expr!r}"
        elif m.group() not in KEYWORDS:
            found.setdefault(m.group(), set())
    assert found, f"no metric in {expr!r}"
    if grouped:
        found[""] = grouped  # grouping labels: checked against the labels of the expression's metrics
    return found


def queries(board: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(where, PromQL) of every panel target and templating variable."""
    for panel in board["panels"]:
        for target in panel.get("targets", []):
            yield f"panel {panel['title']!r}", target["expr"]
    for var in board["templating"]["list"]:
        match = LABEL_VALUES.match(var["query"]["query"])
        assert match, var
        yield f"variable {var['name']}", f"count by ({match.group(2)}) ({match.group(1)})"


@pytest.fixture(scope="module")
def board() -> dict[str, Any]:
    return json.loads((GRAFANA / "dashboards" / "ldpstream.json").read_text())


def test_the_committed_dashboard_is_what_the_generator_writes() -> None:
    generated = load_generator().render()
    assert (GRAFANA / "dashboards" / "ldpstream.json").read_text() == generated, \
        "run `python deploy/grafana/dashboard.py` and commit the result"


def test_every_query_is_balanced_and_names_defined_metrics_and_labels(board: dict[str, Any]) -> None:
    defined = defined_series()
    used = set()
    for where, expr in queries(board):
        names = metric_names(expr)
        grouped = names.pop("", set())
        for name, labels in names.items():
            assert name in defined, f"{where}: {name!r} is not a metric of ldpstream.readapi.metrics ({expr!r})"
            assert labels <= defined[name], f"{where}: {name} has no label(s) {labels - defined[name]}"
            shadowed = {label for label in TARGET_LABELS if f"exported_{label}" in defined[name]}
            assert not (labels | grouped) & shadowed, \
                f"{where}: {name}'s own {shadowed} label is exported_*: {shadowed} is the scrape target's ({expr!r})"
        assert grouped <= set.union(*(defined[n] for n in names)), f"{where}: grouping by unknown labels {grouped}"
        used |= set(names)
    assert {"ldp_reports_total", "ldp_consumer_lag_messages", "ldp_freshness_seconds", "ldp_estimate",
            "ldp_estimate_stderr", "ldp_worker_batch_duration_seconds_bucket", "ldp_job_model_version",
            "ldp_job_updates_total", "ldp_job_held_out_accuracy", "ldp_job_held_out_loss"} <= used


@pytest.mark.parametrize("expr", ["sum(rate(ldp_reports_total[1m])", "ldp_estimate{window=\"all\"",
                                  "nonsense_fn(ldp_estimate)", 'rate({outcome="x"}[1m])', "1 + 2"])
def test_the_query_check_rejects_malformed_queries(expr: str) -> None:
    with pytest.raises(AssertionError):
        metric_names(expr)


def test_an_undefined_metric_or_label_is_caught() -> None:
    defined = defined_series()
    assert "ldp_reports" not in defined and "ldp_reports_total" in defined
    assert "device" not in defined["ldp_reports_total"]


def test_panels_fit_the_grid_with_unique_ids_and_the_provisioned_datasource(board: dict[str, Any]) -> None:
    datasource = yaml.safe_load((GRAFANA / "provisioning" / "datasources" / "prometheus.yml").read_text())
    uid = datasource["datasources"][0]["uid"]
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    for panel in board["panels"]:
        pos = panel["gridPos"]
        assert 0 <= pos["x"] and pos["x"] + pos["w"] <= 24
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == uid and all(t["datasource"]["uid"] == uid for t in panel["targets"])
    titles = [p["title"] for p in board["panels"] if p["type"] == "row"]
    assert titles[:3] == ["Ingestion", "Estimates", "Aggregator workers"]  # rows added later come after


def test_adding_a_row_is_one_call() -> None:
    gen = load_generator()
    extra = gen.Row("SGD", (gen.Panel("Loss", (gen.Query("ldp_estimate", "loss"),)),))
    board = gen.dashboard([*(make() for make in gen.ROWS), extra])
    last_row = [p for p in board["panels"] if p["type"] == "row"][-1]
    panel = board["panels"][-1]
    assert last_row["title"] == "SGD" and panel["title"] == "Loss"
    assert panel["gridPos"]["y"] == last_row["gridPos"]["y"] + 1 > max(
        p["gridPos"]["y"] for p in board["panels"][:-2])


def test_compose_provisions_grafana_and_prometheus_scrapes_our_services() -> None:
    compose = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    services = compose["services"]
    mounts = dict(v.split(":")[:2] for v in services["grafana"]["volumes"])
    provider = yaml.safe_load((GRAFANA / "provisioning" / "dashboards" / "ldpstream.yml").read_text())
    assert mounts["./grafana/dashboards"] == provider["providers"][0]["options"]["path"]
    assert mounts["./grafana/provisioning"] == "/etc/grafana/provisioning"
    prometheus = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in prometheus["scrape_configs"]}
    for svc in SERVICES:  # each service's metrics are where its compose command serves them
        if svc.metrics is None or svc.compose is None:
            continue
        command = services[svc.name]["command"]
        port = int(command[command.index(svc.metrics.option) + 1])
        assert jobs[svc.metrics.job]["dns_sd_configs"][0] == {"names": [svc.name], "type": "A", "port": port}
        if svc.metrics.option == "--metrics-port":  # its own metrics server: on every interface of its container
            assert services[svc.name]["environment"]["LDP_METRICS_ADDR"] == "0.0.0.0"
    assert jobs["ldp-edge"]["authorization"] == jobs["ldp-api"]["authorization"]  # a metrics-scope API token


def test_every_service_row_the_catalog_names_is_on_the_dashboard() -> None:
    board = load_generator().dashboard([make() for make in load_generator().ROWS])
    titles = {p["title"] for p in board["panels"] if p["type"] == "row"}
    named = {svc.metrics.row for svc in SERVICES if svc.metrics is not None and svc.metrics.row is not None}
    assert named and named <= titles and "Shuffler" in named
