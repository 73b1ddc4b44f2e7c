"""The source's schema: inference for batch reads, and checks of a user schema against the options.

Text has the fixed column ``value string``. Parquet and Avro files carry their schema (the first
file's is used; every file's merged with parquet's ``mergeSchema``; ``avroSchema`` replaces it).
CSV and JSON are sampled (the first MiB of the first few files) for batch reads; a stream
needs a user schema for them (``spark.readStream.schema(...)``), as in Spark, because a schema
guessed from whatever files exist when the query first starts would silently change between
restarts. Inferred schemas are marked in their first field's metadata so the stream side can tell.
"""

from __future__ import annotations

import codecs
import collections
import dataclasses
import datetime
import functools
import io
import re
from decimal import Decimal
from collections.abc import Callable, Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    NullType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from connectors.core.arrow import arrow_schema
from connectors.core.filesystem import filesystem
from connectors.core.options import OptionError
from connectors.files import FORMAT
from connectors.files.datetime_patterns import DateTimePattern
from connectors.files.source import partitions
from connectors.files.source.spark_texts import BIG_DECIMAL_TEXT, java_double, java_integer, spark_timestamp
from connectors.files.source.compression import codec_of, decompressing
from connectors.files.source.csv_parser import (
    CsvParser,
    cr_stand_in,
    header_lines,
    header_tokens,
    literal_escapes,
    past_limits,
    white_space_trimmer,
)
from connectors.files.source.json_parser import document_records, line_encoding_problem, strict_json
from connectors.files.source.read_spec import JsonSyntax, ReadSpec
from connectors.files.source.records import separated
from connectors.files.source.split_reader import leaf_physical_types, open_parquet
from connectors.files.source.listing import FileLister, FileStatus
from connectors.files.source.options import SAMPLED_ALL, FileSourceOptions, ascii_incompatible
from connectors.files.source.sampling import LineSample

SAMPLE_BYTES = 1 << 20
SAMPLE_FILES = 8
INFERRED = "connectors.files.inferred"


def _line_sample(config: FileSourceOptions) -> LineSample | None:
    return LineSample(config.sampling_ratio) if config.sampling_ratio <= SAMPLED_ALL else None


def _sample(file: FileStatus, config: FileSourceOptions, lines: LineSample | None = None) -> bytes:
    """The first ~MiB of a file's (decompressed) content, cut after its last complete line, and of
    its lines those ``lines`` samples (samplingRatio); with multiLine the whole file, as a record may
    span any number of lines."""
    fs, path = filesystem(file.path, config.storage_options)
    with fs.open(path, "rb") as raw:
        data = decompressing(raw, codec_of(file.path)).read(-1 if config.multi_line else SAMPLE_BYTES)
    cut = len(data) == SAMPLE_BYTES and not config.multi_line
    encoding = config.encoding
    if ascii_incompatible(encoding):  # the line code looks for ASCII bytes: it reads UTF-8 (a character cut left out)
        data = codecs.getincrementaldecoder(encoding)(errors="replace").decode(data, final=not cut).encode()
        config = dataclasses.replace(config, encoding="UTF-8")
    separator = (config.line_sep or "\n").encode(config.encoding)
    if cut and separator in data:
        data = data[: data.rfind(separator) + len(separator)]
    if lines is not None:  # Spark samples the lines as they are in the file
        comment = (config.comment or "").encode(config.encoding)
        header = ((lambda line: bool(line.strip(b"\r")) and not (comment and line.startswith(comment)))
                  if config.header and config.file_format == "csv" else None)
        data = lines.lines(data, separator, header)
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
    return data if config.encoding == encoding else data.decode().encode(encoding)  # in the files' encoding


class SchemaInference:
    def __init__(self, config: FileSourceOptions, paths: Sequence[str]):
        self.config, self.paths = config, paths

    def infer(self) -> StructType:
        files = sorted(FileLister.of_source(self.config, self.paths).list().values(), key=lambda f: f.path)
        if self.config.file_format == "text":
            fields = [StructField("value", StringType())]
        else:
            if not files and self.config.avro_schema is None:  # avroSchema gives the columns, as in Spark
                raise OptionError(FORMAT, "path", ", ".join(self.paths),
                                  f"no {self.config.file_format} files to infer a schema from; give a schema with .schema(...)")
            readers = {"parquet": self._parquet, "json": self._json, "csv": self._csv, "avro": self._avro}
            # mergeSchema reads every footer, as Spark's
            arrow = readers[self.config.file_format](files if self.config.merge_schema else files[:SAMPLE_FILES])
            # prefer_timestamp_ntz as Spark 4.2+ defaults it (4.1 did not): the same schema on every line
            fields = from_arrow_schema(arrow, prefer_timestamp_ntz=True).fields
        # As Spark: partition columns come last, and one named like a data column replaces it.
        found = partitions.infer(partition_bases(self.config, self.paths), (f.path for f in files))
        names = {f.name for f in found}
        schema = StructType([StructField(f.name, f.dataType, True) for f in fields if f.name not in names] + found)
        if self.config.file_format != "text" and schema.fields:  # (json's struct<> is not marked)
            schema.fields[0].metadata = {INFERRED: True}
        return self._with_metadata_columns(schema)

    def _parquet(self, files: list[FileStatus]) -> pa.Schema:
        if not self.config.merge_schema:
            return self._parquet_schema(files[0])
        merged = StructType([])
        for file in files:
            schema = from_arrow_schema(self._parquet_schema(file), prefer_timestamp_ntz=True)
            try:
                merged = _merged(merged, schema)
            except _MergeConflict as exc:
                raise OptionError(FORMAT, "mergeSchema", "true", f"cannot merge the schema of {file.path} with the "
                                  f"files' before it: {exc} (Spark's CANNOT_MERGE_SCHEMAS)") from None
        return arrow_schema(merged)

    def _parquet_schema(self, file: FileStatus) -> pa.Schema:
        fs, path = filesystem(file.path, self.config.storage_options)
        with fs.open(path, "rb") as raw:
            parquet = open_parquet(raw)
            physical = leaf_physical_types(parquet)
            # Spark reads the void columns of its own files (array(), map()) by the schema it stores: void
            types = _SPARK_TYPES if _SPARK_ROW_METADATA in (parquet.metadata.metadata or {}) else _SPARK_PARQUET_TYPES
            return pa.schema([f.with_type(_int96_as_instants(f.type, physical, types)) for f in parquet.schema_arrow])

    def _avro(self, files: list[FileStatus]) -> pa.Schema:
        from connectors.core import avro  # fastavro: only where an Avro schema is read

        prefix = self.config.union_prefix
        if self.config.avro_schema is not None:
            return arrow_schema(avro.read_type(avro.parse(self.config.avro_schema), prefix))
        fs, path = filesystem(files[0].path, self.config.storage_options)
        try:
            with fs.open(path, "rb") as raw:
                schema_json = avro.read_header(raw)[0]
            return arrow_schema(avro.read_type(avro.parse(schema_json), prefix))
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
        parse = functools.partial(syntax.loads, parse_float=Decimal if config.prefers_decimal else None,
                                  object_pairs_hook=_JsonObject)
        value_type = functools.partial(_json_type, primitives_as_string=config.primitives_as_string,
                                       text_type=_json_text_type(config))
        lines = _line_sample(config)
        problem = line_encoding_problem(config.encoding, config.line_sep, config.multi_line)
        if problem:  # rows of nulls otherwise
            raise OptionError(FORMAT, "encoding", config.encoding, f"cannot read {files[0].path}: {problem}")
        for file in files:
            for line in _sample(file, config, lines).decode(config.encoding, errors="replace").splitlines():
                if not line.strip():
                    continue
                record = _json_record(line[1:] if line.startswith("\ufeff") else line, parse, syntax)  # after a BOM
                if record is _COMMENTS:
                    continue
                # as Spark's compatibleRootType: an array's elements are records, null ones none
                kind = None if record is _NOT_JSON else value_type(record)
                while isinstance(kind, ArrayType):
                    kind = kind.elementType
                if isinstance(kind, NullType):
                    continue
                if not isinstance(kind, StructType):
                    if self.config.mode == "FAILFAST":
                        raise OptionError(FORMAT, "path", file.path,
                                          f"cannot infer a schema: a line is not a JSON object: {line[:200]!r}")
                    corrupt = True
                    continue
                inferred = _wider_json(inferred, kind)
            # as Spark's check of the schema it infers, which fails the whole read; once there, a duplicate stays
            duplicate = _case_duplicate(_canonical(inferred, config.drop_field_if_all_null))
            if duplicate:
                raise OptionError(FORMAT, "path", file.path, f"cannot infer a schema: {duplicate} (spark.sql."
                                  "caseSensitive is false: Spark fails such a read too, COLUMN_ALREADY_EXISTS)")
        canonical = _canonical(inferred, config.drop_field_if_all_null)
        fields = list(canonical.fields) if isinstance(canonical, StructType) else []
        if corrupt and self.config.mode == "PERMISSIVE":
            name = self.config.column_name_of_corrupt_record
            fields = sorted([f for f in fields if f.name != name] + [StructField(name, StringType())], key=lambda f: f.name)
        return arrow_schema(StructType(fields))

    def _csv(self, files: list[FileStatus]) -> pa.Schema:
        # as the reader: in UTF-8, the bytes that are no character as U+FFFD (pyarrow would fail on them)
        def sample(file: FileStatus, lines: LineSample | None = None) -> bytes:
            return _sample(file, self.config, lines).decode(self.config.encoding, errors="replace").encode()

        config = dataclasses.replace(self.config, encoding="UTF-8")
        first_sample = sample(files[0])
        # The header, or the line giving the number of columns: the first not blank, Spark's (its
        # Dataset's trim drops only spaces; multiLine's parser skips only empty lines)
        blank = b"\r" if config.multi_line else b" \r"
        first = header_lines(first_sample, blank) - 1
        first_line = first_sample.split(b"\n", first + 1)[first].decode(config.encoding, "replace").removeprefix("\ufeff")
        cr_data = config.line_sep is not None and "\r" not in config.line_sep  # \r is data then, as in Spark

        def check_limits(file: FileStatus, records: list[list[str]], longest: int = 0) -> None:
            """Spark's parser fails the inference on a record past maxColumns or maxCharsPerColumn, in any mode."""
            longest = max([longest, *(len(value) for values in records for value in values)])
            past = past_limits(max(map(len, records), default=0), longest, config.max_columns,
                               config.max_chars_per_column)
            if past:
                raise config.error(past[0], f"cannot infer a schema: a record of {file.path} has {past[1]}")

        tokens = header_tokens(first_line, config.separator, config.quote, cr_data)
        check_limits(files[0], [tokens])  # the header, or the first line: parsed whatever inferSchema
        names = _safe_header(tokens, config.null_value) if config.header else [f"_c{i}" for i in range(len(tokens))]
        if not config.infer_schema:
            return pa.schema([(name, pa.string()) for name in names])
        inference = CsvInference(config)
        types: list[DataType] = [NullType()] * len(names)
        lines = _line_sample(config)  # the names come from the first line whatever is sampled, as in Spark
        escapes = literal_escapes(config.separator, config.quote, config.escape, config.encoding,
                                  config.multi_line or config.line_sep is not None)
        for file in files:  # one fold over every file, as Spark's over a partition of small files
            data = first_sample if file is files[0] and lines is None else sample(file, lines)
            if not config.multi_line:  # lines of spaces are dropped, as by Spark's Dataset trim
                data = re.sub(rb"(?m)^ +(?=\r?$)", b"", data)
            data = escapes(data)
            data, cr = cr_stand_in(data, config.separator + config.quote + config.escape + (config.comment or "")) \
                if cr_data else (data, None)
            skipped: list[str] = []  # records of too few or too many values: not inferred from, but parsed by Spark
            table = pacsv.read_csv(
                io.BytesIO(data),
                read_options=pacsv.ReadOptions(column_names=names, skip_rows=header_lines(data) if config.header else 0,
                                               encoding=config.encoding),
                parse_options=pacsv.ParseOptions(delimiter=config.separator, quote_char=config.quote != "\0" and config.quote,
                                                 escape_char=config.escape != config.quote and config.escape,
                                                 newlines_in_values=config.multi_line or config.line_sep is not None,
                                                 invalid_row_handler=lambda row: skipped.append(row.text) or "skip"),
                convert_options=pacsv.ConvertOptions(column_types=dict.fromkeys(names, pa.string())),
            )
            columns = [table.column(name) if cr is None else pc.replace_substring(table.column(name), cr, "\r")
                       for name in names]
            longest = max((pc.max(pc.utf8_length(column)).as_py() or 0 for column in columns), default=0) \
                if config.max_chars_per_column >= 0 else 0
            check_limits(file, [header_tokens(record, config.separator, config.quote, cr_data) for record in skipped],
                         longest)
            types = [inference.column_type(so_far, column) for so_far, column in zip(types, columns)]
        return arrow_schema(StructType([StructField(name, _canonical(kind) or StringType())
                                        for name, kind in zip(names, types)]))

    def _with_metadata_columns(self, schema: StructType) -> StructType:
        if self.config.file_path_column:
            schema = schema.add(self.config.file_path_column, StringType())
        if self.config.file_modification_time_column:
            schema = schema.add(self.config.file_modification_time_column, TimestampType())
        return schema


def _int96_as_instants(kind: pa.DataType, physical: Iterator[str],
                       types: dict[pa.DataType, pa.DataType] | None = None) -> pa.DataType:
    """``kind`` with its INT96 timestamps as UTC instants, as Spark infers them (``timestamp``):
    pyarrow reads them zone-less; and its other types as Spark infers them (``_SPARK_PARQUET_TYPES``).
    ``physical`` gives the physical types of the parquet leaf columns
    in the order the Arrow type's leaves come (depth first)."""
    if pa.types.is_struct(kind):
        return pa.struct([f.with_type(_int96_as_instants(f.type, physical, types)) for f in kind])
    if pa.types.is_map(kind):
        key = kind.key_field.with_type(_int96_as_instants(kind.key_type, physical, types))
        return pa.map_(key, kind.item_field.with_type(_int96_as_instants(kind.item_type, physical, types)))
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        item = kind.value_field.with_type(_int96_as_instants(kind.value_type, physical, types))
        return pa.list_(item) if pa.types.is_list(kind) else pa.large_list(item)
    if next(physical) == "INT96" and pa.types.is_timestamp(kind):
        return pa.timestamp(kind.unit, "UTC")
    return (_SPARK_PARQUET_TYPES if types is None else types).get(kind, kind)


# Parquet types Spark reads as others: unsigned integers as the next wider signed type (UINT_64 as
# decimal(20,0)), a column of nulls (pyarrow's UNKNOWN logical type) as int, and pyarrow's durations (plain
# INT64 columns, typed only by pyarrow's ARROW:schema) as bigint. pyarrow reads them as types Spark has none
# for (``uint8``, ``null``: void) or as others (an interval); the reader casts the values.
_SPARK_PARQUET_TYPES = {
    pa.uint8(): pa.int16(), pa.uint16(): pa.int32(), pa.uint32(): pa.int64(), pa.uint64(): pa.decimal128(20, 0),
    pa.null(): pa.int32(), **{pa.duration(unit): pa.int64() for unit in ("s", "ms", "us", "ns")},
}
_SPARK_TYPES = {kind: spark for kind, spark in _SPARK_PARQUET_TYPES.items() if kind != pa.null()}
_SPARK_ROW_METADATA = b"org.apache.spark.sql.parquet.row.metadata"  # the schema of the file Spark wrote


class _MergeConflict(ValueError):
    pass


def _merged(left: DataType, right: DataType) -> DataType:
    """Spark's ``StructType.merge``: struct fields by name (new ones last), arrays and maps by their
    parts, other types only with themselves: no widening, not even int to bigint."""
    if isinstance(left, StructType) and isinstance(right, StructType):
        others = {f.name: f for f in right.fields}
        fields = [StructField(f.name, _merged(f.dataType, others[f.name].dataType), f.nullable or others[f.name].nullable)
                  if f.name in others else f for f in left.fields]
        names = set(left.fieldNames())
        return StructType(fields + [f for f in right.fields if f.name not in names])
    if isinstance(left, ArrayType) and isinstance(right, ArrayType):
        return ArrayType(_merged(left.elementType, right.elementType), left.containsNull or right.containsNull)
    if isinstance(left, MapType) and isinstance(right, MapType):
        return MapType(_merged(left.keyType, right.keyType), _merged(left.valueType, right.valueType),
                       left.valueContainsNull or right.valueContainsNull)
    if left != right:
        raise _MergeConflict(f"incompatible data types {left.simpleString()} and {right.simpleString()}")
    return left


_MAX_DIGITS = 38  # of a Spark decimal
_INTEGER_DECIMALS = {IntegerType: DecimalType(10, 0), LongType: DecimalType(20, 0)}  # Spark's DecimalType.forType


_NOT_JSON, _COMMENTS = object(), object()


def _json_record(line: str, parse: Callable[[str], object], syntax: JsonSyntax) -> object:
    """The JSON value of a line, as Spark's inference reads it: of the lenient ``syntax``, what
    follows the first value unread; ``_NOT_JSON`` if it is not JSON, ``_COMMENTS`` if only comments."""
    try:
        return parse(line)
    except ValueError:
        pass
    text = strict_json(line, syntax) if syntax.lenient else None
    if text == "":
        return _COMMENTS
    try:
        if text is not None:
            return parse(text)
    except ValueError:
        pass
    records = document_records(line, syntax)  # the first value (an array's elements), as written
    try:
        values = None if records is None else [parse(record) for record in records]
    except ValueError:
        return _NOT_JSON
    if values is None or not values and not line.lstrip().startswith("["):
        return _NOT_JSON
    return values if line.lstrip().startswith("[") else values[0]


def _json_text_type(config: FileSourceOptions) -> Callable[[str], DataType]:
    """The type Spark's JSON inference gives a string that is not empty: with ``prefersDecimal`` a
    decimal where :func:`_decimal_text_type` gives one, then with ``inferTimestamp`` a timestamp where
    ``timestampFormat`` (unset: Spark's lenient parser) reads it, else string."""
    tests: list[Callable[[str], DataType | None]] = []
    if config.prefers_decimal:
        tests.append(_decimal_text_type)
    if config.infer_timestamp:
        if config.timestamp_format:
            pattern, kind = DateTimePattern.of(config.timestamp_format), pa.timestamp("us", "UTC")
            tests.append(lambda text: TimestampType() if pattern.parse(pa.array([text]), kind)[0].is_valid else None)
        else:  # Spark tries timestamp_ntz first only where spark.sql.timestampType makes it the default
            tests.append(lambda text: TimestampType() if spark_timestamp(text) is not None else None)
    if not tests:
        return lambda text: StringType()
    return lambda text: next((kind for test in tests if (kind := test(text)) is not None), StringType())


def _json_type(value: object, primitives_as_string: bool = False,
               text_type: Callable[[str], DataType] = lambda text: StringType()) -> DataType:
    """The Spark type of one JSON value, as Spark's JSON inference gives it (a number with a
    fraction or an exponent is a Decimal with prefersDecimal; a string's by ``text_type``)."""
    if value is None:
        return NullType()
    if isinstance(value, str):  # before primitivesAsString, as in Spark: it applies to numbers and booleans
        # "" is null, so that it widens no column: JSON writers may write it for a null
        return text_type(value) if value else NullType()
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
    if isinstance(value, _JsonObject):
        return StructType(sorted((StructField(k, _json_type(v, primitives_as_string, text_type))
                                  for k, v in value), key=lambda f: f.name))
    if isinstance(value, list):
        element: DataType = NullType()
        for item in value:
            element = _wider_json(element, _json_type(item, primitives_as_string, text_type))
        return ArrayType(element)
    return StringType()


def _decimal_text_type(text: str) -> DecimalType | None:
    """The type Spark's JSON inference gives a string with prefersDecimal: that of Java's BigDecimal
    of it without its commas (Spark's parser of the default locale); None (a string) where that is
    no number or Spark's DecimalType refuses its precision and scale (a scale below 0 or above the
    precision: ``1e5``, ``0.001``; over 38 digits)."""
    text = text.replace(",", "")
    if BIG_DECIMAL_TEXT.fullmatch(text) is None:
        return None
    _, digits, exponent = Decimal(text).as_tuple()
    precision, scale = len(digits), -int(exponent)
    return DecimalType(precision, scale) if 0 <= scale <= precision <= _MAX_DIGITS else None


class _JsonObject(list):
    """An object's (key, value) pairs, a key twice kept twice: Spark's inference keeps both."""


def _wider_json(left: DataType, right: DataType) -> DataType:
    """Spark's ``compatibleType``: one type that holds values of both. Structs merge by their sorted
    names, each name's fields in turn (a name twice in one struct stays twice)."""
    tightest = _tightest(left, right)
    if tightest is not None:
        return tightest
    if isinstance(left, StructType) and isinstance(right, StructType):
        fields, rest = [], collections.deque(right.fields)
        for field in left.fields:
            while rest and rest[0].name < field.name:
                fields.append(rest.popleft())
            if rest and rest[0].name == field.name:
                field = StructField(field.name, _wider_json(field.dataType, rest.popleft().dataType))
            fields.append(field)
        return StructType(fields + list(rest))
    if isinstance(left, ArrayType) and isinstance(right, ArrayType):
        return ArrayType(_wider_json(left.elementType, right.elementType))
    numbers = (LongType, DecimalType, DoubleType)
    if isinstance(left, numbers) and isinstance(right, numbers):
        if isinstance(left, DoubleType) or isinstance(right, DoubleType):
            return DoubleType()
        return _wider_decimal(left, right)
    return StringType()


def _tightest(left: DataType, right: DataType) -> DataType | None:
    """Spark's ``findTightestCommonType``, which ``compatibleType`` tries first, for the types json
    inference gives: structs whose names pair up in order, case aside (Spark's case-insensitive
    resolver), are one struct of the left names: ``{"a":1}`` and ``{"A":2.5}`` give ``a double``."""
    if left == right or isinstance(right, NullType):
        return left
    if isinstance(left, NullType):
        return right
    if isinstance(left, StructType) and isinstance(right, StructType):
        if len(left.fields) != len(right.fields):
            return None
        fields = []
        for one, other in zip(left.fields, right.fields):
            kind = _tightest(one.dataType, other.dataType) if one.name.lower() == other.name.lower() else None
            if kind is None:
                return None
            fields.append(StructField(one.name, kind))
        return StructType(fields)
    if isinstance(left, ArrayType) and isinstance(right, ArrayType):
        element = _tightest(left.elementType, right.elementType)
        return None if element is None else ArrayType(element)
    if {type(left), type(right)} == {LongType, DoubleType}:
        return DoubleType()
    decimal = left if isinstance(left, DecimalType) else right
    if {type(left), type(right)} == {LongType, DecimalType} and decimal.precision - decimal.scale >= 20:
        return decimal  # Spark's DecimalType.isWiderThan(LongType)
    return None


def _case_duplicate(data_type: DataType | None, path: str = "") -> str | None:
    """The first two fields of one struct, at any depth, whose names are equal case aside, as Spark's
    ``checkSchemaColumnNameDuplication`` (case-insensitive) finds them."""
    if isinstance(data_type, ArrayType):
        return _case_duplicate(data_type.elementType, path)
    if isinstance(data_type, MapType):
        return _case_duplicate(data_type.keyType, path) or _case_duplicate(data_type.valueType, path)
    if not isinstance(data_type, StructType):
        return None
    seen: dict[str, str] = {}
    for field in data_type.fields:
        if field.name.lower() in seen:
            return f"keys `{path}{seen[field.name.lower()]}` and `{path}{field.name}` are one column to Spark"
        seen[field.name.lower()] = field.name
    return next((found for f in data_type.fields if (found := _case_duplicate(f.dataType, f"{path}{f.name}."))), None)


def _wider_decimal(left: DataType, right: DataType) -> DataType:
    """Spark's widening of two decimals (or integers, as the decimals that hold them): double past 38 digits."""
    left_d, right_d = (_INTEGER_DECIMALS.get(type(t), t) for t in (left, right))
    scale = max(left_d.scale, right_d.scale)
    digits = max(left_d.precision - left_d.scale, right_d.precision - right_d.scale) + scale
    return DecimalType(digits, scale) if digits <= _MAX_DIGITS else DoubleType()


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


# csv inference: Spark's CSVInferSchema. A value is tried as each type of a chain in turn, from the
# column's type so far on; the first that reads it is merged with that type (string if they do not
# merge). The fold is in order, as Spark's: a column that became a string stays one.
_ISO_DATE_TEXT = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})")  # yyyy-MM-dd, strict


def _valid_date(year: str, month: str, day: str) -> bool:
    try:
        datetime.date(int(year), int(month), int(day))
    except ValueError:  # also year 0, which Spark reads and Python's date holds not
        return False
    return True


def _big_decimal(text: str) -> DecimalType | None:
    """The decimal type Spark infers for ``text`` (Java's BigDecimal of it): only for a scale of 0,
    an integer too big for a long or written with a point or an exponent (``5.``, ``1.5e1``)."""
    match = BIG_DECIMAL_TEXT.fullmatch(text)
    if match is None:
        return None
    whole, fraction, only_fraction, exponent = match.groups()
    fraction = only_fraction or fraction
    scale = len(fraction) - int(exponent or 0)
    precision = max(len(((whole or "") + fraction).lstrip("0")), 1)
    return DecimalType(precision, 0) if scale == 0 and precision <= _MAX_DIGITS else None


class CsvInference:
    """Spark's csv type inference (``CSVInferSchema``), one column of values at a time."""

    def __init__(self, config: FileSourceOptions):
        self.null_value = config.null_value
        self.prefer_date = config.prefer_date
        self.float_texts = {config.nan_value, config.positive_inf, config.negative_inf}
        self.patterns = {kind: DateTimePattern.of(pattern) for kind, pattern in (
            (pa.date32(), config.date_format), (pa.timestamp("us", "UTC"), config.timestamp_format)) if pattern}
        # Spark: dates mixed with timestamps are timestamps where its default timestamp parser
        # reads the dates too; strings where a pattern is given to either
        self.dates_are_timestamps = config.timestamp_format is None and config.date_format in _LENIENT_DATE_FORMATS

    def column_type(self, so_far: DataType, values: pa.ChunkedArray) -> DataType:
        # A value seen again leaves the type as it is: each once, in the order they first come.
        values = pc.unique(values.combine_chunks())
        # values a dateFormat or timestampFormat reads: in one go, before the per value fold
        parsed = {kind: pattern.parse(values, kind).is_valid().to_pylist() for kind, pattern in self.patterns.items()}
        steps = self._steps(parsed)
        for row, text in enumerate(values.to_pylist()):
            if isinstance(so_far, StringType):
                break  # nothing widens it
            if text is None or text == "" or text == self.null_value:
                continue
            start = next(i for i, (kinds, _) in enumerate(steps) if isinstance(so_far, kinds))
            found = next((kind for _, test in steps[start:] if (kind := test(row, text)) is not None), StringType())
            so_far = self._wider(so_far, found) or StringType()
        return so_far

    def _steps(self, parsed: dict) -> list[tuple[tuple[type, ...], Callable[[int, str], DataType | None]]]:
        """The chain: each step with the types so far it starts at, and its test of a value."""

        def by_pattern(kind: pa.DataType, default: Callable[[str], bool]) -> Callable[[int, str], bool]:
            if kind in parsed:  # a pattern given: only it, as Spark's formatter of that option
                return lambda row, text: parsed[kind][row]
            return lambda row, text: default(text)

        # preferDate=false: no value is a date, dates are tried as timestamps (Spark's tryParseDouble)
        date = (by_pattern(pa.date32(), lambda text: bool((m := _ISO_DATE_TEXT.fullmatch(text)) and _valid_date(*m.groups())))
                if self.prefer_date else lambda row, text: False)
        timestamp = by_pattern(pa.timestamp("us", "UTC"), lambda text: spark_timestamp(text) is not None)

        def when(test: Callable[[int, str], bool], kind: DataType) -> Callable[[int, str], DataType | None]:
            return lambda row, text: kind if test(row, text) else None

        def integer(bits: int) -> Callable[[int, str], bool]:
            return lambda row, text: java_integer(text, bits) is not None

        return [
            ((NullType, IntegerType), when(integer(32), IntegerType())),
            ((LongType,), when(integer(64), LongType())),
            ((DecimalType,), lambda row, text: _big_decimal(text)),
            ((DoubleType,), when(lambda row, text: text in self.float_texts or java_double(text) is not None, DoubleType())),
            ((DateType,), when(date, DateType())),
            # Spark tries timestamp_ntz first only where spark.sql.timestampType makes it the default
            ((TimestampType,), when(timestamp, TimestampType())),
            ((BooleanType,), when(lambda row, text: text.lower() in ("true", "false"), BooleanType())),
        ]

    def _wider(self, left: DataType, right: DataType) -> DataType | None:
        if {type(left), type(right)} == {DateType, TimestampType}:
            return TimestampType() if self.dates_are_timestamps else StringType()
        return _csv_wider(left, right)


_NUMBER_RANK = {IntegerType: 0, LongType: 1, DoubleType: 2}
_LENIENT_DATE_FORMATS = {None, "yyyy-MM-dd", "yyyy-M-d", "yyyy-M-dd", "yyyy-MM-d", "yyyy-MM", "yyyy-M", "yyyy"}


def _safe_header(tokens: list[str], null_value: str) -> list[str]:
    """Column names from a csv header, as Spark's ``makeSafeHeader`` (spark.sql.caseSensitive off):
    an empty name or nullValue is ``_c`` and its index, a name found again in any case gets its index."""
    counts = collections.Counter(token.lower() for token in tokens)
    return [f"_c{i}" if not token or token == null_value else f"{token}{i}" if counts[token.lower()] > 1 else token
            for i, token in enumerate(tokens)]


def _csv_wider(left: DataType, right: DataType) -> DataType | None:
    """Spark's ``compatibleType`` of csv inference but for dates with timestamps; None where the
    types do not merge."""
    kinds = {type(left), type(right)}
    if left == right or isinstance(right, NullType):
        return left
    if isinstance(left, NullType):
        return right
    if StringType in kinds:
        return StringType()
    if kinds <= _NUMBER_RANK.keys():
        return max(left, right, key=lambda kind: _NUMBER_RANK[type(kind)])
    if DecimalType in kinds and kinds <= {IntegerType, LongType, DecimalType}:
        return _wider_decimal(left, right)
    if kinds == {DecimalType, DoubleType}:
        return DoubleType()
    return None


def partition_bases(config: FileSourceOptions, paths: Sequence[str]) -> tuple[str, ...]:
    return partitions.bases(paths, config.base_path, config.storage_options)


def json_syntax(config: FileSourceOptions) -> JsonSyntax:
    return JsonSyntax(config.allow_single_quotes, config.allow_comments, config.allow_unquoted_field_names,
                      config.allow_numeric_leading_zeros, config.allow_backslash_escaping_any_character,
                      config.allow_unquoted_control_chars, config.allow_non_numeric_numbers)


def is_inferred(schema: StructType) -> bool:
    return bool(schema.fields) and bool(schema.fields[0].metadata.get(INFERRED))


def _has_void_keys(kind: DataType) -> bool:
    if isinstance(kind, MapType):
        return isinstance(kind.keyType, NullType) or _has_void_keys(kind.keyType) or _has_void_keys(kind.valueType)
    if isinstance(kind, ArrayType):
        return _has_void_keys(kind.elementType)
    return isinstance(kind, StructType) and any(_has_void_keys(f.dataType) for f in kind.fields)


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
    duplicate = _case_duplicate(schema) if config.file_format == "json" else None  # inferred ones are checked
    if duplicate:
        raise OptionError(FORMAT, "schema", schema.simpleString()[:200],
                          f"{duplicate} (spark.sql.caseSensitive is false: Spark refuses it, COLUMN_ALREADY_EXISTS)")
    for field in schema.fields:
        if _has_void_keys(field.dataType):  # pyspark's Arrow schema of it fails, in every Python data source
            given = "inferred from the files" if is_inferred(schema) else "given"
            raise OptionError(FORMAT, "schema", f"{field.name} {field.dataType.simpleString()}",
                              f"the column ({given}) has a map with void keys (as Spark's map() writes), which a "
                              "Python data source cannot return; give a schema without it")
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
        line_sep=config.line_sep, json_syntax=json_syntax(config), whole_text=config.whole_text,
        enforce_schema=config.enforce_schema, max_columns=config.max_columns,
        max_chars_per_column=config.max_chars_per_column,
        date_format=config.date_format, timestamp_format=config.timestamp_format,
        timestamp_ntz_format=config.timestamp_ntz_format, time_zone=config.time_zone, multi_line=config.multi_line,
        avro_schema=config.avro_schema,
        union_prefix=config.union_prefix, positional=config.positional_field_matching,
        datetime_rebase=config.datetime_rebase_mode, int96_rebase=config.int96_rebase_mode,
        storage_options=config.storage_options, partition_bases=partition_bases(config, paths),
    )
    data = spec.data_schema
    if config.file_format == "text" and data.names != ["value"]:  # other columns may be partition columns
        found = partitions.infer(spec.partition_bases, FileLister.of_source(config, paths).list())
        data = pa.schema([f for f in data if f.name not in {p.name for p in found}])
    if config.file_format == "text" and (data.names != ["value"] or data.field("value").type != pa.string()):
        raise OptionError(FORMAT, "fileFormat", "text",
                          "the text format has one column, value string, besides partition columns")
    if not data.names and config.file_format not in ("json", "csv", "avro"):  # struct<>: a row per record, as Spark
        raise OptionError(FORMAT, "fileFormat", config.file_format, "the schema has no data column")
    if not data.names and config.file_format == "csv" and corrupt is not None:
        raise OptionError(FORMAT, "columnNameOfCorruptRecord", corrupt,
                          "the schema has no data column besides it "
                          "(Spark refuses it: QUERY_ONLY_CORRUPT_RECORD_COLUMN)")
    return spec
