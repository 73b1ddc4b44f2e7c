"""The write side of ``connectors.jdbc`` (``df.write`` and ``df.writeStream``).

``writer()`` / ``stream_writer()`` run on the driver when a query (or micro-batch) starts: they
parse the options, connect, check the input against the table, build the statement and create
the progress table, so every configuration mistake fails there with a clear message. Tasks then
run :class:`~connectors.jdbc.task_writer.PartitionWriter`; ``commit()`` on the driver prunes the
progress rows no re-execution can need any more.

Spark calls ``stream_writer()`` again for every micro-batch, and once more to get an instance to
``commit()`` on, in driver-side Python workers that it reuses: planning borrows the worker's idle
connection, so the check costs a few round trips rather than a connect each time. The plan itself
is not cached: a query restarted after its table was fixed must see the table as it is now.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterator, Mapping

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter
from pyspark.sql.types import StructType

from connectors.core.commit import current_task
from connectors.core.guarantees import DeliveryGuarantee
from connectors.core.options import OptionError
from connectors.core.retry import retry
from connectors.jdbc import FORMAT
from connectors.jdbc.exactly_once import ProgressKey, ProgressTable
from connectors.jdbc.options import JdbcSinkOptions, missing_sink_id
from connectors.jdbc.overwrite import Overwrite, stage
from connectors.jdbc.statements import InsertStatement, plan_statement
from connectors.jdbc.table import parse_table_name
from connectors.jdbc.task_writer import (
    JdbcCommitMessage,
    JdbcWriteError,
    PartitionWriter,
    WritePlan,
    borrow,
    describe,
    is_transient,
    release,
)
from connectors.testing.faults import fault_point

log = logging.getLogger(__name__)


def writer(options: Mapping[str, str], schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
    return JdbcBatchWriter(*plan_write(options, schema, overwrite))


def stream_writer(options: Mapping[str, str], schema: StructType, overwrite: bool) -> DataSourceStreamArrowWriter:
    if overwrite:
        raise OptionError(FORMAT, "mode", "complete", "only appending streams are supported (output mode append or update)")
    config, plan, name, _ = plan_write(options, schema, False)
    return JdbcStreamWriter(config, plan, name)


def plan_write(options: Mapping[str, str], schema: StructType,
               overwrite: bool) -> tuple[JdbcSinkOptions, WritePlan, str, Overwrite | None]:
    """Validate everything against the server; returns the options, the plan, the target's name
    and, for save mode overwrite, the staging table the rows go to until the job commits."""
    config = JdbcSinkOptions.from_options(options)
    import psycopg2

    try:
        connection = borrow(config.connection)
    except psycopg2.Error as exc:
        raise config.error("url", f"cannot connect: {str(exc).strip()}") from None
    replace = None
    try:
        try:
            with connection.cursor() as cursor:
                if overwrite:
                    replace, config = stage(config, schema, cursor)
                statement, name = plan_statement(config, schema, cursor)
        except psycopg2.OperationalError as exc:  # the server went away mid-check (restart, network)
            raise config.error("url", f"lost the connection while checking the target: {str(exc).strip()}") from None
        except psycopg2.Error as exc:
            target_option = "dbtable" if config.sql is None else "sql"
            raise config.error(target_option, f"checking the target failed: {str(exc).strip()}") from None
        except BaseException:
            if replace is not None:  # the input does not fit: no staging table left behind
                replace.abort(connection)
            raise
        connection.rollback()
        progress = None
        if config.delivery_guarantee is DeliveryGuarantee.EXACTLY_ONCE:
            progress = ProgressTable(_quoted(config, "progressTable", config.progress_table, connection))
            try:
                progress.create(connection)
            except psycopg2.Error as exc:
                connection.rollback()
                raise config.error("progressTable", f"cannot create or update it: {str(exc).strip()}") from None
    finally:
        release(connection, config.connection)  # closed instead if a failed check left it unusable
    target = f"table {name}" if config.sql is None else "the custom sql statement"
    plan = WritePlan(config.connection, config.execution, statement, target, config.delivery_guarantee, progress)
    return config, plan, name, replace


def _quoted(config: JdbcSinkOptions, option_name: str, text: str, connection) -> str:
    from psycopg2 import sql

    try:
        return sql.Identifier(*parse_table_name(text)).as_string(connection)
    except ValueError as exc:
        raise config.error(option_name, str(exc)) from None


class _JdbcWriter:
    """What the batch and the streaming writer share: the write itself and progress pruning."""

    def __init__(self, config: JdbcSinkOptions, plan: WritePlan, target_name: str):
        self.plan = plan
        self.sink_id = config.sink_id
        self.target_name = target_name
        self.write_id = uuid.uuid4().hex  # names this writer when no query id or sink id does

    def _write(self, batches: Iterator[pa.RecordBatch], batch_id: int, sink_id: str) -> JdbcCommitMessage:
        key = ProgressKey(sink_id, batch_id, current_task().partition_id)
        return PartitionWriter(self.plan, key).write(batches)

    def _prune(self, sink_ids: set[str], action: Callable[[object, ProgressTable, str], None]) -> None:
        """Prune progress rows, ``action(connection, progress table, sink id)`` for each sink id; a
        failure only leaves rows that the next commit prunes."""
        import psycopg2

        if self.plan.progress is None or not sink_ids:
            return
        try:
            connection = borrow(self.plan.connection)
        except psycopg2.Error as exc:
            log.warning("%s: could not prune the progress table: %s", FORMAT, exc)
            return
        try:
            for sink_id in sink_ids:
                action(connection, self.plan.progress, sink_id)
        except psycopg2.Error as exc:
            log.warning("%s: could not prune the progress table: %s", FORMAT, exc)
        finally:
            release(connection, self.plan.connection)  # closed instead when the error broke it

    @staticmethod
    def _log(messages: list[JdbcCommitMessage | None], what: str) -> None:
        done = [m for m in messages if m is not None]
        log.info("%s: %s: %d rows written, %d more committed by earlier attempts",
                 FORMAT, what, sum(m.rows for m in done), sum(m.skipped for m in done))


class JdbcBatchWriter(_JdbcWriter, DataSourceArrowWriter):
    """``df.write``: each partition in one transaction; progress rows guard task retries. With save
    mode overwrite the partitions go to a staging table, which the commit puts in the target's place."""

    _BATCH = 0  # a batch write is the only batch of its sink id

    def __init__(self, config: JdbcSinkOptions, plan: WritePlan, target_name: str, overwrite: Overwrite | None):
        super().__init__(config, plan, target_name)
        self.overwrite = overwrite

    def write(self, iterator: Iterator[pa.RecordBatch]) -> JdbcCommitMessage:
        return self._write(iterator, self._BATCH, self._sink_id())

    def commit(self, messages: list[JdbcCommitMessage | None]) -> None:
        if self.overwrite is not None:
            self._replace(messages)
        self._log(messages, "batch write committed")
        # A tombstone, not no rows: a losing attempt still running must not write again (if it
        # cannot be written, the rows stay, which stop such an attempt too).
        self._prune({self._sink_id()}, lambda connection, progress, sink_id:
                    progress.finish(connection, sink_id, self._BATCH))  # fmt: skip

    def _sink_id(self) -> str:
        # write_id is drawn on the driver and pickled to the tasks: each write is its own sink id.
        return f"{self.sink_id or 'batch'}:{self.write_id}"

    def abort(self, messages: list[JdbcCommitMessage | None]) -> None:
        if self.overwrite is not None:
            self._with_connection(self.overwrite.abort)
            self._log(messages, "batch write aborted (the table was left as it was)")
        else:
            self._log(messages, "batch write aborted (partitions already committed stay)")

    def _replace(self, messages: list[JdbcCommitMessage | None]) -> None:
        import psycopg2

        def replace(connection) -> None:
            try:
                self.overwrite.commit(connection)  # type: ignore[union-attr]
            except psycopg2.Error as exc:
                self.overwrite.abort(connection)  # type: ignore[union-attr]
                raise JdbcWriteError(describe(exc, self.plan.target)) from None

        fault_point("jdbc.overwrite.staged", self.plan.target)
        self._with_connection(replace)
        fault_point("jdbc.overwrite.swapped", self.plan.target)

    def _with_connection(self, action) -> None:
        connection = borrow(self.plan.connection)
        try:
            action(connection)
        finally:
            release(connection, self.plan.connection)


class JdbcStreamWriter(_JdbcWriter, DataSourceStreamArrowWriter):
    """``df.writeStream``: progress rows keyed by (sink id, batch id, partition)."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> JdbcCommitMessage:
        task = current_task()
        name = self.sink_id or task.query_id
        if name is None:
            if self.plan.guarantee is DeliveryGuarantee.EXACTLY_ONCE:
                raise missing_sink_id()  # JdbcSink checks it on the driver first; never a random id
            name = self.write_id  # no progress rows without exactly-once: any name does
        return self._write(iterator, task.batch_id if task.batch_id is not None else 0, f"{name}:{self.target_name}")

    def commit(self, messages: list[JdbcCommitMessage | None], batchId: int) -> None:
        fault_point("jdbc.commit.before", self.plan.target)
        self._verify(messages, batchId)
        self._log(messages, f"batch {batchId} committed")
        sink_ids = {m.key.sink_id for m in messages if m is not None and m.key is not None}
        self._prune(sink_ids, lambda connection, progress, sink_id: progress.forget(connection, sink_id, batchId))
        fault_point("jdbc.commit.after", self.plan.target)

    def abort(self, messages: list[JdbcCommitMessage | None], batchId: int) -> None:
        self._log(messages, f"batch {batchId} aborted (committed partitions are skipped when it runs again)")

    def _verify(self, messages: list[JdbcCommitMessage | None], batch_id: int) -> None:
        """Fail the batch when its partitions' rows are not the rows committed under its key.

        Each task checks that the rows it skips are the rows committed for its partition id, but
        no task sees another partition's: when a re-executed batch's rows moved between partitions
        (the source's partition count or a repartition changed before the restart, a
        non-deterministic input), a partition that now holds another's committed rows after its
        own, or a partition id without a progress row, writes them again, and a partition that
        is now empty or gone reads nothing. Each partition's progress row must count exactly the
        rows its task committed or skipped; every other row of the batch must count none.
        The rows are written by now: the batch fails, every time it runs, instead of passing
        with rows twice and nobody told.
        """
        expected = {(m.key.sink_id, m.key.partition_id): m.rows + m.skipped
                    for m in messages if m is not None and m.key is not None}  # fmt: skip
        statement = self.plan.statement
        if self.plan.progress is None or not expected or (isinstance(statement, InsertStatement)
                                                          and statement.key_indexes):
            return  # an upsert writes a moved row again by its key: nothing twice
        import psycopg2

        progress = self.plan.progress
        sink_ids = sorted({sink_id for sink_id, _ in expected})

        def read() -> dict[tuple[str, int], int]:
            connection = borrow(self.plan.connection)
            try:
                with connection.cursor() as cursor:
                    found = progress.committed_rows(cursor, sink_ids, batch_id)
                connection.rollback()
                return found
            finally:
                release(connection, self.plan.connection)

        try:
            committed = retry(read, attempts=self.plan.execution.max_retries + 1, retry_on=is_transient,
                              what=f"{FORMAT}: checking the progress of batch {batch_id}")  # fmt: skip
        except psycopg2.Error as exc:
            raise JdbcWriteError(describe(exc, f"the progress table {progress.table}")) from None
        wrong = sorted(
            (key, rows, committed.get(key, 0))
            for key, rows in {**dict.fromkeys(committed, 0), **expected}.items()
            if committed.get(key, 0) != rows
        )
        if wrong:
            details = "; ".join(f"partition {partition}: {found} rows committed, {rows} now"
                                for (_, partition), rows, found in wrong)  # fmt: skip
            raise JdbcWriteError(
                f"{FORMAT}: batch {batch_id} was re-executed with other rows per partition than it first "
                f"committed ({details}): the rows that moved to another partition were written again, so "
                f"{self.plan.target} may hold some rows twice. Exactly-once needs a re-executed batch to bring each "
                "partition the same rows (it does not when the source's partition count or a repartition changed "
                "before the restart, or the input is not deterministic; see docs/jdbc.md). The batch fails each time "
                f"it runs until its progress rows are deleted (DELETE FROM {progress.table} WHERE sink_id = "
                f"'{sink_ids[0]}' AND batch_id = {batch_id}), after the table is checked"
            )
