"""Reading one split of one file into Arrow record batches: text, csv, json lines, parquet, avro.

Runs in the executors. Line formats are read in blocks that end on a line boundary and parsed
by pyarrow's csv/json readers (text is split in Python); parquet by row groups; Avro object
container files by blocks: a split owns the blocks that start in it, found by the sync marker. A split of an
uncompressed line file is the byte range ``[start, end)`` and owns the lines that START inside
it (Hadoop's LineRecordReader rule): it skips the partial line at its start and finishes the line
crossing its end, so every line is read exactly once whatever the cut points.

Malformed records follow Spark's ``mode``: PERMISSIVE keeps the record with nulls and its text
in the corrupt-record column (when the schema has one), DROPMALFORMED drops it, FAILFAST fails
with the file and line. The fast path parses a whole block at once; only a block that fails
falls back to finding the bad lines one by one.
"""

from __future__ import annotations

import base64
import binascii
import csv
import dataclasses
import io
import json
import logging
import math
import re
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.json as pajson
import pyarrow.parquet as pq
from pyspark.sql.datasource import InputPartition

from connectors.core.filesystem import filesystem
from connectors.files.datetime_patterns import DateTimePattern
from connectors.files.source import partitions
from connectors.files.source.compression import CORRUPT_ERRORS, codec_of, decompressing
from connectors.files.source.rebase import FileCalendar, Fix, fixed
from connectors.files.source.spark_texts import spark_text_value

if TYPE_CHECKING:
    from connectors.core.avro import Decoder

# One record per file that ignoreCorruptFiles skipped, the file in its context: Spark's
# spark.tvf.python_worker_logs() collects them on the driver for batch reads when
# spark.sql.pyspark.worker.logging.enabled is on (Spark 4.3 does not for stream reads).
corrupt_files_log = logging.getLogger("connectors.files.corrupt")
missing_files_log = logging.getLogger("connectors.files.missing")  # ignoreMissingFiles, the same way

BLOCK_BYTES = 8 << 20  # one parse unit: big enough for pyarrow to be fast, small enough for memory
PARQUET_BATCH_ROWS = 1 << 16
AVRO_BATCH_ROWS = 1 << 16


@dataclasses.dataclass(frozen=True)
class FileSplit:
    """Part of one file: the byte range ``[start, end)`` or, for parquet, some row groups."""

    path: str
    size: int
    mtime_ms: int
    start: int = 0
    end: int = -1  # -1: to the end of the file (whole files, compressed files)
    row_groups: tuple[int, ...] | None = None

    @property
    def length(self) -> int:
        return (self.size if self.end < 0 else self.end) - self.start


class FilePartition(InputPartition):
    """The splits one read task reads, in order."""

    def __init__(self, splits: Sequence[FileSplit]):
        super().__init__(tuple(splits))
        self.splits = tuple(splits)


def _not_a_number(word: str) -> Any:
    raise ValueError(f"{word} is not a number (allowNonNumericNumbers is off)")


class CsvRecordError(ValueError):
    """What fails Spark's csv read whatever the mode: a record past maxColumns or maxCharsPerColumn,
    a header unlike the schema with enforceSchema=false."""


class MalformedRecordError(ValueError):
    """FAILFAST: a record that does not parse; the message names the file and the line."""


class CorruptFileError(IOError):
    """A compressed file that is corrupt or truncated (or an unreadable parquet file)."""


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

    def loads(self, text: str, parse_float: Callable[[str], Any] | None = None) -> Any:
        """``json.loads``, which takes NaN, Infinity and -Infinity only where allowNonNumericNumbers is on."""
        return json.loads(text, parse_float=parse_float, parse_constant=None if self.non_numeric else _not_a_number)


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


# ---------------------------------------------------------------------------------------------
# Bytes: line-aligned blocks of a split


def _read_through_newline(stream: BinaryIO) -> bytes:
    """Bytes up to and including the next newline (or to the end); leaves the stream after it."""
    parts = []
    while True:
        position = stream.tell()
        chunk = stream.read(1 << 16)
        if not chunk:
            break
        cut = chunk.find(b"\n")
        if cut >= 0:
            parts.append(chunk[: cut + 1])
            stream.seek(position + cut + 1)
            break
        parts.append(chunk)
    return b"".join(parts)


def _range_chunks(stream: BinaryIO, start: int, end: int) -> Iterator[bytes]:
    """The bytes of the lines that start in ``[start, end)`` of a seekable, uncompressed file."""
    position = 0
    if start > 0:
        stream.seek(start - 1)
        position = start - 1 + len(_read_through_newline(stream))  # the first line starting >= start
    stream.seek(position)
    while position < end:
        chunk = stream.read(min(BLOCK_BYTES, end - position))
        if not chunk:
            return
        position += len(chunk)
        if position >= end and not chunk.endswith(b"\n"):
            chunk += _read_through_newline(stream)
        yield chunk


def _line_blocks(chunks: Iterator[bytes], separator: bytes = b"\n") -> Iterator[bytes]:
    """Re-cut chunks so every block but the last ends with a separator (a newline)."""
    carry = b""
    for chunk in chunks:
        data = carry + chunk if carry else chunk
        cut = data.rfind(separator)
        if cut < 0:
            carry = data
            continue
        cut += len(separator)
        carry = data[cut:]
        yield data[:cut]
    if carry:
        yield carry


# ---------------------------------------------------------------------------------------------
# Parsers: a block of lines -> (Arrow table of the data columns, malformed lines)


@dataclasses.dataclass
class Malformed:
    line: int  # 1-based, within the block
    text: str
    row: int = -1  # its row in the parser's table, holding the values that converted (Spark's partial results)
    columns: int = 0  # csv: how many values it has, where not the schema's count


PatternFor = Callable[[pa.DataType], "DateTimePattern | None"]


def _no_pattern(kind: pa.DataType) -> DateTimePattern | None:
    return None


def cast_array(array: pa.Array, target: pa.DataType) -> pa.Array:
    """Cast, reading zone-less timestamp strings as UTC (Spark would use the session zone)."""
    if array.type == target:
        return array
    try:
        return array.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        if pa.types.is_timestamp(target) and target.tz is not None and pa.types.is_string(array.type):
            return array.cast(pa.timestamp(target.unit)).cast(target)
        raise


def _cast_or_mark(table: pa.Table, schema: pa.Schema, pattern_for: PatternFor) -> tuple[pa.Table, list[int]]:
    """Cast string columns to ``schema``, dates and timestamps by the pattern ``pattern_for`` gives
    them, if any; values that do not convert make their row malformed."""
    bad: set[int] = set()
    columns = []
    for field in schema:
        column = table.column(field.name).combine_chunks()
        pattern = pattern_for(field.type) if column.type != field.type else None
        if pattern is not None:  # vectorised: a value that does not match is null
            parsed = pattern.parse(column, field.type)
            bad.update(pc.indices_nonzero(pc.and_(column.is_valid(), parsed.is_null())).to_pylist())
            columns.append(parsed)
            continue
        try:
            columns.append(cast_array(column, field.type))
            continue
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass
        values = []
        for row, value in enumerate(column.to_pylist()):
            try:
                values.append(cast_array(pa.array([value], column.type), field.type)[0].as_py())
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                as_spark = spark_text_value(value, field.type) if isinstance(value, str) else None
                if as_spark is None:
                    bad.add(row)
                values.append(as_spark)
        columns.append(pa.array(values, field.type))
    return pa.Table.from_arrays(columns, schema=schema), sorted(bad)


def separated(block: bytes, separator: bytes, fmt: str, encoding: str) -> tuple[bytes, dict[int, str]]:
    """A block of records ending in ``separator`` (lineSep) as the newline-separated lines the csv
    and json parsers take, and the original text of each line changed on the way (by 1-based line).

    A json record's own newlines become tabs: whitespace between tokens as newlines are, and, like a
    raw newline, not allowed inside a string, so such a record stays malformed (as in Spark). A csv
    record's newlines are left: a value holding one must be quoted (read as with multiLine).
    """
    records = block.split(separator)
    if records and not records[-1]:
        records.pop()
    changed: dict[int, str] = {}
    if fmt == "json":
        for number, record in enumerate(records):
            if b"\n" in record or b"\r" in record:
                changed[number + 1] = record.decode(encoding, errors="replace")
                records[number] = record.replace(b"\r", b"\t").replace(b"\n", b"\t")
    return b"\n".join(records) + b"\n", changed


class TextParser:
    def __init__(self, spec: ReadSpec):
        self.encoding = spec.encoding
        self.separator = spec.line_sep

    def parse(self, block: bytes, first_block: bool) -> tuple[pa.Table, list[Malformed]]:
        text = block.decode(self.encoding, errors="replace")
        lines = text.split(self.separator or "\n")
        if lines and lines[-1] == "":
            lines.pop()
        if "\r" in text and self.separator is None:
            lines = [line[:-1] if line.endswith("\r") else line for line in lines]
        return pa.table({"value": pa.array(lines, pa.string())}), []


class CsvParser:
    def __init__(self, spec: ReadSpec):
        self.spec = spec
        self.schema = spec.data_schema
        # with lineSep a record's newlines can only be inside quotes: records may span lines
        self.spanning = spec.multi_line or spec.line_sep is not None
        self.parse_options = dict(
            # escape = quote: RFC 4180's doubled quote, which double_quote reads
            delimiter=spec.separator, quote_char=spec.quote, escape_char=spec.escape != spec.quote and spec.escape,
            double_quote=True, newlines_in_values=self.spanning, ignore_empty_lines=True,
        )
        # Unquoted empty values are null whatever nullValue is (as in Spark), so an empty string
        # read was quoted: what emptyValue replaces.
        self.null_values = [spec.null_value] if spec.null_value == "" else [spec.null_value, ""]
        self.comment = spec.comment
        self.trim = white_space_trimmer(spec.separator, spec.quote, spec.escape, spec.trim_leading, spec.trim_trailing)
        self.literal_escapes = literal_escapes(spec.separator, spec.quote, spec.escape, spec.encoding, self.spanning)
        self.split_records = record_splitter(spec.separator, spec.quote, spec.escape)
        self.separator_byte = spec.separator.encode(spec.encoding, "replace")
        # Texts of NaN and the infinities other than the defaults (which pyarrow reads), as pyarrow's.
        self.specials = [(text, value) for text, default, value in (
            (spec.nan_value, "NaN", "NaN"), (spec.positive_inf, "Inf", "inf"), (spec.negative_inf, "-Inf", "-inf"),
        ) if text != default]
        # Columns read as text, for those options to replace values before they are converted (and
        # for maxCharsPerColumn to measure them).
        self.as_text = {f.name for f in self.schema if spec.empty_value is not None or spec.max_chars_per_column >= 0
                        or (self.specials and pa.types.is_floating(f.type))}

    def _read(self, block: bytes, skip: int, types: dict, bad: list[Malformed]) -> pa.Table:
        too_wide = []  # pyarrow drops what the handler raises: records past maxColumns, failed after

        def invalid(row) -> str:
            malformed = Malformed(row.number or 0, row.text, columns=row.actual_columns)
            (too_wide if row.actual_columns > self.spec.max_columns else bad).append(malformed)
            return "skip"

        table = pacsv.read_csv(
            io.BytesIO(block),
            read_options=pacsv.ReadOptions(
                column_names=self.schema.names, skip_rows=skip, encoding=self.spec.encoding,
                use_threads=False, block_size=max(len(block), 1) + 1,
            ),
            parse_options=pacsv.ParseOptions(**self.parse_options, invalid_row_handler=invalid),
            convert_options=pacsv.ConvertOptions(
                column_types=types, null_values=self.null_values, strings_can_be_null=True,
                quoted_strings_can_be_null=False,
            ),
        )
        if too_wide or (table.num_rows and len(self.schema) > self.spec.max_columns):  # Spark's parser fails, any mode
            record = repr(too_wide[0].text[:200]) if too_wide else f"{len(self.schema)} values (the schema's columns)"
            raise CsvRecordError(f"a record has more values than maxColumns = {self.spec.max_columns}: {record}")
        if self.spec.max_chars_per_column >= 0:
            for name in self.as_text:
                longest = pc.max(pc.utf8_length(table.column(name))).as_py()
                if longest is not None and longest > self.spec.max_chars_per_column:
                    raise CsvRecordError(f"a value of column {name!r} has {longest} characters, more than "
                                         f"maxCharsPerColumn = {self.spec.max_chars_per_column}")
        return table

    def _check_header(self, line: str) -> None:
        """enforceSchema=false: the header names the schema's columns, in order, in any case (Spark's
        CSVHeaderChecker, spark.sql.caseSensitive off)."""
        header, names = header_tokens(line, self.spec.separator, self.spec.quote), self.schema.names
        if len(header) != len(names):
            raise CsvRecordError(f"the header has {len(header)} columns, the schema {len(names)} (enforceSchema=false)."
                                 f" Header: {', '.join(header)}; schema: {', '.join(names)}")
        for found, expected in zip(header, names):
            if found.lower() != expected.lower():
                raise CsvRecordError(f"the header does not conform to the schema (enforceSchema=false). Header: "
                                     f"{', '.join(header)}; schema: {', '.join(names)}; expected {expected!r} but "
                                     f"found {found!r}")

    @staticmethod
    def uncommented(block: bytes, comment: str, encoding: str) -> bytes:
        """The lines starting with ``comment`` blanked, not cut, so line numbers stay right (and
        the reader skips blank lines)."""
        return re.sub(rb"(?m)^" + re.escape(comment.encode(encoding)) + rb"[^\r\n]*", b"", block)

    def _replace(self, table: pa.Table) -> pa.Table:
        """emptyValue, nanValue, positiveInf, negativeInf: their texts as what they stand for."""
        for name in self.as_text:
            column, kind = table.column(name), self.schema.field(name).type
            replacements = []
            if self.spec.empty_value is not None:
                empty = None if self.spec.empty_value == self.spec.null_value else self.spec.empty_value
                replacements.append(("", empty))
            if pa.types.is_floating(kind):
                replacements += self.specials
            for text, value in replacements:
                column = pc.if_else(pc.equal(column, text), pa.scalar(value, pa.string()), column)
            table = table.set_column(table.schema.get_field_index(name), name, column)
        return table

    def parse(self, block: bytes, first_block: bool) -> tuple[pa.Table, list[Malformed]]:
        """The block's records, malformed ones too (with the values that convert, the others null,
        as Spark's PERMISSIVE rows), and which rows are malformed."""
        original = block
        if self.comment is not None:
            block = self.uncommented(block, self.comment, self.spec.encoding)
        if self.trim is not None:
            block = self.trim(block)
        skip = header_lines(block) if first_block and self.spec.header else 0
        if skip and not self.spec.enforce_schema:
            self._check_header(block.split(b"\n", skip)[skip - 1].decode(self.spec.encoding, errors="replace"))
        block = self.literal_escapes(block)
        if block.endswith(self.separator_byte):  # pyarrow reads an empty last value with no line end as ""
            block += b"\n"
        skipped: list[Malformed] = []
        pattern_for = self.spec.pattern_for
        # Dates and timestamps with a pattern are read as text, then parsed by it.
        types = {f.name: pa.string() if pattern_for(f.type) or f.name in self.as_text else f.type for f in self.schema}
        try:
            table = self._read(block, skip, types, skipped)
            if not skipped:
                if not self.as_text and types == {f.name: f.type for f in self.schema}:
                    return table, []
                typed, bad_rows = _cast_or_mark(self._replace(table), self.schema, pattern_for)
                if not bad_rows:
                    return typed, []
        except pa.ArrowInvalid:
            pass
        # Some record is malformed: read text, then convert what converts.
        skipped.clear()
        table = self._read(block, skip, {name: pa.string() for name in self.schema.names}, skipped)
        table, skipped_rows = self._with_skipped(table, skipped, skip)
        lines = None if self.spanning else _record_lines(block, skip)  # a record's line number, by row
        if lines is not None and len(lines) != table.num_rows:  # lines pyarrow splits otherwise (a lone \r)
            lines = None
        texts = self._records(original, skip) if lines is None else []  # where records may span lines
        typed, bad_rows = _cast_or_mark(self._replace(table), self.schema, pattern_for)
        starts, ends = _line_bounds(original)
        bad = []
        for row in sorted(set(bad_rows) | skipped_rows.keys()):
            if lines is not None:
                number = int(lines[row])
                text = original[starts[number - 1]:ends[number - 1]].decode(self.spec.encoding, errors="replace")
                bad.append(Malformed(number, text.rstrip("\r"), row))
            elif len(texts) == table.num_rows:  # a record that may span lines: its number and text
                bad.append(Malformed(row + 1, texts[row], row))
            elif row in skipped_rows:
                bad.append(dataclasses.replace(skipped_rows[row], line=row + 1, row=row))
            else:  # its values name it
                values = table.slice(row, 1).to_pylist()[0].values()
                bad.append(Malformed(row + 1, self.spec.separator.join(v or "" for v in values), row))
        return typed, bad

    def _records(self, block: bytes, skip: int) -> list[str]:
        """The texts of the block's records after the first ``skip`` lines, where they may span lines."""
        return [record.rstrip(b"\r\n").decode(self.spec.encoding, errors="replace")
                for record in self.split_records(block.split(b"\n", skip)[skip] if skip else block)]

    def _with_skipped(self, table: pa.Table, skipped: list[Malformed],
                      skip: int) -> tuple[pa.Table, dict[int, Malformed]]:
        """``table`` (text) with the records of too few or too many values the parser skipped put
        back where they are: their first values, nulls for the missing ones, as Spark reads them.
        pyarrow numbers a record after the ``skip`` lines it skipped, blank lines not counted."""
        if not skipped:
            return table, {}
        names, width = self.schema.names, max(len(self.schema), *(m.columns for m in skipped))
        padded = "\n".join(m.text.rstrip("\r") + self.spec.separator * (width - m.columns) for m in skipped) + "\n"
        values = pacsv.read_csv(
            io.BytesIO(padded.encode()),
            read_options=pacsv.ReadOptions(column_names=[str(i) for i in range(width)], use_threads=False),
            parse_options=pacsv.ParseOptions(**self.parse_options),
            convert_options=pacsv.ConvertOptions(column_types=dict.fromkeys(map(str, range(width)), pa.string()),
                                                 null_values=self.null_values, strings_can_be_null=True,
                                                 quoted_strings_can_be_null=False),
        ).select([str(i) for i in range(len(names))]).rename_columns(names)
        rows = table.num_rows
        at = [m.line - skip - 1 for m in skipped]
        if not all(0 <= a < b for a, b in zip(at, [*at[1:], rows + len(skipped)])):  # not numbered: after the rest
            return pa.concat_tables([table, values]), {rows + i: m for i, m in enumerate(skipped)}
        return _interleave(table, values, at), dict(zip(at, skipped))


def white_space_trimmer(separator: str, quote: str, escape: str, leading: bool,
                        trailing: bool) -> Callable[[bytes], bytes] | None:
    """ignoreLeadingWhiteSpace / ignoreTrailingWhiteSpace: a function dropping the whitespace (any
    character up to a space but the separator and line ends, as Spark's parser) at the start or the
    end of every unquoted value, before pyarrow reads the block. Quoted values are passed over whole:
    their whitespace is kept, as in Spark, and so is a separator or newline inside them."""
    if not (leading or trailing):
        return None
    sep, q, e = (re.escape(c.encode()) for c in (separator, quote, escape))
    space = b"[" + b"".join(re.escape(bytes([c])) for c in range(0x21) if chr(c) not in "\r\n" + separator) + b"]+"
    inner = b"[^" + q + b"]|" + q + q if escape == quote else b"[^" + q + e + b"]|" + e + b".|" + q + q
    end = b"(?=" + sep + b"|\r?$)"
    # whitespace after a quoted value goes too (Spark's parser drops it even without the options)
    parts = [b"(" + q + b"(?:" + inner + b")*" + q + b")(?:" + space + end + b")?"]
    if leading:
        parts.append(b"(?:(?<=" + sep + b")|^)" + space)
    if trailing:
        parts.append(space + end)
    pattern = re.compile(b"|".join(parts), re.MULTILINE | re.DOTALL)
    return lambda block: pattern.sub(lambda match: match.group(1) or b"", block)


def literal_escapes(separator: str, quote: str, escape: str, encoding: str,
                    spanning: bool) -> Callable[[bytes], bytes]:
    """The escape character as Spark's csv parser reads it, for pyarrow's, which takes it as an
    escape everywhere: outside quotes it is a character like any other (``C:\\data``), and inside
    them it escapes only a quote or itself (``"a\\xb"`` keeps its backslash). Where it is a
    character it is doubled, which pyarrow reads as one. A quote starts a quoted value only at a
    value's start (else it is a character too). Only the lines holding the escape character are
    looked at, unless records may span lines (``spanning``)."""
    if not escape or escape == quote or (separator + quote + escape + "\n").encode(encoding, "replace") != (
            separator + quote + escape + "\n").encode():
        return lambda block: block  # RFC 4180's doubled quotes, or an encoding these bytes are not in
    s, q, e = (re.escape(c.encode()) for c in (separator, quote, escape))
    start = b"(?:(?<=[" + s + b"\n])|(?<![\\s\\S]))"  # after a separator or a line end, or at the block's start
    inside = b"(?:[^" + q + e + b"]++|" + e + b".|" + q + q + b")*+"
    # a run needing no change (no escape outside quotes, no quoted value holding one), then what does
    plain = b"(?:[^" + q + e + b"]++|" + start + q + b"[^" + q + e + b"]*+" + q + b"|(?<=[^" + s + b"\n])" + q + b")*+"
    pattern = re.compile(b"(" + plain + b")(?:(" + start + q + inside + q + b")|" + e + b")", re.DOTALL)
    pair = re.compile(e + b"(.)", re.DOTALL)
    escape_byte, kept = escape.encode(), {quote.encode(), escape.encode()}
    doubled = escape_byte * 2

    def in_quotes(match: re.Match) -> bytes:
        return match.group(0) if match.group(1) in kept else doubled + match.group(1)

    def fix(match: re.Match) -> bytes:
        quoted = match.group(2)
        return match.group(1) + (doubled if quoted is None else pair.sub(in_quotes, quoted))

    def lines(block: bytes) -> bytes:
        parts, done = [], 0
        while (at := block.find(escape_byte, done)) >= 0:
            start, end = block.rfind(b"\n", done, at) + 1 or done, block.find(b"\n", at) + 1 or len(block)
            parts += [block[done:start], pattern.sub(fix, block[start:end])]
            done = end
        return b"".join([*parts, block[done:]]) if parts else block

    return (lambda block: pattern.sub(fix, block) if escape_byte in block else block) if spanning else lines


def record_splitter(separator: str, quote: str, escape: str) -> Callable[[bytes], list[bytes]]:
    """The records of a block whose quoted values may hold newlines, as Spark's parser tells them
    apart: blank lines left out."""
    s, q, e = (re.escape(c.encode()) for c in (separator, quote, escape))
    start = b"(?:(?<=[" + s + b"\n])|(?<![\\s\\S]))"  # a quote opens a value only at its start
    if escape and escape != quote:
        inside = b"(?:[^" + q + e + b"]++|" + e + b".|" + q + q + b")*+"
    else:
        inside = b"(?:[^" + q + b"]++|" + q + q + b")*+"
    plain = b"[^" + q + b"\n]++|(?<=[^" + s + b"\n])" + q
    pattern = re.compile(b"(?:" + start + q + inside + q + b"|" + plain + b")*+(?:\n|\\Z)", re.DOTALL)
    return lambda block: [record for record in pattern.findall(block) if record.strip(b"\r\n")]


def header_tokens(line: str, separator: str, quote: str) -> list[str]:
    """The values of a csv header line."""
    return next(csv.reader([line.rstrip("\r")], delimiter=separator, quotechar=quote), [])


def header_lines(block: bytes) -> int:
    """How many lines up to and including the header: the first that is not blank (comments are
    blanked by then), as Spark's csv reader takes it."""
    for number, line in enumerate(block.split(b"\n", 64)):  # a header after 64 blank lines: the first line
        if line.strip(b"\r"):
            return number + 1
    return 1


def _interleave(table: pa.Table, rows: pa.Table, at: Sequence[int]) -> pa.Table:
    """``table`` with ``rows`` put in, so that they are rows ``at`` (ascending) of the result."""
    count = table.num_rows + rows.num_rows
    placed = np.zeros(count, bool)
    placed[np.asarray(at, np.int64)] = True
    order = np.empty(count, np.int64)
    order[placed], order[~placed] = table.num_rows + np.arange(rows.num_rows), np.arange(table.num_rows)
    return pa.concat_tables([table, rows]).take(pa.array(order))


def _null_rows(schema: pa.Schema, count: int) -> pa.Table:
    return pa.table({f.name: pa.nulls(count, f.type) for f in schema}, schema=schema)


def _line_bounds(block: bytes) -> tuple[np.ndarray, np.ndarray]:
    """Where each line of the block starts, and where it ends (at its newline, or the block's end)."""
    ends = np.flatnonzero(np.frombuffer(block, np.uint8) == ord("\n"))
    if not block.endswith(b"\n"):
        ends = np.append(ends, len(block))
    return np.concatenate(([0], ends[:-1] + 1)), ends


def _record_lines(block: bytes, skip: int) -> np.ndarray:
    """The numbers (from 1) of the lines after the first ``skip`` that are not blank: one a record,
    where no record spans lines."""
    starts, ends = _line_bounds(block)
    data = np.frombuffer(block, np.uint8)
    only_return = (ends - starts == 1) & (data[np.minimum(starts, len(data) - 1)] == ord("\r"))
    numbers = np.arange(1, len(ends) + 1)
    return numbers[(ends > starts) & ~only_return & (numbers > skip)]


def _data_lines(block: bytes, skip: int) -> list[tuple[int, str]]:
    """(line number, text) of the non-empty lines after the first ``skip`` (no quoted newlines)."""
    lines = block.decode("utf-8", errors="replace").split("\n")
    return [(n + 1, line.rstrip("\r")) for n, line in enumerate(lines) if n >= skip and line.strip("\r")]


class JsonParser:
    """JSON lines through pyarrow's reader. Dates and binary values, at any depth, are JSON
    strings (``yyyy-MM-dd`` and base64, as Spark writes them), which that reader converts to
    neither: it reads them as strings, converted here; a value that does not convert makes its
    line malformed. Two things that reader cannot read go through Python's json first: maps (every
    line, several times slower), and NaN and the infinities as Spark writes them (``"NaN"``,
    ``"Infinity"``, ``"-Infinity"``), which it takes nowhere a number goes: only a line that fails
    is read again that way."""

    def __init__(self, spec: ReadSpec):
        self.spec = spec
        self.schema = spec.data_schema
        self.read_schema = pa.schema([f.with_nullable(True) for f in self.schema])  # pyarrow's reader's
        self.encoding = spec.encoding
        self.pattern_for = spec.pattern_for
        self.wire = pa.schema([f.with_type(_wire_type(f.type, self.pattern_for)) for f in self.schema])
        self.row = pa.struct(list(self.schema))
        self.maps = _has_map(self.row)
        self.syntax = spec.json_syntax
        self.alone: dict[tuple[str, ...], JsonParser] = {}  # by column and field path: a parser of it alone

    def _read(self, block: bytes, in_python: bool = False) -> pa.Table:
        if self.maps or in_python:
            try:
                lines = [json.dumps(_wire_record(line.decode(), self.row)) for line in block.splitlines() if line.strip()]
            except ValueError as exc:
                raise pa.ArrowInvalid(f"not JSON: {exc}") from None
            block = "\n".join(lines).encode()
        table = pajson.read_json(
            io.BytesIO(block),
            read_options=pajson.ReadOptions(use_threads=False, block_size=max(len(block), 1) + 1),
            parse_options=pajson.ParseOptions(explicit_schema=self.wire, unexpected_field_behavior="ignore"),
        )
        if self.wire == self.schema:
            return table
        columns = [_from_wire(column.combine_chunks(), field.type, self.pattern_for)
                   for column, field in zip(table.columns, self.schema)]
        return pa.Table.from_arrays(columns, schema=self.read_schema)

    def parse(self, block: bytes, first_block: bool) -> tuple[pa.Table, list[Malformed]]:
        if self.encoding.replace("-", "").upper() != "UTF8":
            block = block.decode(self.encoding, errors="replace").encode("utf-8")
        # pyarrow's reader takes NaN and Infinity as numbers: with them off, lines holding them go one by one
        if self.syntax.non_numeric or not _NON_NUMERIC.search(block):
            try:
                return self._read(block), []
            except pa.ArrowInvalid:
                pass
        # Some line is not a JSON object of the schema's types: parse the good ones together.
        good, bad = [], []  # (line number, JSON text, the line)
        for number, line in _data_lines(block, 0):
            text = line if _is_object(line, self.syntax) else strict_json(line, self.syntax) if self.syntax.lenient else None
            if text == "":
                continue  # nothing but comments: no record, as in Spark
            ok = text is line or (text is not None and _is_object(text, self.syntax))
            (good if ok else bad).append((number, text or line, line))
        texts = [text.encode() for _, text, _ in good]
        table, failed = self._read_each(texts)
        if failed:  # objects that do not read whole: what does, in place
            table = _interleave(table, self._partial([texts[i] for i in failed]), failed)
        # the records in their order: those that are no JSON object as rows of nulls
        partial = set(failed)
        records = sorted([(number, row, line if row in partial else None) for row, (number, _, line) in enumerate(good)]
                         + [(entry[0], table.num_rows + i, entry[2]) for i, entry in enumerate(bad)])
        order = pa.array([row for _, row, _ in records], pa.int64())
        table = pa.concat_tables([table, _null_rows(self.read_schema, len(bad))]).take(order)
        return table, [Malformed(n, line, row) for row, (n, _, line) in enumerate(records) if line is not None]

    def _read_each(self, lines: list[bytes]) -> tuple[pa.Table, list[int]]:
        """JSON lines read all at once where they read, else by halves, down to the lines that do
        not: a row each line that reads, and which lines do not."""
        parts: list[pa.Table] = []
        failed: list[int] = []

        def read(first: int, end: int) -> None:
            text = b"\n".join(lines[first:end])
            try:
                parts.append(self._read(text, in_python=end - first == 1 or bool(_NON_NUMERIC.search(text))))
            except pa.ArrowInvalid as exc:
                if end - first == 1:
                    failed.append(first)
                    return
                # among a few lines, split at the one pyarrow names, if it does (a read costs ~0.2 ms)
                hint = _JSON_ERROR_ROW.search(str(exc)) if end - first <= 256 else None
                row = first + int(hint.group(1)) if hint else -1
                middle = max(row, first + 1) if first <= row < end else (first + end) // 2
                read(first, middle)
                read(middle, end)

        if lines:
            read(0, len(lines))
        return (pa.concat_tables(parts) if parts else self.read_schema.empty_table()), failed

    def _partial(self, lines: list[bytes]) -> pa.Table:
        """JSON objects' values that read as their columns' types, the others null (Spark's
        partial results): each column read alone, the rest of the object ignored."""
        return pa.Table.from_arrays([self._values(lines, (field,)) for field in self.schema], schema=self.read_schema)

    def _values(self, lines: list[bytes], path: tuple[pa.Field, ...]) -> pa.Array:
        """The values at ``path`` (a column, then fields of structs in it) of JSON objects, null
        where they do not read; a struct that does not read whole is read field by field."""
        field = path[-1]
        table, failed = self._alone(path)._read_each(lines)
        values = table.column(0).combine_chunks()
        for _ in path[1:]:
            values = values.field(0)
        if not failed:
            return values
        if pa.types.is_struct(field.type):
            lines = [lines[i] for i in failed]
            children = [self._values(lines, (*path, child)) for child in field.type]
            # null where the value is no object; an object's fields that do not read are null
            mask = pa.array([not isinstance(_json_at(line, path), dict) for line in lines])
            missing = pa.StructArray.from_arrays(children, fields=list(field.type), mask=mask)
        else:
            missing = pa.nulls(len(failed), field.type)
        return _interleave(pa.table({"v": values}), pa.table({"v": missing}), failed).column(0).combine_chunks()

    def _alone(self, path: tuple[pa.Field, ...]) -> JsonParser:
        """A parser of the value at ``path`` alone: its column, of structs of that one field."""
        key = tuple(field.name for field in path)
        if key not in self.alone:
            field = path[-1]
            for parent in reversed(path[:-1]):
                field = parent.with_type(pa.struct([field]))
            self.alone[key] = JsonParser(dataclasses.replace(self.spec, schema=pa.schema([field])))
        return self.alone[key]


def _json_at(line: bytes, path: tuple[pa.Field, ...]) -> Any:
    """The value at ``path`` (field names from the top) of the JSON object ``line``; None if none."""
    value = json.loads(line)
    for field in path:
        value = value.get(field.name) if isinstance(value, dict) else None
    return value


_JSON = json.JSONDecoder()
_JSON_SPACE = re.compile(r"[ \t\n\r]*")
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_JSON_NUMBER = re.compile(r"-?0+(?=\d)")  # the sign and leading zeros of a number
_JSON_NAME = re.compile(r"([A-Za-z_$][\w$]*)\s*:")  # an unquoted field name, as Jackson's (ASCII)
_JSON_WORD = re.compile(r"[\w$.+-]+")
_NON_NUMERIC = re.compile(rb"NaN|Infinity")
_JSON_ERROR_ROW = re.compile(r" in row (\d+)$")  # where pyarrow's json reader found a type it did not expect
_SIGNED_INFINITY = {"+INF": "Infinity", "+Infinity": "Infinity", "-INF": "-Infinity"}  # Jackson's, as JSON's
_ESCAPE = re.compile(r"\\(.)", re.DOTALL)
_CONTROL_CHAR = re.compile(r"[\x00-\x1f]")


def _is_object(text: str, syntax: JsonSyntax) -> bool:
    try:
        return isinstance(syntax.loads(text), dict)
    except ValueError:
        return False


def strict_json(text: str, syntax: JsonSyntax) -> str | None:
    """``text`` in the JSON of the lenient syntax ``syntax`` allows (Jackson's features behind Spark's
    allowSingleQuotes, allowComments, allowUnquotedFieldNames, allowNumericLeadingZeros,
    allowBackslashEscapingAnyCharacter, allowUnquotedControlChars, allowNonNumericNumbers) as
    standard JSON: None where it is not even that. Only lines standard JSON refuses come here."""
    out: list[str] = []
    position, size = 0, len(text)
    while position < size:
        char = text[position]
        if char == '"':
            match = _JSON_STRING.match(text, position)
            if match is None:
                return None
            out.append('"' + _string_body(match.group()[1:-1], syntax) + '"')
            position = match.end()
        elif char == "'" and syntax.single_quotes:
            position = _single_quoted(text, position + 1, out, syntax)
            if position < 0:
                return None
        elif char == "/" and syntax.comments and text.startswith("/*", position):
            end = text.find("*/", position + 2)
            if end < 0:
                return None
            out.append(" ")
            position = end + 2
        elif char == "/" and syntax.comments and text.startswith("//", position):
            end = text.find("\n", position)  # a line comment ends at the line's end
            position = size if end < 0 else end
        elif char.isdigit() or char in "+-":
            zeros = _JSON_NUMBER.match(text, position)
            if zeros is not None and syntax.numeric_leading_zeros:
                out.append("-" if char == "-" else "")
                position = zeros.end()
                continue
            word = _JSON_WORD.match(text, position)
            if word and syntax.non_numeric:
                out.append(_SIGNED_INFINITY.get(word.group(), word.group()))
            else:
                out.append(word.group() if word else char)
            position = word.end() if word else position + 1
        elif char.isalpha() or char in "_$":
            name = _JSON_NAME.match(text, position) if syntax.unquoted_field_names else None
            if name is not None:
                out.append(json.dumps(name.group(1)) + ":")
                position = name.end()
            else:  # true, NaN, ...: as they are
                word = _JSON_WORD.match(text, position)
                out.append(word.group())  # type: ignore[union-attr]
                position = word.end()  # type: ignore[union-attr]
        else:
            out.append(char)
            position += 1
    return "".join(out).strip()


def _single_quoted(text: str, position: int, out: list[str], syntax: JsonSyntax) -> int:
    """A string in single quotes from ``position`` (after the quote), appended to ``out`` in double
    quotes; where it ends, or -1 if it does not. ``\\'`` is a quote; other escapes are JSON's."""
    parts = []
    while position < len(text):
        char = text[position]
        if char == "'":
            out.append('"' + _string_body("".join(parts), syntax) + '"')
            return position + 1
        if char == "\\":
            escaped = text[position + 1: position + 2]
            parts.append("'" if escaped == "'" else char + escaped)
            position += 2
            continue
        parts.append('\\"' if char == '"' else char)
        position += 1
    return -1


def _string_body(body: str, syntax: JsonSyntax) -> str:
    """The inside of a JSON string as standard JSON: with allowBackslashEscapingAnyCharacter, an
    escape JSON has not is the character escaped; with allowUnquotedControlChars, raw control
    characters are escaped. Left as they are otherwise, for the parser to refuse."""
    if syntax.backslash_any:
        body = _ESCAPE.sub(lambda m: m.group() if m.group(1) in '"\\/bfnrtu' else json.dumps(m.group(1))[1:-1], body)
    if syntax.control_chars:
        body = _CONTROL_CHAR.sub(lambda m: f"\\u{ord(m.group()):04x}", body)
    return body


def _space(text: str, position: int) -> int:
    return _JSON_SPACE.match(text, position).end()  # type: ignore[union-attr]


class _NotText(Exception):
    """A value that is not a string where a string goes."""


def _wire_record(line: str, row: pa.StructType) -> Any:
    """One JSON line in the form :func:`_in_wire_form` gives; ValueError if it is not JSON. Parsed by
    ``json`` (C), or, where a value that is not a string goes where a string goes, by :func:`_typed`,
    which keeps the text that value is written as."""
    try:
        return _in_wire_form(json.loads(line), row)
    except _NotText:
        value, end = _typed(line, 0, row)
        if _space(line, end) != len(line):
            raise ValueError(f"extra data after the JSON value at {end}") from None
        return _in_wire_form(value, row)


def _typed(text: str, position: int, kind: pa.DataType) -> tuple[Any, int]:
    """The JSON value at ``position`` of ``text``, and where it ends, where a value of Arrow type
    ``kind`` goes: any value but a string where a string goes is the text it is written as
    (``1.50``, ``{"a": 1}``), as Spark reads it; the rest as ``json`` parses it."""
    position = _space(text, position)
    if (pa.types.is_string(kind) or pa.types.is_large_string(kind)) and not text.startswith('"', position):
        value, end = _JSON.raw_decode(text, position)
        return (None if value is None else text[position:end]), end
    if (pa.types.is_struct(kind) or pa.types.is_map(kind)) and text.startswith("{", position):
        fields = {} if pa.types.is_map(kind) else {field.name: field.type for field in kind}
        values, position = {}, _space(text, position + 1)
        while not text.startswith("}", position):
            if values:
                if not text.startswith(",", position):
                    raise ValueError(f"expected ',' at {position}")
                position = _space(text, position + 1)
            if not text.startswith('"', position):
                raise ValueError(f"expected a key at {position}")
            key, position = json.decoder.scanstring(text, position + 1)
            position = _space(text, position)
            if not text.startswith(":", position):
                raise ValueError(f"expected ':' at {position}")
            child = kind.item_type if pa.types.is_map(kind) else fields.get(key)
            values[key], position = (_JSON.raw_decode(text, _space(text, position + 1)) if child is None
                                     else _typed(text, position + 1, child))
            position = _space(text, position)
        return values, position + 1
    if (pa.types.is_list(kind) or pa.types.is_large_list(kind)) and text.startswith("[", position):
        items, position = [], _space(text, position + 1)
        while not text.startswith("]", position):
            if items:
                if not text.startswith(",", position):
                    raise ValueError(f"expected ',' at {position}")
                position += 1
            item, position = _typed(text, position, kind.value_type)
            items.append(item)
            position = _space(text, position)
        return items, position + 1
    return _JSON.raw_decode(text, position)


def document_records(text: str, syntax: JsonSyntax | None = None) -> list[str] | None:
    """multiLine json: the text of each record of a document that is an array of them or one
    record, as it is written (numbers keep their digits); None if the document is not JSON, of
    the lenient ``syntax`` either."""
    records = _document_records(text)
    if records is None and syntax is not None and syntax.lenient:
        strict = strict_json(text, syntax)
        records = None if strict is None else _document_records(strict)
    return records


def _document_records(text: str) -> list[str] | None:
    def space(position: int) -> int:
        return _space(text, position)

    position = space(0)
    if position == len(text):
        return []
    try:
        if not text.startswith("[", position):
            _, end = _JSON.raw_decode(text, position)
            return [text[position:end]] if space(end) == len(text) else None
        records, position = [], space(position + 1)
        while not text.startswith("]", position):
            if records:
                if not text.startswith(",", position):
                    return None
                position = space(position + 1)
            _, end = _JSON.raw_decode(text, position)
            records.append(text[position:end])
            position = space(end)
        return records if space(position + 1) == len(text) else None
    except ValueError:
        return None


_NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}  # as Spark's json writer puts them


def _wire_type(kind: pa.DataType, pattern_for: PatternFor = _no_pattern) -> pa.DataType:
    """``kind`` as pyarrow's json reader reads it: every date and binary, and every timestamp with
    a pattern, at any depth, as the JSON string it is written as, and every map as a list of its
    entries."""
    if pa.types.is_date(kind) or pa.types.is_binary(kind) or pa.types.is_large_binary(kind) or pattern_for(kind):
        return pa.string()
    if pa.types.is_struct(kind):
        return pa.struct([field.with_type(_wire_type(field.type, pattern_for)) for field in kind])
    if pa.types.is_map(kind):  # which that reader cannot read: as entries (see _in_wire_form)
        return pa.list_(pa.struct([("key", pa.string()), ("value", _wire_type(kind.item_type, pattern_for))]))
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        make = pa.list_ if pa.types.is_list(kind) else pa.large_list
        return make(kind.value_field.with_type(_wire_type(kind.value_type, pattern_for)))
    return kind


def _from_wire(column: pa.Array, kind: pa.DataType, pattern_for: PatternFor = _no_pattern) -> pa.Array:
    """``column``, read as ``_wire_type(kind, pattern_for)``, as ``kind``: ArrowInvalid where a
    string is no date (or not of the pattern) or no base64."""
    if column.type == kind:
        return column
    pattern = pattern_for(kind)
    if pattern is not None:
        parsed = pattern.parse(column, kind)
        if parsed.null_count != column.null_count:
            raise pa.ArrowInvalid(f"a value does not match the pattern {pattern.pattern!r}")
        return parsed
    if pa.types.is_date(kind):
        return column.cast(kind)
    if pa.types.is_struct(kind):
        children = [_from_wire(column.field(i), field.type, pattern_for) for i, field in enumerate(kind)]
        return pa.StructArray.from_arrays(children, fields=list(kind), mask=column.is_null())
    if pa.types.is_map(kind) or pa.types.is_list(kind) or pa.types.is_large_list(kind):
        # from_arrays takes no null bitmap with sliced offsets: offsets from 0 over the values used
        first, last = column.offsets[0].as_py(), column.offsets[-1].as_py()
        offsets, mask = pc.subtract(column.offsets, first), column.is_null()
        values = column.values.slice(first, last - first)
        if pa.types.is_map(kind):  # JSON keys are strings: "1" for an int key
            keys, key_type = values.field(0), kind.key_type
            keys = (_from_wire(keys, key_type, pattern_for) if _wire_type(key_type, pattern_for) == pa.string()
                    else keys.cast(key_type))
            items = _from_wire(values.field(1), kind.item_type, pattern_for)
            return pa.MapArray.from_arrays(offsets, keys, items, kind, mask=mask)
        values = _from_wire(values, kind.value_type, pattern_for)
        return type(column).from_arrays(offsets, values, kind, mask=mask)
    try:
        return pa.array([None if v is None else base64.b64decode(v, validate=True) for v in column.to_pylist()], kind)
    except binascii.Error as exc:
        raise pa.ArrowInvalid(f"not base64: {exc}") from None


def _has_map(kind: pa.DataType) -> bool:
    if pa.types.is_map(kind):
        return True
    if pa.types.is_struct(kind):
        return any(_has_map(field.type) for field in kind)
    return (pa.types.is_list(kind) or pa.types.is_large_list(kind)) and _has_map(kind.value_type)


def _in_wire_form(value: Any, kind: pa.DataType) -> Any:
    """A parsed JSON value as pyarrow's reader reads it as ``_wire_type(kind)``: every object that
    is a map as a list of ``{"key": ..., "value": ...}`` entries, and Spark's strings for NaN and
    the infinities, where a float goes, as the numbers (which ``json.dumps`` writes as ``NaN``,
    ``Infinity``, ``-Infinity``, and that reader reads). Anything else not of its type stays as it
    is, for the reader to refuse, but for a value where a string goes: see :func:`_wire_record`."""
    if (pa.types.is_string(kind) or pa.types.is_large_string(kind)) and not isinstance(value, (str, type(None))):
        raise _NotText
    if pa.types.is_floating(kind) and isinstance(value, str):
        return _NON_FINITE.get(value, value)
    if pa.types.is_map(kind) and isinstance(value, dict):
        return [{"key": k, "value": _in_wire_form(v, kind.item_type)} for k, v in value.items()]
    if pa.types.is_struct(kind) and isinstance(value, dict):
        fields = {field.name: field.type for field in kind}
        return {k: _in_wire_form(v, fields[k]) if k in fields else v for k, v in value.items()}
    if (pa.types.is_list(kind) or pa.types.is_large_list(kind)) and isinstance(value, list):
        return [_in_wire_form(v, kind.value_type) for v in value]
    return value


PARSERS: dict[str, Callable[[ReadSpec], TextParser | CsvParser | JsonParser]] = {
    "text": TextParser, "csv": CsvParser, "json": JsonParser,
}  # fmt: skip


# ---------------------------------------------------------------------------------------------
# Output: data columns + corrupt-record + file metadata columns, in the schema's order


class BatchBuilder:
    def __init__(self, spec: ReadSpec, split: FileSplit):
        self.spec, self.split = spec, split

    def build(self, table: pa.Table, corrupt: list[str | None] | None = None) -> pa.RecordBatch:
        rows = table.num_rows
        arrays = []
        partition_values = dict(self.spec.partition_values)
        for field in self.spec.schema:
            if field.name in partition_values:
                arrays.append(partitions.column(partition_values[field.name], rows, field.type, self.split.path, field.name))
            elif field.name == self.spec.path_column:
                arrays.append(pa.array([self.split.path] * rows, field.type))
            elif field.name == self.spec.mtime_column:
                arrays.append(pa.array([self.split.mtime_ms * 1000] * rows, pa.int64()).cast(field.type))
            elif field.name == self.spec.corrupt_column:
                arrays.append(pa.array(corrupt if corrupt is not None else [None] * rows, field.type))
            elif field.name in table.column_names:
                arrays.append(cast_array(table.column(field.name).combine_chunks(), field.type))
            else:
                arrays.append(pa.nulls(rows, field.type))
        for field, array in zip(self.spec.schema, arrays):
            if not field.nullable and array.null_count:  # Spark would fail on it with no word of where
                raise ValueError(
                    f"connectors.files: {self.split.path} has records without a value for column {field.name!r} "
                    "(a missing value or a malformed record), which the schema declares not nullable: declare it "
                    "nullable (Spark's own file sources read every column as nullable)"
                )
        return pa.RecordBatch.from_arrays(arrays, schema=self.spec.schema)

    def skipped(self, message: str) -> pa.RecordBatch:
        """ignoreCorruptFiles, PERMISSIVE: a row of nulls for a skipped file, why in the corrupt column."""
        return self.build(_null_rows(self.spec.data_schema, 1), [message])


# ---------------------------------------------------------------------------------------------


class SplitReader:
    """Reads one split; errors name the file (and line) so the user can find the bad input."""

    def __init__(self, spec: ReadSpec, split: FileSplit):
        self.spec, self.split = spec.for_file(split.path), split
        self.out = BatchBuilder(self.spec, split)

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        try:
            yield from self._read()
        except FileNotFoundError:
            if not self.spec.ignore_missing_files:
                raise
            # As Spark's: rows read before the file went are kept, the rest is skipped.
            message = f"connectors.files: {self.split.path} is gone; skipped it (ignoreMissingFiles)"
            missing_files_log.warning(message, extra={"context": {"file": self.split.path}})

    def _read(self) -> Iterator[pa.RecordBatch]:
        fs, path = filesystem(self.split.path, self.spec.storage_options)
        with fs.open(path, "rb") as raw:
            if self.spec.file_format == "parquet":
                yield from self._parquet(raw)
            elif self.spec.file_format == "avro":
                yield from self._avro(raw)
            else:
                yield from self._lines(raw)

    def _lines(self, raw: BinaryIO) -> Iterator[pa.RecordBatch]:
        codec = codec_of(self.split.path)
        if codec is None:
            end = self.split.size if self.split.end < 0 else self.split.end
            chunks = _range_chunks(raw, self.split.start, end)
        else:
            chunks = self._decompressed(decompressing(raw, codec))
        try:
            if self.spec.multi_line or self.spec.whole_text:
                yield from self._document(b"".join(chunks))
                return
            parser = PARSERS[self.spec.file_format](self.spec)
            separator = self.spec.line_sep.encode(self.spec.encoding) if self.spec.line_sep else b"\n"
            # csv and json blocks are made newline-separated; text splits on the separator itself
            ends = separator if self.spec.file_format == "text" else b"\n"
            line = 0  # lines before the current block
            for block in _line_blocks(chunks, separator):
                changed: dict[int, str] = {}
                if ends != separator:
                    block, changed = separated(block, separator, self.spec.file_format, self.spec.encoding)
                try:
                    table, bad = parser.parse(block, line == 0 and self.split.start == 0)
                except pa.ArrowInvalid as exc:  # e.g. an unbalanced quote: no line to blame
                    raise MalformedRecordError(
                        f"connectors.files: cannot parse {self.split.path} after line {line}: {exc}"
                    ) from None
                for malformed in bad:
                    malformed.text = changed.get(malformed.line, malformed.text)
                yield from self._rows(table, bad, line)
                line += block.count(ends)
        except CorruptFileError as exc:
            if not self.spec.ignore_corrupt_files:
                raise
            yield from self._skipped(exc)
        except CsvRecordError as exc:
            raise CsvRecordError(f"connectors.files: {self.split.path}: {exc}") from None

    def _document(self, data: bytes) -> Iterator[pa.RecordBatch]:
        """multiLine, wholetext: the whole file at once. A json document's records are put one per line (a JSON
        value's newlines are only spaces between its tokens) for the json lines reader."""
        if self.spec.file_format == "text":  # an empty file is no row, as in Spark
            text = [data.decode(self.spec.encoding, errors="replace")] if data else []
            table, bad = pa.table({"value": pa.array(text, pa.string())}), []
        elif self.spec.file_format == "csv":
            table, bad = CsvParser(self.spec).parse(data, True)
        else:
            text = data.decode(self.spec.encoding, errors="replace")
            records = document_records(text, self.spec.json_syntax)
            if records is None:
                table, bad = _null_rows(self.spec.data_schema, 1), [Malformed(1, text, 0)]
            else:
                lines = "\n".join(r.replace("\n", " ").replace("\r", " ") for r in records).encode()
                table, bad = JsonParser(dataclasses.replace(self.spec, encoding="UTF-8")).parse(lines, True)
        yield from self._rows(table, bad, 0)

    def _decompressed(self, stream: BinaryIO) -> Iterator[bytes]:
        while True:
            try:
                chunk = stream.read(BLOCK_BYTES)
            except CORRUPT_ERRORS as exc:
                raise self._corrupt(exc) from None
            if not chunk:
                return
            yield chunk

    def _rows(self, table: pa.Table, bad: list[Malformed], lines_before: int) -> Iterator[pa.RecordBatch]:
        """A parser's rows, as the mode says: malformed ones fail the read (FAILFAST), are dropped
        (DROPMALFORMED) or kept, their text in the corrupt-record column (PERMISSIVE)."""
        corrupt = None
        if bad and self.spec.mode == "FAILFAST":
            first = min(bad, key=lambda m: m.line)
            where = f"{'record' if self.spec.multi_line else 'line'} {lines_before + first.line}"
            if self.split.start > 0:
                where += f" counted from byte {self.split.start}"
            raise MalformedRecordError(
                f"connectors.files: malformed record in {self.split.path}, {where} (mode FAILFAST): {first.text[:200]!r}"
            )
        if bad and self.spec.mode == "DROPMALFORMED":
            keep = [True] * table.num_rows
            for malformed in bad:
                keep[malformed.row] = False
            table = table.filter(pa.array(keep))
        elif bad and self.spec.corrupt_column is not None:
            corrupt = [None] * table.num_rows
            for malformed in bad:
                corrupt[malformed.row] = malformed.text
        if table.num_rows:
            yield self.out.build(table, corrupt)

    def _corrupt(self, exc: BaseException) -> CorruptFileError:
        hint = "" if self.spec.ignore_corrupt_files else " (set ignoreCorruptFiles=true to skip such files)"
        return CorruptFileError(f"connectors.files: corrupt or truncated file {self.split.path}: {exc}{hint}")

    def _parquet(self, raw: BinaryIO) -> Iterator[pa.RecordBatch]:
        try:
            parquet = open_parquet(raw)
            present = [name for name in self.spec.data_schema.names if name in parquet.schema_arrow.names]
            calendar = FileCalendar.of(self.split.path, parquet.metadata.metadata, self.spec.datetime_rebase,
                                       self.spec.int96_rebase)
            fixes = calendar.column_fixes(parquet.schema_arrow, present, leaf_physical_types(parquet))
            batches = parquet.iter_batches(
                batch_size=PARQUET_BATCH_ROWS, row_groups=self.split.row_groups, columns=present
            )
            for batch in batches:
                yield self.out.build(pa.Table.from_batches([fixed(batch, fixes)]))
        except (pa.ArrowInvalid, OSError) as exc:
            error = self._corrupt(exc)
            if not self.spec.ignore_corrupt_files:
                raise error from None
            yield from self._skipped(error)

    def _avro(self, raw: BinaryIO) -> Iterator[pa.RecordBatch]:
        """The blocks that start in the split; blocks are decoded together up to AVRO_BATCH_ROWS."""
        from connectors.core import avro  # fastavro and pyarrow.compute: only where Avro is read

        split = self.split
        end = split.size if split.end < 0 else split.end
        try:
            schema_json, codec, sync, metadata = avro.read_header(raw)
            writer = avro.parse(schema_json)
            reader = None if self.spec.avro_schema is None else avro.parse(self.spec.avro_schema)  # None: the writer's
            decoded = avro.arrow_type(reader or writer)
            # The values are decoded with member0, ... and the Avro field names, then viewed with the names read
            names = avro.renamed(decoded, avro.arrow_type(reader or writer, self.spec.union_prefix))
            if self.spec.positional:
                names = avro.renamed(names, pa.struct(list(self.spec.data_schema)))
            avro.check_readable(reader or writer, names, self.spec.data_schema, f"connectors.files: {split.path}")
            decoder = avro.Decoder(schema_json, reader, decoded)
            calendar = FileCalendar.of(split.path, metadata, self.spec.datetime_rebase)
            fixes = calendar.column_fixes(names, self.spec.data_schema.names)
            decompress = avro.CODECS[codec][1]
            position = raw.tell() if split.start == 0 else _after_sync(raw, split.start, sync, split.size)
            pending: list[bytes] = []
            count = 0
            while position < min(end, split.size):
                raw.seek(position)
                records, size = avro.read_varint(raw), avro.read_varint(raw)
                data = raw.read(size)
                if len(data) != size or raw.read(avro.SYNC_SIZE) != sync:
                    raise ValueError(f"the block at byte {position} is cut short or not followed by the sync marker")
                pending.append(decompress(data))
                count += records
                position = raw.tell()
                if count >= AVRO_BATCH_ROWS:
                    yield self._avro_batch(decoder, fixes, names, count, pending)
                    pending, count = [], 0
            if count:
                yield self._avro_batch(decoder, fixes, names, count, pending)
        except (ValueError, EOFError, OSError, pa.ArrowInvalid) as exc:
            error = self._corrupt(exc)
            if not self.spec.ignore_corrupt_files:
                raise error from None
            yield from self._skipped(error)

    def _avro_batch(self, decoder: Decoder, fixes: dict[str, Fix], names: pa.DataType, count: int,
                    blocks: list[bytes]) -> pa.RecordBatch:
        from connectors.core.avro import AvroTypeError

        try:
            values = decoder.decode_block(count, b"".join(blocks)).view(names)
        except AvroTypeError as exc:  # avroSchema that the file's schema does not resolve to: no corrupt file
            raise AvroTypeError(f"connectors.files: {self.split.path}: {exc}") from None
        return self.out.build(pa.Table.from_batches([fixed(pa.RecordBatch.from_struct_array(values), fixes)]))

    def _skipped(self, error: CorruptFileError) -> Iterator[pa.RecordBatch]:
        """ignoreCorruptFiles: count the file where the user sees it, then go on.

        PERMISSIVE with a corrupt-record column: one row for the file (nulls, the error in that
        column, the file's metadata columns). It travels with the data, so a retried task or a
        replayed batch counts it exactly as often as the output holds the file's rows.
        """
        message = f"{error}; skipped the rest of it (ignoreCorruptFiles)"
        corrupt_files_log.warning(message, extra={"context": {"file": self.split.path}})
        if self.spec.mode == "PERMISSIVE" and self.spec.corrupt_column is not None:
            yield self.out.skipped(message)


def open_parquet(raw: BinaryIO) -> pq.ParquetFile:
    """A parquet file whose INT96 timestamps (what Spark writes by default) read at microseconds,
    Spark's unit: at pyarrow's nanoseconds only years 1677-2262 fit."""
    return pq.ParquetFile(raw, coerce_int96_timestamp_unit="us")


def leaf_physical_types(parquet: pq.ParquetFile) -> Iterator[str]:
    """The physical types of a parquet file's leaf columns, in the order the Arrow schema's leaves come
    (depth first): INT96 timestamps read as zone-less ones do."""
    return (parquet.schema.column(i).physical_type for i in range(len(parquet.schema)))


def _after_sync(stream: BinaryIO, start: int, sync: bytes, size: int) -> int:
    """Where the first block starting at or after ``start`` begins: after the first sync marker
    that ends there or later (the file's size when there is none)."""
    position = max(0, start - len(sync))
    stream.seek(position)
    carry = b""
    while True:
        chunk = stream.read(1 << 20)
        if not chunk:
            return size
        data = carry + chunk
        found = data.find(sync)
        if found >= 0:
            return position - len(carry) + found + len(sync)
        carry = data[-(len(sync) - 1):]
        position += len(chunk)


def read_partition(spec: ReadSpec, partition: FilePartition) -> Iterator[pa.RecordBatch]:
    for split in partition.splits:
        yield from SplitReader(spec, split)
