"""The alert rules (deploy/prometheus/rules.yml) with Debian's promtool: valid, each unit-tested on synthetic series
(deploy/prometheus/rules.test.yml), each naming only metrics the code defines; and the configuration `ldp up
--prometheus` generates is one Prometheus accepts. (tests/integration/test_alerts.py makes each alert fire live.)"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from ldpstream.runtime.settings import Settings
from ldpstream.services import ServiceError
from ldpstream.services.debian import debian_program
from ldpstream.services.prometheus import config, rules_path, rules_text
from tests.deploy.test_grafana import defined_series, metric_names

PROMETHEUS = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
RULES, RULE_TESTS = PROMETHEUS / "rules.yml", PROMETHEUS / "rules.test.yml"


@pytest.fixture(scope="module")
def promtool() -> str:
    try:
        return str(Path(debian_program("prometheus", "prometheus")).with_name("promtool"))
    except ServiceError as exc:
        pytest.fail(str(exc))


def run(argv: list[str]) -> str:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def alerts() -> dict[str, str]:
    return {rule["alert"]: rule["expr"] for group in yaml.safe_load(RULES.read_text())["groups"]
            for rule in group["rules"]}


def test_the_rules_are_valid(promtool: str) -> None:
    assert f"SUCCESS: {len(alerts())} rules found" in run([promtool, "check", "rules", str(RULES)])


def test_every_alert_is_unit_tested_firing_and_clearing(promtool: str) -> None:
    run([promtool, "test", "rules", str(RULE_TESTS)])
    cases = [case for test in yaml.safe_load(RULE_TESTS.read_text())["tests"] for case in test["alert_rule_test"]]
    for name in alerts():
        outcomes = [bool(c["exp_alerts"]) for c in cases if c["alertname"] == name]
        assert True in outcomes and False in outcomes, f"{name}: no test where it fires and one where it does not"


def test_the_rules_name_only_defined_metrics() -> None:
    defined = defined_series()
    for name, expr in alerts().items():
        names = metric_names(re.sub(r"\boffset\s+\w+", "", expr))  # the query check knows no offsets
        grouped = names.pop("", set())
        for metric, labels in names.items():
            assert metric in defined, f"{name}: {metric} is not a metric of ours"
            assert labels | grouped <= defined[metric], f"{name}: {metric} has no label(s) {labels - defined[metric]}"


def test_a_test_config_replaces_every_for_and_keeps_the_expressions() -> None:
    fast = yaml.safe_load(rules_text(RULES.read_text(), "0s"))
    rules = [r for g in fast["groups"] for r in g["rules"]]
    assert all(r.get("for", "0s") == "0s" for r in rules)
    assert {r["alert"]: r["expr"] for r in rules} == alerts()
    assert rules_text(RULES.read_text(), None) == RULES.read_text()


def test_the_generated_config_is_valid(promtool: str, tmp_path: Path) -> None:
    cfg = Settings.from_env({"LDP_STATE_DIR": str(tmp_path), "PROMETHEUS_PORT": "29499"})
    assert rules_path(cfg) == RULES
    token = tmp_path / "metrics_token"
    token.write_text("ldp_000000000000_" + "A" * 43)
    generated = config(cfg, RULES, token, "1s")
    (tmp_path / "prometheus.yml").write_text(json.dumps(generated))
    run([promtool, "check", "config", str(tmp_path / "prometheus.yml")])
    jobs = {job["job_name"]: job for job in generated["scrape_configs"]}
    assert jobs["ldp-token"]["authorization"]["credentials_file"] == str(token)  # the edge's and the API's /metrics
    assert "authorization" not in jobs["ldp"]
    assert jobs["prometheus"]["static_configs"] == [{"targets": ["127.0.0.1:29499"]}]
