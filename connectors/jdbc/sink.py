"""The write side of ``connectors.jdbc`` and its foreachBatch callable :class:`JdbcSink`.

``writer()`` / ``stream_writer()`` run on the driver when a query (or micro-batch) starts: they
parse the options, connect, check the input against the table, build the statement and create
the progress table, so every configuration mistake fails there with a clear message. Tasks then
run :class:`~connectors.jdbc.writer.PartitionWriter`; ``commit()`` on the driver prunes the
progress rows no re-execution can need any more.

Spark calls ``stream_writer()`` again for every micro-batch, and once more to get an instance to
``commit()`` on, in driver-side Python workers that it reuses: planning borrows the worker's idle
connection, so the check costs a few round trips rather than a connect each time. The plan itself
is not cached: a query restarted after its table was fixed must see the table as it is now.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import Iterator, Mapping

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter
from pyspark.sql.types import StructType

from connectors.core.commit import current_task
from connectors.core.guarantees import DeliveryGuarantee
from connectors.core.options import OptionError, Options
from connectors.core.sink import ForeachBatchSink
from connectors.jdbc.binary import binary_format
from connectors.jdbc.datasource import JdbcDataSource
from connectors.jdbc.options import SOURCE, JdbcConnectionOptions, JdbcExecutionOptions, JdbcSinkOptions, WriteMode
from connectors.jdbc.progress import ProgressKey, ProgressTable
from connectors.jdbc.statements import (
    CopyStatement,
    CustomStatement,
    InsertStatement,
    Statement,
    copyable,
    parse_named_parameters,
)
from connectors.jdbc.table import PgTable, check_columns, load_table, match_columns, parse_table_name
from connectors.jdbc.writer import JdbcCommitMessage, PartitionWriter, WritePlan, borrow, connect, release

log = logging.getLogger(__name__)


def writer(options: Mapping[str, str], schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
    return JdbcBatchWriter(*plan_write(options, schema, overwrite))


def stream_writer(options: Mapping[str, str], schema: StructType, overwrite: bool) -> DataSourceStreamArrowWriter:
    return JdbcStreamWriter(*plan_write(options, schema, overwrite))


def plan_write(options: Mapping[str, str], schema: StructType, overwrite: bool) -> tuple[JdbcSinkOptions, WritePlan, str]:
    """Validate everything against the server; returns the options, the plan, and the target's name."""
    config = JdbcSinkOptions.from_options(options)
    if overwrite:
        raise OptionError(SOURCE, "mode", "overwrite", "only appending writes are supported (save/output mode append)")
    import psycopg2

    try:
        connection = borrow(config.connection)
    except psycopg2.Error as exc:
        raise config.error("url", f"cannot connect: {str(exc).strip()}") from None
    try:
        with connection.cursor() as cursor:
            if config.sql is not None:
                statement = _custom_statement(config, schema, cursor)
                name = "sql:" + hashlib.sha256(config.sql.encode()).hexdigest()[:16]
            else:
                statement, name = _table_statement(config, schema, cursor)
        connection.rollback()
        progress = None
        if config.delivery_guarantee is DeliveryGuarantee.EXACTLY_ONCE:
            progress = ProgressTable(_quoted(config, "progressTable", config.progress_table, connection))
            progress.create(connection)
    finally:
        release(connection, config.connection)  # closed instead if a failed check left it unusable
    target = f"table {name}" if config.sql is None else "the custom sql statement"
    plan = WritePlan(config.connection, config.execution, statement, target, config.delivery_guarantee, progress)
    return config, plan, name


def _quoted(config: JdbcSinkOptions, option_name: str, text: str, connection) -> str:
    from psycopg2 import sql

    try:
        return sql.Identifier(*parse_table_name(text)).as_string(connection)
    except ValueError as exc:
        raise config.error(option_name, str(exc)) from None


def _load(config: JdbcSinkOptions, cursor) -> PgTable:
    try:
        parts = parse_table_name(config.dbtable or "")
    except ValueError as exc:
        raise config.error("dbtable", str(exc)) from None
    table = load_table(cursor, parts)
    if table is None:
        raise config.error("dbtable", "no such table (create it first; the search_path decides unqualified names)")
    return table


def _table_statement(config: JdbcSinkOptions, schema: StructType, cursor) -> tuple[Statement, str]:
    from psycopg2 import sql

    table = _load(config, cursor)
    columns, problems = check_columns(table, schema, require_all=True)
    if problems:
        raise config.error("dbtable", "the input does not fit the table: " + "; ".join(problems))
    target = sql.Identifier(*table.qualified)
    column_list = sql.SQL(", ").join(map(sql.Identifier, columns))
    name = target.as_string(cursor)
    if config.mode is WriteMode.APPEND:
        if copyable(schema):
            base_types = {column.name: column.base_type for column in table.columns}
            formats = tuple(binary_format(f.dataType, base_types[c]) for f, c in zip(schema.fields, columns))
            if all(formats):
                copy = sql.SQL("COPY {} ({}) FROM STDIN WITH (FORMAT binary)").format(target, column_list)
                planned = tuple((c, base_types[c]) for c in columns)
                return CopyStatement(copy.as_string(cursor), formats, name, planned), name  # type: ignore[arg-type]
            copy = sql.SQL("COPY {} ({}) FROM STDIN WITH (FORMAT csv)").format(target, column_list)
            return CopyStatement(copy.as_string(cursor)), name
        insert = sql.SQL("INSERT INTO {} ({}) VALUES %s").format(target, column_list)
        return InsertStatement(insert.as_string(cursor)), name
    keys = _upsert_keys(config, table, schema, columns)
    updates = [c for c in columns if c not in keys]
    action = (
        sql.SQL("DO UPDATE SET {}").format(
            sql.SQL(", ").join(sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(c)) for c in updates)
        )
        if updates
        else sql.SQL("DO NOTHING")
    )
    upsert = sql.SQL("INSERT INTO {} ({}) VALUES %s ON CONFLICT ({}) {}").format(
        target, column_list, sql.SQL(", ").join(map(sql.Identifier, keys)), action
    )
    return InsertStatement(upsert.as_string(cursor), tuple(columns.index(k) for k in keys)), name


def _upsert_keys(config: JdbcSinkOptions, table: PgTable, schema: StructType, columns: list[str]) -> list[str]:
    """The table column names of the upsert's conflict key, checked against a unique index."""
    if config.key_columns is None:
        if not table.primary_key:
            raise config.error("keyColumns", "required for upsert: the table has no primary key")
        wanted = list(table.primary_key)
        mapping, missing = match_columns(wanted, columns)
    else:
        wanted = list(config.key_columns)
        by_input, missing = match_columns(wanted, schema.names)
        mapping = {key: columns[schema.names.index(name)] for key, name in by_input.items()}
    if missing:
        raise config.error(
            "keyColumns", f"key column(s) {', '.join(missing)} not in the input (columns: {', '.join(schema.names)})"
        )
    keys = [mapping[key] for key in wanted]
    if frozenset(keys) not in table.unique_keys:
        raise config.error(
            "keyColumns", f"no primary key or unique index on exactly ({', '.join(keys)}), which ON CONFLICT needs"
        )
    return keys


def _custom_statement(config: JdbcSinkOptions, schema: StructType, cursor) -> Statement:
    import psycopg2

    parsed = parse_named_parameters(config.sql or "")
    mapping, unknown = match_columns(list(parsed.distinct), schema.names)
    if unknown:
        unknown_list, columns = ", ".join(":" + name for name in unknown), ", ".join(schema.names)
        raise config.error("sql", f"parameter(s) {unknown_list} name no input column (columns: {columns})")
    try:  # let the server parse and plan it now rather than in the first task
        cursor.execute(f"PREPARE connectors_jdbc_check AS {parsed.numbered}")
    except psycopg2.Error as exc:
        raise config.error("sql", f"PostgreSQL rejects the statement: {(exc.diag.message_primary or str(exc)).strip()}") from None
    cursor.execute("DEALLOCATE connectors_jdbc_check")
    indexes = tuple(schema.names.index(mapping[name]) for name in parsed.names)
    return CustomStatement(parsed.psycopg, indexes, config.batch_size)


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

    def _forget(self, messages: list[JdbcCommitMessage | None], before_batch: int | None) -> None:
        """Prune progress rows; a failure only leaves rows that the next commit prunes."""
        import psycopg2

        sink_ids = {m.key.sink_id for m in messages if m is not None and m.key is not None}
        if self.plan.progress is None or not sink_ids:
            return
        try:
            connection = borrow(self.plan.connection)
        except psycopg2.Error as exc:
            log.warning("%s: could not prune the progress table: %s", SOURCE, exc)
            return
        try:
            for sink_id in sink_ids:
                self.plan.progress.forget(connection, sink_id, before_batch)
        except psycopg2.Error as exc:
            log.warning("%s: could not prune the progress table: %s", SOURCE, exc)
        finally:
            release(connection, self.plan.connection)  # closed instead when the error broke it

    @staticmethod
    def _log(messages: list[JdbcCommitMessage | None], what: str) -> None:
        done = [m for m in messages if m is not None]
        log.info("%s: %s: %d rows written, %d partitions skipped as already committed",
                 SOURCE, what, sum(m.rows for m in done if not m.skipped), sum(m.skipped for m in done))


class JdbcBatchWriter(_JdbcWriter, DataSourceArrowWriter):
    """``df.write``: each partition in one transaction; progress rows guard task retries."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> JdbcCommitMessage:
        return self._write(iterator, 0, f"{self.sink_id or 'batch'}:{self.write_id}")

    def commit(self, messages: list[JdbcCommitMessage | None]) -> None:
        self._log(messages, "batch write committed")
        self._forget(messages, None)

    def abort(self, messages: list[JdbcCommitMessage | None]) -> None:
        self._log(messages, "batch write aborted (partitions already committed stay)")


class JdbcStreamWriter(_JdbcWriter, DataSourceStreamArrowWriter):
    """``df.writeStream``: progress rows keyed by (sink id, batch id, partition)."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> JdbcCommitMessage:
        task = current_task()
        if self.sink_id is not None:
            sink_id = self.sink_id
        elif task.query_id is not None:
            sink_id = f"{task.query_id}:{self.target_name}"
        else:  # foreachBatch called by hand: only task retries can be recognised
            sink_id = self.write_id
        return self._write(iterator, task.batch_id if task.batch_id is not None else 0, sink_id)

    def commit(self, messages: list[JdbcCommitMessage | None], batchId: int) -> None:
        self._log(messages, f"batch {batchId} committed")
        self._forget(messages, batchId)

    def abort(self, messages: list[JdbcCommitMessage | None], batchId: int) -> None:
        self._log(messages, f"batch {batchId} aborted (committed partitions are skipped when it runs again)")


class JdbcSink(ForeachBatchSink):
    """``df.writeStream.foreachBatch(JdbcSink(url=..., dbtable=...))``: the format's writer, same guarantees.

    Parameters
    ----------
    options : JdbcSinkOptions or mapping, optional
        All options at once.
    connection, execution : optional
        Flink-style :class:`JdbcConnectionOptions` / :class:`JdbcExecutionOptions`.
    **kwargs
        Options by their string names (``dbtable="t"``, ``batchSize=1000``); they win.
    """

    data_source = JdbcDataSource

    def __init__(
        self,
        options: Options | Mapping[str, object] | None = None,
        *,
        connection: JdbcConnectionOptions | None = None,
        execution: JdbcExecutionOptions | None = None,
        **kwargs: object,
    ):
        typed = {**(connection.to_options() if connection else {}), **(execution.to_options() if execution else {})}
        base = options.to_options() if isinstance(options, Options) else dict(options or {})
        super().__init__({**typed, **base}, **kwargs)

    def _validate(self) -> None:
        JdbcSinkOptions.from_options(self.options)

    def __repr__(self) -> str:
        return f"JdbcSink({JdbcSinkOptions.from_options(self.options)!r})"
