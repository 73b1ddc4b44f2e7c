"""Arrow conversion shared by the connectors.

Sources return ``pyarrow.RecordBatch`` from ``read()`` (much faster than tuples), so the
Spark -> Arrow schema mapping lives in one place, and so does the choice of columns a source
with a fixed schema returns when the user gives a schema of some of them (``Projection``).
"""

from __future__ import annotations

import dataclasses

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import ArrayType, DataType, MapType, StructType

from connectors.core.options import OptionError
from connectors.core.spark_compat import ARROW_TIMESTAMPS_IN_UTC

__all__ = ["Projection", "UTC_ZONES", "arrow_schema"]

# Time zone names that are UTC at every instant (the zone of a timestamp column Spark hands over
# is the session's); each one's table in Spark's julian-gregorian-rebase-micros.json is UTC's too
UTC_ZONES = frozenset({"UTC", "Etc/UTC", "GMT", "Etc/GMT", "Etc/GMT+0", "Etc/GMT-0", "Etc/GMT0", "GMT0", "UCT",
                       "Etc/UCT", "Etc/Greenwich", "Greenwich", "Etc/Universal", "Universal", "Etc/Zulu", "Zulu"})


def arrow_schema(schema: StructType) -> pa.Schema:
    """Spark -> Arrow, with timestamps in UTC as the Python data source expects them."""
    return to_arrow_schema(schema, **ARROW_TIMESTAMPS_IN_UTC)


@dataclasses.dataclass(frozen=True)
class Projection:
    """The columns a source with a fixed schema returns: all of them, or those of a schema the
    user gave (``.schema("value binary, offset long")``), in its order, names and nullability.

    Spark hands a user's schema to ``reader()`` unchecked and fails only when a task's batches
    do not match it, with a worker's stack trace; Spark's own Kafka source refuses any. Here
    any subset of the columns (names case-insensitive, types as the source gives them) selects
    those columns, and anything else fails at the query's start naming the column.
    """

    names: tuple[str, ...] | None = None  # the source's columns to return, None: all as they are
    schema: pa.Schema | None = None  # the user's schema, which Spark checks each batch against

    @classmethod
    def of(cls, source: str, offered: StructType, given: StructType | None) -> Projection:
        if given is None or given == offered:
            return cls()
        fields = {field.name.lower(): field for field in offered.fields}
        names = []
        for field in given.fields:
            found = fields.get(field.name.lower())
            if found is None:
                raise OptionError(source, "schema", field.name, f"the source has no column {field.name!r}; "
                                  f"its columns are {offered.simpleString()}, any of which a given schema may select")
            if found.dataType.simpleString() != field.dataType.simpleString():
                raise OptionError(source, "schema", f"{field.name} {field.dataType.simpleString()}",
                                  f"column {found.name!r} is {found.dataType.simpleString()} in this source "
                                  "(select it as that and cast it in the query)")
            if found.nullable and not field.nullable:
                raise OptionError(source, "schema", f"{field.name} NOT NULL",
                                  f"column {found.name!r} can be null in this source")
            if (nested := _tightened(field.dataType, found.dataType)) is not None:
                raise OptionError(source, "schema", f"{field.name}: {nested} NOT NULL",
                                  f"{nested} of column {found.name!r} can be null in this source")
            names.append(found.name)
        if len(set(names)) < len(names):
            raise OptionError(source, "schema", given.simpleString(), "a column is named twice")
        return cls(tuple(names), arrow_schema(given))

    def __call__(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        if self.names is None:
            return batch
        return pa.RecordBatch.from_arrays(batch.select(list(self.names)).columns, schema=self.schema)


def _tightened(given: DataType, offered: DataType, path: str = "") -> str | None:
    """Where ``given`` (of the same shape) says NOT NULL inside a type whose ``offered`` value
    can be null: the cast to the user's schema would fail in a task at the first null."""
    if isinstance(given, StructType) and isinstance(offered, StructType):
        for mine, theirs in zip(given.fields, offered.fields):
            where = f"field {mine.name!r} of {path}" if path else f"field {mine.name!r}"
            if theirs.nullable and not mine.nullable:
                return where
            if (inner := _tightened(mine.dataType, theirs.dataType, where)) is not None:
                return inner
    elif isinstance(given, ArrayType) and isinstance(offered, ArrayType):
        where = f"an element of {path}" if path else "an element"
        if offered.containsNull and not given.containsNull:
            return where
        return _tightened(given.elementType, offered.elementType, where)
    elif isinstance(given, MapType) and isinstance(offered, MapType):
        where = f"a map value of {path}" if path else "a map value"
        if offered.valueContainsNull and not given.valueContainsNull:
            return where
        return _tightened(given.valueType, offered.valueType, where)
    return None
