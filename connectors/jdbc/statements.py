"""How a chunk of rows (an Arrow table) reaches PostgreSQL: COPY, multi-row INSERT/upsert, custom SQL.

Each statement is built once on the driver (identifiers quoted by psycopg2.sql) and pickled to
the tasks as plain SQL text; values are only ever sent as COPY data or bound parameters.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Protocol

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
from pyspark.sql.types import StructType

from connectors.core.json_text import json_texts
from connectors.core.texts import TEXT
from connectors.jdbc import FORMAT, binary
from connectors.jdbc.options import JdbcSinkOptions, WriteMode
from connectors.jdbc.table import (
    PgTable,
    check_columns,
    create_table,
    column_base_types,
    load_table,
    match_columns,
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
    """Rows of Python values psycopg2 can bind: structs and maps become their JSON text, as Spark's
    ``to_json`` writes it with every digit kept (connectors.core.json_text), in arrays each element."""
    columns = []
    for name, column in zip(table.column_names, table.columns):
        column = column.combine_chunks()
        kind = column.type
        if _is_json(kind):
            values = _json_values(column)
        elif (pa.types.is_list(kind) or pa.types.is_large_list(kind)) and _is_json(kind.value_type):
            # ARRAY['{...}', ...]: text[], which the statement casts to the column's json[] or jsonb[]
            texts, at, values = _json_values(column.flatten()), 0, []
            for length in pc.list_value_length(column).to_pylist():
                values.append(None if length is None else texts[at:at + length])
                at += length or 0
        else:
            try:
                values = column.to_pylist()
            except (OverflowError, ValueError) as exc:  # a date or timestamp outside years 1-9999
                raise BadValue(f"input column '{name}' holds a value Python cannot represent ({exc}): only COPY "
                               "(append without binary, array, struct or map columns) writes years past 9999 or BC") from None
        columns.append(values)
    return list(zip(*columns))


def _is_json(arrow_type: pa.DataType) -> bool:
    return pa.types.is_struct(arrow_type) or pa.types.is_map(arrow_type)


def _json_values(array: pa.Array) -> list[str | None]:
    """The JSON text of each value; None (SQL NULL) for a null."""
    return pc.if_else(array.is_valid(), json_texts(array), pa.scalar(None, TEXT)).to_pylist()


@dataclasses.dataclass(frozen=True)
class Slot:
    """Where a statement puts a value, to name a value the server refuses."""

    label: str  # "input column 'n'", "parameter :n"
    index: int  # of the value in the row (to_rows)
    type: str | None  # the SQL type the value is assigned to, as format_type prints it; None: unknown
    placeholder: str = "%s"  # "%s::jsonb[]" for an array: ARRAY['{}'] is a text[], which only casts explicitly


@dataclasses.dataclass(frozen=True)
class InsertStatement:
    """Multi-row ``INSERT ... VALUES (...), (...) [ON CONFLICT ...]``, one round trip per chunk.

    With ``key_indexes`` (an upsert) only the last row of each key in a chunk is sent: one
    statement may not update the same row twice, and the last row is what a sequence of
    single-row upserts would leave.
    """

    sql: str  # with one VALUES %s placeholder
    slots: tuple[Slot, ...]  # one per column, in the order of the VALUES
    key_indexes: tuple[int, ...] = ()

    def send(self, cursor, chunks: Iterable[pa.Table]) -> None:
        from psycopg2.extras import execute_values

        template = f"({', '.join(slot.placeholder for slot in self.slots)})"
        for chunk in chunks:
            rows = to_rows(chunk)
            sent = last_per_key(rows, self.key_indexes) if self.key_indexes else rows
            with _naming_nul(chunk), _naming_refused(cursor, self.slots, sent, rows):
                execute_values(cursor, self.sql, sent, template, page_size=len(sent))


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
    slots: tuple[Slot, ...] = ()  # each parameter once, typed as the server infers it (without a typmod)

    def send(self, cursor, chunks: Iterable[pa.Table]) -> None:
        from psycopg2.extras import execute_batch

        for chunk in chunks:
            rows = to_rows(chunk)
            with _naming_nul(chunk), _naming_refused(cursor, self.slots, rows, rows):
                execute_batch(cursor, self.sql, [tuple(row[i] for i in self.parameter_indexes) for row in rows],
                              page_size=self.page_size)  # fmt: skip


@contextlib.contextmanager
def _naming_refused(cursor, slots: Sequence[Slot], sent: list[tuple], rows: list[tuple]) -> Iterator[None]:
    """A value the server refuses (SQLSTATE class 22) is named by its column and row of the chunk, as COPY names it.

    The server's error names neither, so only once it came (the transaction is lost anyway) each column's
    ``sent`` values are assigned to its type, by row halves, until the one failing as the server did is found.
    """
    import psycopg2

    try:
        yield
    except psycopg2.DataError as exc:
        bad = _refused(cursor, slots, sent, rows, exc)
        if bad is None:
            raise
        raise bad from exc


def _refused(cursor, slots: Sequence[Slot], sent: list[tuple], rows: list[tuple], error) -> BadValue | None:
    """The value of ``sent`` failing with ``error``'s SQLSTATE and message, or None; rolls back the transaction.

    Each value goes into a temporary table's column of the slot's type: the statement's assignment casts and
    typmods (a CAST to varchar(3) would cut a longer value, not fail) without the target's constraints, triggers
    or privileges. A probe's own failure (a lost connection, a domain refusing NULL) gives None.
    """
    import psycopg2

    typed = [slot for slot in slots if slot.type is not None]
    try:
        cursor.connection.rollback()
        if not typed:
            return None
        cursor.execute("; ".join(f"CREATE TEMPORARY TABLE connectors_jdbc_probe{i} (v {slot.type}) ON COMMIT DROP"
                                 for i, slot in enumerate(typed)))  # fmt: skip
        for i, slot in enumerate(typed):
            insert = f"SAVEPOINT connectors_jdbc_probe; INSERT INTO pg_temp.connectors_jdbc_probe{i} (v) VALUES %s"
            values = [(row[slot.index],) for row in sent]
            found = _first_refused(cursor, insert, f"({slot.placeholder})", values)
            if found is None:
                continue
            position, refusal = found
            if (refusal.pgcode, refusal.diag.message_primary) == (error.pgcode, error.diag.message_primary):
                row = next(n for n, candidate in enumerate(rows) if candidate is sent[position]) + 1
                return _bad_value(slot, cursor.mogrify("%s", values[position]).decode(), row, refusal)
        return None
    except psycopg2.Error:
        return None
    finally:
        with contextlib.suppress(psycopg2.Error):
            cursor.connection.rollback()


def _bad_value(slot: Slot, value: str, row: int, refusal) -> BadValue:
    """``value`` (as sent, SQL) named by its slot and row, with the server's message and detail."""
    text = f"{slot.label} value {value[:60]}{'...' if len(value) > 60 else ''} (row {row} of the chunk) does not fit "
    text += f"{slot.type}: {refusal.diag.message_primary.strip().rstrip('.')}"
    return BadValue(text + (f". {refusal.diag.message_detail.strip()}" if refusal.diag.message_detail else ""))


def _first_refused(cursor, insert: str, template: str, values: list[tuple]) -> tuple[int, Exception] | None:
    """The position of the first of ``values`` that ``insert`` refuses and its error, or None: all values, then
    halves, so a chunk of n rows costs about log2(n) round trips."""
    if _refusal(cursor, insert, template, values) is None:
        return None
    low, high = 0, len(values)
    while high - low > 1:
        middle = (low + high) // 2
        if _refusal(cursor, insert, template, values[low:middle]) is None:
            low = middle
        else:
            high = middle
    refusal = _refusal(cursor, insert, template, values[low:high])
    return None if refusal is None else (low, refusal)


def _refusal(cursor, insert: str, template: str, values: list[tuple]) -> Exception | None:
    """The data error ``insert`` of ``values`` fails with (rolled back to its savepoint), or None."""
    import psycopg2
    from psycopg2.extras import execute_values

    try:
        execute_values(cursor, insert, values, template, page_size=len(values))
    except psycopg2.DataError as exc:
        cursor.execute("ROLLBACK TO SAVEPOINT connectors_jdbc_probe")
        return exc
    return None


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


def _load(config: JdbcSinkOptions, schema: StructType, cursor) -> PgTable:
    """The target table, created first if it is missing (committed at once, as Spark's jdbc writer
    creates it before it writes)."""
    parts = config.table_parts()
    table = load_table(cursor, parts)
    if table is not None:
        return table
    if config.mode is WriteMode.UPSERT and not config.key_columns:
        raise config.error("dbtable", "no such table: give keyColumns to have it created with them as its primary key, "
                                      "or create it first (the search_path decides unqualified names)")
    column_types = config.column_types
    mapping, unmatched = match_columns(list(column_types), schema.names)
    if unmatched:
        raise config.error("createTableColumnTypes", f"no input column {unmatched[0]!r} (the input has {', '.join(schema.names)})")
    keys, missing = match_columns(list(config.key_columns or ()), schema.names)
    if missing:
        raise config.error("keyColumns", f"no input column {missing[0]!r} to be the primary key of the table created")
    import psycopg2

    try:
        create_table(cursor, parts, schema, {mapping[name]: kind for name, kind in column_types.items()},
                     tuple(keys.values()), config.create_table_options)
    except ValueError as exc:
        raise config.error("dbtable", f"cannot create the missing table: {exc}") from None
    except psycopg2.Error as exc:  # e.g. a type or an option the server does not know
        raise config.error("dbtable", f"creating the missing table failed: {(exc.diag.message_primary or str(exc)).strip()} "
                                      "(createTableColumnTypes and createTableOptions go into its CREATE TABLE)") from None
    cursor.connection.commit()
    return load_table(cursor, parts)  # type: ignore[return-value]


def _table_statement(config: JdbcSinkOptions, schema: StructType, cursor) -> tuple[Statement, str]:
    from psycopg2 import sql

    table = _load(config, schema, cursor)
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
        return InsertStatement(insert.as_string(cursor), _slots(table, schema, columns)), name
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
    slots = _slots(table, schema, columns)
    return InsertStatement(upsert.as_string(cursor), slots, tuple(columns.index(k) for k in keys)), name


def _slots(table: PgTable, schema: StructType, columns: list[str]) -> tuple[Slot, ...]:
    by_name = {column.name: column for column in table.columns}
    return tuple(
        Slot(f"input column '{name}'", index, by_name[column].type_display,
             f"%s::{by_name[column].base_display.replace('%', '%%')}" if by_name[column].category == "A" else "%s")
        for index, (name, column) in enumerate(zip(schema.names, columns))
    )  # fmt: skip


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
    try:  # let the server parse and plan it now rather than in the first task; its parameter types name bad values
        cursor.execute(f"PREPARE connectors_jdbc_check AS {parsed.numbered}\n; "  # \n: after a closing -- comment
                       "SELECT parameter_types::text[] FROM pg_prepared_statements "
                       "WHERE name = 'connectors_jdbc_check'")  # fmt: skip
    except psycopg2.Error as exc:
        raise config.error("sql", f"PostgreSQL rejects the statement: {(exc.diag.message_primary or str(exc)).strip()}") from None
    (types,) = cursor.fetchone()
    cursor.execute("DEALLOCATE connectors_jdbc_check")
    indexes = tuple(schema.names.index(mapping[name]) for name in parsed.names)
    slots = tuple(Slot(f"parameter :{name}", schema.names.index(mapping[name]), type_)
                  for name, type_ in zip(parsed.distinct, types))  # fmt: skip
    return CustomStatement(parsed.psycopg, indexes, config.batch_size, slots)
