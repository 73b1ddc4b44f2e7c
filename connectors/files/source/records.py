"""What the line parsers return and share: a malformed record (``Malformed``), the errors,
and the conversion of text columns to the schema's types that marks the rows that fail.

Malformed records follow Spark's ``mode`` (applied by ``split_reader``): PERMISSIVE keeps the
record with the values that convert and its text in the corrupt-record column (when the schema
has one), DROPMALFORMED drops it, FAILFAST fails with the file and line.
"""

from __future__ import annotations

import codecs
import dataclasses
import datetime
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from connectors.files.datetime_patterns import local_instants
from connectors.files.source.read_spec import PatternFor
from connectors.files.source.spark_texts import spark_text_value


class CsvRecordError(ValueError):
    """What fails Spark's csv read whatever the mode: a record past maxColumns or maxCharsPerColumn,
    a header unlike the schema with enforceSchema=false."""


class MalformedRecordError(ValueError):
    """FAILFAST: a record that does not parse; the message names the file and the line."""


@dataclasses.dataclass
class Malformed:
    """A malformed record of a block, as a parser found it."""

    line: int  # 1-based, within the block
    text: str
    row: int = -1  # its row in the parser's table, holding the values that converted (Spark's partial results)
    columns: int = 0  # csv: how many values it has, where not the schema's count


def cast_array(array: pa.Array, target: pa.DataType, zone: datetime.tzinfo = datetime.timezone.utc) -> pa.Array:
    """Cast, reading zone-less timestamp strings in ``zone`` (the timeZone option)."""
    if array.type == target:
        return array
    zone_less = pa.types.is_timestamp(target) and target.tz is not None and pa.types.is_string(array.type)
    if zone_less and _zone_less(array):  # first as zone-less text: a cast that fails costs a whole parse
        try:
            return local_instants(array.cast(pa.timestamp(target.unit)), zone).cast(target)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass
    try:
        return array.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        if zone_less:
            return local_instants(array.cast(pa.timestamp(target.unit)), zone).cast(target)
        raise


_ZONED = re.compile(r":[0-9]{2}(?:\.[0-9]*)?(?:Z|[+-][0-9]{2}(?::?[0-9]{2})?)$")


def _zone_less(array: pa.Array) -> bool:
    """Whether the first timestamp text of ``array`` has no zone offset (a guess of the others')."""
    for value in array.slice(0, 64).to_pylist():
        if value is not None:
            return _ZONED.search(value) is None
    return True


def cast_or_mark(table: pa.Table, schema: pa.Schema, pattern_for: PatternFor,
                 zone: datetime.tzinfo = datetime.timezone.utc) -> tuple[pa.Table, list[int]]:
    """Cast string columns to ``schema``, dates and timestamps by the pattern ``pattern_for`` gives
    them, if any, zone-less timestamps in ``zone``; values that do not convert make their row malformed."""
    bad: set[int] = set()
    columns = []
    for field in schema:
        column = table.column(field.name).combine_chunks()
        pattern = pattern_for(field.type) if column.type != field.type else None
        if pattern is not None:  # vectorised: a value that does not match is null
            parsed = pattern.parse(column, field.type, zone)
            bad.update(pc.indices_nonzero(pc.and_(column.is_valid(), parsed.is_null())).to_pylist())
            columns.append(parsed)
            continue
        converted, failed = cast_each(
            column, field.type, lambda text, kind=field.type: spark_text_value(text, kind, zone), zone)
        bad.update(failed)
        columns.append(converted)
    return pa.Table.from_arrays(columns, schema=schema), sorted(bad)


_RUN = 512  # values cast together by cast_each, where some value does not cast


def cast_each(column: pa.Array, target: pa.DataType, convert: Callable[[str], Any],
              zone: datetime.tzinfo = datetime.timezone.utc) -> tuple[pa.Array, list[int]]:
    """``column`` cast to ``target`` as :func:`cast_array` does, and the indices of the values that
    do not convert. Runs of values are cast together; in a run that does not cast, each value is cast
    alone, or where it does not, converted by ``convert`` (Spark's text of it; None if none)."""
    try:
        return cast_array(column, target, zone), []
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    parts, bad = [], []
    for start in range(0, len(column), _RUN):
        run = column.slice(start, _RUN)
        try:
            parts.append(cast_array(run, target, zone))
            continue
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass
        values = []
        for row, value in enumerate(run.to_pylist(), start):
            try:
                values.append(cast_array(pa.array([value], column.type), target, zone)[0].as_py())
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                as_spark = convert(value) if isinstance(value, str) else None
                if as_spark is None:
                    bad.append(row)
                values.append(as_spark)
        parts.append(pa.array(values, target))
    return pa.concat_arrays(parts), bad


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


def utf8_chunks(chunks: Iterator[bytes], encoding: str) -> Iterator[bytes]:
    """The chunks of a whole file of ``encoding`` as UTF-8, a character cut between chunks kept whole."""
    decoder = codecs.getincrementaldecoder(encoding)(errors="replace")
    for chunk in chunks:
        yield decoder.decode(chunk).encode()
    yield decoder.decode(b"", final=True).encode()


def interleave(table: pa.Table, rows: pa.Table, at: Sequence[int]) -> pa.Table:
    """``table`` with ``rows`` put in, so that they are rows ``at`` (ascending) of the result."""
    count = table.num_rows + rows.num_rows
    placed = np.zeros(count, bool)
    placed[np.asarray(at, np.int64)] = True
    order = np.empty(count, np.int64)
    order[placed], order[~placed] = table.num_rows + np.arange(rows.num_rows), np.arange(table.num_rows)
    return pa.concat_tables([table, rows]).take(pa.array(order))


def null_rows(schema: pa.Schema, count: int) -> pa.Table:
    # of a struct array: with no column (json's struct<>), the rows still count
    return pa.Table.from_struct_array(pa.nulls(count, pa.struct(list(schema))))


# A schema of no data column (Spark's struct<>, given or json's inferred) still reads a row per record: a
# null column no schema names carries their count through the parsers (Arrow's concatenation, take and
# filter of tables of no column give none); the output (split_reader's BatchBuilder) leaves it out.
ROWS = "\0connectors.files.rows"


def rows_schema(data: pa.Schema) -> pa.Schema:
    """``data``, or where it has no column, one of the ``ROWS`` column alone."""
    return data or pa.schema([(ROWS, pa.null())])
