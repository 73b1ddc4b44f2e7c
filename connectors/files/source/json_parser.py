"""json lines blocks into Arrow tables as Spark's json reader reads them, by pyarrow's json reader.

pyarrow reads a block of strict JSON at once into the types of the wire schema (``_wire_type``),
which are then converted to the schema's (``_from_wire``). What pyarrow does not take is made
strict first (``strict_json``: comments, single quotes, unquoted names, NaN, per the json
syntax options), and a block that fails is halved until its malformed lines are found; a
malformed line keeps the fields that read, as in Spark 3+.
"""

from __future__ import annotations

import base64
import binascii
import codecs
import dataclasses
import datetime
import functools
import io
import json
import math
import re
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson

from connectors.files.source.read_spec import JsonSyntax, PatternFor, ReadSpec, no_pattern
from connectors.files.source.records import Malformed, cast_each, interleave, null_rows, rows_schema
from connectors.files.source.spark_texts import spark_date, spark_decimal, spark_timestamp, spark_timestamp_ntz


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
        self.schema = rows_schema(spec.data_schema)  # json's struct<>: a column no record names counts the rows
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
        columns = [_from_wire(column.combine_chunks(), field.type, self.pattern_for, self.spec.zone)
                   for column, field in zip(table.columns, self.schema)]
        return pa.Table.from_arrays(columns, schema=self.read_schema)

    def parse(self, block: bytes, first_block: bool) -> tuple[pa.Table, list[Malformed]]:
        if self.encoding.replace("-", "").upper() != "UTF8":
            block = block.decode(self.encoding, errors="replace").encode("utf-8")
        # pyarrow's reader takes NaN and Infinity as numbers: with them off, lines holding them go one by one
        # (and a block starting with a null line crashes it: that one goes line by line, a null line malformed as in Spark)
        if (self.syntax.non_numeric or not _NON_NUMERIC.search(block)) and not _NULL_FIRST.match(block):
            try:
                return self._read(block), []
            except pa.ArrowInvalid:
                pass
        # Some line is not a JSON object of the schema's types: parse the good ones together.
        good, bad = [], []  # (line number, JSON text, the line)
        for number, line in _data_lines(block, 0):
            body = line[1:] if line.startswith("\ufeff") else line  # a byte order mark, as Jackson's skips it
            is_object = _is_object(body, self.syntax)  # (strict_json may give the line itself: not one, e.g. null)
            text = body if is_object else strict_json(body, self.syntax) if self.syntax.lenient else None
            if text == "":
                continue  # nothing but comments: no record, as in Spark
            ok = is_object or (text is not None and _is_object(text, self.syntax))
            if not ok:  # an array of objects is a record each, and what follows a value is not read, as in Spark
                elements = object_records(body, self.syntax)
                if elements is not None:
                    good.extend((number, element, line) for element in elements)
                    continue
            (good if ok else bad).append((number, text or line, line))
        texts = [text.encode() for _, text, _ in good]
        table, failed = self._read_each(texts)
        if failed:  # objects that do not read whole: what does, in place
            table = interleave(table, self._partial([texts[i] for i in failed]), failed)
        # the records in their order: those that are no JSON object as rows of nulls; every record of
        # an array with one that does not read whole is malformed (Spark's partial results of it)
        partial = {good[row][0] for row in failed}
        records = sorted([(number, row, line if number in partial else None) for row, (number, _, line) in enumerate(good)]
                         + [(entry[0], table.num_rows + i, entry[2]) for i, entry in enumerate(bad)])
        order = pa.array([row for _, row, _ in records], pa.int64())
        table = pa.concat_tables([table, null_rows(self.read_schema, len(bad))]).take(order)
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
        return interleave(pa.table({"v": values}), pa.table({"v": missing}), failed).column(0).combine_chunks()

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
_NULL_FIRST = re.compile(rb"[ \t\r\n]*null")
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
        return _in_wire_form(json.loads(line, parse_float=_JsonNumber if _has_decimal(row) else None), row)
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


def line_encoding_problem(encoding: str, line_sep: str | None, multi_line: bool) -> str | None:
    """Why json lines of ``encoding`` do not read (None if they do): as Spark's JSONOptions, a charset
    with a byte order mark (UTF-16, UTF-32) reads only with multiLine, and one whose newline is not
    the byte \\n needs lineSep (Spark asks it of every charset but UTF-8)."""
    if multi_line:
        return None
    if codecs.lookup(encoding).name in ("utf-16", "utf-32"):
        return (f"the {encoding} encoding (byte order mark) reads only with multiLine=true, as in Spark; "
                "for json lines name the byte order (e.g. UTF-16LE) and set lineSep")
    if line_sep is None and "\n".encode(encoding) != b"\n":
        return f"the {encoding} encoding needs the lineSep option, as in Spark"
    return None


def object_records(text: str, syntax: JsonSyntax) -> list[str] | None:
    """The records of ``text``, a JSON object or an array of them (Spark reads each as a row, an
    empty array as none), in strict JSON as written, what follows unread; None if it is neither."""
    records = document_records(text, syntax)  # (its parser takes NaN and Infinity whatever the syntax)
    return records if records is not None and all(_is_object(record, syntax) for record in records) else None


def _document_records(text: str) -> list[str] | None:
    def space(position: int) -> int:
        return _space(text, position)

    position = space(1 if text.startswith("\ufeff") else 0)  # after a byte order mark
    if position == len(text):
        return []
    try:  # what follows the first document is not read, as Jackson's parser in Spark does not
        if not text.startswith("[", position):
            _, end = _JSON.raw_decode(text, position)
            return [text[position:end]]
        records, position = [], space(position + 1)
        while not text.startswith("]", position):
            if records:
                if not text.startswith(",", position):
                    return None
                position = space(position + 1)
            _, end = _JSON.raw_decode(text, position)
            records.append(text[position:end])
            position = space(end)
        return records
    except ValueError:
        return None


_NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf,  # as Spark's json writer puts them
               "+Infinity": math.inf, "+INF": math.inf, "-INF": -math.inf}  # and as its reader takes them too


class _JsonNumber(float):
    """A JSON number with a fraction or an exponent that keeps its text, for a decimal to read exactly."""

    def __new__(cls, text: str) -> _JsonNumber:
        number = super().__new__(cls, text)
        number.text = text
        return number


@functools.lru_cache(maxsize=64)
def _has_decimal(kind: pa.DataType) -> bool:
    if pa.types.is_decimal(kind):
        return True
    if pa.types.is_struct(kind):
        return any(_has_decimal(field.type) for field in kind)
    if pa.types.is_map(kind):
        return _has_decimal(kind.item_type)
    return (pa.types.is_list(kind) or pa.types.is_large_list(kind)) and _has_decimal(kind.value_type)


def _wire_type(kind: pa.DataType, pattern_for: PatternFor = no_pattern) -> pa.DataType:
    """``kind`` as pyarrow's json reader reads it: every date and binary, and every timestamp with
    a pattern, at any depth, as the JSON string it is written as, and every map as a list of its
    entries. Every timestamp is read as a string too (for Spark's lenient texts; that reader also
    drops a zone where timestamp_ntz goes, which Spark refuses), and a decimal as one of more digits
    (that reader does not check them; _from_wire does)."""
    if (pa.types.is_date(kind) or pa.types.is_binary(kind) or pa.types.is_large_binary(kind) or pattern_for(kind)
            or pa.types.is_timestamp(kind)):
        return pa.string()
    if pa.types.is_decimal(kind):
        return pa.decimal128(38, kind.scale) if kind.precision < 38 else pa.decimal256(76, kind.scale)
    if pa.types.is_struct(kind):
        return pa.struct([field.with_type(_wire_type(field.type, pattern_for)) for field in kind])
    if pa.types.is_map(kind):  # which that reader cannot read: as entries (see _in_wire_form)
        return pa.list_(pa.struct([("key", pa.string()), ("value", _wire_type(kind.item_type, pattern_for))]))
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        make = pa.list_ if pa.types.is_list(kind) else pa.large_list
        return make(kind.value_field.with_type(_wire_type(kind.value_type, pattern_for)))
    return kind


def _from_wire(column: pa.Array, kind: pa.DataType, pattern_for: PatternFor = no_pattern,
               zone: datetime.tzinfo = datetime.timezone.utc) -> pa.Array:
    """``column``, read as ``_wire_type(kind, pattern_for)``, as ``kind`` (zone-less timestamps in
    ``zone``): ArrowInvalid where a string is no date (or not of the pattern) or no base64."""
    if column.type == kind:
        return column
    pattern = pattern_for(kind)
    if pattern is not None:
        parsed = pattern.parse(column, kind, zone)
        if parsed.null_count != column.null_count:
            raise pa.ArrowInvalid(f"a value does not match the pattern {pattern.pattern!r}")
        return parsed
    if pa.types.is_decimal(kind):
        return column.cast(kind)  # ArrowInvalid where a value has more digits than the precision
    if pa.types.is_date(kind) or pa.types.is_timestamp(kind):  # Spark's lenient texts where a cast fails
        convert = (functools.partial(spark_date, days=True) if pa.types.is_date(kind)
                   else functools.partial(spark_timestamp, zone=zone) if kind.tz is not None else spark_timestamp_ntz)
        converted, bad = cast_each(column, kind, convert, zone)
        if bad:
            raise pa.ArrowInvalid(f"{column[bad[0]]} is no {kind}")
        return converted
    if pa.types.is_struct(kind):
        children = [_from_wire(column.field(i), field.type, pattern_for, zone) for i, field in enumerate(kind)]
        return pa.StructArray.from_arrays(children, fields=list(kind), mask=column.is_null())
    if pa.types.is_map(kind) or pa.types.is_list(kind) or pa.types.is_large_list(kind):
        # from_arrays takes no null bitmap with sliced offsets: offsets from 0 over the values used
        first, last = column.offsets[0].as_py(), column.offsets[-1].as_py()
        offsets, mask = pc.subtract(column.offsets, first), column.is_null()
        values = column.values.slice(first, last - first)
        if pa.types.is_map(kind):  # JSON keys are strings: "1" for an int key
            keys, key_type = values.field(0), kind.key_type
            keys = (_from_wire(keys, key_type, pattern_for, zone) if _wire_type(key_type, pattern_for) == pa.string()
                    else keys.cast(key_type))
            items = _from_wire(values.field(1), kind.item_type, pattern_for, zone)
            return pa.MapArray.from_arrays(offsets, keys, items, kind, mask=mask)
        values = _from_wire(values, kind.value_type, pattern_for, zone)
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
    if pa.types.is_decimal(kind) and isinstance(value, (int, float, str)) and not isinstance(value, bool):
        text = value if isinstance(value, str) else getattr(value, "text", None) or repr(value)
        exact = spark_decimal(text, kind)  # rounded to the scale; None past the precision: the line is malformed
        if exact is None:
            raise ValueError(f"{text} is no {kind}")
        return str(exact)
    if (pa.types.is_timestamp(kind) and kind.tz is not None and isinstance(value, int)
            and not isinstance(value, bool) and -62135596800 <= value <= 253402300799):  # years 1 to 9999
        return datetime.datetime.fromtimestamp(value, datetime.timezone.utc).isoformat()  # Spark: seconds
    if pa.types.is_map(kind) and isinstance(value, dict):
        return [{"key": k, "value": _in_wire_form(v, kind.item_type)} for k, v in value.items()]
    if pa.types.is_struct(kind) and isinstance(value, dict):
        fields = {field.name: field.type for field in kind}
        return {k: _in_wire_form(v, fields[k]) if k in fields else v for k, v in value.items()}
    if (pa.types.is_list(kind) or pa.types.is_large_list(kind)) and isinstance(value, list):
        return [_in_wire_form(v, kind.value_type) for v in value]
    return value
