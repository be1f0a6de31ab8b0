"""`ldp up --prometheus`: Debian's Prometheus on loopback, scraping every local process that serves metrics.

Its configuration is generated (`config`): two jobs read the targets the processes announce
(`ldpstream.runtime.targets`, file-based discovery: a process that starts or stops is picked up within seconds),
one of them with a bearer token of scope `metrics` (made once, `ensure_token`) for the edge and the read API; the
rules are `deploy/prometheus/rules.yml`, the compose deployment's. The data and the log live in the state dir.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from ldpstream.runtime.catalog import OPEN, TOKEN
from ldpstream.runtime.process import ServiceError, port_in_use, spawn, wait_until
from ldpstream.runtime.settings import Settings
from ldpstream.runtime.targets import announced, prune, targets_dir
from ldpstream.services.base import LocalService
from ldpstream.services.debian import debian_program

RETENTION = "15d"


class PrometheusService(LocalService):
    """Our own Prometheus (`PROMETHEUS_URL` points at an existing one instead, which is only checked).

    `scrape_interval` is also the rules' evaluation interval; `rules_for` replaces every rule's `for:` (tests, so an
    alert fires at its first evaluation; None keeps the rules' own).
    """

    name = "prometheus"
    external_variable = "PROMETHEUS_URL"
    probe = "GET /-/ready"
    process = "prometheus"
    stop_timeout_s = 20.0

    def __init__(self, config: Settings, scrape_interval: str = "5s", rules_for: str | None = None) -> None:
        super().__init__(config)
        self.scrape_interval, self.rules_for = scrape_interval, rules_for
        self.config_file = self.home / "prometheus.yml"
        self.rules_file = self.home / "rules.yml"
        self.token_file = self.home / "metrics_token"

    @property
    def external(self) -> str | None:
        return os.environ.get(self.external_variable) or None

    @property
    def address(self) -> str:
        return (self.external or f"http://127.0.0.1:{self.cfg.prometheus_port}").rstrip("/")

    def answers(self, timeout_s: float) -> bool:
        try:
            with urllib.request.urlopen(f"{self.address}/-/ready", timeout=timeout_s) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def describe(self) -> str:
        jobs = announced(self.cfg)
        return ", ".join(f"{job} x{len(t)}" for job, t in sorted(jobs.items())) or "no target announced yet"

    def authentication(self) -> str:
        return "off (loopback only)" if self.managed else "-"

    @property
    def running(self) -> bool:
        """Whether this state dir's Prometheus runs (or an external one is named): `ldp status` shows it then."""
        return not self.managed or self.running_pid() is not None

    def launch(self) -> str:
        program = debian_program("prometheus", "prometheus", "or run `make prometheus`")
        port = self.cfg.prometheus_port
        if port_in_use(port):
            raise ServiceError(f"port {port} on 127.0.0.1 is already in use by another process: stop it, or set "
                               f"PROMETHEUS_PORT")
        self.write_config()
        self.data.mkdir(parents=True, exist_ok=True)
        proc = spawn([program, f"--config.file={self.config_file}", f"--storage.tsdb.path={self.data}",
                      f"--storage.tsdb.retention.time={RETENTION}", f"--web.listen-address=127.0.0.1:{port}",
                      "--web.enable-lifecycle"], self.log, self.pidfile)
        wait_until(lambda: self.answers(1.0), lambda: proc.poll() is None, 60.0, "Prometheus", self.log)
        return f"started (pid {proc.pid}) at {self.address}; graphs: {self.address}/graph"

    def apply_access(self) -> None:
        """A running Prometheus: its configuration generated again (a new token, new rules) and reloaded."""
        self.write_config()
        try:
            urllib.request.urlopen(urllib.request.Request(f"{self.address}/-/reload", method="POST"), timeout=10.0)
        except (urllib.error.URLError, OSError) as exc:
            raise ServiceError(f"Prometheus at {self.address} did not reload its configuration: {exc}") from exc

    def write_config(self) -> None:
        """The rules, the metrics token and the configuration, in the state dir (checked with promtool if there)."""
        self.home.mkdir(parents=True, exist_ok=True)
        for access in (OPEN, TOKEN):
            targets_dir(self.cfg, access).mkdir(parents=True, exist_ok=True)
        prune(self.cfg)
        ensure_token(self.cfg, self.token_file)
        self.rules_file.write_text(rules_text(rules_path(self.cfg).read_text(), self.rules_for))
        self.config_file.write_text(json.dumps(config(self.cfg, self.rules_file, self.token_file,
                                                      self.scrape_interval), indent=2))  # JSON is YAML
        promtool = Path(debian_program("prometheus", "prometheus")).with_name("promtool")
        if promtool.exists():
            result = subprocess.run([str(promtool), "check", "config", str(self.config_file)], capture_output=True,
                                    text=True)
            if result.returncode != 0:
                raise ServiceError(f"the generated {self.config_file} is invalid:\n{result.stdout}{result.stderr}")


def rules_path(cfg: Settings) -> Path:
    """The alerting rules (`deploy/prometheus/rules.yml`, beside the local services' templates)."""
    return cfg.deploy_dir.parent / "prometheus" / "rules.yml"


def rules_text(text: str, rules_for: str | None) -> str:
    """The rules file, every `for:` replaced by `rules_for` unless it is None."""
    return text if rules_for is None else re.sub(r"(?m)^(\s+for:)\s*\S+", rf"\g<1> {rules_for}", text)


def config(cfg: Settings, rules: Path, token_file: Path, scrape_interval: str = "5s") -> dict[str, Any]:
    """The configuration: Prometheus itself, and every announced target (module docstring)."""

    def discovered(access: str) -> dict[str, Any]:
        return {"file_sd_configs": [{"files": [str(targets_dir(cfg, access) / "*.json")], "refresh_interval": "5s"}]}

    return {
        "global": {"scrape_interval": scrape_interval, "evaluation_interval": scrape_interval,
                   "scrape_timeout": scrape_interval},
        "rule_files": [str(rules)],
        "scrape_configs": [
            {"job_name": "prometheus", "static_configs": [{"targets": [f"127.0.0.1:{cfg.prometheus_port}"]}]},
            {"job_name": "ldp", **discovered(OPEN)},  # each target names its own job (ldp-aggregator, ...)
            {"job_name": "ldp-token", **discovered(TOKEN),
             "authorization": {"type": "Bearer", "credentials_file": str(token_file)}},
        ],
    }


def ensure_token(cfg: Settings, path: Path) -> None:
    """A bearer token of scope `metrics` in `path` (0600): the one there if Redis still holds it active, else a new
    one (never expiring; `ldp tokens revoke` it and run `ldp up --prometheus` again for another)."""
    from ldpstream.contract.clock import now_ms
    from ldpstream.runtime.redis import redis_client
    from ldpstream.runtime.secrets import replace_secret
    from ldpstream.runtime.tokens import Scope, TokenStore, parse_bearer

    store = TokenStore(redis_client(cfg.redis, 10.0))
    if path.exists():
        held = parse_bearer(f"Bearer {path.read_text().strip()}")
        active = {r.id for r in store.records() if r.status(now_ms()) == "active" and r.allows(Scope.METRICS)}
        if held is not None and held[0] in active:
            return
    replace_secret(path, store.issue([Scope.METRICS], "prometheus", now_ms(), None).token.encode())
