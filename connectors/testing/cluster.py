"""A real Spark standalone cluster and a Spark Connect server, from the installed pyspark.

pyspark's wheel ships ``bin/spark-class`` and the Connect server jar, which is all it takes: a
master and workers are ``spark-class org.apache.spark.deploy.{master.Master,worker.Worker}``,
and the Connect server is ``spark-submit --class ...SparkConnectServer``. Executors and the
Connect server run Python data sources in workers started with this interpreter, which has the
package installed: the same as a cluster where the package is installed on every node.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from connectors.testing.local_service import free_ports, port_open, tail


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def _spawn(argv: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    environment = {**os.environ, "SPARK_HOME": str(spark_home()), "PYSPARK_PYTHON": sys.executable, **(env or {})}
    with open(log, "w") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=environment, start_new_session=True)


def _wait_for_port(port: int, proc: subprocess.Popen, log: Path, what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not port_open(port):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not start; end of {log}:\n{tail(log.read_text())}")
        time.sleep(0.2)


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


class StandaloneCluster:
    """A master and ``workers`` workers on 127.0.0.1; use as a context manager."""

    def __init__(self, workdir: Path, workers: int = 2, cores: int = 1, memory: str = "1g"):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.worker_count, self.cores, self.memory = workers, cores, memory
        self.master: subprocess.Popen | None = None
        self.workers: list[subprocess.Popen] = []

    def start(self) -> StandaloneCluster:
        port, ui = free_ports(2)
        spark_class = str(spark_home() / "bin" / "spark-class")
        log = self.workdir / "master.log"
        self.master = _spawn([spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                              "--port", str(port), "--webui-port", str(ui)], log)
        _wait_for_port(port, self.master, log, "Spark master")
        self.url = f"spark://127.0.0.1:{port}"
        for index in range(self.worker_count):
            self.workers.append(self._start_worker(index))
        return self

    def _start_worker(self, index: int) -> subprocess.Popen:
        port, ui = free_ports(2)
        work = self.workdir / f"worker-{index}"
        work.mkdir(exist_ok=True)
        argv = [str(spark_home() / "bin" / "spark-class"), "org.apache.spark.deploy.worker.Worker", self.url,
                "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(ui), "--cores", str(self.cores),
                "--memory", self.memory, "--work-dir", str(work)]
        log = self.workdir / f"worker-{index}.log"
        worker = _spawn(argv, log)
        _wait_for_port(port, worker, log, f"Spark worker {index}")
        return worker

    def kill_worker(self, index: int) -> None:
        """SIGKILL a worker and the executors it launched (they share its process group)."""
        _kill(self.workers[index])

    def restart_worker(self, index: int) -> None:
        """Start worker ``index`` again if it is not running."""
        if self.workers[index].poll() is not None:
            self.workers[index] = self._start_worker(index)

    def stop(self) -> None:
        for proc in [*self.workers, *([self.master] if self.master else [])]:
            _kill(proc)

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class ConnectServer:
    """A Spark Connect server (local[2]) on a free port; use as a context manager."""

    def __init__(self, workdir: Path):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.proc: subprocess.Popen | None = None

    def start(self) -> ConnectServer:
        (port,) = free_ports(1)
        log = self.workdir / "connect-server.log"
        argv = [str(spark_home() / "bin" / "spark-submit"), "--master", "local[2]",
                "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
                "--conf", f"spark.connect.grpc.binding.port={port}", "--conf", "spark.ui.enabled=false",
                "--conf", "spark.sql.shuffle.partitions=2", "--conf", f"spark.pyspark.python={sys.executable}",
                "spark-internal"]
        self.proc = _spawn(argv, log)
        _wait_for_port(port, self.proc, log, "Spark Connect server", timeout=180)
        self.url = f"sc://127.0.0.1:{port}"
        return self

    def stop(self) -> None:
        if self.proc:
            _kill(self.proc)

    def __enter__(self) -> ConnectServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
