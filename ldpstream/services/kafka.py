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
from runtime.access import (
    ADMIN,
    BROKER,
    CONTROLLER,
    SCRAM_ITERATIONS,
    SCRAM_MECHANISM,
    generate_passwords,
    kafka_security,
    password,
)
from runtime.kafka import metadata_answers
from runtime.kafka_access import apply_access
from runtime.process import ServiceError, port_in_use, spawn, wait_until
from runtime.secrets import replace_secret
from runtime.settings import Settings

READY_LINE = "Kafka Server started"
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


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

    def authentication(self) -> str:
        if metadata_answers(self.address, 2.0, **{"security.protocol": "PLAINTEXT"}):
            return "off"
        configured = kafka_security(self.cfg)
        if not configured:
            return "on (this process has no credentials)"
        mechanism = configured.get("sasl.mechanism") or configured.get("sasl.mechanisms")
        return f"SASL/{mechanism} + ACLs" if mechanism else configured.get("security.protocol", "on")

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
        generate_passwords(self.cfg)
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
        self.apply_access()
        return f"started (pid {proc.pid}) at {self.address}"

    def apply_access(self) -> None:
        apply_access(self.cfg)

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
        """server.properties from the template (0600: with security on it holds the broker's own passwords)."""
        self.home.mkdir(parents=True, exist_ok=True)
        text = server_properties(self.cfg, data_dir=str(self.data), port=self.cfg.kafka_port,
                                 controller_port=self.cfg.kafka_controller_port)
        replace_secret(self.properties, text.encode())

    def _format(self, java: str) -> None:
        """Format the storage directory once; a formatted directory is reused (topics and offsets survive)."""
        marker = self.home / "scram-users"
        if (self.data / "meta.properties").exists():
            if self.cfg.security and not marker.exists():
                raise ServiceError(f"{self.data} was formatted before this version made Kafka's credentials, so its "
                                   f"admin cannot log in: `ldp down --purge` and `ldp up` (this deletes the local "
                                   f"topics), or run it with LDP_SECURITY=off")
            return
        self.data.mkdir(parents=True, exist_ok=True)
        # The broker's and the admin's SCRAM credentials go into the bootstrap metadata (whatever LDP_SECURITY
        # says, so that security can be turned on later): with them the admin creates the other users.
        scram = [arg for user in (BROKER, ADMIN) for arg in (
            "--add-scram", f"{SCRAM_MECHANISM}=[name={user},iterations={SCRAM_ITERATIONS},"
                           f"password={password(self.cfg, 'kafka', user)}]")]
        cmd = [java, "-Xmx512m", f"-Dlog4j2.configurationFile={self.cfg.deploy_dir / 'kafka' / 'log4j2.properties'}",
               "-cp", f"{self.lib}/*", "kafka.tools.StorageTool", "format", "-t", kafka_cluster_id(),
               "-c", str(self.properties), *scram]
        result = subprocess.run(cmd, capture_output=True, text=True)
        if result.returncode != 0:
            raise ServiceError(f"formatting Kafka storage failed:\n{(result.stdout + result.stderr)[-3000:]}")
        marker.write_text(f"{BROKER} {ADMIN}\n")

    @staticmethod
    def _require(tool: str, hint: str) -> str:
        path = shutil.which(tool)
        if path is None:
            raise ServiceError(f"`{tool}` is not on PATH: Kafka needs {hint}")
        return path


def server_properties(cfg: Settings, *, data_dir: str, port: int, controller_port: int, listen_host: str = "127.0.0.1",
                      advertised_host: str = "127.0.0.1") -> str:
    """The broker's server.properties: the template of `cfg.deploy_dir` with these addresses and `cfg`'s security
    (SASL and ACLs with the broker's own passwords from `cfg.secrets_dir`, or plaintext with LDP_SECURITY=off)."""
    template = (cfg.deploy_dir / "kafka" / "server.properties.in").read_text()
    return (template.replace("@DATA_DIR@", data_dir).replace("@PORT@", str(port))
            .replace("@CONTROLLER_PORT@", str(controller_port)).replace("@LISTEN_HOST@", listen_host)
            .replace("@ADVERTISED_HOST@", advertised_host).replace("@SECURITY@", security_properties(cfg)))


def security_properties(cfg: Settings) -> str:
    """SASL on both listeners (SCRAM for clients and the broker, PLAIN for the controller listener: a KRaft
    controller cannot read SCRAM credentials before it has the metadata log) and the StandardAuthorizer with no
    access where no ACL allows it; plaintext listeners with LDP_SECURITY=off."""
    if not cfg.security:
        return "listener.security.protocol.map=BROKER:PLAINTEXT,CONTROLLER:PLAINTEXT"
    broker, controller = password(cfg, "kafka", BROKER), password(cfg, "kafka", CONTROLLER)
    plain = "org.apache.kafka.common.security.plain.PlainLoginModule"
    return "\n".join([
        "listener.security.protocol.map=BROKER:SASL_PLAINTEXT,CONTROLLER:SASL_PLAINTEXT",
        f"sasl.enabled.mechanisms={SCRAM_MECHANISM}",
        f"listener.name.broker.sasl.enabled.mechanisms={SCRAM_MECHANISM}",
        "listener.name.controller.sasl.enabled.mechanisms=PLAIN",
        f"sasl.mechanism.inter.broker.protocol={SCRAM_MECHANISM}",
        "sasl.mechanism.controller.protocol=PLAIN",
        f"listener.name.broker.{SCRAM_MECHANISM.lower()}.sasl.jaas.config={scram_jaas(BROKER, broker)}",
        f'listener.name.controller.plain.sasl.jaas.config={plain} required username="{CONTROLLER}" '
        f'password="{controller}" user_{CONTROLLER}="{controller}";',
        f"authorizer.class.name={AUTHORIZER}",
        "allow.everyone.if.no.acl.found=false",
        f"super.users=User:{ADMIN};User:{BROKER};User:{CONTROLLER}",
    ])


def scram_jaas(user: str, secret: str) -> str:
    """A Java client's (or the broker's) SCRAM login line."""
    return f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{user}" password="{secret}";'
