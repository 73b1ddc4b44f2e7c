"""ReadSpec: what a split reader and the line parsers need to know of a read, built once on
the driver (``schema.read_spec``) and shipped with every partition."""

from __future__ import annotations

import dataclasses
import datetime
import json
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from connectors.files.datetime_patterns import DateTimePattern
from connectors.files.source import partitions
from connectors.files.source.spark_texts import zone_id


def _not_a_number(word: str) -> Any:
    raise ValueError(f"{word} is not a number (allowNonNumericNumbers is off)")


@dataclasses.dataclass(frozen=True)
class JsonSyntax:
    """The non-standard JSON a json read accepts (Spark's allow* options, its defaults)."""

    single_quotes: bool = True
    comments: bool = False
    unquoted_field_names: bool = False
    numeric_leading_zeros: bool = False
    backslash_any: bool = False  # allowBackslashEscapingAnyCharacter
    control_chars: bool = False  # allowUnquotedControlChars
    non_numeric: bool = True  # allowNonNumericNumbers

    @property
    def lenient(self) -> bool:
        return (self.single_quotes or self.comments or self.unquoted_field_names or self.numeric_leading_zeros
                or self.backslash_any or self.control_chars or self.non_numeric)

    def loads(self, text: str, parse_float: Callable[[str], Any] | None = None,
              object_pairs_hook: Callable[[list], Any] | None = None) -> Any:
        """``json.loads``, which takes NaN, Infinity and -Infinity only where allowNonNumericNumbers is on."""
        return json.loads(text, parse_float=parse_float, parse_constant=None if self.non_numeric else _not_a_number,
                          object_pairs_hook=object_pairs_hook)


@dataclasses.dataclass(frozen=True)
class ReadSpec:
    """Everything a task needs to turn a split into batches of the query's Arrow schema."""

    file_format: str
    schema: pa.Schema  # the full output schema
    mode: str = "PERMISSIVE"
    corrupt_column: str | None = None  # present in `schema`
    path_column: str | None = None
    mtime_column: str | None = None
    ignore_corrupt_files: bool = False
    header: bool = False
    separator: str = ","
    quote: str = '"'
    escape: str = "\\"
    encoding: str = "UTF-8"
    null_value: str = ""
    ignore_missing_files: bool = False
    comment: str | None = None  # csv
    trim_leading: bool = False  # csv: ignoreLeadingWhiteSpace, ignoreTrailingWhiteSpace
    trim_trailing: bool = False
    empty_value: str | None = None  # csv: what a quoted "" reads as (None: "")
    nan_value: str = "NaN"  # csv: texts of float specials
    positive_inf: str = "Inf"
    negative_inf: str = "-Inf"
    line_sep: str | None = None  # None: \n (a \r before it is dropped)
    json_syntax: JsonSyntax = JsonSyntax()
    whole_text: bool = False  # text: a file is one row
    enforce_schema: bool = True  # csv: false checks each file's header against the schema
    max_columns: int = 20480  # csv: Spark's limits of a record's values and of a value's characters
    max_chars_per_column: int = -1
    date_format: str | None = None  # csv/json: Java patterns of date, timestamp, timestamp_ntz values
    timestamp_format: str | None = None
    timestamp_ntz_format: str | None = None
    time_zone: str = "UTC"  # timeZone: of zone-less timestamp text in values and in directory names
    multi_line: bool = False
    avro_schema: str | None = None  # avroSchema: the reader schema files are resolved to
    union_prefix: str | None = None  # avro: stable identifiers of union members (None: member0, ...)
    positional: bool = False  # avro: positionalFieldMatching
    datetime_rebase: str = "CORRECTED"  # parquet, avro: datetimeRebaseMode, int96RebaseMode (Spark 4's defaults)
    int96_rebase: str = "CORRECTED"
    storage_options: dict | None = None
    partition_bases: tuple[str, ...] = ()  # where the walk up a file's key=value directories stops
    partition_values: partitions.Values = ()  # of the file read (for_file): columns of the schema only

    @property
    def data_schema(self) -> pa.Schema:
        """The columns that come from the file's content."""
        special = {self.corrupt_column, self.path_column, self.mtime_column, *(n for n, _ in self.partition_values)}
        return pa.schema([f for f in self.schema if f.name not in special])

    @property
    def zone(self) -> datetime.tzinfo:
        return zone_id(self.time_zone)

    def pattern_for(self, kind: pa.DataType) -> DateTimePattern | None:
        """The pattern values of ``kind`` are written in, if an option gives one."""
        if pa.types.is_date(kind):
            pattern = self.date_format
        elif pa.types.is_timestamp(kind):
            pattern = self.timestamp_format if kind.tz is not None else self.timestamp_ntz_format
        else:
            return None
        return DateTimePattern.of(pattern) if pattern else None

    def for_file(self, path: str) -> ReadSpec:
        """This spec for the file at ``path``: the schema's columns its directories name come from there."""
        found = [(name, value) for name, value in partitions.path_values(self.partition_bases, path)
                 if name in self.schema.names and name not in (self.corrupt_column, self.path_column, self.mtime_column)]
        return dataclasses.replace(self, partition_values=tuple(found)) if found else self


PatternFor = Callable[[pa.DataType], "DateTimePattern | None"]


def no_pattern(kind: pa.DataType) -> DateTimePattern | None:
    return None
