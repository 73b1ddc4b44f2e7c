"""A real PostgreSQL server for tests, from Debian's ``postgresql`` packages.

It gets its own cluster (initdb) on a free port, listening on 127.0.0.1 only, with its unix
socket in the data directory, so it never touches the system's cluster.
"""

from __future__ import annotations

import glob
import hashlib
import os
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

import psycopg2

from connectors.testing.local_service import LocalService, free_ports, log, run

USER = PASSWORD = DATABASE = "connectors"

# fsync and full-page writes buy crash safety a throwaway test cluster does not need.
# services.py gives containers the same settings.
SETTINGS = {
    "max_connections": "200",
    "max_prepared_transactions": "10",
    "fsync": "off",
    "full_page_writes": "off",
}


def _bin_dir() -> Path | None:
    """The newest installed server's bin directory, e.g. /usr/lib/postgresql/15/bin."""
    found = [Path(p).parent for p in glob.glob("/usr/lib/postgresql/*/bin/postgres")]
    return max(found, key=lambda d: int(d.parent.name), default=None)


class PostgresServer(LocalService):
    """A private PostgreSQL cluster; ``start()`` returns its DSN.

    The role ``connectors`` (password ``connectors``) is the cluster's superuser, as in the
    official image, and owns the database ``connectors``.
    """

    name = "postgres"
    stop_signal = signal.SIGINT  # "fast" shutdown; SIGTERM waits for clients to leave

    def __init__(self, runtime_dir: Path | None = None) -> None:
        super().__init__(runtime_dir)
        if os.geteuid() == 0:
            # PostgreSQL refuses to run as root, and the `postgres` user cannot reach a data
            # dir under root's home; keep the cluster in a world-traversable place instead.
            key = hashlib.sha256(str(self.runtime_dir).encode()).hexdigest()[:8]
            self.data_dir = Path("/var/tmp") / f"connectors-postgres-{key}" / "data"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "postgres.log"

    def _prepare(self) -> None:
        if _bin_dir() is not None:
            return
        if os.geteuid() != 0:
            raise RuntimeError("PostgreSQL server not found: run `apt-get install postgresql` as root")
        log.info("installing PostgreSQL with apt-get")
        env = os.environ | {"DEBIAN_FRONTEND": "noninteractive"}
        run(["apt-get", "update"], "apt-get update", env=env)
        install = ["apt-get", "install", "-y", "--no-install-recommends", "postgresql"]
        run(install, "apt-get install postgresql", env=env)

    def _launch(self) -> tuple[subprocess.Popen[bytes], dict[str, Any]]:
        bin_dir = _bin_dir()
        assert bin_dir is not None  # _prepare installed it
        as_owner = self._as_owner()
        pwfile = self.data_dir.parent / "pwfile"
        pwfile.write_text(PASSWORD + "\n")
        if as_owner:
            shutil.chown(pwfile, "postgres", "postgres")
            shutil.chown(self.data_dir, "postgres", "postgres")
        self.data_dir.chmod(0o700)
        try:
            run(
                [str(bin_dir / "initdb"), "-D", str(self.data_dir), "-U", USER, f"--pwfile={pwfile}",
                 "--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8", "--locale=C.UTF-8", "--no-sync"],
                "initdb",
                **as_owner,
            )
        finally:
            pwfile.unlink()
        run(
            [str(bin_dir / "postgres"), "--single", "-D", str(self.data_dir), "postgres"],
            "create database",
            input=f"CREATE DATABASE {DATABASE} OWNER {USER};\n",
            **as_owner,
        )
        (port,) = free_ports(1)
        settings = SETTINGS | {
            "port": str(port),
            "listen_addresses": "'127.0.0.1'",
            "unix_socket_directories": f"'{self.data_dir}'",
        }
        with open(self.data_dir / "postgresql.conf", "a") as conf:
            conf.write("".join(f"{key} = {value}\n" for key, value in settings.items()))
        dsn = f"postgresql://{USER}:{PASSWORD}@127.0.0.1:{port}/{DATABASE}"
        return self._spawn(), {"address": dsn, "port": port}

    def _spawn(self) -> subprocess.Popen[bytes]:
        bin_dir = _bin_dir()
        assert bin_dir is not None  # _prepare installed it
        with open(self.log_file, "ab") as out:
            return subprocess.Popen(
                [str(bin_dir / "postgres"), "-D", str(self.data_dir)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                **self._as_owner(),
            )

    def _ready(self, state: dict[str, Any]) -> bool:
        try:
            psycopg2.connect(state["address"], connect_timeout=5).close()
        except psycopg2.OperationalError:  # still starting up
            return False
        return True

    def _as_owner(self) -> dict[str, Any]:
        """subprocess arguments that run a command as the `postgres` user when we are root."""
        if os.geteuid() != 0:
            return {}
        return {"user": "postgres", "group": "postgres", "extra_groups": [], "cwd": self.data_dir.parent}
