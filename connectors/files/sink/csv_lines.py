"""csv lines for the file sink, escaped as Spark's csv writer escapes them, written by Arrow.

Arrow's csv writer quotes every string and doubles a quote inside one (RFC 4180's escape, which
Spark reads only with ``escape='"'``). With Spark's default escape, a backslash, a string holding
a quote or a backslash is first escaped here (``\\`` -> ``\\\\``, ``"`` -> ``\\"``), and the
quotes Arrow then doubles behind an escape are single again in the output: ``a"b`` is written
``"a\\"b"``, which Spark's reader and ours read back. The output holds ``\\""`` nowhere else: every
quote of a value follows an escape, and a closing quote is followed by the separator or the end
of the line. A null is an empty field (``nullValue``), an empty string ``""``. Doubles and floats are written
as Spark writes them (see ``connectors.core.texts.float_texts``), quoted; numbers, dates and timestamps are
quoted too where the separator or the line separator could be inside them (``sep='-'``). With
``quoteAll`` every field is quoted, nulls too (their ``nullValue``), as Spark's writer quotes them.
"""

from __future__ import annotations

import dataclasses
import io

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from connectors.core.arrow import UTC_ZONES
from connectors.core.texts import TEXT, concat, float_texts

_QUOTE = '"'
_IN_NUMBERS_AND_TIMES = "-+.: "  # with letters and digits, what numbers, dates and timestamps hold


@dataclasses.dataclass(frozen=True)
class CsvDialect:
    """Spark's csv writer options ``sep``, ``escape``, ``nullValue``, ``quoteAll``, ``lineSep`` and
    ``emptyValue``, with its defaults."""

    sep: str = ","
    escape: str = "\\"
    null_value: str = ""
    quote_all: bool = False
    line_sep: str = "\n"
    empty_value: str | None = None  # None: Spark's default, an empty string written as ""


def header_line(columns: list[str], dialect: CsvDialect) -> bytes:
    """The column names as one line."""
    return _write(pa.table([pa.array([], TEXT) for _ in columns], names=columns), dialect, header=True)


def csv_lines(batch: pa.RecordBatch, dialect: CsvDialect) -> bytes:
    return _write(pa.table(batch), dialect, header=False)


def _write(table: pa.Table, dialect: CsvDialect, header: bool) -> bytes:
    escape, escaped = dialect.escape, False
    names = table.column_names
    if header and escape != _QUOTE and any(_QUOTE in name or escape in name for name in names):
        names, escaped = [_escaped_text(name, escape) for name in names], True
    columns = []
    in_numbers = any(c.isalnum() or c in _IN_NUMBERS_AND_TIMES for c in (dialect.sep, dialect.line_sep))
    for column in table.columns:
        kind = column.type
        if pa.types.is_floating(kind):
            column = float_texts(column.combine_chunks())
        elif pa.types.is_string(kind) or pa.types.is_large_string(kind):
            if dialect.empty_value is not None and pc.any(pc.equal(column, "")).as_py():
                column = _empty_replaced(column, dialect)
            if escape != _QUOTE and (pc.any(pc.match_substring(column, _QUOTE)).as_py()
                                     or pc.any(pc.match_substring(column, escape)).as_py()):  # fmt: skip
                column, escaped = _escaped(column, escape), True
        elif pa.types.is_timestamp(kind) and kind.tz is not None:
            # the same text as Arrow writes for a UTC zone, 3x faster: Arrow formats a zoned timestamp
            # through the time zone database (docs/file-sink.md); quoted, as every string. Other zones
            # in UTC too, as json and timestampFormat write them: Arrow's local time has the offset cut
            # to minutes (1883 Los Angeles: -0752 for -07:52:58), read back 58 s off
            zone_text = "+0000" if kind.tz != "UTC" and kind.tz in UTC_ZONES else "Z"
            column = concat(column.cast(pa.timestamp(kind.unit)), zone_text)
        elif in_numbers and not dialect.quote_all:
            column = pc.cast(column, TEXT)  # quoted, as every string
        if dialect.quote_all and column.null_count:  # Arrow leaves nulls unquoted; Spark quotes its nullValue
            column = pc.fill_null(pc.cast(column, TEXT), pa.scalar(dialect.null_value, TEXT))
        columns.append(column)
    out = io.BytesIO()
    # the whole batch as one chunk: Arrow's default of 1,024 rows took a fifth longer (docs/file-sink.md)
    options = pacsv.WriteOptions(include_header=header, delimiter=dialect.sep, batch_size=max(table.num_rows, 1),
                                 eol=dialect.line_sep, null_string=dialect.null_value,
                                 quoting_style="all_valid" if dialect.quote_all else "needed")
    pacsv.write_csv(pa.table(columns, names=names), out, options)
    data = out.getvalue()
    if escaped:
        marker = escape.encode()
        data = data.replace(marker + b'""', marker + b'"')
    return data


def _empty_replaced(column, dialect: CsvDialect):
    """Empty strings as ``emptyValue``: quoted as every string; ``""`` as an empty field, which
    Arrow writes only for a null (a nullValue other than "" is refused with it, unless quoteAll,
    where Spark writes both quoted)."""
    if dialect.empty_value == "" and not dialect.quote_all:
        return pc.if_else(pc.equal(column, ""), pa.scalar(None, column.type), column)
    return pc.if_else(pc.equal(column, ""), pa.scalar(dialect.empty_value, column.type), column)


def _escaped(column, escape: str):
    return pc.replace_substring(pc.replace_substring(column, escape, escape * 2), _QUOTE, escape + _QUOTE)


def _escaped_text(text: str, escape: str) -> str:
    return text.replace(escape, escape * 2).replace(_QUOTE, escape + _QUOTE)
