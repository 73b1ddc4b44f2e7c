"""``keyFormat`` / ``valueFormat`` ``avro-confluent`` on the write side: struct columns -> bytes.

At query start, on the driver, each such column gets its schema and id: ``valueSchema`` (or the
subject's ``valueSchemaVersion``), else the schema derived from the column's Spark type. Unless
``autoRegisterSchemas=false`` it is registered under the subject (``valueSubject``, default
``<topic>-value``), so a change the subject's compatibility rule refuses fails the query before
any task runs; otherwise it must already be registered. The tasks encode whole Arrow batches at
once (:class:`connectors.core.avro.Encoder`) behind the wire header (byte 0, the schema id).
"""

from __future__ import annotations

import dataclasses
import json

import pyarrow as pa
from pyspark.sql.types import BinaryType, StructField, StructType

from connectors.core import avro
from connectors.core.arrow import arrow_schema
from connectors.core.options import OptionError
from connectors.kafka import FORMAT, registry
from connectors.kafka.registry import RegistryError


class EncodeError(ValueError):
    """A value that its Avro schema cannot hold (a null where none is allowed, an unknown enum symbol)."""


@dataclasses.dataclass(frozen=True)
class AvroColumn:
    name: str  # "key" or "value"
    schema_json: str
    schema_id: int

    @property
    def prefix(self) -> bytes:
        return b"\x00" + self.schema_id.to_bytes(4, "big", signed=True)


def _subject(options, column: str) -> str:
    subject = options.column_option(column, "subject")
    if subject is not None:
        return subject
    if options.topic is None:
        raise OptionError(FORMAT, f"{column}Subject", None,
                          f"required with {column}Format avro-confluent when the topic comes from a column")
    return f"{options.topic}-{column}"


def _column_schema(options, column: str, field: StructField) -> AvroColumn:
    settings, subject = options.registry_settings(), _subject(options, column)
    option_name = f"{column}Format"
    try:
        version = options.column_option(column, "schema_version")
        if version is not None and options.column_option(column, "schema") is None:
            schema_id, schema_json = registry.subject_version(settings, subject, version)
        else:
            schema_json = options.column_option(column, "schema") or json.dumps(avro.from_spark(field.dataType))
            schema_id = registry.register(settings, subject, schema_json, options.auto_register_schemas)
        avro.Encoder(avro.parse(schema_json), _arrow(field))  # the column must fit the schema
    except (RegistryError, avro.AvroError) as exc:
        raise OptionError(FORMAT, option_name, "avro-confluent", f"column '{column}': {exc}") from None
    return AvroColumn(column, schema_json, schema_id)


def _arrow(field: StructField) -> pa.DataType:
    return arrow_schema(StructType([field])).field(0).type


class RecordEncoder:
    """Turns batches with struct key/value columns into batches with their wire-format bytes."""

    def __init__(self, columns: tuple[AvroColumn, ...]):
        self.columns = columns
        self._encoders: dict[tuple[str, pa.DataType], avro.Encoder] = {}

    @classmethod
    def of(cls, options, schema: StructType) -> RecordEncoder:
        """On the driver, at query start, when the key or the value is avro-confluent."""
        names = options.avro_columns()
        fields = {f.name: f for f in schema.fields}
        columns = []
        for name in names:
            if name not in fields or not isinstance(fields[name].dataType, StructType):
                shown = fields[name].dataType.simpleString() if name in fields else "missing"
                raise OptionError(FORMAT, f"{name}Format", "avro-confluent",
                                  f"needs a struct column '{name}' (the record to encode); it is {shown}")
            columns.append(_column_schema(options, name, fields[name]))
        return cls(tuple(columns))

    def __getstate__(self) -> dict:
        return {"columns": self.columns, "_encoders": {}}

    def schema(self, schema: StructType) -> StructType:
        """The input schema as the record layout sees it: encoded columns are binary."""
        encoded = {c.name for c in self.columns}
        return StructType([StructField(f.name, BinaryType(), f.nullable) if f.name in encoded else f
                           for f in schema.fields])

    def __call__(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        names, arrays = batch.schema.names, list(batch.columns)
        for column in self.columns:
            index = names.index(column.name)
            array = arrays[index]
            key = (column.name, array.type)
            if key not in self._encoders:
                self._encoders[key] = avro.Encoder(avro.parse(column.schema_json), array.type, column.prefix)
            try:
                arrays[index] = self._encoders[key].encode(array)
            except avro.AvroError as exc:
                raise EncodeError(f"{FORMAT}: cannot encode the {column.name} with schema id "
                                  f"{column.schema_id}: {exc}") from None
        return pa.RecordBatch.from_arrays(arrays, names=names)
