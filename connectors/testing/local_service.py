"""Shared machinery of the local test servers (Kafka broker, PostgreSQL, Schema Registry).

A server runs in its own session so that it outlives the Python process that started it;
``<runtime_dir>/state.json`` records its pid and address so that any later process (a test
session, ``make demo``, a benchmark) reuses it instead of starting another.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import random
import shutil
import signal
import socket
import subprocess
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path
from typing import Any, ClassVar

log = logging.getLogger("connectors.testing")

# Servers this process spawned and deliberately never waits for; holding on to them keeps
# Popen from warning "subprocess ... is still running" when it is garbage-collected.
_spawned: list[subprocess.Popen[bytes]] = []


def _reap(pid: int) -> None:
    """Wait for a server this process spawned and stopped: a zombie's pid still exists, and a
    server restarted on the same data (PostgreSQL) takes its lock file for a live one's."""
    for proc in _spawned:
        if proc.pid == pid:
            proc.wait()


def cache_dir() -> Path:
    """Where downloads and runtime state live: ``$XDG_CACHE_HOME/connectors`` or ``~/.cache/connectors``."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "connectors"


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports free on 127.0.0.1, below Linux's default ephemeral range (32768+).

    A server binds its ports seconds after they are chosen (a JVM starts slowly); ports the
    kernel never hands to outgoing connections cannot be taken by them in the meantime.
    """
    ports: list[int] = []
    with ExitStack() as stack:  # hold each port while choosing the next
        while len(ports) < count:
            sock = stack.enter_context(socket.socket())
            port = random.randrange(20000, 32000)
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            ports.append(port)
    return ports


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def tail(text: str, lines: int = 30) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def find_java() -> str:
    """``$JAVA_HOME/bin/java``, else the ``java`` on the PATH."""
    java_home = os.environ.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if not java or not Path(java).exists():
        raise RuntimeError("java not found: install a JDK 17 (e.g. apt-get install openjdk-17-jdk-headless)")
    return java


def run(argv: list[str], what: str, **kwargs: Any) -> None:
    """Run a setup command, failing with its last output lines rather than a bare exit code."""
    result = subprocess.run(argv, capture_output=True, text=True, **kwargs)
    if result.returncode != 0:
        raise RuntimeError(f"{what} failed (exit {result.returncode}):\n{tail(result.stdout + result.stderr)}")


def maven(goal: list[str], what: str, cwd: Path) -> None:
    """Run a Maven goal that fetches ``what`` from Maven Central, as :func:`run` does."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RuntimeError(f"mvn not found: install Maven (apt-get install maven) to fetch {what}")
    run([mvn, "-q", "-B", "-Dstyle.color=never", *goal], "mvn", cwd=cwd)


class LocalService(ABC):
    """A server process recorded in ``<runtime_dir>/state.json``; each fresh start wipes ``data_dir``."""

    name: ClassVar[str]
    #: The signal asking the server for a quick clean shutdown.
    stop_signal: ClassVar[signal.Signals] = signal.SIGTERM

    def __init__(self, runtime_dir: Path | None = None) -> None:
        self.runtime_dir = runtime_dir or cache_dir() / "run" / self.name
        self.state_file = self.runtime_dir / "state.json"
        self.data_dir = self.runtime_dir / "data"

    @property
    @abstractmethod
    def log_file(self) -> Path:
        """The server's own log, quoted when it fails to start."""

    @abstractmethod
    def _prepare(self) -> None:
        """Make sure the server's binaries are there (download or install them)."""

    @abstractmethod
    def _launch(self) -> tuple[subprocess.Popen[bytes], dict[str, Any]]:
        """Initialise the empty ``data_dir`` and spawn the server in a new session.

        Returns the process and its state, which holds at least ``address`` and ``port``.
        """

    @abstractmethod
    def _ready(self, state: dict[str, Any]) -> bool:
        """Whether the server answers real requests (one quick probe)."""

    def _spawn(self) -> subprocess.Popen[bytes]:
        """Start the server process on the initialised ``data_dir``, in a new session (what
        :meth:`restart` runs; a server that cannot be restarted on its data does not define it)."""
        raise NotImplementedError(f"{self.name} cannot be restarted on its data")

    def start(self, timeout: float = 180) -> str:
        """Return the address of the running server, starting one unless a live one is recorded."""
        with self._locked():
            state = self._read_state()
            if state and self._alive(pid := state["pid"]):
                # A busy server may be slow to answer: killing it would break its other users.
                if self._answers_within(state, 30, lambda: self._alive(pid)):
                    log.info("reusing %s (pid %s) at %s", self.name, pid, state["address"])
                    return str(state["address"])
                log.warning("%s (pid %s) runs but does not answer: replacing it", self.name, pid)
                self._terminate(pid)
            self._prepare()
            shutil.rmtree(self.data_dir, ignore_errors=True)
            self.data_dir.mkdir(parents=True)
            began = time.monotonic()
            proc, state = self._launch()
            _spawned.append(proc)
            state["pid"] = proc.pid
            self.state_file.write_text(json.dumps(state, indent=2) + "\n")
            if not self._answers_within(state, timeout, lambda: proc.poll() is None):
                problem = "exited" if proc.poll() is not None else f"did not answer within {timeout:.0f} s"
                with suppress(ProcessLookupError):  # our unreaped child, so the pid is still ours
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                self.state_file.unlink(missing_ok=True)
                raise RuntimeError(f"{self.name} {problem}; end of {self.log_file}:\n{self._log_tail()}")
            took = time.monotonic() - began
            log.info("started %s (pid %s) at %s in %.1f s", self.name, proc.pid, state["address"], took)
            return str(state["address"])

    def stop(self) -> bool:
        """Stop the recorded server; returns whether one was running."""
        with self._locked():
            state = self._read_state()
            if state is None:
                return False
            running = self._terminate(state["pid"])
            self.state_file.unlink(missing_ok=True)
            if running:
                log.info("stopped %s (pid %s)", self.name, state["pid"])
            return running

    # -- faults, for tests of how clients ride out a server failure (never on a shared server) --

    def signal(self, sig: signal.Signals) -> None:
        """Send ``sig`` to the server's process group: SIGKILL (a crash), SIGSTOP (frozen: its
        sockets stay open, nothing answers), SIGCONT (thawed)."""
        state = self._read_state()
        if state is None or not self._alive(state["pid"]):
            raise RuntimeError(f"{self.name} is not running")
        os.killpg(state["pid"], sig)
        if sig == signal.SIGKILL:
            deadline = time.monotonic() + 30
            while self._alive(state["pid"]):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{self.name} (pid {state['pid']}) survived SIGKILL")
                time.sleep(0.05)
            _reap(state["pid"])

    def shutdown(self) -> None:
        """Stop the server as its administrator would, keeping its data for :meth:`restart`."""
        state = self._read_state()
        if state is None or not self._terminate(state["pid"]):
            raise RuntimeError(f"{self.name} is not running")
        _reap(state["pid"])

    def restart(self, timeout: float = 180) -> str:
        """Start the server again on its data and ports after a crash or :meth:`shutdown`."""
        with self._locked():
            state = self._read_state()
            if state is None or self._alive(state["pid"]):
                raise RuntimeError(f"{self.name} is not stopped")
            proc = self._spawn()
            _spawned.append(proc)
            state["pid"] = proc.pid
            self.state_file.write_text(json.dumps(state, indent=2) + "\n")
            if not self._answers_within(state, timeout, lambda: proc.poll() is None):
                raise RuntimeError(f"{self.name} did not come back; end of {self.log_file}:\n{self._log_tail()}")
            return str(state["address"])

    def _read_state(self) -> dict[str, Any] | None:
        try:
            return dict(json.loads(self.state_file.read_text()))
        except (OSError, ValueError):
            return None

    def _answers_within(self, state: dict[str, Any], timeout: float, running: Callable[[], bool]) -> bool:
        deadline = time.monotonic() + timeout
        while not (port_open(state["port"]) and self._ready(state)):
            if not running() or time.monotonic() > deadline:
                return False
            time.sleep(0.2)
        return True

    def _alive(self, pid: int) -> bool:
        # Matching the command line guards against a reused pid; a zombie's is empty.
        try:
            return str(self.data_dir).encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return False

    def _terminate(self, pid: int, grace: float = 30) -> bool:
        """Signal the server's process group, then SIGKILL it if it lingers; returns whether it ran."""
        if not self._alive(pid):
            return False
        for sig, wait in ((self.stop_signal, grace), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(pid, sig)  # started with start_new_session, so pid is also the group id
            except ProcessLookupError:
                return True
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline:
                if not self._alive(pid):
                    return True
                time.sleep(0.1)
        raise RuntimeError(f"{self.name} (pid {pid}) survived SIGKILL")

    def _log_tail(self) -> str:
        try:
            return tail(self.log_file.read_text(errors="replace"))
        except OSError as exc:
            return f"(no log: {exc})"

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """Serialise start/stop across processes, e.g. parallel test workers."""
        self.runtime_dir.mkdir(parents=True, exist_ok=True)
        with open(self.runtime_dir / "lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield
