"""A real Confluent-compatible Schema Registry for tests: Apicurio Registry's ``ccompat`` API.

Apicurio Registry serves the Confluent Schema Registry REST API under ``/apis/ccompat/v7``,
so confluent-kafka's ``SchemaRegistryClient`` talks to it unchanged. Its distribution (a
Quarkus application, about 110 MB) is pinned by version and fetched from Maven Central with
``mvn`` into ``<cache>/apicurio-registry-<version>`` once; later starts only launch the JVM
(a few seconds). Schemas are kept in memory, so each fresh start begins empty.

Unlike Confluent's registry, the default compatibility level is ``NONE``: tests that rely on
a level set it on their subject.
"""

from __future__ import annotations

import http.client
import shutil
import subprocess
import tarfile
import urllib.request
from pathlib import Path
from typing import Any

from connectors.testing.local_service import (
    LocalService,
    cache_dir,
    find_java,
    free_ports,
    log,
    maven,
)

APICURIO_VERSION = "3.0.9"
_ARTIFACT = f"io.apicurio:apicurio-registry-app:{APICURIO_VERSION}:tar.gz:all"
_RUNNER = f"apicurio-registry-app-{APICURIO_VERSION}-runner.jar"

#: Where the Confluent-compatible API lives; the registry's address is its URL.
CCOMPAT_PATH = "/apis/ccompat/v7"

# In-memory H2 storage (its default URL is jdbc:h2:mem:...); no authentication, so no identity
# server is ever called; no management port; no banner or per-request log lines. Nothing else
# in its configuration reaches out: Kafka and Git serve only storage kinds not chosen here.
# services.py gives containers the same settings.
SETTINGS = {
    "apicurio.storage.kind": "sql",
    "apicurio.storage.sql.kind": "h2",
    "quarkus.oidc.tenant-enabled": "false",
    "quarkus.management.enabled": "false",
    "quarkus.http.access-log.enabled": "false",
    "quarkus.banner.enabled": "false",
}

# Probes go straight to the registry, never through a proxy from the environment.
_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class SchemaRegistry(LocalService):
    """Apicurio Registry ``APICURIO_VERSION`` on a free 127.0.0.1 port; ``start()`` returns its ccompat URL."""

    name = "schema-registry"

    def __init__(self, runtime_dir: Path | None = None) -> None:
        super().__init__(runtime_dir)
        self.home = cache_dir() / f"apicurio-registry-{APICURIO_VERSION}"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "server.log"

    def _prepare(self) -> None:
        if self.home.is_dir():
            return
        log.info("fetching Apicurio Registry %s with mvn into %s", APICURIO_VERSION, self.home)
        partial = self.home.with_name(self.home.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        goal = ["dependency:copy", f"-Dartifact={_ARTIFACT}", f"-DoutputDirectory={partial}"]
        maven(goal, "Apicurio Registry", partial)
        (archive,) = partial.glob("*.tar.gz")
        with tarfile.open(archive) as tar:
            tar.extractall(partial, filter="data")
        archive.unlink()
        partial.rename(self.home)  # only a complete download counts

    def _launch(self) -> tuple[subprocess.Popen[bytes], dict[str, Any]]:
        java = find_java()
        (port,) = free_ports(1)
        settings = SETTINGS | {"quarkus.http.host": "127.0.0.1", "quarkus.http.port": str(port)}
        tmp = self.data_dir / "tmp"  # Vert.x's file cache and the registry's scratch files
        tmp.mkdir()
        # A test registry sees little traffic: C1 alone halves its start-up CPU time and
        # takes ~60 MB less memory than C1 and C2 together. Quarkus logs through JBoss
        # LogManager, as in the official image.
        jvm = ["-Xmx512m", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true", f"-Djava.io.tmpdir={tmp}",
               "-Djava.util.logging.manager=org.jboss.logmanager.LogManager"]
        properties = [f"-D{key}={value}" for key, value in settings.items()]
        with open(self.log_file, "wb") as out:
            proc = subprocess.Popen(
                [java, *jvm, *properties, "-jar", str(self.home / _RUNNER)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=self.data_dir,
            )
        url = f"http://127.0.0.1:{port}{CCOMPAT_PATH}"
        return proc, {"address": url, "port": port}

    def _ready(self, state: dict[str, Any]) -> bool:
        return answers(state["address"])


def answers(url: str) -> bool:
    """Whether a registry at ``url`` (its ccompat API) lists its subjects."""
    try:
        with _opener.open(f"{url}/subjects", timeout=5) as response:
            return bool(response.status == 200)
    except (OSError, http.client.HTTPException):  # still coming up (URLError is an OSError)
        return False
