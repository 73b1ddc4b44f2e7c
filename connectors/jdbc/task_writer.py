"""One Spark partition into PostgreSQL: chunking, transactions, retries, exactly-once skip.

``exactly-once`` and ``at-least-once`` write a partition in ONE transaction, so a failure never
leaves part of it behind (a constraint violation rolls all of it back). ``exactly-once`` also
commits a progress row in that transaction and skips keys already committed. ``none`` is Flink's
plain JdbcSink: every chunk commits on its own.

On a transient error (connection lost, server restarting, serialization failure, deadlock) the
transaction is retried on a new connection, up to ``maxRetries`` times with back-off; the
partition's chunks already sent are kept (Arrow, in memory) so the retry can resend them.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import os
import time
from collections.abc import Iterable, Iterator

import pyarrow as pa
from pyspark.sql.datasource import WriterCommitMessage

from connectors.core.guarantees import DeliveryGuarantee
from connectors.core.retry import retry
from connectors.jdbc import FORMAT
from connectors.jdbc.exactly_once import ProgressKey, ProgressTable
from connectors.jdbc.options import JdbcConnectionOptions, JdbcExecutionOptions
from connectors.jdbc.statements import Statement
from connectors.testing.faults import fault_point

log = logging.getLogger(__name__)

# SQLSTATEs worth a retry on a new connection: connection exceptions (class 08), the server
# shutting down or starting (57P0x), too many connections, serialization failure, deadlock.
_TRANSIENT_STATES = ("08", "57P01", "57P02", "57P03", "53300", "40001", "40P01")


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
    return text + ". The partition's transaction was rolled back."


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
    rows: int
    skipped: bool  # committed by an earlier attempt


def connect(options: JdbcConnectionOptions):
    """A psycopg2 connection in UTC, so timestamps land the same through COPY and INSERT."""
    import psycopg2

    connection = psycopg2.connect(**options.connect_kwargs())
    with connection.cursor() as cursor:
        cursor.execute("SET TIME ZONE 'UTC'")
    connection.commit()
    return connection


# One idle connection per process and connection options: Spark reuses its Python workers for
# the next task, which then skips a connect (a backend start and authentication).
_idle: dict[tuple, tuple[int, object]] = {}


def _idle_key(options: JdbcConnectionOptions) -> tuple:
    return tuple(sorted((key, str(value)) for key, value in options.connect_kwargs().items()))


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


def _kept(chunks: Iterator[pa.Table], sent: list[pa.Table]) -> Iterator[pa.Table]:
    """Pass ``chunks`` on, keeping each in ``sent`` first so a retry can send it again."""
    for chunk in chunks:
        sent.append(chunk)
        yield chunk


def _without_first(chunks: list[pa.Table], count: int) -> Iterator[pa.Table]:
    """``chunks`` less their first ``count`` rows."""
    for chunk in chunks:
        if count >= chunk.num_rows:
            count -= chunk.num_rows
            continue
        yield chunk.slice(count)
        count = 0


class PartitionWriter:
    """Writes one partition's rows; one instance per task."""

    def __init__(self, plan: WritePlan, key: ProgressKey | None):
        self.plan = plan
        self.key = key if plan.guarantee is DeliveryGuarantee.EXACTLY_ONCE else None
        self._connection = None

    def write(self, batches: Iterator[pa.RecordBatch]) -> JdbcCommitMessage:
        execution = self.plan.execution
        pending = chunks(batches, execution.batch_size, execution.batch_interval_ms)
        first = next(pending, None)
        if first is None:  # an empty partition needs no connection (and no progress row)
            return JdbcCommitMessage(self.key, 0, skipped=False)
        pending = itertools.chain([first], pending)
        try:
            if self.plan.guarantee is DeliveryGuarantee.NONE:
                rows = sum(self._retrying(lambda chunk=chunk: self._commit_chunk(chunk)) for chunk in pending)
                message = JdbcCommitMessage(self.key, rows, skipped=False)
            else:
                sent: list[pa.Table] = []
                message = self._retrying(lambda: self._commit_partition(sent, pending))
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

            if isinstance(exc, psycopg2.Error):
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

    def _commit_partition(self, sent: list[pa.Table], pending: Iterator[pa.Table]) -> JdbcCommitMessage:
        """One attempt: resend what earlier attempts sent, send the rest, commit with the progress row."""
        progress = self.plan.progress
        with self._cursor() as cursor:
            committed = progress.claim(cursor, self.key) if self.key is not None and progress is not None else None
            if committed is None:
                chunks: Iterable[pa.Table] = itertools.chain(list(sent), _kept(pending, sent))
            else:
                for _ in _kept(pending, sent):  # the whole partition decides what is missing
                    pass
                rows = sum(chunk.num_rows for chunk in sent)
                if rows == committed:
                    self._connection.rollback()
                    log.info("%s: %s already committed (%d rows); skipped", FORMAT, self.key, rows)
                    return JdbcCommitMessage(self.key, rows, skipped=True)
                if rows < committed:
                    raise JdbcWriteError(
                        f"{FORMAT}: {self.key} was committed with {committed} rows, but its re-execution has "
                        f"{rows}: the input of a re-executed batch must be deterministic for exactly-once "
                        "(see docs/jdbc.md)"
                    )
                # Spark ends a writer's input early, as if complete, when an upstream operator fails:
                # an earlier attempt committed a prefix. Write exactly the rows it did not.
                log.warning("%s: %s: an earlier attempt committed %d of %d rows; writing the rest",
                            FORMAT, self.key, committed, rows)
                chunks = _without_first(sent, committed)
            self.plan.statement.send(cursor, chunks)
            rows = sum(chunk.num_rows for chunk in sent)
            if self.key is not None and progress is not None:
                progress.record(cursor, self.key, rows)
        fault_point("jdbc.task.before_commit", self.plan.target)
        self._connection.commit()
        fault_point("jdbc.task.after_commit", self.plan.target)
        return JdbcCommitMessage(self.key, rows, skipped=False)

    def _close(self) -> None:
        if self._connection is not None:
            discard(self._connection)
            self._connection = None
