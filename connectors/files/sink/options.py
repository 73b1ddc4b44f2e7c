"""Options of the ``connectors.files`` sink (Flink's FileSink, with Spark's spelling of shared names)."""

from __future__ import annotations

import codecs
import dataclasses
from datetime import timedelta
from typing import Any, Protocol

from connectors.core.avro_options import avro_record_schema, resolve_schema_url
from connectors.core.filesystem import STORAGE_OPTIONS, parse_storage_options
from connectors.core.options import (
    OptionError,
    Options,
    choice,
    option,
    parse_bool,
    parse_duration,
    parse_size,
    positive,
    single_char,
)
from connectors.files import FORMAT
from connectors.files.datetime_patterns import DateTimeFormat, strftime_pattern
from connectors.files.sink.buckets import DEFAULT_FORMAT, parse_zone
from connectors.files.sink.codecs import ROW_CODECS
from connectors.files.sink.csv_lines import CsvDialect
from connectors.files.sink.formats import AVRO_CODECS, PARQUET_CODECS, AvroLayout, RowOptions
from connectors.files.sink.rolling import (
    DEFAULT_INTERVAL,
    DEFAULT_PART_SIZE,
    RollingRules,
)

ROW_FORMATS = ("text", "csv", "json")
BULK_FORMATS = ("parquet", "avro")


def _pattern(text: str) -> str:
    strftime_pattern(text)
    return text


def _time_pattern(kind: str):
    def parse(text: str) -> str:
        DateTimeFormat.of(text, kind)  # unsupported letters fail here, at query start
        return text

    return parse


def _encoding(text: str) -> str:
    """A charset name as Python's codec name; one that writes a byte order mark is refused."""
    try:
        name = codecs.lookup(text.strip()).name
    except LookupError:
        raise ValueError("unknown charset") from None
    if name in ("utf-16", "utf-32", "utf-8-sig"):
        # Java writes one BOM at the start of a file; a part grows by appends, which would repeat it
        raise ValueError("a charset with a byte order mark is not supported: name the byte order (UTF-16LE, UTF-16BE)")
    return name


def _not_empty(text: str) -> None:
    if not text:
        raise ValueError("must not be empty")


def _no_separator(text: str) -> None:
    if "/" in text or "\\" in text:
        raise ValueError("must not contain a path separator")


@dataclasses.dataclass(frozen=True)
class FileSinkOptions(Options):
    """The sink's options; ``path`` is the base path (``save(path)`` or ``option("path", ...)``)."""

    source_name = FORMAT

    path: str = option("path", doc="base path: a local directory or an fsspec URL such as s3://bucket/dir (required)")
    file_format: str = option(
        "fileFormat", choice(*ROW_FORMATS, *BULK_FORMATS),
        doc="text | csv | json (JSON lines) | parquet | avro (required)"
    )
    compression: str | None = option(
        "compression", choice(*dict.fromkeys((*ROW_CODECS, *PARQUET_CODECS, *AVRO_CODECS))), default=None,
        doc="row formats: none (default), uncompressed, bzip2, deflate, gzip, lz4 or snappy, as Spark's "
            "(part names get the codec's extension); parquet: snappy (default), "
            "none, uncompressed, gzip, lz4, lz4_raw or zstd; avro: snappy (default), none, uncompressed, deflate, "
            "bzip2, xz, zstandard or zstd, as Spark's",
    )
    header: bool = option("header", parse_bool, default=False, doc="csv: start each part file with the column names")
    sep: str | None = option("sep", default=None, checks=[single_char], doc="csv field separator (default ,)")
    delimiter: str | None = option("delimiter", default=None, checks=[single_char], doc="alias of sep")
    escape: str | None = option(
        "escape", default=None, checks=[single_char],
        doc='csv: escapes the quote (and itself) inside quotes (default \\, as Spark\'s; " for RFC 4180)',
    )
    null_value: str | None = option(
        "nullValue", default=None,
        doc="csv: the text of a null (default empty); written unquoted, so it must not need quotes",
    )
    empty_value: str | None = option(
        "emptyValue", default=None,
        doc='csv: the text of an empty string (default "", quoted); an empty emptyValue writes an empty field',
    )
    quote_all: bool | None = option(
        "quoteAll", parse_bool, default=None, doc="csv: quote every field, nulls (their nullValue) too (default false)"
    )
    line_sep: str | None = option(
        "lineSep", default=None, checks=[_not_empty],
        doc="csv (one character) and json: the text ending each row (default \\n)",
    )
    encoding: str | None = option(
        "encoding", _encoding, default=None,
        doc="csv and json: the charset of the files (default UTF-8); unmappable characters become ?",
    )
    ignore_null_fields: bool | None = option(
        "ignoreNullFields", parse_bool, default=None,
        doc="json: leave struct fields that are null out of the objects (default true, as Spark's)",
    )
    timestamp_format: str | None = option(
        "timestampFormat", _time_pattern("timestamp"), default=None,
        doc="csv and json: Java pattern of timestamps, in UTC (default ISO 8601 with microseconds)",
    )
    timestamp_ntz_format: str | None = option(
        "timestampNTZFormat", _time_pattern("timestamp_ntz"), default=None,
        doc="csv and json: Java pattern of timestamp_ntz values (default ISO 8601 with microseconds)",
    )
    date_format: str | None = option(
        "dateFormat", _time_pattern("date"), default=None, doc="csv and json: Java pattern of dates (default yyyy-MM-dd)"
    )
    avro_schema: str | None = option(
        "avroSchema", avro_record_schema, default=None,
        doc="avro: the parts' schema (Avro JSON record) instead of the one derived from the columns, e.g. for enums; "
            "every column must have a field of a type that holds it",
    )
    avro_schema_url: str | None = option(
        "avroSchemaUrl", default=None, checks=[_not_empty],
        doc="avro: path or fsspec URL of a file holding that schema (avroSchema wins if both are given)",
    )
    record_name: str = option(
        "recordName", default="topLevelRecord", checks=[_not_empty], doc="avro: the name of the derived top record",
    )
    record_namespace: str = option("recordNamespace", default="", doc="avro: the namespace of the derived records")
    positional_field_matching: bool = option(
        "positionalFieldMatching", parse_bool, default=False,
        doc="avro with avroSchema: columns go to the record's fields by position, whatever their names",
    )
    auto_compaction: bool | None = option(
        "autoCompaction", parse_bool, default=None,
        doc="row formats: parts of a bucket that roll together are published as one file of at most partSize "
            "(default true; parquet: false only)",
    )
    part_prefix: str = option("partPrefix", default="part", checks=[_no_separator], doc="OutputFileConfig part prefix")
    part_suffix: str = option(
        "partSuffix", default="", checks=[_no_separator],
        doc="OutputFileConfig part suffix, e.g. .json or .csv; row formats: a compression's extension "
            "(.gz, .bz2, ...) is appended unless the suffix ends with it",
    )
    rolling_policy: str | None = option(
        "rollingPolicy", choice("default", "onCheckpoint"), default=None,
        doc="default (row formats' default) or onCheckpoint (parquet's default and only choice)",
    )
    part_size: int | None = option(
        "partSize", parse_size, default=None, checks=[positive], doc="default policy: roll at this size (128MB)"
    )
    rollover_interval: timedelta | None = option(
        "rolloverInterval", parse_duration, default=None, checks=[positive],
        doc="default policy: roll a part open this long (60s)",
    )
    inactivity_interval: timedelta | None = option(
        "inactivityInterval", parse_duration, default=None, checks=[positive],
        doc="default policy: roll a part not written for this long (60s)",
    )
    bucket_check_interval: timedelta = option(
        "bucketCheckInterval", parse_duration, default=timedelta(seconds=60), checks=[positive],
        doc="how often FileSinkListener checks time-based rolling while the query runs",
    )
    bucket_assigner: str = option(
        "bucketAssigner", choice("dateTime", "basePath", "column"), default="dateTime",
        doc="dateTime (processing time), basePath (no sub-directories) or column (column=value directories)",
    )
    bucket_format: str = option("bucketFormat", _pattern, default=DEFAULT_FORMAT, doc="dateTime: directory name pattern")
    bucket_time_zone: str = option("bucketTimeZone", parse_zone, default="UTC", doc="dateTime: time zone (IANA name)")
    bucket_column: str | None = option("bucketColumn", default=None, doc="column: the column naming the bucket")
    storage_options: dict[str, Any] | None = option(
        STORAGE_OPTIONS, parse_storage_options, default=None, secret=True,
        doc="JSON object of fsspec filesystem arguments (endpoint, credentials)",
    )

    def validate(self) -> None:
        if not self.path.strip():
            raise self.error("path", "must not be empty")
        bulk = self.file_format in BULK_FORMATS
        if bulk and self.rolling_policy == "default":
            raise self.error(
                "rollingPolicy", f"fileFormat {self.file_format!r} is a bulk format: only onCheckpoint is allowed"
            )
        if self.rolling_policy_name == "onCheckpoint":
            for name, value in (("partSize", self.part_size), ("rolloverInterval", self.rollover_interval),
                                ("inactivityInterval", self.inactivity_interval)):  # fmt: skip
                if value is not None:
                    raise self.error(name, "applies only to rollingPolicy default, not onCheckpoint")
        if self.compression is not None and not bulk and self.compression not in ROW_CODECS:
            raise self.error("compression", f"row format {self.file_format!r} takes {', '.join(ROW_CODECS)}")
        allowed = {"parquet": PARQUET_CODECS, "avro": AVRO_CODECS}.get(self.file_format, ())
        if self.compression is not None and bulk and self.compression not in allowed:
            raise self.error("compression", f"{self.file_format} takes {', '.join(allowed)}")
        csv_options = (("header", self.header or None), ("sep", self.sep), ("delimiter", self.delimiter),
                       ("escape", self.escape), ("nullValue", self.null_value), ("quoteAll", self.quote_all),
                       ("emptyValue", self.empty_value))  # fmt: skip
        for name, value in csv_options:
            if value is not None and self.file_format != "csv":
                raise self.error(name, f"applies only to fileFormat csv, not {self.file_format}")
        row_options = (("lineSep", self.line_sep), ("encoding", self.encoding),
                       ("timestampFormat", self.timestamp_format), ("timestampNTZFormat", self.timestamp_ntz_format),
                       ("dateFormat", self.date_format))  # fmt: skip
        for name, value in row_options:
            if value is not None and self.file_format not in ("csv", "json"):
                raise self.error(name, f"applies only to fileFormat csv or json, not {self.file_format}")
        if self.ignore_null_fields is not None and self.file_format != "json":
            raise self.error("ignoreNullFields", f"applies only to fileFormat json, not {self.file_format}")
        if self.line_sep is not None and self.file_format == "csv":
            if len(self.line_sep) != 1:
                raise self.error("lineSep", "csv takes a single character, as Spark's")
            if self.line_sep in (self.csv_dialect.sep, self.csv_dialect.escape, '"'):
                raise self.error("lineSep", "must not be the separator, the escape or the quote")
        if self.null_value:
            dialect = self.csv_dialect
            if any(c in self.null_value for c in (dialect.sep, dialect.escape, dialect.line_sep, '"', "\r", "\n")):
                # Spark quotes such a nullValue; Arrow's writer cannot, and the file would not read back
                raise self.error("nullValue", "must not hold the separator, the escape, a quote or a line break")
        if self.empty_value == "" and self.null_value and not self.quote_all:
            # both would be written as a null is: Arrow has one text for unquoted empty fields
            raise self.error("emptyValue", "an empty emptyValue needs nullValue empty too (or quoteAll)")
        if self.sep is not None and self.delimiter is not None and self.sep != self.delimiter:
            raise self.error("delimiter", f"conflicts with sep = {self.sep!r}")
        if self.escape is not None and (self.escape == self.csv_dialect.sep or self.escape in "\r\n"):
            raise self.error("escape", "must not be the separator or a line break")
        avro_options = (("avroSchema", self.avro_schema), ("avroSchemaUrl", self.avro_schema_url),
                        ("recordName", None if self.record_name == "topLevelRecord" else self.record_name),
                        ("recordNamespace", self.record_namespace or None),
                        ("positionalFieldMatching", self.positional_field_matching or None))  # fmt: skip
        for name, value in avro_options:
            if value is not None and self.file_format != "avro":
                raise self.error(name, f"applies only to fileFormat avro, not {self.file_format}")
        resolve_schema_url(self)
        if self.auto_compaction and bulk:
            raise self.error(
                "autoCompaction", f"fileFormat {self.file_format!r} is a bulk format: parts cannot be concatenated"
            )
        if self.bucket_assigner == "column" and not self.bucket_column:
            raise self.error("bucketAssigner", "column needs the option bucketColumn")
        if self.bucket_column and self.bucket_assigner != "column":
            raise self.error("bucketColumn", f"applies only to bucketAssigner column, not {self.bucket_assigner}")

    @property
    def avro_layout(self) -> AvroLayout:
        return AvroLayout(self.avro_schema, self.record_name, self.record_namespace, self.positional_field_matching)

    @property
    def rolling_policy_name(self) -> str:
        return self.rolling_policy or ("onCheckpoint" if self.file_format in BULK_FORMATS else "default")

    @property
    def csv_dialect(self) -> CsvDialect:
        return CsvDialect(self.sep or self.delimiter or ",", self.escape or "\\", self.null_value or "",
                          bool(self.quote_all), self.line_sep or "\n", self.empty_value)  # fmt: skip

    @property
    def row_options(self) -> RowOptions:
        """How csv and json rows are encoded."""
        return RowOptions(self.csv_dialect, self.ignore_null_fields is not False, self.timestamp_format,
                          self.timestamp_ntz_format, self.date_format, self.line_sep or "\n",
                          None if self.encoding in (None, "utf-8") else self.encoding)  # fmt: skip

    @property
    def compacts(self) -> bool:
        """Whether parts rolling together in one bucket are concatenated into one file."""
        return self.file_format not in BULK_FORMATS and self.auto_compaction is not False

    @property
    def codec(self) -> str:
        """The effective compression: a name in ``ROW_CODECS`` for row formats, a parquet or avro codec otherwise."""
        return self.compression or ("snappy" if self.file_format in BULK_FORMATS else "none")

    @property
    def final_suffix(self) -> str:
        """What ends a part's final name: a compressed row-format part ends with its codec's
        extension, by which Spark's readers (and this project's source) tell the codec."""
        if self.file_format in BULK_FORMATS:
            return self.part_suffix
        return ROW_CODECS[self.codec].suffix(self.part_suffix)

    @property
    def rules(self) -> RollingRules:
        return RollingRules(
            on_checkpoint=self.rolling_policy_name == "onCheckpoint",
            part_size=self.part_size or DEFAULT_PART_SIZE,
            rollover_seconds=(self.rollover_interval or DEFAULT_INTERVAL).total_seconds(),
            inactivity_seconds=(self.inactivity_interval or DEFAULT_INTERVAL).total_seconds(),
        )


class TypedConfig(Protocol):
    """A typed config with Flink's name (``config.py``): it renders to the sink's options."""

    def to_options(self) -> dict[str, str]: ...


def validate_config(config: TypedConfig) -> None:
    """Check a typed config's options on their own, as :class:`FileSinkOptions` checks them:
    the one validation of every rolling policy, output file config and bucket assigner."""
    specs = {spec.name: spec for spec in FileSinkOptions.specs().values()}
    options = config.to_options()
    for name, text in options.items():
        FileSinkOptions._parse_one(specs[name], text)
    if options.get("bucketAssigner") == "column" and not options.get("bucketColumn", "").strip():
        raise OptionError(FORMAT, "bucketColumn", options.get("bucketColumn"), "must name a column")
