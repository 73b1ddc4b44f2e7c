"""csv blocks into Arrow tables as Spark's csv reader reads them, by pyarrow's csv reader.

A block holds whole lines. The fast path reads it at once with the schema's types; a block with
a malformed record is read again as text, then converted column by column, the records of too
few or too many values put back where they are. Spark's parser (univocity) differs from pyarrow's
in places, which the passes here bridge: escapes outside quotes (``literal_escapes``), white
space around values (``white_space_trimmer``), comments, headers.
"""

from __future__ import annotations

import codecs
import csv
import dataclasses
import io
import re
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from connectors.files.source.read_spec import ReadSpec
from connectors.files.source.records import (
    CsvRecordError,
    Malformed,
    cast_or_mark,
    interleave,
    null_rows,
    rows_schema,
)


class CsvParser:
    def __init__(self, spec: ReadSpec):
        self.spec = spec
        self.schema = spec.data_schema
        self.rows_only = not self.schema.names  # struct<> given (or the partition columns alone): rows, no values
        # with lineSep a record's newlines can only be inside quotes: records may span lines
        self.spanning = spec.multi_line or spec.line_sep is not None
        # a lineSep without \r makes \r data, as in Spark, where pyarrow ends a line at it
        self.cr_data = spec.line_sep is not None and "\r" not in spec.line_sep
        self.special = spec.separator + spec.quote + spec.escape + (spec.comment or "")
        self.parse_options = dict(
            # escape = quote: RFC 4180's doubled quote, which double_quote reads
            # quote \0 turns quoting off, as in Spark
            delimiter=spec.separator, quote_char=spec.quote != "\0" and spec.quote,
            escape_char=spec.escape != spec.quote and spec.escape,
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
        # Spark's integers (Integer.parseInt) take no hex, which pyarrow's do (0x1A): read as text where
        # the block has a 0x, those values made malformed
        self.integers = {f.name for f in self.schema if pa.types.is_integer(f.type)}
        self.booleans = {f.name for f in self.schema if pa.types.is_boolean(f.type)}
        # A quoted nullValue is null too (Spark compares it after unquoting), which pyarrow keeps.
        self.quoted_null = (spec.quote + spec.null_value + spec.quote).encode(spec.encoding, "replace") \
            if spec.null_value else None
        # Spark's line reader drops the lines holding only whitespace (Java's trim: up to U+0020); its
        # multiLine parser only empty ones. Where such a line would read as a record of too few values
        # (several columns, the separator no whitespace), the fast path never returns it: looked for
        # only when a block goes the slow path.
        self.blank_lines = not spec.multi_line
        self.blank_lines_first = self.blank_lines and (len(self.schema) == 1 or spec.separator <= " ")
        self.utf8 = codecs.lookup(spec.encoding).name == "utf-8"

    def _read(self, block: bytes, skip: int, types: dict, bad: list[Malformed], cr: str | None) -> pa.Table:
        """``cr``: the stand-in for \r in ``block`` (see ``cr_stand_in``), made \r again in the text read."""
        too_wide = []  # pyarrow drops what the handler raises: records past maxColumns, failed after

        def invalid(row) -> str:
            text = row.text if cr is None else row.text.replace(cr, "\r")
            malformed = Malformed(row.number or 0, text, columns=row.actual_columns)
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
                quoted_strings_can_be_null=False, true_values=_TRUE, false_values=_FALSE,
            ),
        )
        if cr is not None:
            table = pa.Table.from_arrays([pc.replace_substring(column, cr, "\r") if pa.types.is_string(column.type)
                                          else column for column in table.columns], schema=table.schema)
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
        """The header within maxColumns and maxCharsPerColumn, as Spark's parser takes it whatever the mode
        and enforceSchema; with enforceSchema=false, naming the schema's columns, in order, in any case
        (Spark's CSVHeaderChecker, spark.sql.caseSensitive off)."""
        header, names = header_tokens(line.removeprefix("\ufeff"), self.spec.separator, self.spec.quote,
                                       self.cr_data), self.schema.names
        past = past_limits(len(header), max(map(len, header), default=0), self.spec.max_columns,
                           self.spec.max_chars_per_column)
        if past:
            raise CsvRecordError(f"the header has {past[1]}: {line[:200]!r}")
        if self.spec.enforce_schema:
            return
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

    def _nulls(self, table: pa.Table, block: bytes) -> pa.Table:
        """A quoted nullValue as null, in the columns read as text."""
        if self.quoted_null is None or self.quoted_null not in block:
            return table
        for index, field in enumerate(table.schema):
            if pa.types.is_string(field.type):
                column = table.column(index)
                table = table.set_column(index, field, pc.if_else(pc.equal(column, self.spec.null_value),
                                                                  pa.scalar(None, pa.string()), column))
        return table

    def _invalid(self, table: pa.Table, hex_ints: bool) -> pa.Table:
        """Texts pyarrow's casts read that Spark's do not, made malformed: hex integers, booleans
        other than true and false (in any case)."""
        for index, field in enumerate(table.schema):
            if not pa.types.is_string(field.type):
                continue
            column = table.column(index)
            if field.name in self.booleans:
                bad = pc.invert(pc.is_in(pc.utf8_lower(column), pa.array(["true", "false"])))
            elif hex_ints and field.name in self.integers:
                bad = pc.match_substring_regex(column, "^[+-]?0[xX]")
            else:
                continue
            table = table.set_column(index, field, pc.if_else(bad, pa.scalar(_NOT_A_VALUE), column))
        return table

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
        if self.rows_only:
            return self._rows_only(block, first_block)
        original = block
        if self.comment is not None:
            block = self.uncommented(block, self.comment, self.spec.encoding)
        if self.trim is not None:
            block = self.trim(block)
        if self.blank_lines_first:
            block = blanked_lines(block)
        skip = header_lines(block, _JAVA_SPACE if self.blank_lines else b"\r") if first_block and self.spec.header else 0
        if skip:
            self._check_header(block.split(b"\n", skip)[skip - 1].decode(self.spec.encoding, errors="replace"))
        block = self.literal_escapes(block)
        block, cr = cr_stand_in(block, self.special) if self.cr_data else (block, None)
        if block.endswith(self.separator_byte):  # pyarrow reads an empty last value with no line end as ""
            block += b"\n"
        skipped: list[Malformed] = []
        pattern_for = self.spec.pattern_for
        hex_ints = bool(self.integers) and (b"0x" in block or b"0X" in block)  # memmem: cheap, and rare in text
        # Dates and timestamps with a pattern are read as text, then parsed by it.
        # Decimals read wider: pyarrow does not check a value's precision, the cast to the column's does.
        types = {f.name: pa.string() if pattern_for(f.type) or f.name in self.as_text
                 or (hex_ints and f.name in self.integers)
                 else pa.decimal128(38, f.type.scale) if pa.types.is_decimal128(f.type) and f.type.precision < 38
                 else f.type for f in self.schema}
        try:
            table = self._read(block, skip, types, skipped, cr)
            if not skipped:
                if not self.as_text and types == {f.name: f.type for f in self.schema}:
                    return self._nulls(table, block), []
                table = self._invalid(self._nulls(table, block), hex_ints)
                typed, bad_rows = cast_or_mark(self._replace(table), self.schema, pattern_for, self.spec.zone)
                if not bad_rows:
                    return typed, []
        except pa.ArrowInvalid:
            pass
        # Some record is malformed: read text, then convert what converts.
        if self.blank_lines and not self.blank_lines_first:
            block = blanked_lines(block)
        if self.utf8:  # Spark reads the bytes that are no UTF-8 as U+FFFD, where pyarrow fails the block
            block = valid_utf8(block)
        skipped.clear()
        table = self._read(block, skip, {name: pa.string() for name in self.schema.names}, skipped, cr)
        table = self._invalid(self._nulls(table, block), hex_ints)
        table, skipped_rows = self._with_skipped(table, skipped, skip, cr)
        lines = None if self.spanning else _record_lines(block, skip)  # a record's line number, by row
        if lines is not None and len(lines) != table.num_rows:  # lines pyarrow splits otherwise (a lone \r)
            lines = None
        texts = self._records(original, skip) if lines is None else []  # where records may span lines
        typed, bad_rows = cast_or_mark(self._replace(table), self.schema, pattern_for, self.spec.zone)
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

    def _rows_only(self, block: bytes, first_block: bool) -> tuple[pa.Table, list[Malformed]]:
        """A schema of no data column, as Spark's reader reads it (its parser pruning the columns): line by
        line, a row of no column per line that is neither blank nor a comment, the line not parsed (so none
        is malformed, and maxColumns and maxCharsPerColumn are not looked at, whatever the mode); with
        multiLine, a row per record, each malformed (it has values, the schema none), as the mode says,
        and a record past maxColumns or maxCharsPerColumn fails the read. The header is checked as ever."""
        if self.comment is not None:
            block = self.uncommented(block, self.comment, self.spec.encoding)
        blank = _JAVA_SPACE if self.blank_lines else b"\r"
        skip = header_lines(block, blank) if first_block and self.spec.header else 0
        if skip:
            self._check_header(block.split(b"\n", skip)[skip - 1].decode(self.spec.encoding, errors="replace"))
        if not self.spec.multi_line:
            count = sum(1 for line in block.split(b"\n")[skip:] if line.strip(_JAVA_SPACE))
            return null_rows(rows_schema(self.schema), count), []
        records = self._records(block, skip)
        for record in records:
            values = header_tokens(record, self.spec.separator, self.spec.quote, self.cr_data)
            past = past_limits(len(values), max(map(len, values), default=0), self.spec.max_columns,
                               self.spec.max_chars_per_column)
            if past:
                raise CsvRecordError(f"a record has {past[1]}: {record[:200]!r}")
        return (null_rows(rows_schema(self.schema), len(records)),
                [Malformed(row + 1, text, row) for row, text in enumerate(records)])

    def _records(self, block: bytes, skip: int) -> list[str]:
        """The texts of the block's records after the first ``skip`` lines, where they may span lines."""
        return [record.rstrip(b"\r\n").decode(self.spec.encoding, errors="replace")
                for record in self.split_records(block.split(b"\n", skip)[skip] if skip else block)]

    def _with_skipped(self, table: pa.Table, skipped: list[Malformed], skip: int,
                      cr: str | None) -> tuple[pa.Table, dict[int, Malformed]]:
        """``table`` (text) with the records of too few or too many values the parser skipped put
        back where they are: their first values, nulls for the missing ones, as Spark reads them.
        pyarrow numbers a record after the ``skip`` lines it skipped, blank lines not counted."""
        if not skipped:
            return table, {}
        names, width = self.schema.names, max(len(self.schema), *(m.columns for m in skipped))
        texts = [m.text.rstrip("\r") if cr is None else m.text.replace("\r", cr) for m in skipped]  # as _read had it
        padded = "\n".join(t + self.spec.separator * (width - m.columns) for t, m in zip(texts, skipped)) + "\n"
        values = pacsv.read_csv(
            io.BytesIO(padded.encode()),
            read_options=pacsv.ReadOptions(column_names=[str(i) for i in range(width)], use_threads=False),
            parse_options=pacsv.ParseOptions(**self.parse_options),
            convert_options=pacsv.ConvertOptions(column_types=dict.fromkeys(map(str, range(width)), pa.string()),
                                                 null_values=self.null_values, strings_can_be_null=True,
                                                 quoted_strings_can_be_null=False),
        ).select([str(i) for i in range(len(names))]).rename_columns(names)
        if cr is not None:
            values = pa.table([pc.replace_substring(column, cr, "\r") for column in values.columns], names=names)
        rows = table.num_rows
        at = [m.line - skip - 1 for m in skipped]
        if not all(0 <= a < b for a, b in zip(at, [*at[1:], rows + len(skipped)])):  # not numbered: after the rest
            return pa.concat_tables([table, values]), {rows + i: m for i, m in enumerate(skipped)}
        return interleave(table, values, at), dict(zip(at, skipped))


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


def header_tokens(line: str, separator: str, quote: str, cr_data: bool = False) -> list[str]:
    """The values of a csv header line; ``cr_data``: a \r in it is data (lineSep without \r), not its end."""
    if not cr_data:
        return next(csv.reader([line.rstrip("\r")], delimiter=separator, quotechar=quote), [])
    stand_in = next(c for c in map(chr, range(0xE000, 0xF900)) if c not in line)  # csv.reader ends a line at \r
    tokens = next(csv.reader([line.replace("\r", stand_in)], delimiter=separator, quotechar=quote), [])
    return [token.replace(stand_in, "\r") for token in tokens]


def past_limits(values: int, longest: int, max_columns: int, max_chars: int) -> tuple[str, str] | None:
    """Which of maxColumns and maxCharsPerColumn records of up to ``values`` values, of up to ``longest``
    characters, pass (the option, and how); None for neither. Spark's parser fails any such record, header
    or line sampled for inference too, whatever the mode."""
    if values > max_columns:
        return "maxColumns", f"{values} values, more than maxColumns = {max_columns}"
    if 0 <= max_chars < longest:
        return "maxCharsPerColumn", f"a value of {longest} characters, more than maxCharsPerColumn = {max_chars}"
    return None


def cr_stand_in(block: bytes, special: str) -> tuple[bytes, str | None]:
    """``block`` with its \r made a control character it does not hold nor is ``special`` (one pyarrow reads
    as data, and Java's trim drops as it does \r), and that character; None where it holds no \r or every one."""
    if b"\r" not in block:
        return block, None
    for byte in _CR_STAND_INS:
        if byte not in block and chr(byte[0]) not in special:
            return block.replace(b"\r", byte), chr(byte[0])
    return block, None  # \r ends lines then, as pyarrow reads it


_CR_STAND_INS = [bytes([c]) for c in range(1, 0x20) if chr(c) not in "\t\n\r"]


def valid_utf8(block: bytes) -> bytes:
    """``block`` with its bytes that are no UTF-8 as U+FFFD, as Java decodes them."""
    try:
        block.decode()
        return block
    except UnicodeDecodeError:
        return block.decode(errors="replace").encode()


_TRUE, _FALSE = ["true", "True", "TRUE"], ["false", "False", "FALSE"]  # other cases: by the slow path
_NOT_A_VALUE = "\x00"  # a text no cast reads
_JAVA_SPACE = bytes(range(0x21))  # what Java's String.trim() drops
_SPACE_START = re.compile(rb"\n[\x00-\x09\x0b\x0c\x0e-\x20]")  # a line starting with whitespace (not \r)
_SPACE_LINE = re.compile(rb"\n[\x00-\x09\x0b-\x20]*[\x00-\x09\x0b\x0c\x0e-\x20][\x00-\x09\x0b-\x20]*(?=\n|\Z)")


def blanked_lines(block: bytes) -> bytes:
    """The lines holding only whitespace (Java's trim: characters up to U+0020) made empty, which
    the reader skips, as Spark's line reader drops them; looked for only where a line starts with
    whitespace."""
    first = block[:block.find(b"\n") + 1 or len(block)]
    if first and not first.strip(_JAVA_SPACE):
        block = block[len(first.rstrip(b"\n")):]
    elif _SPACE_START.search(block) is None:
        return block
    return _SPACE_LINE.sub(b"\n", block)


def whitespace_records_blanked(block: bytes, separator: bytes) -> bytes:
    """lineSep: the records holding only whitespace (Java's trim) made empty, which Spark drops."""
    s = re.escape(separator)
    return re.sub(rb"(?:\A|" + s + rb")[\x00-\x20]+(?=" + s + rb"|\Z)",
                  lambda match: separator * match.group(0).count(separator), block)


def header_lines(block: bytes, blank: bytes = b"\r") -> int:
    """How many lines up to and including the header: the first that is not blank (comments are
    blanked by then), as Spark's csv reader takes it: ``blank`` the characters a blank line holds
    (the line reader's: any up to a space; multiLine's: none but a \r)."""
    for number, line in enumerate(block.split(b"\n", 64)):  # a header after 64 blank lines: the first line
        if line.strip(blank):
            return number + 1
    return 1


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
