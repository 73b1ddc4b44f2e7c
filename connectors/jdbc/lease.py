"""The lease of a batch overwrite's staging table: proof that the job writing it is alive.

A job killed between its tasks and its commit (driver SIGKILLed, its host lost) leaves its
staging table behind; the next overwrite of the same target drops it, as a Kafka-style sink
aborts a dead producer's transaction when it starts. It must never drop the staging table of a
job still running, and no process of the job lives as long as the job does: the driver-side
Python workers that plan and commit come and go. So planning starts a holder process that lives
exactly as long as the job needs the table: it holds a session-level advisory lock (a key from
the staging table's name) until the table is gone (committed or aborted) or the driver's JVM is
(it checks both every :data:`POLL_SECONDS`); PostgreSQL releases the lock when the holder's
session ends, however it ends. A staging table whose lock is free has no live job.

The lock is taken before the table exists, so a sweep never finds a live job's table unlocked.
"""

from __future__ import annotations

import os
import pickle
import re
import subprocess
import sys
import time
from pathlib import Path

from connectors.jdbc import FORMAT
from connectors.jdbc.options import JdbcConnectionOptions

POLL_SECONDS = 1.0
_TAG = re.compile(r"__overwrite_([0-9a-f]{12})")
# The advisory lock keys of staging tables: one class ("JD") in the bigint key space, the 48 bits of the tag below it.
_KEY_CLASS = 0x4A44 << 48


def lock_key(staging_name: str) -> int | None:
    """The lock of a staging table (a name ending in ``__overwrite_<12 hex digits>``), else None."""
    match = _TAG.search(staging_name)
    return _KEY_CLASS | int(match[1], 16) if match is not None and match.end() == len(staging_name) else None


class Lease:
    """Starts the holder and waits until it holds the lock; then :meth:`keep` or :meth:`give_up`."""

    @classmethod
    def start(cls, options: JdbcConnectionOptions, staging: str, key: int) -> Lease | None:
        """None where the driver's JVM cannot be watched (no ``/proc``, as on macOS, or no ``java``
        among this process's ancestors): the staging table is then not marked, and never swept."""
        driver = _driver()
        return None if driver is None else cls(options, staging, key, driver)

    def __init__(self, options: JdbcConnectionOptions, staging: str, key: int, driver: tuple[int, str]):
        # A session of its own: whatever kills the driver's process groups does not take the
        # holder with it, which must see the driver die (the crash tests kill that way).
        self._holder = subprocess.Popen([sys.executable, "-m", __name__], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        self._holder.stdin.write(pickle.dumps((options, staging, key, driver)))  # no password on a command line
        self._holder.stdin.flush()
        answer = self._holder.stdout.readline().decode().strip()
        self._holder.stdout.close()
        if answer != "locked":
            self.give_up()
            error = answer or self._holder.stderr.read().decode().strip().splitlines()[-1:]
            raise RuntimeError(f"{FORMAT}: the lease of the overwrite's staging table failed: {error}")
        self._holder.stderr.close()

    def keep(self) -> None:
        """The staging table exists: hold the lock until it is gone."""
        self._holder.stdin.write(b"kept\n")
        self._holder.stdin.close()

    def give_up(self) -> None:
        """No staging table was made: release the lock now."""
        self._holder.stdin.close()
        self._holder.wait()


def _stat(pid: int) -> tuple[str, list[str]] | None:
    """(command name, the fields of /proc/<pid>/stat after it: state, ppid, ..., start time at 19)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.index("(") + 1 : text.rindex(")")], text[text.rindex(")") + 2 :].split()


def _driver() -> tuple[int, str] | None:
    """The driver's JVM, the first ``java`` among this process's ancestors: (pid, start time)."""
    pid = os.getppid()
    while pid > 1 and (stat := _stat(pid)) is not None:
        name, fields = stat
        if name == "java":
            return pid, fields[19]
        pid = int(fields[1])
    return None


def _alive(driver: tuple[int, str]) -> bool:
    stat = _stat(driver[0])  # the start time tells the driver from a later process with its pid
    return stat is not None and stat[1][0] != "Z" and stat[1][19] == driver[1]


def _take(options: JdbcConnectionOptions, key: int):
    """A new session holding the lock ``key``; RuntimeError if another session holds it."""
    from connectors.jdbc.task_writer import connect, discard

    connection = connect(options)
    connection.autocommit = True
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s)", (key,))
        if not cursor.fetchone()[0]:
            discard(connection)
            raise RuntimeError(f"advisory lock {key} is held by another session")
    return connection


def _hold() -> None:
    import psycopg2

    from connectors.jdbc.task_writer import discard

    options, staging, key, driver = pickle.load(sys.stdin.buffer)
    try:
        connection = _take(options, key)
    except Exception as exc:
        print(str(exc).strip().replace("\n", " "), flush=True)
        return
    print("locked", flush=True)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)  # the planning worker stops reading
    if sys.stdin.buffer.readline() != b"kept\n":
        return  # no staging table: the session ends, and the lock with it
    while _alive(driver):
        time.sleep(POLL_SECONDS)
        try:
            if connection is None:  # lost (a server restart): take the lock again, unless a sweep has it
                connection = _take(options, key)
            with connection.cursor() as cursor:
                cursor.execute("SELECT to_regclass(%s)", (staging,))
                if cursor.fetchone()[0] is None:
                    return  # committed or aborted
        except psycopg2.Error:
            if connection is not None:
                discard(connection)
            connection = None
        except RuntimeError:  # a sweep holds it: it found the table unlocked while we reconnected
            return


if __name__ == "__main__":
    _hold()
