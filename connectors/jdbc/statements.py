"""How a chunk of rows (an Arrow table) reaches PostgreSQL: COPY, multi-row INSERT/upsert, custom SQL.

Each statement is built once on the driver (identifiers quoted by psycopg2.sql) and pickled to
the tasks as plain SQL text; values are only ever sent as COPY data or bound parameters.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import datetime as dt
import decimal
import hashlib
import json
import math
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Protocol

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
from pyspark.sql.types import StructType

from connectors.jdbc import FORMAT, binary
from connectors.jdbc.options import JdbcSinkOptions, WriteMode
from connectors.jdbc.table import (
    PgTable,
    check_columns,
    column_base_types,
    load_table,
    match_columns,
    parse_table_name,
)
from connectors.jdbc.types import binary_format, csv_copyable

_CSV = pa_csv.WriteOptions(include_header=False, quoting_style="all_valid")


class Statement(Protocol):
    def send(self, cursor, chunks: Iterable[pa.Table]) -> None:
        """Send the rows of ``chunks`` (each at most ``batchSize`` rows) in the cursor's open transaction."""


class TableChanged(RuntimeError):
    """The table's column types are no longer those the binary COPY was planned for."""


class BadValue(ValueError):
    """A value that cannot be sent, named by its input column."""


@dataclasses.dataclass(frozen=True)
class CopyStatement:
    """Append with ``COPY ... FROM STDIN``: Arrow renders the rows in C++.

    In PostgreSQL's binary format when every column has one (binary.py: the server then parses
    no text, docs/jdbc.md), else as CSV, where every non-null value is quoted
    and nulls are not, which is how COPY tells NULL from ''.

    One COPY streams every chunk: the server parses chunk n while Arrow renders chunk n+1,
    where a COPY per chunk would wait for each to finish.
    """

    sql: str  # COPY ... FROM STDIN WITH (FORMAT csv | binary)
    binary_formats: tuple[str, ...] = ()  # FORMAT binary: each column's encoding (types.binary_format)
    table: str = ""  # FORMAT binary: the quoted table name
    base_types: tuple[tuple[str, str], ...] = ()  # FORMAT binary: (column, PostgreSQL type) encoded for

    def send(self, cursor, chunks: Iterable[pa.Table]) -> None:
        import psycopg2

        if self.binary_formats:
            self._check_types(cursor)
            stream = _CopyStream(iter(chunks), self._render_binary, binary.HEADER, binary.TRAILER)
        else:
            stream = _CopyStream(iter(chunks), _render_csv)
        try:
            cursor.copy_expert(self.sql, stream)
        except psycopg2.Error as exc:
            if stream.error is not None:  # psycopg2 reports a failing read() as a cancelled COPY
                raise stream.error from None
            bad = _nul_value(stream.sent) if exc.pgcode == "22021" else None  # CSV's error names no column
            if bad is not None:
                raise bad from exc
            raise

    def _render_binary(self, chunk: pa.Table) -> bytes:
        return binary.render(chunk, self.binary_formats)

    def _check_types(self, cursor) -> None:
        """Fail unless the columns still have the types the binary values are encoded for.

        An int8 read as a float8 would be a wrong number, not an error. Checked under the lock
        COPY takes anyway (ALTER TABLE waits for it), so the types cannot change before COPY runs.
        """
        cursor.execute(f"LOCK TABLE {self.table} IN ROW EXCLUSIVE MODE")
        found = column_base_types(cursor, self.table, [column for column, _ in self.base_types])
        changed = [
            f'column "{column}" is {found.get(column, "gone")}, was {planned}'
            for column, planned in self.base_types
            if found.get(column) != planned
        ]
        if changed:
            raise TableChanged(
                f"{FORMAT}: table {self.table} changed since the query started ({'; '.join(changed)}): restart the query"
            )


class _CopyStream:
    """The file object COPY reads: ``header``, each ``read()`` one chunk rendered, ``trailer``, then b""."""

    def __init__(self, chunks: Iterator[pa.Table], render: Callable[[pa.Table], bytes], header=b"", trailer=b""):
        self.chunks, self.render = chunks, render
        self.header, self.trailer = header, trailer
        self.error: BaseException | None = None
        self.sent: list[pa.Table] = []  # to name a value the server refuses

    def read(self, size: int = -1) -> bytes:
        try:
            chunk = next(self.chunks, None)
            if chunk is None:
                data, self.header, self.trailer = self.header + self.trailer, b"", b""
                return data
            data, self.header = self.header + self.render(chunk), b""
            self.sent.append(chunk)
            return data
        except BaseException as exc:
            self.error = exc
            raise


def _render_csv(chunk: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pa_csv.write_csv(_csv_ready(chunk), sink, _CSV)
    return sink.getvalue().to_pybytes()


def _csv_ready(chunk: pa.Table) -> pa.Table:
    """``chunk`` with zoned timestamps as their UTC wall time (the same numbers, no zone) and
    floats as doubles.

    Arrow formats zoned timestamps through the time zone database, far slower than plain ones;
    the session's TimeZone is UTC, so the server reads the wall time as the same instant. A
    float's shortest text is another number as a double or numeric (0.1f is not 0.1): its double
    text is the float's exact value, as the binary and INSERT paths send it, and reads back as
    the same float into ``real``.
    """
    for index, field in enumerate(chunk.schema):
        if pa.types.is_timestamp(field.type) and field.type.tz is not None:
            chunk = chunk.set_column(index, field.name, chunk.column(index).cast(pa.timestamp(field.type.unit)))
        elif pa.types.is_float32(field.type):
            chunk = chunk.set_column(index, field.name, chunk.column(index).cast(pa.float64()))
    return chunk


def _nul_value(chunks: Iterable[pa.Table]) -> BadValue | None:
    """The first string holding a NUL character, which PostgreSQL's text types cannot store."""
    for chunk in chunks:
        for name, column in zip(chunk.column_names, chunk.columns):
            if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
                found = pc.index(pc.match_substring(column, "\x00"), True).as_py()
                if found >= 0:
                    value = column[found].as_py()
                    return BadValue(f"input column '{name}' holds a NUL character (0x00), which PostgreSQL text "
                                    f"cannot store: {value[:40]!r}{'...' if len(value) > 40 else ''}")  # fmt: skip
    return None


@contextlib.contextmanager
def _naming_nul(chunk: pa.Table) -> Iterator[None]:
    """psycopg2 refuses a string with a NUL without naming it: name its column and value."""
    try:
        yield
    except ValueError as exc:
        bad = _nul_value([chunk])
        if bad is None:
            raise
        raise bad from exc


def to_rows(table: pa.Table) -> list[tuple]:
    """Rows of Python values psycopg2 can bind: structs and maps become JSON."""
    from psycopg2.extras import Json

    columns = []
    for name, column in zip(table.column_names, table.columns):
        nested = pa.types.is_struct(column.type) or pa.types.is_map(column.type)
        try:
            values = column.to_pylist(maps_as_pydicts="strict" if nested else None)  # maps within structs too
        except (OverflowError, ValueError) as exc:  # a date or timestamp outside years 1-9999
            raise BadValue(f"input column '{name}' holds a value Python cannot represent ({exc}): only COPY (append "
                           "without binary, array, struct or map columns) writes years past 9999 or BC") from None
        if nested:
            values = [None if v is None else Json(v, _json) for v in values]
        columns.append(values)
    return list(zip(*columns))


def _json(value) -> str:
    """A struct's or map's Python value as JSON, as Spark's ``to_json`` writes it (NaN and infinities
    as strings, binary in base64) but with every digit: decimals exact, timestamps to the microsecond."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_json(_json_key(k))}: {_json(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(map(_json, value)) + "]"
    if isinstance(value, float) and not math.isfinite(value):
        return '"NaN"' if math.isnan(value) else '"Infinity"' if value > 0 else '"-Infinity"'
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, dt.date):  # and datetime
        return json.dumps(value.isoformat())
    if isinstance(value, bytes):
        return json.dumps(base64.b64encode(value).decode())
    return json.dumps(value)


def _json_key(key) -> str:
    """A map key as a JSON object's name: its JSON text, unquoted."""
    return key if isinstance(key, str) else _json(key).strip('"')


@dataclasses.dataclass(frozen=True)
class InsertStatement:
    """Multi-row ``INSERT ... VALUES (...), (...) [ON CONFLICT ...]``, one round trip per chunk.

    With ``key_indexes`` (an upsert) only the last row of each key in a chunk is sent: one
    statement may not update the same row twice, and the last row is what a sequence of
    single-row upserts would leave.
    """

    sql: str  # with one VALUES %s placeholder
    key_indexes: tuple[int, ...] = ()

    def send(self, cursor, chunks: Iterable[pa.Table]) -> None:
        from psycopg2.extras import execute_values

        for chunk in chunks:
            rows = to_rows(chunk)
            if self.key_indexes:
                rows = last_per_key(rows, self.key_indexes)
            with _naming_nul(chunk):
                execute_values(cursor, self.sql, rows, page_size=len(rows))


def last_per_key(rows: list[tuple], key_indexes: Sequence[int]) -> list[tuple]:
    """The last row of each key, in input order; rows with a NULL key never conflict and all stay."""
    last: dict[object, int] = {}
    for position, row in enumerate(rows):
        key = tuple(row[i] for i in key_indexes)
        last[position if None in key else key] = position
    if len(last) == len(rows):
        return rows
    return [rows[position] for position in sorted(last.values())]


@dataclasses.dataclass(frozen=True)
class CustomStatement:
    """The user's DML with ``:column`` parameters, run once per row, batched in round trips."""

    sql: str  # psycopg2 style, one %s per parameter occurrence
    parameter_indexes: tuple[int, ...]  # input column of each %s
    page_size: int

    def send(self, cursor, chunks: Iterable[pa.Table]) -> None:
        from psycopg2.extras import execute_batch

        for chunk in chunks:
            rows = [tuple(row[i] for i in self.parameter_indexes) for row in to_rows(chunk)]
            with _naming_nul(chunk):
                execute_batch(cursor, self.sql, rows, page_size=self.page_size)


# ---------------------------------------------------------------------------------------------
# `:name` parameters in custom SQL. Literals, quoted identifiers, comments, dollar quotes and
# `::` casts are skipped; `%` is escaped for psycopg2.

_SQL_TOKENS = re.compile(
    r"""
      (?P<skip> [eE]'(?:[^'\\]|\\.|'')*'      # escape string
              | '(?:[^']|'')*'                 # string literal
              | "(?:[^"]|"")*"                 # quoted identifier
              | --[^\n]*                       # line comment
              | /\*.*?\*/                      # block comment
              | \$(?P<tag>(?:[A-Za-z_]\w*)?)\$.*?\$(?P=tag)\$   # dollar quoting
              | ::                             # cast
              | \w+ )                          # words (so E' is only a prefix at a word start)
    | :(?P<name>[A-Za-z_]\w*)
    | (?P<percent>%)
    """,
    re.S | re.X,
)


@dataclasses.dataclass(frozen=True)
class ParsedSql:
    psycopg: str  # %s placeholders, % escaped: for execution
    numbered: str  # $1, $2 ... placeholders: for PREPARE, to check the statement at query start
    names: tuple[str, ...]  # the parameter name of each %s, in order
    distinct: tuple[str, ...]  # each name once, in the order of $1, $2 ...


def parse_named_parameters(text: str) -> ParsedSql:
    names: list[str] = []
    distinct: list[str] = []

    def token(match: re.Match, numbered: bool) -> str:
        if match.group("skip") is not None:
            return match.group(0) if numbered else match.group(0).replace("%", "%%")
        if match.group("percent") is not None:
            return "%" if numbered else "%%"
        name = match.group("name")
        if numbered:
            if name not in distinct:
                distinct.append(name)
            return f"${distinct.index(name) + 1}"
        names.append(name)
        return "%s"

    psycopg = _SQL_TOKENS.sub(lambda m: token(m, False), text)
    numbered = _SQL_TOKENS.sub(lambda m: token(m, True), text)
    return ParsedSql(psycopg, numbered, tuple(names), tuple(distinct))


# ---------------------------------------------------------------------------------------------
# Planning: the statement for the options and the input, checked against the server once, when
# the query starts.


def plan_statement(config: JdbcSinkOptions, schema: StructType, cursor) -> tuple[Statement, str]:
    """The statement that writes ``schema``'s rows as the options say, and the target's name."""
    if config.sql is not None:
        return _custom_statement(config, schema, cursor), "sql:" + hashlib.sha256(config.sql.encode()).hexdigest()[:16]
    return _table_statement(config, schema, cursor)


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
        base_types = {column.name: column.base_type for column in table.columns}
        if all(csv_copyable(f.dataType, base_types[c]) for f, c in zip(schema.fields, columns)):
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
