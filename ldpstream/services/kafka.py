"""A single-node Apache Kafka broker in KRaft combined mode, assembled from the Maven Central jars.

Steps of `start`: (1) copy the broker's jars into a per-version cache under the state dir with Maven (reused on
later runs); (2) write server.properties from our template; (3) format the storage once (kafka.tools.StorageTool,
static quorum, so no --standalone); (4) start kafka.Kafka detached; (5) wait for "Kafka Server started" in its log
and for an answer to a metadata request. Any failure raises ServiceError with the reason and the log's tail.
"""

from __future__ import annotations

import base64
import shutil
import subprocess
import uuid

from ldpstream.services.base import LocalService
from runtime.kafka import metadata_answers
from runtime.process import ServiceError, port_in_use, spawn, wait_until
from runtime.settings import Settings

READY_LINE = "Kafka Server started"


def kafka_cluster_id() -> str:
    """A Kafka cluster id: 16 random bytes, URL-safe base64 without padding, not starting with '-'."""
    while True:
        s = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not s.startswith("-"):
            return s


class KafkaService(LocalService):
    """The local Kafka broker (or, with KAFKA_BOOTSTRAP set, an existing one that we only check)."""

    name = "kafka"
    external_variable = "KAFKA_BOOTSTRAP"
    probe = "a metadata request"
    process = "broker"
    stop_timeout_s = 60.0

    def __init__(self, config: Settings) -> None:
        super().__init__(config)
        self.lib = self.home / f"lib-{config.kafka_version}"
        self.properties = self.home / "server.properties"

    @property
    def external(self) -> str | None:
        return self.cfg.kafka_bootstrap

    @property
    def address(self) -> str:
        return self.cfg.bootstrap

    def answers(self, timeout_s: float) -> bool:
        return metadata_answers(self.address, timeout_s)

    def describe(self) -> str:
        return f"Kafka {self.cfg.kafka_version}, KRaft combined mode"

    def launch(self) -> str:
        java = self._require("java", "Java 17+ (e.g. `apt-get install openjdk-17-jre-headless`)")
        for port in (self.cfg.kafka_port, self.cfg.kafka_controller_port):
            if port_in_use(port):
                raise ServiceError(f"port {port} on 127.0.0.1 is already in use by another process: stop it, or "
                                   f"set KAFKA_PORT / KAFKA_CONTROLLER_PORT, or point KAFKA_BOOTSTRAP at an "
                                   f"existing broker")
        self.fetch_jars()
        self._write_properties()
        self._format(java)
        log_opts = [f"-Dlog4j2.configurationFile={self.cfg.deploy_dir / 'kafka' / 'log4j2.properties'}",
                    f"-Dkafka.logs.dir={self.home / 'logs'}"]
        jvm = [f"-Xms{self.cfg.kafka_heap}", f"-Xmx{self.cfg.kafka_heap}", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
               "-Djava.awt.headless=true"]
        self.log.unlink(missing_ok=True)
        proc = spawn([java, *jvm, *log_opts, "-cp", f"{self.lib}/*", "kafka.Kafka", str(self.properties)],
                     self.log, self.pidfile)
        wait_until(lambda: READY_LINE in self.log.read_text(errors="replace") and metadata_answers(self.address),
                   lambda: proc.poll() is None, self.cfg.start_timeout_s, "Kafka broker", self.log)
        return f"started (pid {proc.pid}) at {self.address}"

    def fetch_jars(self) -> None:
        """Copy the broker's runtime jars from Maven Central into the per-version cache (once)."""
        if (self.lib / ".complete").exists():
            return
        mvn = self._require("mvn", "Maven (e.g. `apt-get install maven`)")
        tmp = self.lib.with_name(self.lib.name + ".partial")
        shutil.rmtree(tmp, ignore_errors=True)
        cmd = [mvn, "-B", "-q", "-f", str(self.cfg.deploy_dir / "kafka" / "pom.xml"),
               "org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies", "-DincludeScope=runtime",
               f"-DoutputDirectory={tmp}", f"-Dkafka.version={self.cfg.kafka_version}",
               f"-Dlog4j2.version={self.cfg.log4j2_version}"]
        result = subprocess.run(cmd, capture_output=True, text=True)
        if result.returncode != 0:
            raise ServiceError(f"Maven could not fetch Kafka {self.cfg.kafka_version}:\n"
                               f"{(result.stdout + result.stderr)[-3000:]}")
        jars = sorted(p.name for p in tmp.glob("*.jar"))
        if not any(j.startswith(f"kafka_2.13-{self.cfg.kafka_version}") for j in jars):
            raise ServiceError(f"Maven ran but {tmp} has no kafka_2.13-{self.cfg.kafka_version}.jar")
        if sum(j.startswith("slf4j-api-") for j in jars) != 1:
            raise ServiceError(f"expected exactly one slf4j-api jar in {tmp} (the broker would log nothing)")
        shutil.rmtree(self.lib, ignore_errors=True)
        tmp.rename(self.lib)
        (self.lib / ".complete").write_text("\n".join(jars))

    def _write_properties(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        template = (self.cfg.deploy_dir / "kafka" / "server.properties.in").read_text()
        text = (template.replace("@DATA_DIR@", str(self.data)).replace("@PORT@", str(self.cfg.kafka_port))
                .replace("@CONTROLLER_PORT@", str(self.cfg.kafka_controller_port)))
        self.properties.write_text(text)

    def _format(self, java: str) -> None:
        """Format the storage directory once; a formatted directory is reused (topics and offsets survive)."""
        if (self.data / "meta.properties").exists():
            return
        self.data.mkdir(parents=True, exist_ok=True)
        cmd = [java, "-Xmx512m", f"-Dlog4j2.configurationFile={self.cfg.deploy_dir / 'kafka' / 'log4j2.properties'}",
               "-cp", f"{self.lib}/*", "kafka.tools.StorageTool", "format", "-t", kafka_cluster_id(),
               "-c", str(self.properties)]
        result = subprocess.run(cmd, capture_output=True, text=True)
        if result.returncode != 0:
            raise ServiceError(f"formatting Kafka storage failed:\n{(result.stdout + result.stderr)[-3000:]}")

    @staticmethod
    def _require(tool: str, hint: str) -> str:
        path = shutil.which(tool)
        if path is None:
            raise ServiceError(f"`{tool}` is not on PATH: Kafka needs {hint}")
        return path
