"""One Spark partition into PostgreSQL: chunking, transactions, retries, exactly-once resume.

``exactly-once`` and ``at-least-once`` write a partition in transactions of ``maxBufferedBytes``
of rows (a single one for a partition smaller than that), so a failure never leaves part of a
transaction behind (a constraint violation rolls all of it back). ``exactly-once`` also commits
the partition's progress row in each: the rows committed so far and their digest; an attempt
finding rows committed reads past them, checks their digest, and writes the rest. ``none`` is
Flink's plain JdbcSink: every chunk commits on its own.

On a transient error (connection lost, server restarting, serialization failure, deadlock, lock
timeout) the open transaction is retried on a new connection, up to ``maxRetries`` times with
back-off; its chunks are kept (Arrow, in memory) so the retry can resend them. Nothing older is
kept, so a task holds about ``maxBufferedBytes`` of rows whatever the size of its partition.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import os
import time
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import WriterCommitMessage

from connectors.core.digest import Replayed, RowsDigest
from connectors.core.guarantees import DeliveryGuarantee
from connectors.core.retry import retry
from connectors.jdbc import FORMAT
from connectors.jdbc.exactly_once import Committed, ProgressKey, ProgressTable, Superseded
from connectors.jdbc.options import JdbcConnectionOptions, JdbcExecutionOptions
from connectors.jdbc.statements import BadValue, Statement
from connectors.testing.faults import fault_point

log = logging.getLogger(__name__)

# SQLSTATEs worth a retry on a new connection: connection exceptions (class 08), the server
# shutting down or starting (57P0x), too many connections, serialization failure, deadlock, lock
# timeout (a lock held by a dead peer's transaction until the server ends it).
_TRANSIENT_STATES = ("08", "57P01", "57P02", "57P03", "53300", "40001", "40P01", "55P03")

# A statement timeout, a lock timeout: the option that sets it.
_TIMEOUT_OPTIONS = {"57014": "queryTimeout", "55P03": "lockTimeout"}


class JdbcWriteError(RuntimeError):
    """Writing failed for a reason a retry cannot fix (constraint, data, permission, ...)."""


def is_transient(exc: BaseException) -> bool:
    import psycopg2

    if not isinstance(exc, (psycopg2.OperationalError, psycopg2.InterfaceError)):
        return False
    code = getattr(exc, "pgcode", None)
    return code is None or code.startswith(_TRANSIENT_STATES)  # no code: libpq lost the connection


def describe(exc: BaseException, target: str) -> str:
    """A one-paragraph error for ``exc``, naming the constraint or column PostgreSQL reported."""
    import psycopg2

    if not isinstance(exc, psycopg2.Error):
        return f"{FORMAT}: writing to {target} failed: {exc}"
    diag = exc.diag
    what = "constraint violation" if isinstance(exc, psycopg2.IntegrityError) else "error"
    text = f"{FORMAT}: writing to {target} failed ({what}"
    text += f", constraint \"{diag.constraint_name}\"" if diag.constraint_name else ""
    text += f", column \"{diag.column_name}\"" if diag.column_name else ""
    text += f", SQLSTATE {exc.pgcode}): " if exc.pgcode else "): "
    text += (diag.message_primary or str(exc)).strip().rstrip(".")
    text += f". {diag.message_detail.strip().rstrip('.')}" if diag.message_detail else ""
    text += f" ({'; '.join(diag.context.strip().splitlines())})" if diag.context else ""  # e.g. COPY's line and column
    text += f" (the option '{_TIMEOUT_OPTIONS[exc.pgcode]}' sets it)" if exc.pgcode in _TIMEOUT_OPTIONS else ""
    return text + ". The open transaction was rolled back."


@dataclasses.dataclass(frozen=True)
class WritePlan:
    """Everything a task needs, built and checked on the driver; pickled to the tasks."""

    connection: JdbcConnectionOptions
    execution: JdbcExecutionOptions
    statement: Statement
    target: str  # for messages
    guarantee: DeliveryGuarantee
    progress: ProgressTable | None  # exactly-once only


@dataclasses.dataclass(frozen=True)
class JdbcCommitMessage(WriterCommitMessage):
    key: ProgressKey | None
    rows: int  # written by this attempt
    skipped: int = 0  # exactly-once: rows of the partition found committed (by an earlier attempt)


def connect(options: JdbcConnectionOptions):
    """A psycopg2 connection with the options' session settings (UTC, the timeouts, the isolation
    level), then the ``sessionInitStatement``, committed."""
    import psycopg2

    try:
        connection = psycopg2.connect(**options.connect_kwargs())
    except psycopg2.Error as exc:
        raise options.scrubbed(exc) from None
    settings = options.session_settings()
    with connection.cursor() as cursor:
        calls = ", ".join(["set_config(%s, %s, false)"] * len(settings))
        cursor.execute(f"SELECT {calls}", [*itertools.chain(*settings.items())])
    connection.commit()
    if options.session_init_statement is not None:
        try:
            with connection.cursor() as cursor:
                cursor.execute(options.session_init_statement)
            connection.commit()
        except psycopg2.Error as exc:
            discard(connection)
            if is_transient(exc):  # the connection, not the statement: retried like any other
                raise
            raise options.error("sessionInitStatement", f"failed on a new connection: {str(exc).strip()}") from None
    return connection


# One idle connection per process and connection options: Spark reuses its Python workers for
# the next task, which then skips a connect (a backend start and authentication).
_idle: dict[tuple, tuple[int, object]] = {}


def _idle_key(options: JdbcConnectionOptions) -> tuple:
    settings = {**options.connect_kwargs(), **options.session_settings()}
    # The init statement ran once, at connect: only options with the same one may reuse the connection.
    return (*sorted((key, str(value)) for key, value in settings.items()), options.session_init_statement)


def borrow(options: JdbcConnectionOptions):
    """This process's idle connection if it still answers (Flink's ``isValid`` check), else a new one."""
    import psycopg2

    pid, connection = _idle.pop(_idle_key(options), (None, None))
    if connection is not None and pid == os.getpid():  # never a connection inherited through fork
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")
            connection.rollback()
            return connection
        except psycopg2.Error:
            discard(connection)
    return connect(options)


def release(connection, options: JdbcConnectionOptions) -> None:
    """Keep ``connection`` as this process's idle one if no transaction is open on it, else close it."""
    import psycopg2.extensions

    if connection.closed or connection.get_transaction_status() != psycopg2.extensions.TRANSACTION_STATUS_IDLE:
        discard(connection)
        return
    previous = _idle.get(_idle_key(options))
    _idle[_idle_key(options)] = (os.getpid(), connection)
    if previous is not None:
        discard(previous[1])


def discard(connection) -> None:
    try:
        connection.close()
    except Exception:  # already broken: nothing to release
        pass


def chunks(batches: Iterator[pa.RecordBatch], size: int, interval_ms: int) -> Iterator[pa.Table]:
    """Flink's buffering: a chunk every ``size`` rows, or when ``interval_ms`` passed since the last."""
    buffer: list[pa.RecordBatch] = []
    buffered, last = 0, time.monotonic()
    for batch in batches:
        if batch.num_rows == 0:
            continue
        buffer.append(batch)
        buffered += batch.num_rows
        while buffered >= size:
            table = pa.Table.from_batches(buffer)
            yield table.slice(0, size)
            buffer, buffered, last = table.slice(size).to_batches(), buffered - size, time.monotonic()
        if interval_ms and buffered and (time.monotonic() - last) * 1000 >= interval_ms:
            yield pa.Table.from_batches(buffer)
            buffer, buffered, last = [], 0, time.monotonic()
    if buffered:
        yield pa.Table.from_batches(buffer)


class PartitionWriter:
    """Writes one partition's rows; one instance per task."""

    def __init__(self, plan: WritePlan, key: ProgressKey | None):
        self.plan = plan
        self.key = key if plan.guarantee is DeliveryGuarantee.EXACTLY_ONCE else None
        self._connection = None
        # exactly-once (a key): the progress table, and the digest of the rows committed
        self._progress: ProgressTable = plan.progress  # type: ignore[assignment]
        self._digest: RowsDigest = RowsDigest()
        self._chunks: Iterator[pa.Table] = iter(())
        self._committed = 0  # rows of the partition committed, by this attempt or another
        self._skipped = 0  # of those, rows another attempt committed
        self._kept: list[pa.Table] = []  # rows read after those, kept until they commit
        self._kept_bytes = 0
        self._exhausted = False

    def write(self, batches: Iterator[pa.RecordBatch]) -> JdbcCommitMessage:
        execution = self.plan.execution
        self._chunks = chunks(batches, execution.batch_size, execution.batch_interval_ms)
        first = next(self._chunks, None)
        if first is None:  # an empty partition needs no connection (and no progress row)
            return JdbcCommitMessage(self.key, 0)
        try:
            if self.plan.guarantee is DeliveryGuarantee.NONE:
                pending = itertools.chain([first], self._chunks)
                rows = sum(self._retrying(lambda chunk=chunk: self._commit_chunk(chunk)) for chunk in pending)
                message = JdbcCommitMessage(self.key, rows)
            else:
                self._keep(first)
                while self._retrying(self._commit_transaction):
                    pass
                message = JdbcCommitMessage(self.key, self._committed - self._skipped, self._skipped)
        except BaseException:
            self._close()
            raise
        release(self._connection, self.plan.connection)  # kept for the next task in this worker
        self._connection = None
        return message

    def _retrying(self, attempt):
        try:
            return retry(
                attempt, attempts=self.plan.execution.max_retries + 1, retry_on=is_transient,
                what=f"{FORMAT}: writing to {self.plan.target}", before_retry=lambda _: self._close(),
            )  # fmt: skip
        except Exception as exc:
            import psycopg2

            if isinstance(exc, (psycopg2.Error, BadValue)):
                raise JdbcWriteError(describe(exc, self.plan.target)) from exc
            raise

    def _cursor(self):
        if self._connection is None:
            self._connection = borrow(self.plan.connection)
        return self._connection.cursor()

    def _commit_chunk(self, chunk: pa.Table) -> int:
        with self._cursor() as cursor:
            self.plan.statement.send(cursor, [chunk])
        self._connection.commit()
        return chunk.num_rows

    def _commit_transaction(self) -> bool:
        """One attempt at the next transaction: resend the rows an attempt before sent, read on up
        to ``maxBufferedBytes``, commit them with the progress row. False once nothing is left."""
        with self._cursor() as cursor:
            if self.key is not None:
                self._claim(cursor)
            if not self._kept:
                chunk = next(self._chunks, None)
                if chunk is None:
                    self._connection.rollback()
                    return False
                self._keep(chunk)
            digest = self._digest.copy() if self.key is not None else None
            self.plan.statement.send(cursor, self._sending(digest))
            rows = sum(chunk.num_rows for chunk in self._kept)
            if self.key is not None:
                self._progress.record(cursor, self.key, Committed(self._committed + rows, digest.hexdigest()))
        fault_point("jdbc.task.before_commit", self.plan.target)
        self._connection.commit()
        fault_point("jdbc.task.after_commit", self.plan.target)
        self._committed += rows
        if digest is not None:
            self._digest = digest
        self._kept, self._kept_bytes = [], 0
        return not self._exhausted

    def _sending(self, digest: RowsDigest | None) -> Iterator[pa.Table]:
        """The transaction's chunks: those kept from an attempt before, then new ones up to the bound."""
        for chunk in list(self._kept):
            if digest is not None:
                digest.update(chunk)
            yield chunk
        while self._kept_bytes < self.plan.execution.max_buffered_bytes:
            chunk = next(self._chunks, None)
            if chunk is None:
                self._exhausted = True
                return
            self._keep(chunk)  # before it is sent: a retry sends it again
            if digest is not None:
                digest.update(chunk)
            yield chunk

    def _keep(self, chunk: pa.Table) -> None:
        self._kept.append(chunk)
        self._kept_bytes += chunk.nbytes

    def _claim(self, cursor) -> None:
        """Lock the progress row in the open transaction, after reading past the rows it says are
        committed (without holding the lock), and check they are the rows committed."""
        while True:
            try:
                found = self._progress.claim(cursor, self.key)
            except Superseded as later:
                self._connection.rollback()
                if later.finished:
                    raise JdbcWriteError(
                        f"{FORMAT}: {self.key}: the batch write this task belongs to is committed already, and "
                        "nothing of it is written again: this task is a late attempt (a speculative copy that lost, "
                        "or an attempt Spark is killing) that reached the database after the job commit"
                    ) from None
                raise JdbcWriteError(
                    f"{FORMAT}: {self.key}: batch {later.later_batch} of this sink id is committed already, so "
                    f"batch {self.key.batch_id} was committed before it and nothing of it is written again: this task "
                    "is a zombie (it ran on after its driver died, while the restarted query committed its batch), "
                    "or the batch ids started over under the same sink id (a new checkpoint needs a new sinkId; "
                    "see docs/jdbc.md)"
                ) from None
            rows = found.rows if found is not None else 0
            if rows <= self._committed:
                break
            self._connection.rollback()
            self._skip_to(rows)
        if rows < self._committed:  # deleted or rewritten under this task: writing on could duplicate
            raise JdbcWriteError(
                f"{FORMAT}: {self.key}: the progress table says {rows} rows are committed, but this task "
                f"committed {self._committed}: another writer changed it (a query sharing the sinkId, or the "
                "commit of a later batch while this task ran on as a zombie); nothing more was written"
            )
        replayed = Replayed.SAME if found is None or found.digest is None else self._digest.compare(found.digest)
        if replayed is Replayed.OTHER:
            raise JdbcWriteError(
                f"{FORMAT}: {self.key}: the first {rows} rows of this re-execution are not the {rows} rows "
                "committed (their digests differ), so skipping them would lose some rows and duplicate others: "
                "exactly-once needs a re-executed batch to bring each partition the same rows in the same order, "
                "which fails when, e.g., the source's partition count changed before a restart (see docs/jdbc.md)"
            )
        # A shuffle's fetch order may change between attempts: the same rows and no more were all committed.
        if replayed is Replayed.REORDERED and self._more_input():
            raise JdbcWriteError(
                f"{FORMAT}: {self.key}: this re-execution begins with the {rows} rows committed in another order "
                "and has more after them, so which rows were committed is unknown: exactly-once needs a "
                "re-executed batch whose partition was committed only in part to bring the same rows in the same "
                "order (see docs/jdbc.md)"
            )

    def _more_input(self) -> bool:
        if not self._kept:
            chunk = next(self._chunks, None)
            if chunk is None:
                return False
            self._keep(chunk)
        return True

    def _skip_to(self, rows: int) -> None:
        """Read past the partition's rows up to ``rows``, which another attempt committed."""
        before = self._committed
        while self._committed < rows:
            chunk = self._kept.pop(0) if self._kept else next(self._chunks, None)
            if chunk is None:
                raise JdbcWriteError(
                    f"{FORMAT}: {self.key} was committed with {rows} rows, but its re-execution has "
                    f"{self._committed}: the input of a re-executed batch must be deterministic for exactly-once "
                    "(see docs/jdbc.md)"
                )
            take = min(chunk.num_rows, rows - self._committed)
            self._digest.update(chunk.slice(0, take))
            self._committed += take
            if take < chunk.num_rows:
                self._kept.insert(0, chunk.slice(take))
        self._skipped += rows - before
        self._kept_bytes = sum(chunk.nbytes for chunk in self._kept)
        log.info("%s: %s: rows %d to %d were committed by another attempt; read past them", FORMAT, self.key, before, rows)

    def _close(self) -> None:
        if self._connection is not None:
            discard(self._connection)
            self._connection = None
