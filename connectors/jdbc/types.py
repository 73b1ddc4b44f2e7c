"""The one map from Spark types to PostgreSQL types: which columns a Spark type may be written to
(checked when the query starts), the type of a column the sink creates, which pairs have a
binary COPY encoding, and which pairs Arrow's CSV writer renders as COPY reads them.

Strings go to textual types only (text, json, uuid, enums, inet, interval...), not to numbers or
dates: a cast in Spark is explicit, a failed parse in the middle of a batch is not.
"""

from __future__ import annotations

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

_INTEGRAL_BYTES = {ByteType: 1, ShortType: 2, IntegerType: 4, LongType: 8}
_PG_INT_BYTES = {"int2": 2, "int4": 4, "int8": 8}
_TEXTUAL_CATEGORIES = frozenset("SUEITVG")  # string, user-defined (json, uuid), enum, network, timespan, bit, geometric
_CSV_COPYABLE = (
    BooleanType, *_INTEGRAL_BYTES, FloatType, DoubleType, DecimalType, StringType, DateType, TimestampType,
    TimestampNTZType,
)  # fmt: skip


def accepts(spark: DataType, base_type: str, category: str, element: tuple[str | None, str | None] = (None, None)) -> bool:
    """Whether values of Spark type ``spark`` can be written to a column of this PostgreSQL type."""
    if isinstance(spark, BooleanType):
        return base_type == "bool"
    if isinstance(spark, (*_INTEGRAL_BYTES, DecimalType)):
        return category == "N"
    if isinstance(spark, (FloatType, DoubleType)):
        return base_type in ("float4", "float8", "numeric")
    if isinstance(spark, StringType):
        return category in _TEXTUAL_CATEGORIES and base_type != "bytea"
    if isinstance(spark, BinaryType):
        return base_type == "bytea"
    if isinstance(spark, DateType):
        return base_type in ("date", "timestamp", "timestamptz")
    if isinstance(spark, (TimestampType, TimestampNTZType)):
        return base_type in ("timestamp", "timestamptz")
    if isinstance(spark, ArrayType):
        element_type, element_category = element
        return category == "A" and element_type is not None and accepts(spark.elementType, element_type, element_category or "")
    if isinstance(spark, (StructType, MapType)):
        return base_type in ("json", "jsonb")
    return False


_CREATED = {
    BooleanType: "boolean", ByteType: "smallint", ShortType: "smallint", IntegerType: "integer", LongType: "bigint",
    FloatType: "real", DoubleType: "double precision", StringType: "text", BinaryType: "bytea", DateType: "date",
    TimestampType: "timestamptz", TimestampNTZType: "timestamp",
}  # fmt: skip


def created_type(spark: DataType) -> str | None:
    """The type of the column a table the sink creates gets for ``spark``: Spark's jdbc writer's
    PostgreSQL types, but for a timestamp, an instant, which is timestamptz (Spark's timestamp
    keeps the writer's wall time and drops its zone), and structs and maps, which are jsonb
    (Spark's writer has no type for them). None: no column type (arrays of arrays)."""
    if isinstance(spark, DecimalType):
        return f"numeric({spark.precision},{spark.scale})"
    if isinstance(spark, (StructType, MapType)):
        return "jsonb"
    if isinstance(spark, ArrayType):
        element = None if isinstance(spark.elementType, ArrayType) else created_type(spark.elementType)
        return None if element is None else element + "[]"
    return _CREATED.get(type(spark))


def csv_copyable(spark: DataType, base_type: str) -> bool:
    """Whether Arrow's CSV writer renders values of ``spark`` type as COPY reads them into ``base_type``.

    A decimal's text with a fraction digit ("5.00") is no integer's input, which an INSERT rounds
    (as Spark's jdbc writer does), so that pair takes the INSERT path.
    """
    if isinstance(spark, DecimalType) and spark.scale != 0 and base_type in _PG_INT_BYTES:
        return False
    return isinstance(spark, _CSV_COPYABLE)


def binary_format(spark: DataType, base_type: str) -> str | None:
    """How values of ``spark`` type are sent to a column of PostgreSQL ``base_type``; None: no binary form.

    Only exact or widening pairs: a narrowing one (bigint into int4) stays CSV so that an
    out-of-range value fails with the server's error rather than being cut.
    """
    width = _INTEGRAL_BYTES.get(type(spark))
    if width is not None:
        return base_type if _PG_INT_BYTES.get(base_type, 0) >= width else None
    if isinstance(spark, BooleanType) and base_type == "bool":
        return "bool"
    if isinstance(spark, FloatType) and base_type in ("float4", "float8"):
        return base_type
    if isinstance(spark, (DoubleType, DecimalType)) and base_type == "float8":
        return "float8"  # a decimal is rounded as the server rounds its text (_decimal_doubles)
    if isinstance(spark, DecimalType) and spark.scale >= 0 and base_type == "numeric":
        return "numeric"  # (a negative scale, allowed only by a legacy setting, stays CSV)
    if isinstance(spark, StringType) and base_type in ("text", "varchar", "bpchar"):
        return "text"
    if isinstance(spark, DateType) and base_type == "date":
        return "date"
    if isinstance(spark, (TimestampType, TimestampNTZType)) and base_type in ("timestamp", "timestamptz"):
        return "timestamp"  # the session is UTC: a zoned value's instant, a plain one's wall time
    return None
