"""csv lines for the file sink, escaped as Spark's csv writer escapes them, written by Arrow.

Arrow's csv writer quotes every string and doubles a quote inside one (RFC 4180's escape, which
Spark reads only with ``escape='"'``). With Spark's default escape, a backslash, a string holding
a quote or a backslash is first escaped here (``\\`` -> ``\\\\``, ``"`` -> ``\\"``), and the
quotes Arrow then doubles behind an escape are single again in the output: ``a"b`` is written
``"a\\"b"``, which Spark's reader and ours read back. The output holds ``\\""`` nowhere else: every
quote of a value follows an escape, and a closing quote is followed by the separator or the end
of the line. A null is an empty field, an empty string ``""``. Doubles and floats are written
as Spark writes them (see ``connectors.core.texts.float_texts``), quoted; numbers, dates and timestamps are
quoted too where the separator could be inside them (``sep='-'``).
"""

from __future__ import annotations

import dataclasses
import io

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from connectors.core.texts import TEXT, float_texts

_QUOTE = '"'
_IN_NUMBERS_AND_TIMES = "-+.: "  # with letters and digits, what numbers, dates and timestamps hold


@dataclasses.dataclass(frozen=True)
class CsvDialect:
    """Spark's csv writer options ``sep`` and ``escape``, with its defaults."""

    sep: str = ","
    escape: str = "\\"


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
    for column in table.columns:
        kind = column.type
        if pa.types.is_floating(kind):
            column = float_texts(column.combine_chunks())
        elif pa.types.is_string(kind) or pa.types.is_large_string(kind):
            if escape != _QUOTE and (pc.any(pc.match_substring(column, _QUOTE)).as_py()
                                     or pc.any(pc.match_substring(column, escape)).as_py()):  # fmt: skip
                column, escaped = _escaped(column, escape), True
        elif dialect.sep.isalnum() or dialect.sep in _IN_NUMBERS_AND_TIMES:
            column = pc.cast(column, TEXT)  # quoted, as every string
        columns.append(column)
    out = io.BytesIO()
    # the whole batch as one chunk: Arrow's default of 1,024 rows took a fifth longer (docs/file-sink.md)
    options = pacsv.WriteOptions(include_header=header, delimiter=dialect.sep, batch_size=max(table.num_rows, 1))
    pacsv.write_csv(pa.table(columns, names=names), out, options)
    data = out.getvalue()
    if escaped:
        marker = escape.encode()
        data = data.replace(marker + b'""', marker + b'"')
    return data


def _escaped(column, escape: str):
    return pc.replace_substring(pc.replace_substring(column, escape, escape * 2), _QUOTE, escape + _QUOTE)


def _escaped_text(text: str, escape: str) -> str:
    return text.replace(escape, escape * 2).replace(_QUOTE, escape + _QUOTE)
