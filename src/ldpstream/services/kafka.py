"""An Apache Kafka node in KRaft combined mode (broker and controller), assembled from the Maven Central jars: the
single-node broker of `ldp up`, or one node of the 3 of `ldp up --cluster` (`ldpstream.services.cluster`).

Steps of `start`: (1) copy the broker's jars into a per-version cache under the state dir with Maven (reused on
later runs); (2) write server.properties from our template; (3) format the storage once (kafka.tools.StorageTool,
static quorum, so no --standalone; a cluster's nodes share one cluster id); (4) start kafka.Kafka detached; (5) wait
for "Kafka Server started" in its log (a cluster's node gets there once a majority of the controllers run) and for
an answer to a metadata request. Any failure raises ServiceError with the reason and the log's tail.
"""

from __future__ import annotations

import base64
import shutil
import subprocess
import uuid

from ldpstream.runtime.access import (
    ADMIN,
    BROKER,
    CONTROLLER,
    SCRAM_ITERATIONS,
    SCRAM_MECHANISM,
    generate_passwords,
    kafka_security,
    password,
)
from ldpstream.runtime.kafka import metadata_answers
from ldpstream.runtime.kafka_access import apply_access
from ldpstream.runtime.process import ServiceError, port_in_use, spawn, wait_until
from ldpstream.runtime.secrets import replace_secret
from ldpstream.runtime.settings import Settings
from ldpstream.services.base import LocalService

READY_LINE = "Kafka Server started"
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def kafka_cluster_id() -> str:
    """A Kafka cluster id: 16 random bytes, URL-safe base64 without padding, not starting with '-'."""
    while True:
        s = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not s.startswith("-"):
            return s


class KafkaService(LocalService):
    """The local Kafka broker, or node `node` of the local cluster (or, with KAFKA_BOOTSTRAP set, an existing
    cluster that we only check)."""

    name = "kafka"
    external_variable = "KAFKA_BOOTSTRAP"
    probe = "a metadata request"
    process = "broker"
    stop_timeout_s = 60.0

    def __init__(self, config: Settings, node: int | None = None) -> None:
        root = config.state_dir / self.name
        super().__init__(config, None if node is None else root / f"node-{node + 1}")
        self.node = node
        self.lib = root / f"lib-{config.kafka_version}"  # one cache for every node
        self.cluster_id_file = root / "cluster.id"
        self.properties = self.home / "server.properties"
        self.port = config.kafka_port + (node or 0)
        self.controller_port = config.kafka_controller_port + (node or 0)

    @property
    def external(self) -> str | None:
        return self.cfg.kafka_bootstrap

    @property
    def address(self) -> str:
        return self.cfg.bootstrap if self.node is None or not self.managed else f"127.0.0.1:{self.port}"

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
        if self.node is None:
            return f"Kafka {self.cfg.kafka_version}, KRaft combined mode"
        return (f"Kafka {self.cfg.kafka_version}, node {self.node + 1} of {len(self.cfg.kafka_ports)} (broker + "
                f"controller, controller port {self.controller_port})")

    def launch(self) -> str:
        proc = self.spawn()
        self.wait_ready(proc)
        self.apply_access()
        return f"started (pid {proc.pid}) at {self.address}"

    def spawn(self) -> subprocess.Popen[bytes]:
        """Steps 1-4: start the node without waiting for it (a cluster's nodes wait for each other's quorum)."""
        java = self._require("java", "Java 17+ (e.g. `apt-get install openjdk-17-jre-headless`)")
        for port in (self.port, self.controller_port):
            if port_in_use(port):
                raise ServiceError(f"port {port} on 127.0.0.1 is already in use by another process: stop it, or "
                                   f"set KAFKA_PORT / KAFKA_CONTROLLER_PORT, or point KAFKA_BOOTSTRAP at an "
                                   f"existing broker")
        self.home.mkdir(parents=True, exist_ok=True)
        self.fetch_jars()
        generate_passwords(self.cfg)
        self._write_properties()
        self._format(java)
        log_opts = [f"-Dlog4j2.configurationFile={self.cfg.deploy_dir / 'kafka' / 'log4j2.properties'}",
                    f"-Dkafka.logs.dir={self.home / 'logs'}"]
        jvm = [f"-Xms{self.cfg.kafka_heap}", f"-Xmx{self.cfg.kafka_heap}", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
               "-Djava.awt.headless=true"]
        self.log.unlink(missing_ok=True)
        return spawn([java, *jvm, *log_opts, "-cp", f"{self.lib}/*", "kafka.Kafka", str(self.properties)],
                     self.log, self.pidfile)

    def wait_ready(self, proc: subprocess.Popen[bytes]) -> None:
        """Step 5: wait until the node has started and answers a metadata request."""
        wait_until(lambda: READY_LINE in self.log.read_text(errors="replace") and metadata_answers(self.address),
                   lambda: proc.poll() is None, self.cfg.start_timeout_s, f"Kafka node at {self.address}", self.log)

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
        if self.node is None:
            text = server_properties(self.cfg, data_dir=str(self.data), port=self.port,
                                     controller_port=self.controller_port)
        else:
            voters = ",".join(f"{i + 1}@127.0.0.1:{self.cfg.kafka_controller_port + i}"
                              for i in range(len(self.cfg.kafka_ports)))
            text = server_properties(self.cfg, data_dir=str(self.data), port=self.port,
                                     controller_port=self.controller_port, node_id=self.node + 1, voters=voters,
                                     replicas=len(self.cfg.kafka_ports))
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
               "-cp", f"{self.lib}/*", "kafka.tools.StorageTool", "format", "-t", self._cluster_id(),
               "-c", str(self.properties), *scram]
        result = subprocess.run(cmd, capture_output=True, text=True)
        if result.returncode != 0:
            raise ServiceError(f"formatting Kafka storage failed:\n{(result.stdout + result.stderr)[-3000:]}")
        marker.write_text(f"{BROKER} {ADMIN}\n")

    def _cluster_id(self) -> str:
        """A new id for a single node; a cluster's nodes share the one made for the first of them."""
        if self.node is None:
            return kafka_cluster_id()
        if not self.cluster_id_file.exists():
            self.cluster_id_file.parent.mkdir(parents=True, exist_ok=True)
            self.cluster_id_file.write_text(kafka_cluster_id())
        return self.cluster_id_file.read_text().strip()

    @staticmethod
    def _require(tool: str, hint: str) -> str:
        path = shutil.which(tool)
        if path is None:
            raise ServiceError(f"`{tool}` is not on PATH: Kafka needs {hint}")
        return path


def server_properties(cfg: Settings, *, data_dir: str, port: int, controller_port: int, listen_host: str = "127.0.0.1",
                      advertised_host: str = "127.0.0.1", node_id: int = 1, voters: str | None = None,
                      replicas: int = 1) -> str:
    """A node's server.properties: the template of `cfg.deploy_dir` with these addresses, the controller quorum
    `voters` (default: this node alone), `replicas` per topic (min.insync.replicas one fewer, at least 1) and `cfg`'s
    security (SASL and ACLs with the broker's own passwords from `cfg.secrets_dir`, or plaintext with
    LDP_SECURITY=off)."""
    template = (cfg.deploy_dir / "kafka" / "server.properties.in").read_text()
    return (template.replace("@DATA_DIR@", data_dir).replace("@PORT@", str(port))
            .replace("@VOTERS@", voters or f"{node_id}@{advertised_host}:{controller_port}")
            .replace("@NODE_ID@", str(node_id)).replace("@REPLICAS@", str(replicas))
            .replace("@MIN_ISR@", str(max(1, replicas - 1)))
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
