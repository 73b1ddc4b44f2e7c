"""A real Apache Kafka broker for tests: one KRaft node acting as broker and controller.

The broker's jars are pinned by version and fetched from Maven Central with ``mvn`` into
``<cache>/kafka-<version>/libs`` once; later starts only launch the JVM (a few seconds).
"""

from __future__ import annotations

import base64
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from connectors.testing.local_service import (
    LocalService,
    cache_dir,
    find_java,
    free_ports,
    log,
    maven,
    run,
)

KAFKA_VERSION = "4.1.1"
LOG4J_VERSION = "2.24.3"
SLF4J_VERSION = "2.0.16"

_ARTIFACTS = [
    ("org.apache.kafka", "kafka_2.13", KAFKA_VERSION),
    ("org.apache.logging.log4j", "log4j-core", LOG4J_VERSION),
    ("org.apache.logging.log4j", "log4j-slf4j2-impl", LOG4J_VERSION),
    ("org.slf4j", "slf4j-api", SLF4J_VERSION),  # 2.x, or the broker's logging does not bind
]
_DEPENDENCIES = "".join(
    f"    <dependency><groupId>{g}</groupId><artifactId>{a}</artifactId><version>{v}</version></dependency>\n"
    for g, a, v in _ARTIFACTS
)
_POM = f"""<project>
  <modelVersion>4.0.0</modelVersion>
  <groupId>connectors.testing</groupId>
  <artifactId>kafka-broker</artifactId>
  <version>{KAFKA_VERSION}</version>
  <packaging>pom</packaging>
  <dependencies>
{_DEPENDENCIES}  </dependencies>
</project>
"""

# Single node, so every internal topic has one replica; transactions and share groups need
# their state topics to be creatable with that. services.py gives containers the same settings.
SETTINGS = {
    "process.roles": "broker,controller",
    "node.id": "1",
    "controller.listener.names": "CONTROLLER",
    "inter.broker.listener.name": "PLAINTEXT",
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
    "num.partitions": "1",
    "auto.create.topics.enable": "true",
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    # Exactly-once sinks keep transactions open across checkpoints; allow up to an hour.
    "transaction.max.timeout.ms": "3600000",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
}

# Logs go to stdout, which the launcher sends to server.log along with any JVM error.
_LOG4J2 = """status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = out
# The per-request and state-change chatter would dwarf everything else.
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.state.name = state.change.logger
logger.state.level = WARN
"""


def _cluster_id() -> str:
    """Kafka's Uuid text form: URL-safe base64 without padding, never starting with '-'."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cid.startswith("-"):
            return cid


class KafkaBroker(LocalService):
    """Kafka ``KAFKA_VERSION`` on free 127.0.0.1 ports; ``start()`` returns its bootstrap servers.

    ``settings`` add to or override :data:`SETTINGS` (e.g. a short ``offsets.retention.minutes``
    for a test's own broker, with its own ``runtime_dir``).
    """

    name = "kafka"

    def __init__(self, runtime_dir: Path | None = None, settings: dict[str, str] | None = None) -> None:
        super().__init__(runtime_dir)
        self.home = cache_dir() / f"kafka-{KAFKA_VERSION}"
        self.libs = self.home / "libs"
        self.settings = SETTINGS | (settings or {})

    @property
    def log_file(self) -> Path:
        return self.data_dir / "server.log"

    def _prepare(self) -> None:
        if self.libs.is_dir():
            return
        log.info("fetching Kafka %s jars with mvn into %s", KAFKA_VERSION, self.libs)
        self.home.mkdir(parents=True, exist_ok=True)
        (self.home / "pom.xml").write_text(_POM)
        partial = self.home / "libs.partial"
        shutil.rmtree(partial, ignore_errors=True)
        goal = ["dependency:copy-dependencies", f"-DoutputDirectory={partial}", "-DincludeScope=runtime"]
        maven(goal, "the Kafka broker", self.home)
        partial.rename(self.libs)  # only a complete download counts

    def _launch(self) -> tuple[subprocess.Popen[bytes], dict[str, Any]]:
        java = find_java()
        port, controller_port = free_ports(2)
        settings = self.settings | {
            "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
            "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
            "log.dirs": str(self.data_dir / "kraft-logs"),
        }
        config = self.data_dir / "server.properties"
        config.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
        (self.data_dir / "log4j2.properties").write_text(_LOG4J2)
        common = self._common_args()
        # A one-shot JVM: C1 only and the serial GC start it about twice as fast.
        quick = ["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"]
        format_args = ["kafka.tools.StorageTool", "format", "-t", _cluster_id(), "-c", str(config)]
        run([java, *quick, *common, *format_args], "kafka storage format")
        address = f"127.0.0.1:{port}"
        return self._spawn(), {"address": address, "port": port, "controller_port": controller_port}

    def _common_args(self) -> list[str]:
        return ["-cp", str(self.libs / "*"), f"-Dlog4j2.configurationFile={self.data_dir / 'log4j2.properties'}"]

    def _spawn(self) -> subprocess.Popen[bytes]:
        config = self.data_dir / "server.properties"
        with open(self.log_file, "ab") as out:
            return subprocess.Popen(
                [find_java(), "-Xmx1g", "-Djava.awt.headless=true", *self._common_args(), "kafka.Kafka", str(config)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def _ready(self, state: dict[str, Any]) -> bool:
        return answers(state["address"])


def answers(bootstrap_servers: str) -> bool:
    """Whether a broker at ``bootstrap_servers`` serves metadata requests."""
    try:
        metadata = AdminClient({"bootstrap.servers": bootstrap_servers}).list_topics(timeout=5)
    except KafkaException:  # still coming up
        return False
    return bool(metadata.brokers)
