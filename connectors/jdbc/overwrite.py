"""Batch overwrite (``df.write.mode("overwrite")``), atomic where Spark's is not.

Spark's jdbc writer drops the table (or, with ``truncate=true``, empties it) before its tasks
insert, so a job that fails half way leaves the table empty or half written. Here the tasks write
into a staging table beside the target, and the job's commit replaces the target in one
transaction; until then readers see the old rows, and an aborted job only drops the staging table.

- ``truncate=false`` (Spark's default): the target is dropped and the staging table, created from
  the DataFrame's schema as a missing table is (``createTableColumnTypes``,
  ``createTableOptions``), takes its name: the table is recreated, as Spark recreates it.
- ``truncate=true``: the table stays, with its indexes, constraints and grants; the staging table
  is ``LIKE`` it, and the commit runs ``TRUNCATE`` and ``INSERT ... SELECT`` (the rows are copied
  once more, and the table's constraints are checked then). A missing table is created as above.
  ``cascadeTruncate=true`` makes it ``TRUNCATE ... CASCADE``, as Spark's PostgreSQL dialect does:
  the tables whose foreign keys reference the target are emptied too, in the same transaction.

A job killed before its commit leaves its staging table behind: the next overwrite of the same
target drops those whose job is dead (their lease, :mod:`connectors.jdbc.lease`, is free).
"""

from __future__ import annotations

import dataclasses
import logging
import uuid

from connectors.jdbc import FORMAT
from connectors.jdbc.lease import Lease, lock_key
from connectors.jdbc.options import JdbcSinkOptions, WriteMode
from connectors.jdbc.table import check_columns, create_table, load_table

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Overwrite:
    target: tuple[str, str]  # (schema, name); the table may not exist yet
    staging: tuple[str, str]  # in the same schema, so a rename moves it into place
    truncate: bool  # keep the target and move the rows (else replace the table)
    cascade: bool  # truncate: also empty the tables referencing the target
    columns: tuple[str, ...]  # truncate: the columns the rows fill

    def commit(self, connection) -> None:
        """Replace the target's rows with the staging table's, in one transaction."""
        from psycopg2 import sql

        target, staging = sql.Identifier(*self.target), sql.Identifier(*self.staging)
        with connection.cursor() as cursor:
            if self.truncate:
                columns = sql.SQL(", ").join(map(sql.Identifier, self.columns))
                cascade = sql.SQL(" CASCADE" if self.cascade else "")
                cursor.execute(sql.SQL("TRUNCATE TABLE ONLY {0}{3}; INSERT INTO {0} ({1}) SELECT {1} FROM {2}; DROP TABLE {2}")
                               .format(target, columns, staging, cascade))  # fmt: skip
            else:
                # without the staging table's mark, or a sweep would take the target for one
                cursor.execute(sql.SQL("DROP TABLE IF EXISTS {0}; ALTER TABLE {1} RENAME TO {2}; "
                                       "COMMENT ON TABLE {0} IS NULL")
                               .format(target, staging, sql.Identifier(self.target[1])))  # fmt: skip
        connection.commit()

    def abort(self, connection) -> None:
        from psycopg2 import sql

        connection.rollback()
        with connection.cursor() as cursor:
            cursor.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(*self.staging)))
        connection.commit()


def stage(config: JdbcSinkOptions, schema, cursor) -> tuple[Overwrite, JdbcSinkOptions]:
    """Create the staging table (committed); returns the overwrite and the options that write into it."""
    from psycopg2 import sql

    if config.sql is not None or config.mode is not WriteMode.APPEND:
        raise config.error("mode" if config.sql is None else "sql",
                           "save mode overwrite takes an appending write to a dbtable (not upsert, not sql)")
    parts = config.table_parts()
    existing = load_table(cursor, parts)
    if existing is not None:
        target = existing.qualified
    else:
        cursor.execute("SELECT current_schema()")
        target = (parts[0] if len(parts) == 2 else cursor.fetchone()[0], parts[-1])
    # PostgreSQL cuts names at 63 bytes: the target's name, cut, and a tag unique to this write (its lock key)
    staging = (target[0], f"{target[1].encode()[:39].decode(errors='ignore')}__overwrite_{uuid.uuid4().hex[:12]}")
    truncate = config.truncate and existing is not None
    columns: list[str] = []
    if truncate:
        columns, problems = check_columns(existing, schema, require_all=True)
        if problems:  # named against the target, before any staging table exists
            raise config.error("dbtable", "the input does not fit the table: " + "; ".join(problems))
    mark = f"{FORMAT}: staging table of an overwrite of {sql.Identifier(*target).as_string(cursor)}"
    _sweep(cursor, target, mark)
    lease = Lease.start(config.connection, sql.Identifier(*staging).as_string(cursor), lock_key(staging[1]))
    try:
        if truncate:
            cursor.execute(sql.SQL("CREATE TABLE {} (LIKE {} INCLUDING DEFAULTS INCLUDING IDENTITY INCLUDING GENERATED)")
                           .format(sql.Identifier(*staging), sql.Identifier(*target)))  # fmt: skip
        else:
            try:
                create_table(cursor, staging, schema, config.column_types, (), config.create_table_options)
            except ValueError as exc:
                raise config.error("dbtable", f"cannot create the table to overwrite with: {exc}") from None
        if lease is not None:
            cursor.execute(sql.SQL("COMMENT ON TABLE {} IS {}").format(sql.Identifier(*staging), sql.Literal(mark)))
        cursor.connection.commit()
    except BaseException:
        if lease is not None:
            lease.give_up()  # the table was not made (the caller rolls back or closes the connection)
        raise
    if lease is not None:
        lease.keep()
    else:
        log.info("%s: no driver JVM to watch among this process's ancestors: %s is not swept if the job dies",
                 FORMAT, staging)
    log.info("%s: overwriting %s: the rows go to %s until the job commits", FORMAT, target, staging)
    into = dataclasses.replace(config, dbtable=sql.Identifier(*staging).as_string(cursor))
    return Overwrite(target, staging, truncate, config.cascade_truncate, tuple(columns)), into


def _sweep(cursor, target: tuple[str, str], mark: str) -> None:
    """Drop the staging tables of ``target`` left by dead jobs: those whose lease is free. Each is
    dropped holding its lock, so two sweeps never both drop it; one that cannot be dropped (another
    owner) is left, with a warning."""
    import psycopg2
    from psycopg2 import sql

    cursor.execute("SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                   "WHERE n.nspname = %s AND c.relkind = 'r' AND obj_description(c.oid, 'pg_class') = %s",
                   (target[0], mark))  # fmt: skip
    for name in [row[0] for row in cursor.fetchall() if lock_key(row[0]) is not None]:
        try:
            cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", (lock_key(name),))
            if cursor.fetchone()[0]:
                cursor.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(target[0], name)))
                log.info("%s: dropped %s, left by an overwrite of %s whose job died before its commit",
                         FORMAT, name, target)
            cursor.connection.commit()
        except psycopg2.Error as exc:
            cursor.connection.rollback()
            log.warning("%s: could not drop %s, left by an overwrite of %s whose job died: %s",
                        FORMAT, name, target, str(exc).strip())
