"""Spark values as JSON text, every value exact, built column by column in Arrow: the file sink's
json lines and the JDBC sink's json / jsonb columns.

What Spark's ``json`` source (and ``from_json``) reads back into the same values: doubles and
floats in their shortest round-trip form (NaN and the infinities as the strings Spark writes for
them), decimals as plain numbers, binary in base64, dates as ``yyyy-MM-dd``, timestamps in ISO 8601
with microseconds (``Z``: UTC; none for timestamp_ntz), maps as objects, variants as the JSON they
hold, nulls as ``null``. A :class:`JsonStyle` changes that for the file sink (Spark's
``ignoreNullFields``, ``timestampFormat``, ``timestampNTZFormat``, ``dateFormat``); the JDBC sink
keeps the default. Each column becomes an array of JSON texts, nested ones from their
children's, joined by Arrow's string kernels; only strings with control characters, binary values
and types without a vectorised form go through Python.
"""

from __future__ import annotations

import base64
import dataclasses
import json
from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc

from connectors.core.texts import TEXT, concat, float_texts

_NULL = pa.scalar("null", TEXT)

Formatter = Callable[[pa.Array], pa.Array]  # timestamps or dates -> their texts


@dataclasses.dataclass(frozen=True)
class JsonStyle:
    """Spark's json writer options: struct fields that are null left out (``ignoreNullFields``;
    array items and map values stay ``null``, as Spark's), and formatters for zoned timestamps,
    timestamp_ntz and dates (None: ISO 8601 with microseconds, ``yyyy-MM-dd``)."""

    ignore_null_fields: bool = False
    timestamp: Formatter | None = None
    timestamp_ntz: Formatter | None = None
    date: Formatter | None = None


_DEFAULT = JsonStyle()


def json_texts(array: pa.Array, style: JsonStyle = _DEFAULT) -> pa.Array:
    """The JSON text of every value of ``array`` ("null" for a null), as a large_string array."""
    kind = array.type
    if _is_variant(kind):  # Spark's json writer writes the JSON the variant holds
        from pyspark.sql.types import VariantVal

        texts = pa.array([None if v is None else VariantVal(v["value"], v["metadata"]).toJson()
                          for v in array.to_pylist()], TEXT)  # fmt: skip
    elif pa.types.is_struct(kind):
        children = array.flatten()  # null where the struct is: such rows become "null" below
        if style.ignore_null_fields and any(child.null_count for child in children):
            texts = _without_nulls(kind, children, style)
        else:
            parts: list[pa.Array | str] = ["{"]
            for index, (field, child) in enumerate(zip(kind, children)):
                parts += [("," if index else "") + json.dumps(field.name) + ":", json_texts(child, style)]
            texts = concat(*parts, "}") if len(kind) else pa.array(["{}"] * len(array), TEXT)
    elif pa.types.is_map(kind):
        entries = array.values  # the key/value structs of every map, which the offsets index
        keys = json_texts(entries.field(0), style)
        keys = pc.if_else(pc.starts_with(keys, '"'), keys, _string(keys))  # JSON keys are strings: 1 -> "1"
        texts = _joined(array, concat(keys, ":", json_texts(entries.field(1), style)), "{", "}")
    elif pa.types.is_list(kind) or pa.types.is_large_list(kind):
        texts = _joined(array, json_texts(array.values, style), "[", "]")
    elif pa.types.is_string(kind) or pa.types.is_large_string(kind):
        texts = _string(array)
    elif pa.types.is_floating(kind):
        texts = float_texts(array)
        if not pc.all(pc.is_finite(array)).as_py():  # NaN and the infinities as JSON strings, as Spark's
            texts = pc.if_else(pc.is_finite(array), texts, concat('"', texts, '"'))
    elif pa.types.is_integer(kind) or pa.types.is_boolean(kind) or pa.types.is_decimal(kind):
        texts = pc.cast(array, TEXT)
    elif pa.types.is_date(kind) and style.date is not None:
        texts = _string(style.date(array))
    elif pa.types.is_date(kind):
        texts = concat('"', pc.cast(array.cast(pa.date32()), TEXT), '"')
    elif pa.types.is_timestamp(kind) and (style.timestamp if kind.tz else style.timestamp_ntz) is not None:
        texts = _string((style.timestamp if kind.tz else style.timestamp_ntz)(array))  # type: ignore[misc]
    elif pa.types.is_timestamp(kind):
        # The instants as UTC wall time: Arrow formats a zoned timestamp through the time zone
        # database, and strftime, 15x slower than a cast and a replace.
        wall = pc.cast(array.cast(pa.timestamp(kind.unit)), TEXT)
        texts = concat('"', pc.replace_substring(wall, " ", "T", max_replacements=1), 'Z"' if kind.tz else '"')
    elif pa.types.is_binary(kind) or pa.types.is_large_binary(kind) or pa.types.is_fixed_size_binary(kind):
        texts = pa.array([None if v is None else f'"{base64.b64encode(v).decode()}"' for v in array.to_pylist()],
                         TEXT)
    else:  # time: what Python's json makes of it
        texts = pa.array([json.dumps(v, default=str) for v in array.to_pylist()], TEXT)
    return texts if array.null_count == 0 else pc.if_else(array.is_valid(), texts, _NULL)


def _without_nulls(kind: pa.StructType, children: list[pa.Array], style: JsonStyle) -> pa.Array:
    """Objects of the fields that are not null (Spark's ignoreNullFields)."""
    if children[0].null_count == 0:
        # every later field as ',"name":value', "" where it is null: one join, as without the option
        parts: list[pa.Array | str] = ["{"]
        for index, (field, child) in enumerate(zip(kind, children)):
            key = ("," if index else "") + json.dumps(field.name) + ":"
            if child.null_count == 0:
                parts += [key, json_texts(child, style)]
            else:
                parts.append(pc.if_else(child.is_valid(), concat(key, json_texts(child, style)), pa.scalar("", TEXT)))
        return concat(*parts, "}")
    # a row's first field may be missing: '"name":value' or null per field, joined by commas skipping
    # the nulls; "{" first, since Arrow drops the rows where every joined value is null (pyarrow 26)
    pieces = [pc.if_else(child.is_valid(), concat(json.dumps(field.name) + ":", json_texts(child, style)),
                         pa.scalar(None, TEXT)) for field, child in zip(kind, children)]  # fmt: skip
    body = pc.binary_join_element_wise(pa.scalar("{", TEXT), *pieces, pa.scalar(",", TEXT), null_handling="skip")
    return concat(pc.replace_substring(body, "{,", "{", max_replacements=1), "}")


def _is_variant(kind: pa.DataType) -> bool:
    """PySpark hands a variant over as a struct of binary value and metadata, the latter marked."""
    return pa.types.is_struct(kind) and any(field.metadata and field.metadata.get(b"variant") == b"true"
                                            for field in kind)  # fmt: skip


def _string(array: pa.Array) -> pa.Array:
    if pc.any(pc.match_substring_regex(array, r"[\x00-\x1f]")).as_py():  # escapes Arrow has no kernel for
        return pa.array([None if v is None else json.dumps(v, ensure_ascii=False) for v in array.to_pylist()], TEXT)
    escaped = pc.replace_substring(pc.replace_substring(array.cast(TEXT), "\\", "\\\\"), '"', '\\"')
    return concat('"', escaped, '"')


def _joined(array: pa.Array, items: pa.Array, start: str, end: str) -> pa.Array:
    """Each list's (or map's) item texts joined by commas between ``start`` and ``end``."""
    grouped = pa.LargeListArray.from_arrays(array.offsets.cast(pa.int64()), items)
    return concat(start, pc.binary_join(grouped, pa.scalar(",", TEXT)), end)
