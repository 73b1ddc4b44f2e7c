"""How a chunk of rows (an Arrow table) reaches PostgreSQL: COPY, multi-row INSERT/upsert, custom SQL.

Each statement is built once on the driver (identifiers quoted by psycopg2.sql) and pickled to
the tasks as plain SQL text; values are only ever sent as COPY data or bound parameters.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Protocol

import pyarrow as pa
import pyarrow.csv as pa_csv
from pyspark.sql.types import (
    BooleanType,
    ByteType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from connectors.jdbc import binary
from connectors.jdbc.options import SOURCE
from connectors.jdbc.table import column_base_types

_CSV = pa_csv.WriteOptions(include_header=False, quoting_style="all_valid")


class Statement(Protocol):
    def send(self, cursor, chunks: Iterable[pa.Table]) -> None:
        """Send the rows of ``chunks`` (each at most ``batchSize`` rows) in the cursor's open transaction."""


_COPYABLE = (
    BooleanType, ByteType, ShortType, IntegerType, LongType, FloatType, DoubleType, DecimalType,
    StringType, DateType, TimestampType, TimestampNTZType,
)  # fmt: skip


def copyable(schema: StructType) -> bool:
    """Whether Arrow's CSV writer renders every column as PostgreSQL's COPY reads it."""
    return all(isinstance(field.dataType, _COPYABLE) for field in schema.fields)


class TableChanged(RuntimeError):
    """The table's column types are no longer those the binary COPY was planned for."""


@dataclasses.dataclass(frozen=True)
class CopyStatement:
    """Append with ``COPY ... FROM STDIN``: Arrow renders the rows in C++.

    In PostgreSQL's binary format when every column has one (binary.py: the server then parses
    no text, 2-3x less of its CPU than CSV), else as CSV, where every non-null value is quoted
    and nulls are not, which is how COPY tells NULL from ''.

    One COPY streams every chunk: the server parses chunk n while Arrow renders chunk n+1,
    where a COPY per chunk would wait for each to finish.
    """

    sql: str  # COPY ... FROM STDIN WITH (FORMAT csv | binary)
    binary_formats: tuple[str, ...] = ()  # FORMAT binary: each column's encoding (binary.binary_format)
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
        except psycopg2.Error:
            if stream.error is not None:  # psycopg2 reports a failing read() as a cancelled COPY
                raise stream.error from None
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
                f"{SOURCE}: table {self.table} changed since the query started ({'; '.join(changed)}): restart the query"
            )


class _CopyStream:
    """The file object COPY reads: ``header``, each ``read()`` one chunk rendered, ``trailer``, then b""."""

    def __init__(self, chunks: Iterator[pa.Table], render: Callable[[pa.Table], bytes], header=b"", trailer=b""):
        self.chunks, self.render = chunks, render
        self.header, self.trailer = header, trailer
        self.error: BaseException | None = None

    def read(self, size: int = -1) -> bytes:
        try:
            chunk = next(self.chunks, None)
            if chunk is None:
                data, self.header, self.trailer = self.header + self.trailer, b"", b""
                return data
            data, self.header = self.header + self.render(chunk), b""
            return data
        except BaseException as exc:
            self.error = exc
            raise


def _render_csv(chunk: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pa_csv.write_csv(_utc_wall_time(chunk), sink, _CSV)
    return sink.getvalue().to_pybytes()


def _utc_wall_time(chunk: pa.Table) -> pa.Table:
    """``chunk`` with zoned timestamps as their UTC wall time (the same numbers, no zone).

    Arrow formats zoned timestamps through the time zone database, 20x slower than plain ones;
    the session's TimeZone is UTC, so the server reads the wall time as the same instant.
    """
    for index, field in enumerate(chunk.schema):
        if pa.types.is_timestamp(field.type) and field.type.tz is not None:
            chunk = chunk.set_column(index, field.name, chunk.column(index).cast(pa.timestamp(field.type.unit)))
    return chunk


def to_rows(table: pa.Table) -> list[tuple]:
    """Rows of Python values psycopg2 can bind: structs and maps become JSON."""
    from psycopg2.extras import Json

    columns = []
    for column in table.columns:
        values = column.to_pylist()
        if pa.types.is_struct(column.type):
            values = [None if v is None else Json(v) for v in values]
        elif pa.types.is_map(column.type):
            values = [None if v is None else Json(dict(v)) for v in values]
        columns.append(values)
    return list(zip(*columns))


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

