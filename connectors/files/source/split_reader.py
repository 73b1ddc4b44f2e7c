"""Reading one split of one file into Arrow record batches: text, csv, json lines, parquet, avro.

Runs in the executors. Line formats are read in blocks that end on a line boundary and parsed
by pyarrow's csv/json readers (text is split in Python); parquet by row groups; Avro object
container files by blocks: a split owns the blocks that start in it, found by the sync marker. A split of an
uncompressed line file is the byte range ``[start, end)`` and owns the lines that START inside
it (Hadoop's LineRecordReader rule): it skips the partial line at its start and finishes the line
crossing its end, so every line is read exactly once whatever the cut points.

A block of lines goes to its format's parser (``csv_parser``, ``json_parser``, or text's split
here), which returns all the block's rows and which of them are malformed; ``SplitReader._rows``
then keeps, drops or refuses those as Spark's ``mode`` says.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, BinaryIO

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql.datasource import InputPartition

from connectors.core.filesystem import filesystem
from connectors.files.source import partitions
from connectors.files.source.compression import CORRUPT_ERRORS, codec_of, decompressing
from connectors.files.source.rebase import FileCalendar, Fix, fixed

from connectors.files.source.csv_parser import CsvParser, whitespace_records_blanked
from connectors.files.source.json_parser import JsonParser, document_records, line_encoding_problem
from connectors.files.source.options import ascii_incompatible
from connectors.files.source.read_spec import ReadSpec
from connectors.files.source.records import (
    CsvRecordError,
    Malformed,
    MalformedRecordError,
    cast_array,
    null_rows,
    separated,
    utf8_chunks,
)

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


class CorruptFileError(IOError):
    """A compressed file that is corrupt or truncated (or an unreadable parquet file)."""


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
                arrays.append(partitions.column(partition_values[field.name], rows, field.type, self.split.path,
                                                field.name, self.spec.zone))
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
        if not arrays:  # json's struct<>: a row per record still, which a batch of no arrays would not hold
            return pa.RecordBatch.from_struct_array(pa.nulls(rows, pa.struct([])))
        return pa.RecordBatch.from_arrays(arrays, schema=self.spec.schema)

    def skipped(self, message: str) -> pa.RecordBatch:
        """ignoreCorruptFiles, PERMISSIVE: a row of nulls for a skipped file, why in the corrupt column."""
        return self.build(null_rows(self.spec.data_schema, 1), [message])


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
        spec = self.spec
        if spec.file_format in ("csv", "json") and ascii_incompatible(spec.encoding):
            # whole files (such reads take lineSep or multiLine): decoded as they come, so no cut halves a character
            chunks, spec = utf8_chunks(chunks, spec.encoding), dataclasses.replace(spec, encoding="UTF-8")
        try:
            if spec.multi_line or spec.whole_text:
                yield from self._document(b"".join(chunks), spec)
                return
            problem = (line_encoding_problem(self.spec.encoding, spec.line_sep, False)
                       if spec.file_format == "json" else None)
            if problem:  # rows of nulls otherwise
                raise ValueError(f"connectors.files: cannot read {self.split.path}: option 'encoding' = "
                                 f"{self.spec.encoding!r}: {problem}")
            parser = PARSERS[spec.file_format](spec)
            separator = spec.line_sep.encode(spec.encoding) if spec.line_sep else b"\n"
            # csv and json blocks are made newline-separated; text splits on the separator itself
            ends = separator if spec.file_format == "text" else b"\n"
            line = 0  # lines before the current block
            for block in _line_blocks(chunks, separator):
                changed: dict[int, str] = {}
                if ends != separator:
                    if spec.file_format == "csv":  # Spark's line reader drops whitespace-only records
                        block = whitespace_records_blanked(block, separator)
                        if parser.rows_only and b"\n" not in separator:  # a record's newlines are data, its own
                            block = block.replace(b"\n", b" ")  # line (a row, unparsed) as in Spark's line reader
                    block, changed = separated(block, separator, spec.file_format, spec.encoding)
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

    def _document(self, data: bytes, spec: ReadSpec) -> Iterator[pa.RecordBatch]:
        """multiLine, wholetext: the whole file at once. A json document's records are put one per line (a JSON
        value's newlines are only spaces between its tokens) for the json lines reader."""
        if spec.file_format == "text":  # an empty file is no row, as in Spark
            text = [data.decode(spec.encoding, errors="replace")] if data else []
            table, bad = pa.table({"value": pa.array(text, pa.string())}), []
        elif spec.file_format == "csv":
            table, bad = CsvParser(spec).parse(data, True)
        else:
            text = data.decode(spec.encoding, errors="replace")
            records = document_records(text, spec.json_syntax)
            # as Spark's: a document (or an array of them) of anything but objects is one malformed record, the file's text
            if records is None or not all(record.startswith("{") for record in records):
                table, bad = null_rows(spec.data_schema, 1), [Malformed(1, text, 0)]
            else:
                lines = "\n".join(r.replace("\n", " ").replace("\r", " ") for r in records).encode()
                table, bad = JsonParser(dataclasses.replace(spec, encoding="UTF-8")).parse(lines, True)
                if bad:  # every record of a document with one malformed is (Spark's partial results), as the file's text
                    bad = [Malformed(1, text, row) for row in range(table.num_rows)]
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
            # the file's column of each column of the schema, by name in any case, as Spark's (caseSensitive=false)
            groups = self.split.row_groups
            groups = range(parquet.metadata.num_row_groups) if groups is None else groups
            rows = sum(parquet.metadata.row_group(group).num_rows for group in groups)  # none: no type checked
            columns = parquet_columns(parquet.schema_arrow, self.spec.data_schema, self.split.path, rows > 0)
            present = list(columns.values())
            calendar = FileCalendar.of(self.split.path, parquet.metadata.metadata, self.spec.datetime_rebase,
                                       self.spec.int96_rebase)
            fixes = calendar.column_fixes(parquet.schema_arrow, present, leaf_physical_types(parquet))
            batches = parquet.iter_batches(
                batch_size=PARQUET_BATCH_ROWS, row_groups=self.split.row_groups, columns=present
            )
            names = list(columns)
            for batch in batches:
                batch = fixed(batch, fixes)
                arrays = [_renamed(array, self.spec.data_schema.field(name).type)
                          for name, array in zip(names, batch.columns)]
                table = pa.Table.from_arrays(arrays, names=names) if names else pa.Table.from_batches([batch])
                try:
                    out = self.out.build(table)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:  # not a corrupt file: a value of
                    # no schema type (ignoreCorruptFiles must not skip it)
                    raise ValueError(f"connectors.files: {self.split.path}: cannot read the file's values as the "
                                     f"schema's types: {exc}") from None
                yield out
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


def parquet_columns(file: pa.Schema, schema: pa.Schema, path: str, check: bool = True) -> dict[str, str]:
    """The file's column (by name) of each column of ``schema`` the file has, matched by name in any case,
    as Spark's parquet reader matches them (``spark.sql.caseSensitive=false``, its default): two columns of
    the file matching one of the schema fail, as in Spark. A file column whose type Spark's reader cannot
    read as the schema's fails, naming the file and the column, as Spark's reader does when it reads a row
    group: a ``check`` of a split without rows is not made."""
    by_name: dict[str, list[pa.Field]] = {}
    for field in file:
        by_name.setdefault(field.name.lower(), []).append(field)
    columns = {}
    for field in schema:
        found = by_name.get(field.name.lower(), [])
        if len(found) > 1:
            raise ValueError(f"connectors.files: {path}: columns {[f.name for f in found]} of the file all match the "
                             f"column {field.name!r} in case-insensitive mode, as Spark's reader matches them")
        if found:
            problem = unreadable(found[0].type, field.type) if check else None
            if problem:
                raise ValueError(f"connectors.files: {path}: the file's column {found[0].name!r} ({found[0].type}) "
                                 f"cannot be read as {field.type}: {problem}, as Spark's parquet reader refuses it")
            columns[field.name] = found[0].name
    return columns


_INTEGER_DIGITS = {8: 10, 16: 10, 32: 10, 64: 20}  # Spark reads INT32 as decimals of 10 integer digits, INT64 of 20


def unreadable(written: pa.DataType, wanted: pa.DataType) -> str | None:
    """Why Spark's parquet reader refuses to read values of the file's type ``written`` as ``wanted``
    (``SchemaColumnConvertNotSupportedException``), where a cast would read them silently; None if it reads them
    (or where pyarrow's cast fails anyway, naming the values). Structs, lists and maps are checked in their parts."""
    if pa.types.is_struct(written) and pa.types.is_struct(wanted):
        fields = {f.name.lower(): f for f in written}
        for field in wanted:
            inner = fields.get(field.name.lower())
            problem = None if inner is None else unreadable(inner.type, field.type)
            if problem:
                return problem
        return None
    if pa.types.is_map(written) and pa.types.is_map(wanted):
        return unreadable(written.key_type, wanted.key_type) or unreadable(written.item_type, wanted.item_type)
    if _is_list(written) and _is_list(wanted):
        return unreadable(written.value_type, wanted.value_type)
    if written == wanted or pa.types.is_null(written) or pa.types.is_dictionary(written):
        return None
    if pa.types.is_boolean(written) != pa.types.is_boolean(wanted):
        return "booleans and other types are not read as each other"
    text = (pa.types.is_string(written) or pa.types.is_large_string(written) or pa.types.is_binary(written)
            or pa.types.is_large_binary(written) or pa.types.is_fixed_size_binary(written))
    if pa.types.is_string(wanted) and not text:
        return "only strings and binary values are read as strings"
    if pa.types.is_integer(written) and pa.types.is_signed_integer(written):
        if pa.types.is_floating(wanted) and (wanted.bit_width < 64 or written.bit_width == 64):
            return "32-bit integers are read as double, other integers as no floating-point type"
        if pa.types.is_timestamp(wanted):
            return "integers are not read as timestamps"
        if pa.types.is_integer(wanted) and written.bit_width == 64 and wanted.bit_width < 64:
            return "a 64-bit integer is not read as a narrower integer"
        if pa.types.is_decimal(wanted) and wanted.precision - wanted.scale < _INTEGER_DIGITS[written.bit_width]:
            return f"the decimal has fewer than {_INTEGER_DIGITS[written.bit_width]} digits before its point"
    if pa.types.is_unsigned_integer(written) and pa.types.is_decimal(wanted) and (
            written != pa.uint64() or wanted != pa.decimal128(20, 0)):
        return "unsigned integers are read as no decimal but UINT_64's decimal(20,0)"
    if pa.types.is_floating(written) and pa.types.is_floating(wanted) and wanted.bit_width < written.bit_width:
        return "a double is not read as a float"
    if pa.types.is_floating(written) and (pa.types.is_integer(wanted) or pa.types.is_decimal(wanted)):
        return "floating-point values are read as float or double only"
    if pa.types.is_decimal(written) and pa.types.is_floating(wanted):
        return "decimals are read as decimals only"
    if pa.types.is_date(written) and pa.types.is_timestamp(wanted) and wanted.tz is not None:
        return "dates are read as timestamp_ntz, not timestamp"
    if pa.types.is_timestamp(written) and pa.types.is_date(wanted):
        return "timestamps are not read as dates"
    if pa.types.is_decimal(written) and pa.types.is_decimal(wanted):
        if wanted.scale < written.scale or wanted.precision - wanted.scale < written.precision - written.scale:
            return "a decimal is read only as one of at least its scale and its digits before the point"
    return None


def _is_list(kind: pa.DataType) -> bool:
    return pa.types.is_list(kind) or pa.types.is_large_list(kind)


def _renamed(array: pa.Array, wanted: pa.DataType) -> pa.Array:
    """``array`` with the names of its struct fields (at any depth) spelt as ``wanted`` spells them where
    they match in another case, so that the cast to ``wanted`` (by name) finds them, as Spark's reader does."""
    kind = _spelt(array.type, wanted)
    return array if kind == array.type else array.view(kind)


def _spelt(kind: pa.DataType, wanted: pa.DataType) -> pa.DataType:
    if pa.types.is_struct(kind) and pa.types.is_struct(wanted):
        names = {f.name.lower(): f for f in wanted}
        fields = []
        for field in kind:
            match = names.get(field.name.lower())
            fields.append(field if match is None else pa.field(match.name, _spelt(field.type, match.type),
                                                                field.nullable, field.metadata))
        return pa.struct(fields)
    if pa.types.is_map(kind) and pa.types.is_map(wanted):
        return pa.map_(kind.key_field.with_type(_spelt(kind.key_type, wanted.key_type)),
                       kind.item_field.with_type(_spelt(kind.item_type, wanted.item_type)))
    if _is_list(kind) and _is_list(wanted):
        item = kind.value_field.with_type(_spelt(kind.value_type, wanted.value_type))
        return pa.list_(item) if pa.types.is_list(kind) else pa.large_list(item)
    return kind


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
