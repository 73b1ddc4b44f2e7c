"""Fault points: SIGKILL the whole Spark application at a named step of a sink's protocol.

A sink marks each step of its exactly-once protocol with a one-line
``fault_point("name", scope)``, ``scope`` naming the sink (its transactional id, base path or
table). Nothing happens unless the environment variable ``CONNECTORS_FAULT`` names that point::

    CONNECTORS_FAULT=jdbc.task.after_commit:3   # the 3rd time any process of the application
                                                 # passes that point, SIGKILL the application
    CONNECTORS_FAULT=jdbc.task.after_commit:3:orders,refunds
        # the sinks whose scope contains "orders" or "refunds" (hits counted per name): each
        # waits at its 3rd hit until the other has got there too, then SIGKILL: one kill stops
        # both queries of the application at that step

``<point>[:<hit>[:<name>,...]]``, the hit 1 when left out; names hold no ``:`` ``,`` ``/``. The
variable is read once, when this module is imported, so with it unset a point costs one
comparison. Spark passes the driver's environment on to its JVM and from there to every Python
worker it starts, so setting it for the driver process arms the points in the tasks and in the
driver-side commit as well.

Hits are counted across all processes of the application, in files under
``$CONNECTORS_FAULT_DIR`` (the crash harness gives every run its own), else under a temporary
directory named after the process's session. When a point fires it writes ``fired`` there (JSON:
point, hit, the names that got there, pid) and SIGKILLs every process group of its session: the
driver, its JVM and the process group PySpark's worker daemon makes for its workers. A named sink
waits at most :data:`HOLD_SECONDS` for the others, then kills anyway (``fired`` shows who is
missing). Run the application as a session of its own (``setsid``;
:class:`~connectors.testing.crash.CrashHarness` does), or the kill takes the rest of the session
(a terminal's shell) with it. In local mode that is the whole application; on a cluster only the
processes of the host that hit the point die.

The points, in protocol order (:data:`POINTS`; ``docs/guarantees.md`` has the windows each one
tests):

Kafka sink (``connectors/kafka/sink``)
    ``kafka.task.before_commit``  records produced and the progress added to the transaction,
                                  ``commit_transaction()`` not yet called
    ``kafka.task.after_commit``   the transaction (records and progress) committed; the task has
                                  not returned and no later task has read the progress back
    ``kafka.commit.before``       every task returned its commit message; the driver-side
                                  ``commit()`` has not run, Spark's commit log not written
    ``kafka.commit.after``        ``commit()`` done; Spark's commit log not written

File sink (``connectors/files/sink``)
    ``files.task.written``        the task's part bytes written and synced, its message not returned
    ``files.commit.before``       the driver-side ``commit()`` called, nothing done yet
    ``files.commit.state_written``  the new state version written (the sink's commit point),
                                  nothing of it published
    ``files.publish.part``        one part of a version published, the next not yet
    ``files.concat.partial``      a compacted part's first source copied into its hidden target,
                                  the rest not (not renamed into place)
    ``files.commit.after``        published and swept; Spark's commit log not written

JDBC sink (``connectors/jdbc``)
    ``jdbc.task.before_commit``   rows and progress row sent in the partition's transaction,
                                  ``COMMIT`` not sent
    ``jdbc.task.after_commit``    the transaction committed; the task has not returned
    ``jdbc.commit.before``        every task returned; the driver-side ``commit()`` has not run
    ``jdbc.commit.after``         ``commit()`` (progress pruning) done; Spark's commit log not written
    ``jdbc.overwrite.staged``     batch overwrite: every partition committed into the staging table,
                                  the target not yet replaced
    ``jdbc.overwrite.swapped``    batch overwrite: the target replaced (committed), the job's commit
                                  not returned
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import signal
import tempfile
import time
from pathlib import Path

ENV = "CONNECTORS_FAULT"
DIR_ENV = "CONNECTORS_FAULT_DIR"
HOLD_SECONDS = 240.0  # the longest a named sink waits at its point for the others

POINTS = (
    "kafka.task.before_commit",
    "kafka.task.after_commit",
    "kafka.commit.before",
    "kafka.commit.after",
    "files.task.written",
    "files.commit.before",
    "files.commit.state_written",
    "files.publish.part",
    "files.concat.partial",
    "files.commit.after",
    "jdbc.task.before_commit",
    "jdbc.task.after_commit",
    "jdbc.commit.before",
    "jdbc.commit.after",
    "jdbc.overwrite.staged",
    "jdbc.overwrite.swapped",
)


@dataclasses.dataclass(frozen=True)
class Fault:
    point: str
    hit: int
    names: tuple[str, ...] = ()  # only sinks whose scope contains one of these, each counted apart

    def __str__(self) -> str:
        return f"{self.point}:{self.hit}" + (f":{','.join(self.names)}" if self.names else "")


def parse(spec: str) -> Fault:
    """``"<point>[:<hit>[:<name>,...]]"``; a clear ValueError for anything else."""
    point, _, rest = spec.strip().partition(":")
    hit, _, names = rest.partition(":")
    if point not in POINTS:
        raise ValueError(f"{ENV}={spec!r}: unknown fault point {point!r}; the points are: {', '.join(POINTS)}")
    if hit and (not hit.isdigit() or int(hit) < 1):
        raise ValueError(f"{ENV}={spec!r}: the hit count {hit!r} is not a positive integer")
    return Fault(point, int(hit or 1), tuple(name for name in names.split(",") if name))


_armed: Fault | None = parse(os.environ[ENV]) if os.environ.get(ENV) else None


def fault_point(name: str, scope: object = None) -> None:
    """Step ``name`` of a protocol, in the sink ``scope`` (its topic's transactional id, base
    path or table): SIGKILL the application if ``CONNECTORS_FAULT`` says so."""
    if _armed is None or _armed.point != name:
        return
    _hit(_armed, str(scope))


def _hit(fault: Fault, scope: str) -> None:
    names = [name for name in fault.names if name in scope] if fault.names else [""]
    if not names:
        return
    directory = _directory()
    if _count(directory / f"{fault.point}.{names[0]}.hits") != fault.hit:
        return
    held = directory / f"{fault.point}.held"
    held.mkdir(exist_ok=True)
    (held / (names[0] or "any")).touch()
    deadline = time.monotonic() + HOLD_SECONDS
    while len(os.listdir(held)) < max(len(fault.names), 1) and time.monotonic() < deadline:
        time.sleep(0.05)  # until the other named sinks reach the point too (they kill us then)
    record = {"point": fault.point, "hit": fault.hit, "held": sorted(os.listdir(held)), "pid": os.getpid()}
    draft = directory / f"fired.{os.getpid()}"
    draft.write_text(json.dumps(record))
    try:
        os.link(draft, directory / "fired")  # whole, and only the first process's record
    except FileExistsError:  # another process got there at the same moment
        pass
    kill_session()


def _directory() -> Path:
    if os.environ.get(DIR_ENV):
        directory = Path(os.environ[DIR_ENV])
    else:  # the session leader's start time tells this session from an older one with its id
        sid = os.getsid(0)
        leader = _stat(sid)
        directory = Path(tempfile.gettempdir()) / f"connectors-faults-{sid}-{leader[19] if leader else 0}"
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def _count(path: Path) -> int:
    """Add one hit to ``path`` and return the total, across processes."""
    with open(path, "ab") as hits:
        fcntl.flock(hits, fcntl.LOCK_EX)
        hits.write(b".")
        hits.flush()
        return os.fstat(hits.fileno()).st_size


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (state, ppid, pgrp, session, ...)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()


def kill_session(session: int | None = None) -> None:
    """SIGKILL every process group of ``session``: by default this process's own session, with
    this process's own group last."""
    own = os.getpgrp() if session is None else None
    session = os.getsid(0) if session is None else session
    groups = set()
    for entry in os.listdir("/proc"):
        fields = _stat(int(entry)) if entry.isdigit() else None
        if fields is not None and int(fields[3]) == session:
            groups.add(int(fields[2]))
    # The session leader's group first: its JVM is what starts new workers.
    for group in sorted(groups - {own}, key=lambda g: g != session):
        try:
            os.killpg(group, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if own is not None:
        os.killpg(own, signal.SIGKILL)
