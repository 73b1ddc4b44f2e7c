"""Options of the ``connectors.files`` source (Flink's FileSource, Spark's file stream source names)."""

from __future__ import annotations

import codecs
import dataclasses
import json
from datetime import timedelta
from typing import Any

from connectors.core.avro_options import AvroReadOptions, avro_record_schema, resolve_schema_url
from connectors.core.filesystem import STORAGE_OPTIONS, parse_storage_options
from connectors.core.options import (
    OptionError,
    Options,
    choice,
    non_negative,
    option,
    parse_bool,
    parse_duration,
    parse_int,
    parse_size,
    positive,
    single_char,
    supported_choice,
)
from connectors.files import FORMAT
from connectors.files.datetime_patterns import DateTimePattern
from connectors.files.source import rebase
from connectors.files.source.spark_texts import spark_timestamp, zone_id

FORMATS = ("text", "csv", "json", "parquet", "avro")


def ascii_incompatible(encoding: str) -> bool:
    """Whether ``encoding`` writes ASCII characters otherwise than as their ASCII bytes (UTF-16, UTF-32):
    the line and csv code looks for those bytes, so such files are made UTF-8 first."""
    return "\n".encode(encoding) != b"\n"


SAMPLED_ALL = 0.99  # a samplingRatio above it samples nothing out, as in Spark


def _not_empty(value: str) -> None:
    if not value:
        raise ValueError("cannot be an empty string")


def _date_time_pattern(text: str) -> str:
    DateTimePattern.of(text)  # an unsupported letter fails here, at query start
    return text


def _ratio(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise ValueError("must be more than 0 (Spark's sample of no row infers no column)")
    return value


def _unlimited_or_non_negative(value: int) -> None:
    if value < -1:
        raise ValueError("must be -1 (no limit) or a number of characters")


# pyarrow's parser has one fixed way to read a stray quote, and reports none
_unescaped_quote_handling = supported_choice(
    ("STOP_AT_DELIMITER", "STOP_AT_CLOSING_QUOTE", "BACK_TO_DELIMITER", "SKIP_VALUE", "RAISE_ERROR"),
    "STOP_AT_DELIMITER", "(Spark's default) is supported: pyarrow's csv parser cannot read a quote inside a value "
    "the other ways; fix the quoting of the files, or read them with spark.read.csv")


def _locale(text: str) -> str:
    # Spark parses numbers and month and day names by the locale: only en-US's are implemented
    if text.strip().replace("_", "-").lower() != "en-us":
        raise ValueError("only en-US (Spark's default) is supported: the number formats and month and day "
                         "names of other locales are not implemented; read such files with spark.read")
    return text


def _modification_time(text: str) -> str:
    # kept as text, parsed again when listing: a time alone (10:00:00) is today's, as in Spark
    if spark_timestamp(text) is None:
        raise ValueError("not a timestamp; the expected format is YYYY-MM-DDTHH:mm:ss (as Spark), "
                         "in timeZone unless it has an offset or a zone")
    return text


def _time_zone(text: str) -> str:
    if zone_id(text) is None:
        raise ValueError("not a time zone: expected a region id (America/New_York), UTC, Z, or an offset "
                         "(+01:00, -0800, GMT+1), as Spark")
    return text


@dataclasses.dataclass(frozen=True)
class FileSourceOptions(AvroReadOptions, Options):
    """Everything but the paths (``load(path)``, or the ``path``/``paths`` options)."""

    source_name = FORMAT

    file_format: str = option("fileFormat", choice(*FORMATS), doc="text | csv | json (JSON lines) | parquet | avro (required)")
    recursive_file_lookup: bool = option(
        "recursiveFileLookup", parse_bool, default=True, doc="descend into sub-directories (Flink always does)"
    )
    path_glob_filter: str | None = option(
        "pathGlobFilter", default=None, doc="only file names matching this glob, e.g. *.csv"
    )
    modified_before: str | None = option(
        "modifiedBefore", _modification_time, default=None,
        doc="batch reads: only files modified before this time, e.g. 2024-05-01T08:00:00 (in timeZone unless an "
            "offset is given)",
    )
    modified_after: str | None = option(
        "modifiedAfter", _modification_time, default=None,
        doc="batch reads: only files modified after this time, e.g. 2024-05-01T08:00:00 (in timeZone unless an "
            "offset is given)",
    )
    file_name_only: bool = option(
        "fileNameOnly", parse_bool, default=False,
        doc="streams: a file is new unless a file of the same name (not path) was read",
    )
    merge_schema: bool = option(
        "mergeSchema", parse_bool, default=False,
        doc="parquet inference: merge the schemas of all files (else the first file's)",
    )
    avro_schema: str | None = option(
        "avroSchema", avro_record_schema, default=None,
        doc="avro: reader schema (Avro JSON) that files are resolved to by Avro's rules; gives the columns",
    )
    avro_schema_url: str | None = option(
        "avroSchemaUrl", default=None, checks=[_not_empty],
        doc="avro: path or fsspec URL of a file holding the reader schema (avroSchema wins if both are given)",
    )
    positional_field_matching: bool = option(
        "positionalFieldMatching", parse_bool, default=False,
        doc="avro: with a given schema, its fields read the Avro fields at the same position, whatever their names",
    )
    ignore_extension: bool = option(
        "ignoreExtension", parse_bool, default=True, doc="avro: false reads only files named *.avro (deprecated in Spark)",
    )
    base_path: str | None = option(
        "basePath", default=None,
        doc="where partition discovery stops going up key=value directories (default: each path)",
    )
    discovery_interval: timedelta = option(
        "discoveryInterval", parse_duration, default=timedelta(seconds=1), checks=[non_negative],
        doc="least time between two directory listings, whatever the trigger (Flink's monitoring interval)",
    )
    max_files_per_trigger: int | None = option(
        "maxFilesPerTrigger", parse_int, default=None, checks=[positive], doc="most new files per micro-batch"
    )
    max_bytes_per_trigger: int | None = option(
        "maxBytesPerTrigger", parse_size, default=None, checks=[positive],
        doc="most bytes of new files per micro-batch (at least one file is always taken)",
    )
    latest_first: bool = option("latestFirst", parse_bool, default=False, doc="admit the newest files first")
    max_file_age: timedelta | None = option(
        "maxFileAge", parse_duration, default=None, checks=[positive],
        doc="ignore files older than this, relative to the newest file (Spark's rule; default no limit)",
    )
    allowed_lateness: timedelta = option(
        "allowedLateness", parse_duration, default=timedelta(minutes=10), checks=[non_negative],
        doc="how far behind the newest admitted file a file's modification time may be when it appears",
    )
    clean_source: str = option(
        "cleanSource", choice("off", "archive", "delete"), default="off",
        doc="after the batch that read a file committed: leave it, move it to sourceArchiveDir, or delete it",
    )
    source_archive_dir: str | None = option("sourceArchiveDir", default=None, doc="where cleanSource=archive moves files")
    mode: str = option(
        "mode", choice("PERMISSIVE", "DROPMALFORMED", "FAILFAST"), default="PERMISSIVE",
        doc="malformed records: keep with nulls (+ corrupt-record column), drop, or fail",
    )
    column_name_of_corrupt_record: str = option(
        "columnNameOfCorruptRecord", default="_corrupt_record",
        doc="PERMISSIVE: string column of the schema that receives a malformed record's text",
    )
    ignore_corrupt_files: bool = option(
        "ignoreCorruptFiles", parse_bool, default=False,
        doc="skip (and log) the rest of a corrupt or truncated file instead of failing",
    )
    ignore_missing_files: bool = option(
        "ignoreMissingFiles", parse_bool, default=False,
        doc="skip (and log) a file listed for a batch but gone before the batch reads it, instead of failing",
    )
    header: bool = option("header", parse_bool, default=False, doc="csv: the first line holds column names")
    multi_line: bool = option(
        "multiLine", parse_bool, default=False,
        doc="json: a file is one JSON document (an array of records, or one record); csv: quoted values may "
            "hold newlines. Each file is then read whole, by one task",
    )
    infer_schema: bool = option(
        "inferSchema", parse_bool, default=False, doc="csv batch reads: infer column types (else all strings)"
    )
    sep: str | None = option("sep", default=None, checks=[single_char], doc="csv field separator (default ,)")
    delimiter: str | None = option("delimiter", default=None, checks=[single_char], doc="alias of sep")
    quote: str = option("quote", default='"', checks=[single_char], doc="csv quote character")
    escape: str = option("escape", default="\\", checks=[single_char], doc="csv escape character")
    encoding: str = option("encoding", default="UTF-8", doc="csv/json/text character set")
    null_value: str = option("nullValue", default="", doc="csv: the text of a null value")
    comment: str | None = option(
        "comment", default=None, checks=[single_char], doc="csv: skip lines starting with this character",
    )
    ignore_leading_white_space: bool = option(
        "ignoreLeadingWhiteSpace", parse_bool, default=False,
        doc="csv: drop whitespace before each value (a quote after it then starts a quoted value)",
    )
    ignore_trailing_white_space: bool = option(
        "ignoreTrailingWhiteSpace", parse_bool, default=False, doc="csv: drop whitespace after each value",
    )
    empty_value: str | None = option(
        "emptyValue", default=None, doc="csv: what a quoted empty value (\"\") reads as (default: an empty string)",
    )
    nan_value: str = option("nanValue", default="NaN", doc="csv: the text of a NaN float or double")
    positive_inf: str = option("positiveInf", default="Inf", doc="csv: the text of a float or double +infinity")
    negative_inf: str = option("negativeInf", default="-Inf", doc="csv: the text of a float or double -infinity")
    line_sep: str | None = option(
        "lineSep", default=None, checks=[_not_empty],
        doc="csv/json/text: the record separator (csv: 1 or 2 characters; default: \\n or \\r\\n)",
    )
    allow_single_quotes: bool = option(
        "allowSingleQuotes", parse_bool, default=True, doc="json: strings and field names may be in single quotes",
    )
    allow_comments: bool = option(
        "allowComments", parse_bool, default=False, doc="json: Java/C++ comments (/* */, //) are ignored",
    )
    allow_unquoted_field_names: bool = option(
        "allowUnquotedFieldNames", parse_bool, default=False, doc="json: field names may be unquoted identifiers",
    )
    allow_numeric_leading_zeros: bool = option(
        "allowNumericLeadingZeros", parse_bool, default=False, doc="json: numbers may have leading zeros (007)",
    )
    primitives_as_string: bool = option(
        "primitivesAsString", parse_bool, default=False, doc="json inference: every number and boolean as string",
    )
    prefers_decimal: bool = option(
        "prefersDecimal", parse_bool, default=False,
        doc="json inference: numbers with a fraction or exponent as decimal (double if they do not fit)",
    )
    infer_timestamp: bool = option(
        "inferTimestamp", parse_bool, default=False,
        doc="json inference: strings that timestampFormat (or Spark's lenient parser) reads as timestamp",
    )
    drop_field_if_all_null: bool = option(
        "dropFieldIfAllNull", parse_bool, default=False,
        doc="json inference: drop columns only ever null, [] or {} (else they are string)",
    )
    whole_text: bool = option(
        "wholetext", parse_bool, default=False, doc="text: each file is one row, its whole content (lineSep unused)",
    )
    allow_backslash_escaping_any_character: bool = option(
        "allowBackslashEscapingAnyCharacter", parse_bool, default=False,
        doc="json: a backslash before any character in a string is that character (\\$ is $)",
    )
    allow_unquoted_control_chars: bool = option(
        "allowUnquotedControlChars", parse_bool, default=False,
        doc="json: strings may hold raw control characters (a tab)",
    )
    allow_non_numeric_numbers: bool = option(
        "allowNonNumericNumbers", parse_bool, default=True,
        doc="json: NaN, Infinity, +Infinity, -Infinity, +INF, -INF are numbers",
    )
    sampling_ratio: float = option(
        "samplingRatio", _ratio, default=1.0,
        doc="csv/json inference: the fraction of the sampled lines used (Spark's seeded choice)",
    )
    prefer_date: bool = option(
        "preferDate", parse_bool, default=True,
        doc="csv inference: date-like values are date (false: timestamp, or string if no timestamp reads them)",
    )
    enforce_schema: bool = option(
        "enforceSchema", parse_bool, default=True,
        doc="csv with header: false checks each file's header names against the schema, and fails if they differ",
    )
    max_columns: int = option("maxColumns", parse_int, default=20480, checks=[positive],
                              doc="csv: a record with more values fails the read")
    max_chars_per_column: int = option(
        "maxCharsPerColumn", parse_int, default=-1, checks=[_unlimited_or_non_negative],
        doc="csv: a longer value fails the read (-1: no limit)",
    )
    unescaped_quote_handling: str = option(
        "unescapedQuoteHandling", _unescaped_quote_handling, default="STOP_AT_DELIMITER",
        doc="csv: only Spark's default, STOP_AT_DELIMITER, is supported",
    )
    char_to_escape_quote_escaping: str | None = option(
        "charToEscapeQuoteEscaping", default=None, checks=[single_char],
        doc="csv: only the escape character itself is supported (which is what it is read as)",
    )
    locale: str = option("locale", _locale, default="en-US", doc="csv/json: only en-US (Spark's default)")
    date_format: str | None = option(
        "dateFormat", _date_time_pattern, default=None,
        doc="csv/json: Java pattern of date values, e.g. dd/MM/yyyy (default: ISO yyyy-MM-dd)",
    )
    timestamp_format: str | None = option(
        "timestampFormat", _date_time_pattern, default=None,
        doc="csv/json: Java pattern of timestamp values, e.g. yyyy-MM-dd'T'HH:mm:ss.SSSXXX (no offset: timeZone)",
    )
    timestamp_ntz_format: str | None = option(
        "timestampNTZFormat", _date_time_pattern, default=None,
        doc="csv/json: Java pattern of timestamp_ntz values, e.g. dd/MM/yyyy HH:mm (no offset allowed)",
    )
    time_zone: str = option(
        "timeZone", _time_zone, default="UTC",
        doc="csv/json timestamp values, partition directory values, modifiedBefore/After: the zone of text without "
            "an offset, e.g. America/New_York or +01:00 (Spark's default is the session zone, not told to Python)",
    )
    file_path_column: str | None = option(
        "filePathColumn", default=None, doc="name of a string column receiving each record's file path"
    )
    file_modification_time_column: str | None = option(
        "fileModificationTimeColumn", default=None,
        doc="name of a timestamp column receiving each record's file modification time",
    )
    max_partition_bytes: int = option(
        "maxPartitionBytes", parse_size, default=128 << 20, checks=[positive],
        doc="largest byte range of one read task (big uncompressed files are split on line boundaries)",
    )
    storage_options: dict[str, Any] | None = option(
        STORAGE_OPTIONS, parse_storage_options, default=None, secret=True,
        doc="JSON object of fsspec filesystem arguments (endpoint, credentials)",
    )

    _: dataclasses.KW_ONLY
    # Keyword-only as the AvroReadOptions field it overrides (which, as from_avro, takes only CORRECTED).
    # Spark's parquet and avro read options: its confs (spark.sql.parquet.datetimeRebaseModeInRead, ...) do not
    # reach a Python data source. They decide only for files Spark did not write: Spark's metadata does the rest.
    datetime_rebase_mode: str = option(
        "datetimeRebaseMode", choice(*rebase.MODES), default="CORRECTED",
        doc="parquet, avro: the calendar of dates and timestamps of files not written by Spark: CORRECTED reads "
            "them as written (Spark 4's default), EXCEPTION fails on dates before 1582-10-15 and timestamps before "
            "1900, LEGACY rebases them from the hybrid Julian+Gregorian calendar",
    )
    int96_rebase_mode: str = option(
        "int96RebaseMode", choice(*rebase.MODES), default="CORRECTED",
        doc="parquet: the same for INT96 timestamps",
    )

    def validate(self) -> None:
        if self.max_files_per_trigger is not None and self.max_bytes_per_trigger is not None:
            raise self.error("maxBytesPerTrigger", "cannot be combined with maxFilesPerTrigger (as in Spark)")
        if self.clean_source == "archive" and not self.source_archive_dir:
            raise self.error("cleanSource", "archive needs the option sourceArchiveDir")
        if self.multi_line and self.file_format not in ("csv", "json"):
            raise self.error("multiLine", f"applies to csv and json, not {self.file_format}")
        for name, value in (("dateFormat", self.date_format), ("timestampFormat", self.timestamp_format),
                            ("timestampNTZFormat", self.timestamp_ntz_format)):
            if value is not None and self.file_format not in ("csv", "json"):
                raise self.error(name, f"applies to csv and json, not {self.file_format}")
        for field in dataclasses.fields(self):  # a format's option set for another is a mistake
            formats = _FORMATS_OF.get(field.name)
            if formats and self.file_format not in formats and getattr(self, field.name) != field.default:
                name = field.metadata["option"].name
                raise self.error(name, f"applies to {', '.join(formats)}, not {self.file_format}")
        if self.line_sep is not None and self.file_format == "csv" and len(self.line_sep) > 2:
            raise self.error("lineSep", "csv takes a separator of 1 or 2 characters (as Spark)")
        if self.line_sep is not None and self.multi_line:
            raise self.error("lineSep", "does not apply with multiLine (a file is one record or document)")
        if self.comment is not None and self.multi_line:
            # a quoted value's line starting with it would be taken for a comment: data lost silently
            raise self.error("comment", "is not supported with multiLine")
        if self.sampling_ratio <= SAMPLED_ALL and self.multi_line:
            # Spark samples whole documents (json) or records (csv) then, by another generator
            raise self.error("samplingRatio", "is not supported with multiLine")
        if self.char_to_escape_quote_escaping not in (None, self.escape):
            raise self.error("charToEscapeQuoteEscaping", f"only the escape character ({self.escape!r}) is supported: "
                             "the csv parser reads an escape character before any character, itself too, as that "
                             "character")
        if self.sep is not None and self.delimiter is not None and self.sep != self.delimiter:
            raise self.error("delimiter", f"conflicts with sep = {self.sep!r}")
        if self.file_format == "csv":
            for name, value in (("sep", self.sep), ("delimiter", self.delimiter), ("quote", self.quote),
                                ("escape", self.escape)):
                if value is not None and not value.isascii():
                    raise self.error(name, "not an ASCII character, which pyarrow's csv parser needs (Spark takes any); "
                                     "convert the files, or read them with spark.read.csv")
        resolve_schema_url(self)
        if self.avro_schema is not None and self.union_prefix is not None:
            from connectors.core import avro  # fastavro: only where Avro is read

            try:
                avro.read_type(avro.parse(self.avro_schema), self.union_prefix)
            except avro.AvroError as exc:
                raise self.error("enableStableIdentifiersForUnionType", str(exc)) from None
        try:
            "".encode(self.encoding)
        except LookupError:
            raise self.error("encoding", "unknown character set") from None
        if self.file_format == "csv" and not self.multi_line and ascii_incompatible(self.encoding):
            # Spark's line reader cuts such files at the byte \n or at lineSep's bytes with a byte order mark,
            # misreading them: read here only where the lines can be told apart as Spark reads them
            if codecs.lookup(self.encoding).name in ("utf-16", "utf-32"):
                raise self.error("encoding", "csv lines do not read in a charset with a byte order mark (Spark "
                                             "misreads them): name the byte order (e.g. UTF-16LE) and set lineSep, "
                                             "or set multiLine=true")
            if self.line_sep is None:
                raise self.error("encoding", "csv lines of this charset need the lineSep option (Spark's default "
                                             "line reader cuts its characters at the byte \\n)")

    @property
    def separator(self) -> str:
        return self.sep or self.delimiter or ","

    @property
    def splittable_text(self) -> bool:
        """Line-oriented formats whose uncompressed files can be cut into byte ranges."""
        # a custom lineSep is not looked for at a range's edges: such files are read whole
        return (self.file_format in ("text", "csv", "json") and not self.multi_line and not self.whole_text
                and self.line_sep is None)


_JSON_ONLY = ("json",)
# The options that apply to some formats only (and the formats).
_FORMATS_OF = {
    "comment": ("csv",), "empty_value": ("csv",), "ignore_leading_white_space": ("csv",),
    "ignore_trailing_white_space": ("csv",), "nan_value": ("csv",), "positive_inf": ("csv",),
    "negative_inf": ("csv",), "line_sep": ("csv", "json", "text"),
    "allow_single_quotes": _JSON_ONLY, "allow_comments": _JSON_ONLY, "allow_unquoted_field_names": _JSON_ONLY,
    "allow_numeric_leading_zeros": _JSON_ONLY, "primitives_as_string": _JSON_ONLY, "prefers_decimal": _JSON_ONLY,
    "infer_timestamp": _JSON_ONLY, "drop_field_if_all_null": _JSON_ONLY,
    "allow_backslash_escaping_any_character": _JSON_ONLY, "allow_unquoted_control_chars": _JSON_ONLY,
    "allow_non_numeric_numbers": _JSON_ONLY, "whole_text": ("text",), "sampling_ratio": ("csv", "json"),
    "prefer_date": ("csv",), "enforce_schema": ("csv",), "max_columns": ("csv",), "max_chars_per_column": ("csv",),
    "unescaped_quote_handling": ("csv",), "char_to_escape_quote_escaping": ("csv",), "locale": ("csv", "json"),
    "merge_schema": ("parquet",), "avro_schema": ("avro",), "ignore_extension": ("avro",), "avro_schema_url": ("avro",),
    "positional_field_matching": ("avro",), "enable_stable_identifiers_for_union_type": ("avro",),
    "stable_identifier_prefix_for_union_type": ("avro",), "datetime_rebase_mode": ("parquet", "avro"),
    "int96_rebase_mode": ("parquet",),
    "recursive_field_max_depth": ("avro",),
}  # fmt: skip


def parse_paths(raw: dict[str, str]) -> list[str]:
    """The paths given by ``load(path)`` / ``load([paths])`` / the ``path`` and ``paths`` options.

    Spark passes ``load([a, b])`` as the option ``paths`` holding a JSON array; a comma-separated
    ``paths`` option is accepted too (no path contains a comma and a JSON bracket at once).
    """
    options = {str(k).lower(): v for k, v in raw.items()}
    paths: list[str] = []
    if options.get("path"):
        paths.append(options["path"])
    text = (options.get("paths") or "").strip()
    if text.startswith("["):
        try:
            paths.extend(str(p) for p in json.loads(text))
        except json.JSONDecodeError:
            raise OptionError(FORMAT, "paths", text, "expected a JSON array of paths") from None
    elif text:
        paths.extend(p.strip() for p in text.split(",") if p.strip())
    if not paths:
        raise OptionError(FORMAT, "path", None, "no path given: use load(path) or option('path', ...)")
    return paths
