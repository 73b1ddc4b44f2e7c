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

The driver's JVM is the first ``java`` among the planning worker's ancestors, known by its pid and
its start time (so that a later process given its pid is not taken for it). Its facts are read
from ``/proc/<pid>/stat`` where ``/proc`` exists (Linux: no process to start every poll), else from
``ps`` (macOS, BSD); the holder reads them the way the worker did, as the two start times differ in
form. A ``ps`` that does not run (no process to spare, a timeout) is no answer: the worker marks
no table, the holder asks again at its next poll.
"""

from __future__ import annotations

import os
import pickle
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

from connectors.jdbc import FORMAT
from connectors.jdbc.options import JdbcConnectionOptions

POLL_SECONDS = 1.0
_TAG = re.compile(r"__overwrite_([0-9a-f]{12})")
# The advisory lock keys of staging tables: one class ("JD") in the bigint key space, the 48 bits of the tag below it.
_KEY_CLASS = 0x4A44 << 48
# Whether this process reads the facts of processes from /proc (else from ps: macOS, BSD).
_PROC = Path("/proc/self/stat").exists()


def lock_key(staging_name: str) -> int | None:
    """The lock of a staging table (a name ending in ``__overwrite_<12 hex digits>``), else None."""
    match = _TAG.search(staging_name)
    return _KEY_CLASS | int(match[1], 16) if match is not None and match.end() == len(staging_name) else None


class Lease:
    """Starts the holder and waits until it holds the lock; then :meth:`keep` or :meth:`give_up`."""

    @classmethod
    def start(cls, options: JdbcConnectionOptions, staging: str, key: int) -> Lease | None:
        """None where the driver's JVM cannot be watched (no ``java`` among this process's ancestors,
        or neither ``/proc`` nor ``ps`` to find it): the staging table is then not marked, and never swept."""
        driver = _driver()
        return None if driver is None else cls(options, staging, key, driver)

    def __init__(self, options: JdbcConnectionOptions, staging: str, key: int, driver: Driver):
        # A session of its own: whatever kills the driver's process groups does not take the
        # holder with it, which must see the driver die (the crash tests kill that way).
        self._holder = subprocess.Popen([sys.executable, "-m", __name__], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        # no password on a command line; the driver as a tuple, so the holder need not import this module again
        self._holder.stdin.write(pickle.dumps((options, staging, key, tuple(driver))))
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


class Process(NamedTuple):
    """What the lease needs to know of a process, however it was read."""

    name: str  # the command's name (a file name, without its directory)
    parent: int  # the parent's pid
    zombie: bool  # exited, not yet waited for by its parent
    started: str  # when it started, in the form of the way it was read: compare only with the same way


class Driver(NamedTuple):
    pid: int
    started: str
    proc: bool  # its facts were read from /proc (else from ps): the holder reads them the same way


def _process(pid: int, proc: bool | None = None) -> Process | None:
    """The facts of process ``pid``, None if there is none; from /proc, else (``proc`` false, or
    this machine has no /proc: :data:`_PROC`) from ``ps``: OSError or SubprocessError where it
    does not run."""
    return _from_proc(pid) if (_PROC if proc is None else proc) else _from_ps(pid)


def _from_proc(pid: int) -> Process | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the name is in parentheses and may hold any character; the fields after it are state, ppid,
    # ..., the start time (clock ticks after boot) at 19
    fields = text[text.rindex(")") + 2 :].split()
    return Process(text[text.index("(") + 1 : text.rindex(")")], int(fields[1]), fields[0] == "Z", fields[19])


def _from_ps(pid: int) -> Process | None:
    """From POSIX ``ps`` and ``lstart`` (Linux procps, macOS, BSD): in the C locale the start time is
    five words ("Sun Nov  9 04:43:10 2026", to the second) on each; the command's name comes last, as
    it may hold spaces (macOS shows the program's full path: its file name is the name)."""
    done = subprocess.run(["ps", "-o", "ppid=,stat=,lstart=,comm=", "-p", str(pid)], capture_output=True,
                          env={**os.environ, "LC_ALL": "C"}, timeout=30, check=False)
    try:
        ppid, state, *started, name = done.stdout.decode(errors="replace").strip().split(maxsplit=7)
        if done.returncode != 0 or len(started) != 5:
            return None
        return Process(os.path.basename(name), int(ppid), state.startswith("Z"), " ".join(started))
    except ValueError:  # no such process (nothing printed), or a ps that prints otherwise
        return None


def _driver() -> Driver | None:
    """The driver's JVM, the first ``java`` among this process's ancestors."""
    pid = os.getppid()
    try:
        while pid > 1 and (process := _process(pid)) is not None:
            if process.name == "java":
                return Driver(pid, process.started, _PROC)
            pid = process.parent
    except (OSError, subprocess.SubprocessError):  # no ps
        pass
    return None


def _alive(driver: Driver) -> bool:
    try:
        process = _process(driver.pid, driver.proc)
    except (OSError, subprocess.SubprocessError):  # ps did not run this time: a live job keeps its table
        return True
    # the start time tells the driver from a later process with its pid
    return process is not None and not process.zombie and process.started == driver.started


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
    driver = Driver(*driver)
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
