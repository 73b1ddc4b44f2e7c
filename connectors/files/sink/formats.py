"""Encoders of the file sink: Arrow batches to the bytes of a part file.

Row formats (text, csv, json lines) encode each batch to self-contained bytes, so a part can grow
by appending across micro-batches and any committed prefix is a valid file; a compressed append is
a unit complete for its codec (``codecs.py``). Parquet and Avro are bulk formats: one writer per
part file, closed when the part rolls (at every micro-batch). A csv header is written once, at the
start of a part, as bytes of its own (its own compressed unit), so compaction can leave it out of
every part but the first.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Iterator
from typing import Any, BinaryIO, Protocol

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    DayTimeIntervalType,
    MapType,
    StringType,
    StructType,
    VariantType,
    YearMonthIntervalType,
)

from connectors.core.arrow import arrow_schema
from connectors.core.options import OptionError
from connectors.files import FORMAT
from connectors.core.json_text import JsonStyle, json_texts
from connectors.core.texts import TEXT, lines
from connectors.files.datetime_patterns import DateTimeFormat
from connectors.files.sink.codecs import ROW_CODECS
from connectors.files.sink.csv_lines import CsvDialect, csv_lines, header_line


@dataclasses.dataclass(frozen=True)
class RowOptions:
    """How csv and json rows are written (Spark's writer options; None: this sink's default)."""

    dialect: CsvDialect = CsvDialect()
    ignore_null_fields: bool = True  # json, as Spark's default
    timestamp_format: str | None = None  # Java patterns; None: ISO 8601 with microseconds
    timestamp_ntz_format: str | None = None
    date_format: str | None = None
    line_sep: str = "\n"  # json (csv's is the dialect's)
    encoding: str | None = None  # a Python codec name; None: UTF-8

    @functools.cached_property
    def json_style(self) -> JsonStyle:
        return JsonStyle(self.ignore_null_fields, *self.formatters())

    def formatters(self):
        """Formatters of zoned timestamps, timestamp_ntz and dates (None where not set)."""
        return tuple(None if pattern is None else DateTimeFormat.of(pattern, kind).format for pattern, kind in (
            (self.timestamp_format, "timestamp"), (self.timestamp_ntz_format, "timestamp_ntz"),
            (self.date_format, "date")))  # fmt: skip


DEFAULT_ROWS = RowOptions()


# The compression option -> the codec in the file: Spark's names, and the ones this sink took before.
# Not Spark's parquet lzo (pyarrow cannot write it) or brotli (Spark's build cannot read it); lz4
# is written as LZ4_RAW, which Spark reads.
PARQUET_CODECS = {"none": "none", "uncompressed": "none", "snappy": "snappy", "gzip": "gzip", "lz4": "lz4",
                  "lz4_raw": "lz4", "zstd": "zstd"}  # fmt: skip
AVRO_CODECS = {"none": "null", "uncompressed": "null", "snappy": "snappy", "deflate": "deflate", "bzip2": "bzip2",
               "xz": "xz", "zstd": "zstandard", "zstandard": "zstandard"}  # fmt: skip


class PartEncoder(Protocol):
    def write(self, batch: pa.RecordBatch) -> None: ...

    def close(self) -> None:
        """Flush what the encoder buffers (the underlying file stays open)."""


class RowEncoder:
    """text / csv / json lines, optionally compressed: bytes are written as each batch arrives."""

    def __init__(self, handle: BinaryIO, file_format: str, codec: str, rows: RowOptions):
        self.handle, self.file_format, self.rows = handle, file_format, rows
        self.compress = ROW_CODECS[codec].compress

    def write(self, batch: pa.RecordBatch) -> None:
        self.handle.write(self.compress(encode_rows(batch, self.file_format, self.rows)))

    def close(self) -> None:
        pass


@dataclasses.dataclass(frozen=True)
class AvroLayout:
    """The schema of avro parts, by Spark's writer options: avroSchema (or the file of avroSchemaUrl),
    else the one derived from the columns and named recordName in recordNamespace;
    positionalFieldMatching matches columns to the record's fields by position, not name."""

    schema: str | None = None
    record_name: str = "topLevelRecord"
    record_namespace: str = ""
    positional: bool = False

    def encoder(self, schema: pa.Schema) -> tuple[Any, pa.DataType, str]:
        """The Encoder of rows of ``schema``, the type to view them as (its names) and the header's schema JSON."""
        from connectors.core import avro  # fastavro: only where Avro is written

        if self.schema is None:
            avro_schema = avro.from_spark(from_arrow_schema(schema), name=self.record_name,
                                          namespace=self.record_namespace)
            header = json.dumps(avro_schema)
        else:
            avro_schema, header = avro.parse(self.schema), json.dumps(json.loads(self.schema))
        columns = pa.struct(list(schema))
        if self.positional:
            columns = avro.renamed(columns, avro.arrow_type(avro_schema))
        fields = {field["name"] for field in avro_schema["fields"]}
        extra = [name for name in columns.names if name not in fields]
        if extra:  # Spark's writer refuses them too, rather than leave them out
            raise avro.AvroError(f"column {extra[0]!r} has no field in the Avro schema")
        return avro.Encoder(avro_schema, columns), columns, header


class AvroEncoder:
    """An Avro object container file: the header (the schema derived from the columns, as
    Spark's avro writer derives it, or the given one), then one block per batch, encoded column by column."""

    def __init__(self, handle: BinaryIO, schema: pa.Schema, codec: str, layout: AvroLayout):
        from connectors.core import avro  # fastavro: only where Avro is written

        self.handle, self.compress = handle, avro.CODECS[AVRO_CODECS[codec]][0]
        self.encoder, self.columns, schema_json = layout.encoder(schema)
        header, self.sync = avro.container_header(schema_json, AVRO_CODECS[codec])
        self.block = avro.container_block
        handle.write(header)

    def write(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows:
            _, data = self.encoder.lengths_and_bytes(batch.to_struct_array().view(self.columns))
            self.handle.write(self.block(batch.num_rows, self.compress(data.tobytes()), self.sync))

    def close(self) -> None:
        pass


class ParquetEncoder:
    def __init__(self, handle: BinaryIO, schema: pa.Schema, codec: str):
        self.writer = pq.ParquetWriter(handle, schema, compression=PARQUET_CODECS[codec])

    def write(self, batch: pa.RecordBatch) -> None:
        self.writer.write_batch(batch)

    def close(self) -> None:
        self.writer.close()


def encoder(handle: BinaryIO, file_format: str, codec: str, schema: pa.Schema, rows: RowOptions,
            layout: AvroLayout) -> PartEncoder:
    if file_format == "parquet":
        return ParquetEncoder(handle, schema, codec)
    if file_format == "avro":
        return AvroEncoder(handle, schema, codec, layout)
    return RowEncoder(handle, file_format, codec, rows)


def csv_header(columns: list[str], rows: RowOptions, codec: str) -> bytes:
    """The bytes a csv part starts with: the column names as one line (one compressed unit)."""
    return ROW_CODECS[codec].compress(_encoded(header_line(columns, rows.dialect), rows.encoding))


def encode_rows(batch: pa.RecordBatch, file_format: str, rows: RowOptions = DEFAULT_ROWS) -> bytes:
    if file_format == "text":  # null as an empty line, as Spark's text sink writes it
        return lines(batch.column(0).fill_null(""))
    if file_format == "csv":
        return _encoded(csv_lines(_times_formatted(batch, rows), rows.dialect), rows.encoding)
    data = lines(json_texts(pa.StructArray.from_arrays(batch.columns, fields=list(batch.schema)), rows.json_style))
    if rows.line_sep != "\n":  # JSON text escapes every line break inside values: each one ends a row
        data = data.replace(b"\n", rows.line_sep.encode())
    return _encoded(data, rows.encoding)


def _times_formatted(batch: pa.RecordBatch, rows: RowOptions) -> pa.RecordBatch:
    """csv: timestamp and date columns as the texts of their patterns, where patterns are set."""
    timestamp, ntz, date = rows.formatters()
    if timestamp is ntz is date is None:
        return batch
    columns = []
    for column in batch.columns:
        kind = column.type
        formatter = (date if pa.types.is_date(kind) else (timestamp if kind.tz else ntz)
                     if pa.types.is_timestamp(kind) else None)  # fmt: skip
        columns.append(column if formatter is None else formatter(column).cast(TEXT))
    return pa.RecordBatch.from_arrays(columns, names=batch.schema.names)


def _encoded(data: bytes, encoding: str | None) -> bytes:
    # unmappable characters as "?", as Java's encoder replaces them in Spark's writers
    return data if encoding is None else data.decode("utf-8").encode(encoding, "replace")



def check_schema(schema: StructType, file_format: str, data_columns: list[str],
                 layout: AvroLayout = AvroLayout()) -> None:
    """Reject at query start what a format cannot hold (Spark's text/csv sinks have the same rules)."""
    fields = [f for f in schema.fields if f.name in data_columns]
    if file_format == "avro":
        from connectors.core import avro  # fastavro: only for Avro part files

        try:
            layout.encoder(arrow_schema(StructType(fields)))
        except avro.AvroError as exc:
            option_name = "fileFormat" if layout.schema is None else "avroSchema"
            raise OptionError(FORMAT, option_name, "avro" if layout.schema is None else None, str(exc)) from None
    if file_format == "text" and (len(fields) != 1 or not isinstance(fields[0].dataType, StringType)):
        shown = ", ".join(f"{f.name} {f.dataType.simpleString()}" for f in fields)
        raise OptionError(FORMAT, "fileFormat", "text", f"needs exactly one string column, got [{shown}]")
    if file_format == "csv":
        for field in fields:
            if isinstance(field.dataType, (StructType, ArrayType, MapType, BinaryType, VariantType)):  # as Spark's
                raise OptionError(
                    FORMAT, "fileFormat", "csv",
                    f"cannot hold column {field.name!r} of type {field.dataType.simpleString()}",
                )  # fmt: skip
    for field in fields:
        kinds = {type(kind) for kind in _types_in(field.dataType)}
        if YearMonthIntervalType in kinds:  # PySpark's Arrow conversion fails on it inside the task
            raise OptionError(FORMAT, "fileFormat", file_format, f"column {field.name!r} holds a year-month interval, "
                              "which Spark cannot hand to a Python sink: cast it to string (Spark's text of it)")
        if DayTimeIntervalType in kinds and file_format in ("csv", "json"):
            raise OptionError(FORMAT, "fileFormat", file_format, f"column {field.name!r} holds a day-time interval: "
                              "cast it to string, which gives the text Spark's own csv and json writers write")


def _types_in(kind: DataType) -> Iterator[DataType]:
    """``kind`` and every type nested in it."""
    yield kind
    if isinstance(kind, StructType):
        for field in kind.fields:
            yield from _types_in(field.dataType)
    elif isinstance(kind, ArrayType):
        yield from _types_in(kind.elementType)
    elif isinstance(kind, MapType):
        yield from _types_in(kind.keyType)
        yield from _types_in(kind.valueType)
