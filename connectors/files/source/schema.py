"""The source's schema: inference for batch reads, and checks of a user schema against the options.

Text has the fixed column ``value string``. Parquet and Avro files carry their schema (the first
file's is used). CSV and JSON are sampled (the first MiB of the first few files) for batch reads; a stream
needs a user schema for them (``spark.readStream.schema(...)``), as in Spark, because a schema
guessed from whatever files exist when the query first starts would silently change between
restarts. Inferred schemas are marked in their first field's metadata so the stream side can tell.
"""

from __future__ import annotations

import csv
import functools
import io
import json
from decimal import Decimal
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    DecimalType,
    DoubleType,
    LongType,
    NullType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from connectors.core.arrow import arrow_schema
from connectors.core.filesystem import filesystem
from connectors.core.options import OptionError
from connectors.files import FORMAT
from connectors.files.source import partitions
from connectors.files.source.compression import codec_of, decompressing
from connectors.files.source.formats import (
    CsvParser,
    JsonSyntax,
    ReadSpec,
    document_records,
    header_lines,
    separated,
    strict_json,
    white_space_trimmer,
)
from connectors.files.source.listing import FileLister, FileStatus
from connectors.files.source.options import FileSourceOptions

SAMPLE_BYTES = 1 << 20
SAMPLE_FILES = 8
INFERRED = "connectors.files.inferred"


def _normalize(field_type: DataType) -> DataType:
    # pyarrow infers zone-less timestamps in csv and json text; Spark users expect TIMESTAMP, read as UTC.
    return TimestampType() if isinstance(field_type, TimestampNTZType) else field_type


def _sample(file: FileStatus, config: FileSourceOptions) -> bytes:
    """The first ~MiB of a file's (decompressed) content, cut after its last complete line; with
    multiLine the whole file, as a record may span any number of lines."""
    fs, path = filesystem(file.path, config.storage_options)
    with fs.open(path, "rb") as raw:
        data = decompressing(raw, codec_of(file.path)).read(-1 if config.multi_line else SAMPLE_BYTES)
    separator = (config.line_sep or "\n").encode(config.encoding)
    if len(data) == SAMPLE_BYTES and separator in data and not config.multi_line:
        data = data[: data.rfind(separator) + len(separator)]
    if config.line_sep is not None and config.file_format != "text":
        data, _ = separated(data, separator, config.file_format, config.encoding)
    if config.comment is not None:
        data = CsvParser.uncommented(data, config.comment, config.encoding)
    trim = white_space_trimmer(config.separator, config.quote, config.escape, config.ignore_leading_white_space,
                               config.ignore_trailing_white_space)
    if trim is not None:
        data = trim(data)
    if config.multi_line and config.file_format == "json":  # the records of the document, one per line
        records = document_records(data.decode(config.encoding, errors="replace"), json_syntax(config))
        if records is None:
            raise OptionError(FORMAT, "path", file.path, "cannot infer a schema: not a JSON document (multiLine)")
        data = "\n".join(r.replace("\n", " ").replace("\r", " ") for r in records).encode()
    return data


class SchemaInference:
    def __init__(self, config: FileSourceOptions, paths: Sequence[str]):
        self.config, self.paths = config, paths

    def infer(self) -> StructType:
        files = sorted(FileLister.of_source(self.config, self.paths).list().values(), key=lambda f: f.path)
        if self.config.file_format == "text":
            fields = [StructField("value", StringType())]
        else:
            if not files:
                raise OptionError(FORMAT, "path", ", ".join(self.paths),
                                  f"no {self.config.file_format} files to infer a schema from; give a schema with .schema(...)")
            readers = {"parquet": self._parquet, "json": self._json, "csv": self._csv, "avro": self._avro}
            arrow = readers[self.config.file_format](files[:SAMPLE_FILES])
            # prefer_timestamp_ntz as Spark 4.2+ defaults it (4.1 did not): the same schema on every line
            fields = from_arrow_schema(arrow, prefer_timestamp_ntz=True).fields
            if self.config.file_format in ("csv", "json"):  # parquet and avro say which timestamps they hold
                fields = [StructField(f.name, _normalize(f.dataType)) for f in fields]
        # As Spark: partition columns come last, and one named like a data column replaces it.
        found = partitions.infer(partition_bases(self.config, self.paths), (f.path for f in files))
        names = {f.name for f in found}
        schema = StructType([StructField(f.name, f.dataType, True) for f in fields if f.name not in names] + found)
        if self.config.file_format != "text":
            schema.fields[0].metadata = {INFERRED: True}
        return self._with_metadata_columns(schema)

    def _parquet(self, files: list[FileStatus]) -> pa.Schema:
        fs, path = filesystem(files[0].path, self.config.storage_options)
        with fs.open(path, "rb") as raw:
            return pq.read_schema(raw)

    def _avro(self, files: list[FileStatus]) -> pa.Schema:
        from connectors.core import avro  # fastavro: only where an Avro schema is read

        fs, path = filesystem(files[0].path, self.config.storage_options)
        try:
            with fs.open(path, "rb") as raw:
                schema_json, _, _ = avro.read_header(raw)
            return arrow_schema(avro.read_type(avro.parse(schema_json)))
        except (ValueError, EOFError) as exc:
            raise OptionError(FORMAT, "path", files[0].path, f"cannot read an Avro schema from it: {exc}") from None

    def _json(self, files: list[FileStatus]) -> pa.Schema:
        """Spark's JSON inference (``JsonInferSchema``) over the sample: fields sorted by name, strings
        stay strings (dates and times too), integers are bigint or, past it, decimal(n,0); a record
        that is not a JSON object adds the corrupt-record column in PERMISSIVE mode."""
        config = self.config
        inferred: DataType = StructType([])
        corrupt = False
        syntax = json_syntax(config)
        # prefersDecimal: a number's digits say its decimal type
        parse = functools.partial(json.loads, parse_float=Decimal) if config.prefers_decimal else json.loads
        for file in files:
            for line in _sample(file, config).decode(config.encoding, errors="replace").splitlines():
                if not line.strip():
                    continue
                try:
                    record = parse(line)
                except ValueError:
                    text = strict_json(line, syntax) if syntax.lenient else None
                    if text == "":
                        continue  # only comments
                    try:
                        record = None if text is None else parse(text)
                    except ValueError:
                        record = None
                if not isinstance(record, dict):
                    if self.config.mode == "FAILFAST":
                        raise OptionError(FORMAT, "path", file.path,
                                          f"cannot infer a schema: a line is not a JSON object: {line[:200]!r}")
                    corrupt = True
                    continue
                inferred = _wider_json(inferred, _json_type(record, config.primitives_as_string))
        canonical = _canonical(inferred, config.drop_field_if_all_null)
        fields = list(canonical.fields) if isinstance(canonical, StructType) else []
        if corrupt and self.config.mode == "PERMISSIVE":
            name = self.config.column_name_of_corrupt_record
            fields = sorted([f for f in fields if f.name != name] + [StructField(name, StringType())], key=lambda f: f.name)
        if not fields:
            raise OptionError(FORMAT, "path", files[0].path, "the files hold no JSON record; give a schema with .schema(...)")
        return arrow_schema(StructType(fields))

    def _csv(self, files: list[FileStatus]) -> pa.Schema:
        config = self.config
        sample = _sample(files[0], config)
        first = header_lines(sample) - 1 if config.header else 0  # the header, or the first line
        first_line = sample.split(b"\n", first + 1)[first].decode(config.encoding, "replace")
        tokens = next(csv.reader([first_line.rstrip("\r")], delimiter=config.separator, quotechar=config.quote), [])
        names = [token or f"_c{i}" for i, token in enumerate(tokens)] if config.header else [f"_c{i}" for i in range(len(tokens))]
        if not config.infer_schema:
            return pa.schema([(name, pa.string()) for name in names])
        schemas = []
        for file in files:
            data = sample if file is files[0] else _sample(file, config)
            table = pacsv.read_csv(
                io.BytesIO(data),
                read_options=pacsv.ReadOptions(column_names=names, skip_rows=header_lines(data) if config.header else 0,
                                               encoding=config.encoding),
                parse_options=pacsv.ParseOptions(delimiter=config.separator, quote_char=config.quote,
                                                 escape_char=config.escape != config.quote and config.escape,
                                                 newlines_in_values=config.multi_line or config.line_sep is not None,
                                                 invalid_row_handler=lambda row: "skip"),
                convert_options=pacsv.ConvertOptions(null_values=[config.null_value]),
            )
            schemas.append(table.schema)
        return self._unify(schemas, files)

    def _unify(self, schemas: list[pa.Schema], files: list[FileStatus]) -> pa.Schema:
        if not schemas:
            raise OptionError(FORMAT, "path", files[0].path, "the files are empty; give a schema with .schema(...)")
        unified = pa.unify_schemas(schemas, promote_options="permissive")
        return pa.schema([pa.field(f.name, pa.string()) if pa.types.is_null(f.type) else f for f in unified])

    def _with_metadata_columns(self, schema: StructType) -> StructType:
        if self.config.file_path_column:
            schema = schema.add(self.config.file_path_column, StringType())
        if self.config.file_modification_time_column:
            schema = schema.add(self.config.file_modification_time_column, TimestampType())
        return schema


_MAX_DIGITS = 38  # of a Spark decimal


def _json_type(value: object, primitives_as_string: bool = False) -> DataType:
    """The Spark type of one JSON value, as Spark's JSON inference gives it (a number with a
    fraction or an exponent is a Decimal with prefersDecimal)."""
    if value is None:
        return NullType()
    if primitives_as_string and not isinstance(value, (list, dict)):
        return StringType()
    if isinstance(value, bool):
        return BooleanType()
    if isinstance(value, int):
        if -(2**63) <= value < 2**63:
            return LongType()
        digits = len(str(abs(value)))
        return DecimalType(digits, 0) if digits <= _MAX_DIGITS else DoubleType()
    if isinstance(value, Decimal):
        # Java's BigDecimal precision and scale; Spark fails on a negative scale (1e5): double here
        _, digits, exponent = value.as_tuple()
        precision, scale = len(digits), -int(exponent)
        if 0 <= scale <= _MAX_DIGITS and precision <= _MAX_DIGITS:
            return DecimalType(max(precision, scale), scale)
        return DoubleType()
    if isinstance(value, float):
        return DoubleType()
    if isinstance(value, list):
        element: DataType = NullType()
        for item in value:
            element = _wider_json(element, _json_type(item, primitives_as_string))
        return ArrayType(element)
    if isinstance(value, dict):
        return StructType(sorted((StructField(k, _json_type(v, primitives_as_string)) for k, v in value.items()),
                                 key=lambda f: f.name))
    return StringType()


def _wider_json(left: DataType, right: DataType) -> DataType:
    """Spark's ``compatibleType``: one type that holds values of both."""
    if left == right or isinstance(right, NullType):
        return left
    if isinstance(left, NullType):
        return right
    if isinstance(left, StructType) and isinstance(right, StructType):
        merged = {f.name: f.dataType for f in left.fields}
        for field in right.fields:
            merged[field.name] = _wider_json(merged[field.name], field.dataType) if field.name in merged else field.dataType
        return StructType([StructField(name, merged[name]) for name in sorted(merged)])
    if isinstance(left, ArrayType) and isinstance(right, ArrayType):
        return ArrayType(_wider_json(left.elementType, right.elementType))
    numbers = (LongType, DecimalType, DoubleType)
    if isinstance(left, numbers) and isinstance(right, numbers):
        if isinstance(left, DoubleType) or isinstance(right, DoubleType):
            return DoubleType()
        left_d, right_d = (t if isinstance(t, DecimalType) else DecimalType(20, 0) for t in (left, right))
        scale = max(left_d.scale, right_d.scale)
        digits = max(left_d.precision - left_d.scale, right_d.precision - right_d.scale) + scale
        return DecimalType(digits, scale) if digits <= _MAX_DIGITS else DoubleType()
    return StringType()


def _canonical(data_type: DataType, drop_all_null: bool = False) -> DataType | None:
    """As Spark ends its inference: a type seen only as null is string (dropped, with
    dropFieldIfAllNull, and so is an array of such); an empty struct goes away."""
    if isinstance(data_type, NullType):
        return None if drop_all_null else StringType()
    if isinstance(data_type, ArrayType):
        element = _canonical(data_type.elementType, drop_all_null)
        return None if element is None and drop_all_null else ArrayType(element or StringType())
    if isinstance(data_type, StructType):
        fields = [StructField(f.name, t) for f in data_type.fields if (t := _canonical(f.dataType, drop_all_null)) is not None]
        return StructType(fields) if fields else None
    return data_type


def partition_bases(config: FileSourceOptions, paths: Sequence[str]) -> tuple[str, ...]:
    return partitions.bases(paths, config.base_path, config.storage_options)


def json_syntax(config: FileSourceOptions) -> JsonSyntax:
    return JsonSyntax(config.allow_single_quotes, config.allow_comments, config.allow_unquoted_field_names,
                      config.allow_numeric_leading_zeros)


def is_inferred(schema: StructType) -> bool:
    return bool(schema.fields) and bool(schema.fields[0].metadata.get(INFERRED))


def read_spec(config: FileSourceOptions, paths: Sequence[str], schema: StructType) -> ReadSpec:
    """Check ``schema`` against the options (at query start) and build what the tasks need."""
    names = set(schema.fieldNames())
    by_name = {f.name: f.dataType for f in schema.fields}
    for option_name, column, expected in (
        ("filePathColumn", config.file_path_column, StringType()),
        ("fileModificationTimeColumn", config.file_modification_time_column, TimestampType()),
    ):
        if column is None:
            continue
        if column not in names:
            raise OptionError(FORMAT, option_name, column, "the schema has no such column; add it to the schema")
        if by_name[column] != expected:
            raise OptionError(FORMAT, option_name, column, f"the column must be {expected.simpleString()}")
    corrupt = config.column_name_of_corrupt_record if config.column_name_of_corrupt_record in names else None
    if corrupt is not None and by_name[corrupt] != StringType():
        raise OptionError(FORMAT, "columnNameOfCorruptRecord", corrupt, "the column must be string")
    spec = ReadSpec(
        file_format=config.file_format, schema=arrow_schema(schema), mode=config.mode, corrupt_column=corrupt,
        path_column=config.file_path_column, mtime_column=config.file_modification_time_column,
        ignore_corrupt_files=config.ignore_corrupt_files, header=config.header, separator=config.separator,
        quote=config.quote, escape=config.escape, encoding=config.encoding, null_value=config.null_value,
        ignore_missing_files=config.ignore_missing_files, comment=config.comment, empty_value=config.empty_value,
        trim_leading=config.ignore_leading_white_space, trim_trailing=config.ignore_trailing_white_space,
        nan_value=config.nan_value, positive_inf=config.positive_inf, negative_inf=config.negative_inf,
        line_sep=config.line_sep, json_syntax=json_syntax(config),
        date_format=config.date_format, timestamp_format=config.timestamp_format,
        timestamp_ntz_format=config.timestamp_ntz_format, multi_line=config.multi_line,
        storage_options=config.storage_options, partition_bases=partition_bases(config, paths),
    )
    data = spec.data_schema
    if config.file_format == "text" and data.names != ["value"]:  # other columns may be partition columns
        found = partitions.infer(spec.partition_bases, FileLister.of_source(config, paths).list())
        data = pa.schema([f for f in data if f.name not in {p.name for p in found}])
    if config.file_format == "text" and (data.names != ["value"] or data.field("value").type != pa.string()):
        raise OptionError(FORMAT, "fileFormat", "text",
                          "the text format has one column, value string, besides partition columns")
    if not data.names:
        raise OptionError(FORMAT, "fileFormat", config.file_format, "the schema has no data column")
    return spec
