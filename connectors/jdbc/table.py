"""The target table as PostgreSQL's catalog describes it, and the check of the input against it.

Checked once when the query starts (on the driver), after creating the table if it is missing
(as Spark's jdbc writer does): the table exists, every input column has a
table column of a compatible type (names match exactly, else case-insensitively when that is
unambiguous), table columns the input lacks can be left out (nullable or with a default), and an
upsert's key columns carry a unique index. A mismatch fails with every problem listed.
"""

from __future__ import annotations

import dataclasses
import re

from pyspark.sql.types import StructType

from connectors.jdbc.types import accepts, created_type

_QUALIFIED_PART = re.compile(r'\s*(?:"((?:[^"]|"")+)"|([^".\s]+))\s*(\.|$)')


def parse_table_name(text: str) -> tuple[str, ...]:
    """``schema.table`` in SQL syntax -> its parts: unquoted parts fold to lower case, as in
    PostgreSQL, and ``"..."`` parts are kept verbatim (``""`` is a quote).

    Raises ValueError for anything else (so no SQL can ride in on the table name).
    """
    parts, position = [], 0
    while position < len(text):
        match = _QUALIFIED_PART.match(text, position)
        if not match:
            raise ValueError('expected table, schema.table or "Quoted Name"')
        quoted, plain, dot = match.groups()
        parts.append(quoted.replace('""', '"') if quoted is not None else plain.lower())
        position = match.end()
        if dot == "." and position == len(text):
            raise ValueError("ends with a dot")
    if not 1 <= len(parts) <= 2:
        raise ValueError('expected table, schema.table or "Quoted Name"')
    return tuple(parts)


@dataclasses.dataclass(frozen=True)
class PgColumn:
    name: str
    type_display: str  # as PostgreSQL prints it, e.g. "character varying(20)"
    base_display: str  # the base type (a domain's) without the typmod, e.g. "character varying[]"
    base_type: str  # pg_type.typname after resolving a domain, e.g. "varchar", "_int4"
    category: str  # pg_type.typcategory of the base type
    element_type: str | None  # for arrays
    element_category: str | None
    not_null: bool
    has_default: bool  # a default, an identity or a generated column
    generated: bool


@dataclasses.dataclass(frozen=True)
class PgTable:
    oid: int
    qualified: tuple[str, str]  # (schema, name), as stored in the catalog
    columns: tuple[PgColumn, ...]
    primary_key: tuple[str, ...]
    unique_keys: tuple[frozenset[str], ...]  # column sets of non-partial unique indexes


_COLUMNS = """
SELECT a.attname, format_type(a.atttypid, a.atttypmod), format_type(b.oid, NULL),
       b.typname, b.typcategory, e.typname, e.typcategory,
       a.attnotnull, a.atthasdef OR a.attidentity <> '' OR a.attgenerated <> '', a.attgenerated <> ''
FROM pg_attribute a
JOIN pg_type t ON t.oid = a.atttypid
JOIN pg_type b ON b.oid = CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE t.oid END
LEFT JOIN pg_type e ON e.oid = b.typelem AND b.typcategory = 'A'
WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum
"""

_BASE_TYPES = """
SELECT a.attname, b.typname
FROM pg_attribute a
JOIN pg_type t ON t.oid = a.atttypid
JOIN pg_type b ON b.oid = CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE t.oid END
WHERE a.attrelid = %s::regclass AND a.attname = ANY(%s) AND a.attnum > 0 AND NOT a.attisdropped
"""

_UNIQUE_KEYS = """
SELECT i.indisprimary, array_agg(a.attname ORDER BY k.ord)
FROM pg_index i
CROSS JOIN unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
WHERE i.indrelid = %s AND i.indisunique AND i.indpred IS NULL AND i.indexprs IS NULL
GROUP BY i.indexrelid, i.indisprimary
"""


def load_table(cursor, parts: tuple[str, ...]) -> PgTable | None:
    """The table named by ``parts`` (resolved through search_path when unqualified), or None."""
    from psycopg2 import sql

    cursor.execute("SELECT to_regclass(%s)::oid", (sql.Identifier(*parts).as_string(cursor),))
    (oid,) = cursor.fetchone()
    if oid is None:
        return None
    cursor.execute("SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = %s", (oid,))
    qualified = tuple(cursor.fetchone())
    cursor.execute(_COLUMNS, (oid,))
    columns = tuple(PgColumn(*row) for row in cursor.fetchall())
    cursor.execute(_UNIQUE_KEYS, (oid,))
    keys = cursor.fetchall()
    primary = next((tuple(cols) for is_primary, cols in keys if is_primary), ())
    return PgTable(oid, qualified, columns, primary, tuple(frozenset(cols) for _, cols in keys))  # type: ignore[arg-type]


def column_base_types(cursor, table: str, columns: list[str]) -> dict[str, str]:
    """Column name -> base type name (a domain's base type) of those of ``columns`` that ``table`` (quoted) has."""
    cursor.execute(_BASE_TYPES, (table, columns))
    return dict(cursor.fetchall())


def create_table(cursor, parts: tuple[str, ...], schema: StructType, column_types: dict[str, str],
                 primary_key: tuple[str, ...], options: str) -> None:
    """``CREATE TABLE IF NOT EXISTS`` with a column per input column, as Spark's jdbc writer creates
    a missing table: the type :func:`created_type` maps to unless ``column_types`` names one,
    NOT NULL where the input column is not nullable, ``options`` after the column list. Raises
    ValueError naming an input column no type is known for."""
    from psycopg2 import sql

    columns = []
    for field in schema.fields:
        kind = column_types.get(field.name) or created_type(field.dataType)
        if kind is None:
            raise ValueError(f"input column '{field.name}' ({field.dataType.simpleString()}) has no PostgreSQL type "
                             "to create it with: name one in createTableColumnTypes")
        columns.append(sql.SQL("{} {}{}").format(sql.Identifier(field.name), sql.SQL(kind),
                                                 sql.SQL("" if field.nullable else " NOT NULL")))
    if primary_key:
        columns.append(sql.SQL("PRIMARY KEY ({})").format(sql.SQL(", ").join(map(sql.Identifier, primary_key))))
    cursor.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} ({}) {}").format(
        sql.Identifier(*parts), sql.SQL(", ").join(columns), sql.SQL(options)))


def match_columns(input_names: list[str], available: list[str]) -> tuple[dict[str, str], list[str]]:
    """Map input names to available names: exact, else the one case-insensitive match.

    Returns (input name -> available name, the input names left unmatched).
    """
    mapping, unmatched = {}, []
    for name in input_names:
        if name in available:
            mapping[name] = name
            continue
        folded = [candidate for candidate in available if candidate.lower() == name.lower()]
        if len(folded) == 1:
            mapping[name] = folded[0]
        else:
            unmatched.append(name)
    return mapping, unmatched


def check_columns(table: PgTable, schema: StructType, *, require_all: bool) -> tuple[list[str], list[str]]:
    """Check the input ``schema`` against ``table``.

    Returns (target column names in input order, problems). ``require_all`` also reports table
    columns the input lacks that must be given (NOT NULL without a default).
    """
    by_name = {column.name: column for column in table.columns}
    mapping, unmatched = match_columns(schema.names, list(by_name))
    problems = [
        f"input column '{name}' is not in the table (its columns: {', '.join(by_name)})" for name in unmatched
    ]
    for field in schema.fields:
        column = by_name.get(mapping.get(field.name, ""))
        if column is None:
            continue
        if column.generated:
            problems.append(f"column \"{column.name}\" is generated and cannot be written")
        elif not accepts(field.dataType, column.base_type, column.category, (column.element_type, column.element_category)):
            problems.append(
                f"input column '{field.name}' ({field.dataType.simpleString()}) cannot be written to "
                f"column \"{column.name}\" ({column.type_display})"
            )
    if require_all:
        given = set(mapping.values())
        missing = [c.name for c in table.columns if c.not_null and not c.has_default and c.name not in given]
        problems.extend(f"table column \"{name}\" is NOT NULL without a default but not in the input" for name in missing)
    return [mapping.get(name, name) for name in schema.names], problems
