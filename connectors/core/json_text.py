"""Spark values as JSON text, every value exact, built column by column in Arrow: the file sink's
json lines and the JDBC sink's json / jsonb columns.

What Spark's ``json`` source (and ``from_json``) reads back into the same values: doubles and
floats in their shortest round-trip form (NaN and the infinities as the strings Spark writes for
them), decimals as plain numbers, binary in base64, dates as ``yyyy-MM-dd``, timestamps in ISO 8601
with microseconds (``Z``: UTC; none for timestamp_ntz), maps as objects, variants as the JSON they
hold, nulls as ``null``. Each column becomes an array of JSON texts, nested ones from their
children's, joined by Arrow's string kernels; only strings with control characters, binary values
and types without a vectorised form go through Python.
"""

from __future__ import annotations

import base64
import json

import pyarrow as pa
import pyarrow.compute as pc

from connectors.core.texts import TEXT, concat, float_texts

_NULL = pa.scalar("null", TEXT)


def json_texts(array: pa.Array) -> pa.Array:
    """The JSON text of every value of ``array`` ("null" for a null), as a large_string array."""
    kind = array.type
    if _is_variant(kind):  # Spark's json writer writes the JSON the variant holds
        from pyspark.sql.types import VariantVal

        texts = pa.array([None if v is None else VariantVal(v["value"], v["metadata"]).toJson()
                          for v in array.to_pylist()], TEXT)  # fmt: skip
    elif pa.types.is_struct(kind):
        parts: list[pa.Array | str] = ["{"]
        for index, (field, child) in enumerate(zip(kind, array.flatten())):
            parts += [("," if index else "") + json.dumps(field.name) + ":", json_texts(child)]
        texts = concat(*parts, "}") if len(kind) else pa.array(["{}"] * len(array), TEXT)
    elif pa.types.is_map(kind):
        entries = array.values  # the key/value structs of every map, which the offsets index
        keys = json_texts(entries.field(0))
        keys = pc.if_else(pc.starts_with(keys, '"'), keys, _string(keys))  # JSON keys are strings: 1 -> "1"
        texts = _joined(array, concat(keys, ":", json_texts(entries.field(1))), "{", "}")
    elif pa.types.is_list(kind) or pa.types.is_large_list(kind):
        texts = _joined(array, json_texts(array.values), "[", "]")
    elif pa.types.is_string(kind) or pa.types.is_large_string(kind):
        texts = _string(array)
    elif pa.types.is_floating(kind):
        texts = float_texts(array)
        if not pc.all(pc.is_finite(array)).as_py():  # NaN and the infinities as JSON strings, as Spark's
            texts = pc.if_else(pc.is_finite(array), texts, concat('"', texts, '"'))
    elif pa.types.is_integer(kind) or pa.types.is_boolean(kind) or pa.types.is_decimal(kind):
        texts = pc.cast(array, TEXT)
    elif pa.types.is_date(kind):
        texts = concat('"', pc.cast(array.cast(pa.date32()), TEXT), '"')
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
