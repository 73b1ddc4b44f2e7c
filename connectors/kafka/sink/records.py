"""Input columns -> Kafka records, with Spark's Kafka sink column rules.

``value`` (string or binary, required), ``key`` (string or binary), ``topic`` (string; the
``topic`` option wins), ``partition`` (int) and ``headers`` (array<struct<key:string,value:binary>>).
Other columns are ignored, as by Spark's sink. The layout is checked against the Spark schema on
the driver, so a missing or mistyped column fails when the query starts.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    StringType,
    StructField,
    StructType,
)

from connectors.core.options import OptionError
from connectors.kafka import FORMAT

HEADERS_TYPE = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))
_STRING_OR_BINARY = (StringType(), BinaryType())
_EXPECTED: dict[str, tuple[tuple[DataType, ...], str]] = {
    "value": (_STRING_OR_BINARY, "string or binary"),
    "key": (_STRING_OR_BINARY, "string or binary"),
    "topic": ((StringType(),), "string"),
    "partition": ((IntegerType(),), "int"),
    "headers": ((HEADERS_TYPE,), "array<struct<key:string,value:binary>>"),
}

# One record as Producer.produce(topic, value, key, partition, headers=...) takes it.
Record = tuple[str, "str | bytes | None", "str | bytes | None", int, "list[tuple[str, bytes | None]] | None"]

UNASSIGNED_PARTITION = -1  # librdkafka: let the partitioner choose


class ColumnError(ValueError):
    """An input column that Spark's Kafka sink rules reject; raised when the query starts."""

    def __init__(self, column: str, reason: str):
        super().__init__(f"{FORMAT}: input column '{column}': {reason}")
        self.column = column


class RecordError(ValueError):
    """A record that cannot become a Kafka record (e.g. no topic)."""


@dataclasses.dataclass(frozen=True)
class RecordLayout:
    """Which of Spark's Kafka sink columns the input has, and the fixed topic if any."""

    topic: str | None  # the topic option: every record goes there
    has_topic: bool
    has_key: bool
    has_partition: bool
    has_headers: bool

    @classmethod
    def of(cls, schema: StructType, topic: str | None) -> RecordLayout:
        """Check ``schema`` against Spark's Kafka sink columns (ColumnError), and that records have a topic."""
        fields = {field.name: field.dataType for field in schema.fields}
        if "value" not in fields:
            raise ColumnError("value", f"required, but the input has only {', '.join(fields) or 'no columns'}; "
                              "select or alias a string or binary column as 'value'")
        for name, (allowed, spelled) in _EXPECTED.items():
            if name == "topic" and topic is not None:
                continue  # the option wins and the column is never read, whatever its type (as Spark's sink)
            if name in fields and not any(_same_type(fields[name], t) for t in allowed):
                raise ColumnError(name, f"has type {fields[name].simpleString()}; expected {spelled} "
                                  "(cast it, as for Spark's Kafka sink)")
        if topic is None and "topic" not in fields:
            raise OptionError(FORMAT, "topic", None, "no topic: set the option 'topic' or give the input a 'topic' column")
        return cls(topic, "topic" in fields, "key" in fields, "partition" in fields, "headers" in fields)

    @property
    def columns(self) -> tuple[str, ...]:
        """The input columns the records are made of (a topic column only without the topic option)."""
        used = {"key": self.has_key, "topic": self.has_topic and self.topic is None,
                "partition": self.has_partition, "headers": self.has_headers}
        return ("value", *(name for name, wanted in used.items() if wanted))

    def records(self, batch: pa.RecordBatch) -> Iterator[Record]:
        """The records of one Arrow batch, in order."""
        n = batch.num_rows
        values = batch.column("value").to_pylist()
        keys = batch.column("key").to_pylist() if self.has_key else itertools.repeat(None, n)
        topics = self._topics(batch) if self.topic is None else itertools.repeat(self.topic, n)
        partitions = self._partitions(batch) if self.has_partition else itertools.repeat(UNASSIGNED_PARTITION, n)
        headers = self._headers(batch) if self.has_headers else itertools.repeat(None, n)
        return zip(topics, values, keys, partitions, headers)

    @staticmethod
    def _partitions(batch: pa.RecordBatch) -> list[int]:
        column = batch.column("partition")
        # librdkafka reads -1 as "the partitioner chooses", so a negative partition would land in
        # any partition unnoticed; Spark's sink (the Java ProducerRecord) refuses it too.
        if column.null_count < len(column) and pc.min(column).as_py() < 0:
            row = pc.index(pc.less(column, 0), True).as_py()
            raise RecordError(f"row {row} of the batch has partition {column[row].as_py()}: a partition must not "
                              "be negative (null lets the partitioner choose)")
        return [UNASSIGNED_PARTITION if p is None else p for p in column.to_pylist()]

    @staticmethod
    def _headers(batch: pa.RecordBatch) -> list[list[tuple[str, bytes | None]] | None]:
        column = batch.column("headers")
        # A null key would be written as the header key 'None' (the producer takes str() of it).
        keys = pc.struct_field(pc.list_flatten(column), [0])  # null too where the header itself is null
        if keys.null_count:
            row = pc.list_parent_indices(column)[pc.index(keys.is_null(), True).as_py()].as_py()
            raise RecordError(f"row {row} of the batch has a null header or a header with a null key; "
                              "Kafka header keys are strings")
        return [None if row is None else [(h["key"], h["value"]) for h in row] for row in column.to_pylist()]

    def _topics(self, batch: pa.RecordBatch) -> list[str]:
        column = batch.column("topic")
        if column.null_count:
            row = column.is_null().to_pylist().index(True)
            raise RecordError(f"row {row} of the batch has a null topic and the option 'topic' is not set")
        return column.to_pylist()


def _same_type(actual: DataType, expected: DataType) -> bool:
    """Equal types, ignoring nullability (Spark's sink accepts nullable and non-null alike)."""
    if isinstance(expected, ArrayType):
        return isinstance(actual, ArrayType) and _same_type(actual.elementType, expected.elementType)
    if isinstance(expected, StructType):
        return isinstance(actual, StructType) and [(f.name, f.dataType.simpleString()) for f in actual.fields] == [
            (f.name, f.dataType.simpleString()) for f in expected.fields
        ]
    return actual == expected
