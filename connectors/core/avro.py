"""Avro <-> Spark/Arrow: the type mapping, and columnar decoding and encoding of Avro bodies.

Shared by the Kafka connector (Schema Registry wire format) and the file connector (object
container files). Types map as spark-avro maps them (``SchemaConverters``), except that a
nullable Spark type becomes ``["null", T]`` with ``"default": null``, as Flink writes it, so a
field added later can be read from older records.

Decoding is columnar: the bodies of many records written with one schema are put into one Avro
object-container block in memory and decoded at once by polars' Rust reader into Arrow; schema
resolution (writer -> reader: defaults, dropped fields, promotions) is then applied to the Arrow
columns. Schemas that reader cannot take (maps, unions of several types) and any block that fails
go record by record through fastavro, which also finds the records that cannot be decoded.

Encoding is columnar too: every leaf computes its encoded length per row with numpy, the row
offsets follow, then each leaf writes its bytes into one buffer at once.
"""

from __future__ import annotations

import bz2
import datetime
import decimal
import functools
import io
import json
import lzma
import os
import re
import struct
import zlib
from collections.abc import Callable
from typing import Any, BinaryIO

import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.pandas.types import from_arrow_type
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    NullType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from connectors.core.arrow import arrow_schema

__all__ = ["AvroError", "AvroTypeError", "Decoder", "Encoder", "parse", "spark_type", "read_type", "arrow_type",
           "check_readable", "from_spark", "renamed",
           "container_header", "container_block", "read_header", "read_varint", "CODECS", "SYNC_SIZE"]

SYNC_SIZE = 16
MAGIC = b"Obj\x01"
# For decimals: the default context rounds to 28 digits, and decimals have up to 38.
_EXACT = decimal.Context(prec=decimal.MAX_PREC)


class AvroError(ValueError):
    """A schema that cannot be mapped, or a value that cannot be encoded."""


class AvroTypeError(TypeError):
    """A column whose Avro type does not convert to the type it is read as (not a corrupt file)."""


# ---------------------------------------------------------------------------------------------
# Schemas


def parse(schema: str | dict | list) -> dict | list | str:
    """An Avro schema (JSON text or parsed) expanded: named types inlined where used."""
    try:
        raw = float_defaults(json.loads(schema) if isinstance(schema, str) else schema, strict=False)
        return fastavro.parse_schema(raw, expand=True, _write_hint=False)
    except (ValueError, TypeError, KeyError, fastavro.schema.SchemaParseException,
            fastavro.schema.UnknownType) as exc:
        raise AvroError(f"not a valid Avro schema: {exc}") from None


def _type(schema: Any) -> str:
    return schema if isinstance(schema, str) else "union" if isinstance(schema, list) else schema["type"]


def _logical(schema: Any) -> str | None:
    return schema.get("logicalType") if isinstance(schema, dict) else None


def _nullable(schema: Any) -> tuple[Any, bool]:
    """``(T, True)`` for a union of null and one type T, else ``(schema, False)``."""
    if isinstance(schema, list) and "null" in schema and len(schema) == 2:
        return next(s for s in schema if s != "null"), True
    return schema, False


def _read_as(schema: Any) -> tuple[Any, bool]:
    """``(T, nullable)``: the type a schema is read as, spark-avro's rule for unions. Null and one type T
    is T; int and long is long, float and double is double (null aside); any other union is the list
    of its non-null branches, read as a struct of members ``member0, member1, ...``."""
    if not isinstance(schema, list):
        return schema, False
    branches, nullable = [branch for branch in schema if branch != "null"], "null" in schema
    kinds = {_type(branch) for branch in branches}
    if len(branches) == 1:
        return branches[0], nullable
    if len(branches) == 2 and kinds in ({"int", "long"}, {"float", "double"}):
        return "long" if "long" in kinds else "double", nullable
    return branches, nullable


def _member_names(branches: list, stable_prefix: str | None) -> list[str]:
    """The fields of the struct a union of several types is read as: ``member0, member1, ...``, or with
    enableStableIdentifiersForUnionType the prefix and each branch's type name (a named type's own
    name, case kept); spark-avro refuses two that differ only in case."""
    if stable_prefix is None:
        return [f"member{i}" for i in range(len(branches))]
    names: list[str] = []
    for branch in branches:
        kind = _type(branch)
        type_name = branch["name"].rsplit(".", 1)[-1] if kind in _NAMED else kind
        if any(n.lower() == (stable_prefix + type_name).lower() for n in names):
            raise AvroError("Cannot generate stable identifier for Avro union type due to name conflict of type "
                            f"name {type_name}")
        names.append(stable_prefix + type_name)
    return names


def spark_type(schema: Any, stable_prefix: str | None = None) -> tuple[DataType, bool]:
    """Avro -> (Spark type, nullable), spark-avro's mapping; ``stable_prefix``: unions' member names
    as with enableStableIdentifiersForUnionType (None: member0, member1, ...)."""
    inner, nullable = _read_as(schema)
    if isinstance(inner, list):  # only the member of the branch written is set
        names = _member_names(inner, stable_prefix)
        return StructType([StructField(name, spark_type(b, stable_prefix)[0], True)
                           for name, b in zip(names, inner)]), nullable
    kind, logical = _type(inner), _logical(inner)
    if logical == "decimal":
        return DecimalType(inner["precision"], inner.get("scale", 0)), nullable
    if logical in ("timestamp-millis", "timestamp-micros"):
        return TimestampType(), nullable
    if logical in ("local-timestamp-millis", "local-timestamp-micros"):
        return TimestampNTZType(), nullable
    if logical == "date":
        return DateType(), nullable
    primitive = {"null": NullType(), "boolean": BooleanType(), "int": IntegerType(), "long": LongType(),
                 "float": FloatType(), "double": DoubleType(), "bytes": BinaryType(), "string": StringType(),
                 "enum": StringType(), "fixed": BinaryType()}
    if kind in primitive:
        return primitive[kind], nullable or kind == "null"
    if kind == "record":
        fields = []
        for field in inner["fields"]:
            child, child_nullable = spark_type(field["type"], stable_prefix)
            fields.append(StructField(field["name"], child, child_nullable))
        return StructType(fields), nullable
    if kind == "array":
        items, items_nullable = spark_type(inner["items"], stable_prefix)
        return ArrayType(items, items_nullable), nullable
    if kind == "map":
        values, values_nullable = spark_type(inner["values"], stable_prefix)
        return MapType(StringType(), values, values_nullable), nullable
    raise AvroError(f"Avro type {kind!r} is not supported")


def from_spark(data_type: DataType, nullable: bool = False, name: str = "topLevelRecord",
               namespace: str = "") -> Any:
    """Spark -> Avro schema (as JSON-able data). Nullable types become ``["null", T]``."""
    full = f"{namespace}.{name}" if namespace else name
    if isinstance(data_type, StructType):
        fields = []
        for field in data_type.fields:
            field_schema = from_spark(field.dataType, field.nullable, field.name, full)
            entry = {"name": field.name, "type": field_schema}
            if field.nullable:
                entry["default"] = None
            fields.append(entry)
        schema: Any = {"type": "record", "name": name, "fields": fields}
        if namespace:
            schema["namespace"] = namespace
    elif isinstance(data_type, ArrayType):
        schema = {"type": "array", "items": from_spark(data_type.elementType, data_type.containsNull, name, full)}
    elif isinstance(data_type, MapType):
        if not isinstance(data_type.keyType, StringType):
            raise AvroError(f"Avro maps need string keys, not {data_type.keyType.simpleString()}")
        schema = {"type": "map", "values": from_spark(data_type.valueType, data_type.valueContainsNull, name, full)}
    elif isinstance(data_type, DecimalType):
        schema = {"type": "bytes", "logicalType": "decimal", "precision": data_type.precision,
                  "scale": data_type.scale}
    else:
        simple = {BooleanType: "boolean", ByteType: "int", ShortType: "int", IntegerType: "int", LongType: "long",
                  FloatType: "float", DoubleType: "double", BinaryType: "bytes", StringType: "string",
                  NullType: "null"}
        logical = {DateType: ("int", "date"), TimestampType: ("long", "timestamp-micros"),
                   TimestampNTZType: ("long", "local-timestamp-micros")}
        if type(data_type) in simple:
            schema = simple[type(data_type)]
        elif type(data_type) in logical:
            base, logical_type = logical[type(data_type)]
            schema = {"type": base, "logicalType": logical_type}
        else:
            raise AvroError(f"Spark type {data_type.simpleString()} has no Avro equivalent")
    return ["null", schema] if nullable and schema != "null" else schema


def read_type(schema: Any, stable_prefix: str | None = None) -> DataType:
    """The Spark type of a decoded Avro value: spark-avro's, with every field nullable, so that a
    record that cannot be decoded can be a null struct."""
    return _all_nullable(spark_type(schema, stable_prefix)[0])


def _all_nullable(data_type: DataType) -> DataType:
    if isinstance(data_type, StructType):
        return StructType([StructField(f.name, _all_nullable(f.dataType), True) for f in data_type.fields])
    if isinstance(data_type, ArrayType):
        return ArrayType(_all_nullable(data_type.elementType), True)
    if isinstance(data_type, MapType):
        return MapType(data_type.keyType, _all_nullable(data_type.valueType), True)
    return data_type


def arrow_type(schema: Any, stable_prefix: str | None = None) -> pa.DataType:
    """The Arrow type of :func:`read_type`, as a Python data source returns it."""
    return arrow_schema(StructType([StructField("v", read_type(schema, stable_prefix))])).field("v").type


def renamed(have: pa.DataType, names: pa.DataType) -> pa.DataType:
    """``have`` with the struct field names of ``names``, field by field in order, at every depth where
    both are structs, lists or maps: the type to view decoded values as (``Array.view``, no copy) for
    stable union member names or positionalFieldMatching. Fields past the end of ``names`` keep theirs."""
    if pa.types.is_struct(have) and pa.types.is_struct(names):
        return pa.struct([have.field(i).with_name(names.field(i).name).with_type(
            renamed(have.field(i).type, names.field(i).type)) if i < names.num_fields else have.field(i)
            for i in range(have.num_fields)])
    if pa.types.is_map(have) and pa.types.is_map(names):
        return pa.map_(have.key_type, have.item_field.with_type(renamed(have.item_type, names.item_type)))
    lists = (pa.types.is_list, pa.types.is_large_list)
    if any(t(have) for t in lists) and any(t(names) for t in lists):
        value = have.value_field.with_type(renamed(have.value_type, names.value_type))
        return pa.large_list(value) if pa.types.is_large_list(have) else pa.list_(value)
    return have


def check_readable(writer: Any, written: pa.DataType, columns: pa.Schema, where: str) -> None:
    """Refuse a column whose written values (of Arrow type ``written``, as named for reading) its type to
    read would change or fail on (text read as numbers, numbers as text, a double as a long, a long as
    an int), as spark-avro refuses them."""
    if not pa.types.is_struct(written):
        return
    for column in columns:
        index = written.get_field_index(column.name)
        if index >= 0 and not _converts(written.field(index).type, column.type):
            have = _nullable(writer)[0]["fields"][index]["type"]
            raise AvroTypeError(f"{where}: column {column.name!r} is {json.dumps(have)} in the file's Avro schema, "
                                f"which cannot be read as {from_arrow_type(column.type).simpleString()} without "
                                "changing values (give a schema of its type and cast in the query)")


def _converts(have: pa.DataType, want: pa.DataType) -> bool:
    """Whether every value of ``have`` casts to ``want`` as it is: Avro's exact promotions and no more."""
    kinds = (pa.types.is_struct, pa.types.is_map, pa.types.is_list, pa.types.is_large_list, pa.types.is_timestamp,
             pa.types.is_integer, pa.types.is_floating, pa.types.is_decimal)
    kind = next((k for k in kinds if k(have) and k(want)), None)
    if have == want or pa.types.is_null(have) or kind is pa.types.is_timestamp:  # local-timestamp as timestamp
        return True
    if kind is pa.types.is_struct:
        return all(_converts(have.field(f.name).type, f.type) for f in want if have.get_field_index(f.name) >= 0)
    if kind is pa.types.is_map:
        return _converts(have.key_type, want.key_type) and _converts(have.item_type, want.item_type)
    if kind in (pa.types.is_list, pa.types.is_large_list):
        return _converts(have.value_type, want.value_type)
    if kind in (pa.types.is_integer, pa.types.is_floating):
        return want.bit_width >= have.bit_width
    if kind is pa.types.is_decimal:
        return want.scale == have.scale and want.precision >= have.precision
    texts = (pa.types.is_string, pa.types.is_large_string, pa.types.is_binary, pa.types.is_large_binary)
    if any(t(have) for t in texts):
        return any(t(want) for t in texts)
    return pa.types.is_int32(have) and pa.types.is_float64(want)


# ---------------------------------------------------------------------------------------------
# Object container files


def _varint(n: int) -> bytes:
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def container_header(schema_json: str, codec: str = "null", sync: bytes | None = None) -> tuple[bytes, bytes]:
    """An object container file's header, and its sync marker."""
    sync = sync or os.urandom(SYNC_SIZE)
    meta = {b"avro.schema": schema_json.encode(), b"avro.codec": codec.encode()}
    parts = [MAGIC, _varint(len(meta))]
    for key, value in meta.items():
        parts += [_varint(len(key)), key, _varint(len(value)), value]
    parts += [_varint(0), sync]
    return b"".join(parts), sync


def container_block(count: int, data: bytes | memoryview, sync: bytes) -> bytes:
    """One data block: record count, byte size, the (compressed) records, the sync marker."""
    return b"".join((_varint(count), _varint(len(data)), data, sync))


def _deflate(data: bytes) -> bytes:
    compressor = zlib.compressobj(6, zlib.DEFLATED, -15)
    return compressor.compress(data) + compressor.flush()


def _snappy(data: bytes) -> bytes:
    return pa.Codec("snappy").compress(data, asbytes=True) + struct.pack(">I", zlib.crc32(data))


def _unsnappy(data: bytes) -> bytes:
    raw = pa.Codec("snappy").decompress(data[:-4], _snappy_length(data), asbytes=True)
    if struct.unpack(">I", data[-4:])[0] != zlib.crc32(raw):
        raise ValueError("snappy block checksum mismatch")
    return raw


def _snappy_length(data: bytes) -> int:
    """The uncompressed length a raw snappy block starts with (a varint)."""
    length, shift = 0, 0
    for byte in data[:5]:
        length |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return length
    raise ValueError("not a snappy block")


def _unzstd(data: bytes) -> bytes:
    # a frame need not record its content size: decompress it as a stream
    return pa.CompressedInputStream(pa.BufferReader(data), "zstd").read()


# Avro codec name -> (compress, decompress). Snappy blocks end with the CRC-32 of the raw data.
CODECS: dict[str, tuple[Callable[[bytes], bytes], Callable[[bytes], bytes]]] = {
    "null": (bytes, bytes),
    "deflate": (_deflate, lambda data: zlib.decompress(data, -15)),
    "snappy": (_snappy, _unsnappy),
    "bzip2": (bz2.compress, bz2.decompress),
    "xz": (lzma.compress, lzma.decompress),
    "zstandard": (lambda data: pa.Codec("zstd").compress(data, asbytes=True), _unzstd),
}


def read_varint(stream: BinaryIO) -> int:
    n, shift = 0, 0
    while True:
        byte = stream.read(1)
        if not byte:
            raise EOFError("the file ends inside a number")
        n |= (byte[0] & 0x7F) << shift
        shift += 7
        if byte[0] < 0x80:
            return (n >> 1) ^ -(n & 1)


def read_header(stream: BinaryIO) -> tuple[str, str, bytes, dict[bytes, bytes]]:
    """``(schema JSON, codec, sync marker, metadata)`` of an object container file; leaves ``stream`` after it.
    The metadata tells the calendar of Spark's dates and timestamps (``org.apache.spark.legacyDateTime``)."""
    if stream.read(4) != MAGIC:
        raise ValueError("not an Avro object container file (no Obj\\x01 magic)")
    meta: dict[bytes, bytes] = {}
    while (count := read_varint(stream)) != 0:
        if count < 0:
            read_varint(stream)  # a negative count is followed by the block's size
        for _ in range(abs(count)):
            key = stream.read(read_varint(stream))
            meta[key] = stream.read(read_varint(stream))
    sync = stream.read(SYNC_SIZE)
    codec = meta.get(b"avro.codec", b"null").decode()
    if codec not in CODECS:
        raise ValueError(f"codec {codec!r} is not supported ({', '.join(CODECS)} are)")
    return meta[b"avro.schema"].decode(), codec, sync, meta


# ---------------------------------------------------------------------------------------------
# Decoding


def _polars_can_read(schema: Any, top: bool = True, field: bool = False) -> bool:
    """Whether polars' Avro reader takes this writer schema (no maps, no general unions, no times;
    enums only as non-null fields of the top record: it panics on any other)."""
    inner, _ = _nullable(schema)
    kind = _type(inner)
    if kind in ("union", "map") or _logical(inner) in ("time-millis", "time-micros"):
        return False
    if kind == "enum":
        return field and inner is schema
    if kind == "record":
        return all(_polars_can_read(f["type"], False, top) for f in inner["fields"])
    if kind == "array":
        return _polars_can_read(inner["items"], False)
    return True


class _Unresolvable(Exception):
    """Writer -> reader resolution that the Arrow path does not do; fastavro does it per record."""


_PROMOTIONS = {("int", "long"), ("int", "float"), ("int", "double"), ("long", "float"), ("long", "double"),
               ("float", "double"), ("string", "bytes"), ("bytes", "string")}
_NAMED = ("record", "enum", "fixed")


def _resolve(array: pa.Array, writer: Any, reader: Any, target: pa.DataType) -> pa.Array:
    """Avro schema resolution on a decoded Arrow column, cast to ``target``."""
    w, w_null = _read_as(writer)
    r, r_null = _read_as(reader)
    if w_null and not r_null and array.null_count:
        raise _Unresolvable("null written where the reader schema allows none")
    if isinstance(w, list) or isinstance(r, list):
        return _resolve_union(array, writer, reader, target)
    wk, rk = _type(w), _type(r)
    if wk == "record" and rk == "record":
        by_name = {f["name"]: f for f in w["fields"]}
        for f in w["fields"]:
            for alias in f.get("aliases", ()):
                by_name.setdefault(alias, f)
        children = []
        if isinstance(array, pa.ChunkedArray):
            array = array.combine_chunks()
        for field, child_type in zip(r["fields"], target):
            source = by_name.get(field["name"]) or next(
                (by_name[a] for a in field.get("aliases", ()) if a in by_name), None)
            if source is not None:
                children.append(_resolve(array.field(source["name"]), source["type"], field["type"], child_type.type))
            elif "default" in field:
                children.append(_constant(field["default"], field["type"], child_type.type, len(array)))
            else:
                raise _Unresolvable(f"field {field['name']!r} is missing in the writer schema and has no default")
        return pa.StructArray.from_arrays(children, fields=list(target), mask=array.is_null())
    if wk == "array" and rk == "array":
        if isinstance(array, pa.ChunkedArray):
            array = array.combine_chunks()
        array = array.cast(pa.large_list(array.type.value_type)) if pa.types.is_list(array.type) else array
        items = _resolve(array.values, w["items"], r["items"], target.value_type)
        return pa.LargeListArray.from_arrays(array.offsets, items, mask=array.is_null()).cast(target)
    if wk == "enum" and rk == "enum" and not set(w["symbols"]) <= set(r["symbols"]):
        raise _Unresolvable("enum symbols the reader does not know")
    if (wk != rk and (wk, rk) not in _PROMOTIONS) or _logical(w) != _logical(r):
        raise _Unresolvable(f"{wk} cannot be read as {rk}")
    if wk in ("fixed", "enum") and w.get("name") != r.get("name"):
        raise _Unresolvable("named types with different names")
    texts = (pa.types.is_string, pa.types.is_large_string, pa.types.is_binary, pa.types.is_large_binary)
    if any(t(target) for t in texts[:2]) and any(t(array.type) for t in texts):
        # bytes (or a string) read as a string are kept as they are, valid UTF-8 or not, as Spark keeps them
        array = array.combine_chunks() if isinstance(array, pa.ChunkedArray) else array
        return array.view(_as_binary(array.type)).cast(_as_binary(target)).view(target)
    # a long (an int) read as a double or a float is rounded to the nearest, as Avro promotes it
    return array.cast(target, safe=not (wk in ("int", "long") and rk in ("float", "double")))


def _resolve_union(array: pa.Array, writer: Any, reader: Any, target: pa.DataType) -> pa.Array:
    """Resolution where the writer or the reader is a union read as a struct: each written branch
    (a member) is resolved to the first reader branch it matches, or to a reader that is no union."""
    w, r = _read_as(writer)[0], _read_as(reader)[0]
    merged = isinstance(writer, list) and not isinstance(w, list) and sum(b != "null" for b in writer) > 1
    if merged and isinstance(r, list):
        raise _Unresolvable("int and long (or float and double) are one column: which branch was written is lost")
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    written = list(zip(w, array.flatten())) if isinstance(w, list) else [(w, array)]
    written = [(branch, values) for branch, values in written if values.null_count < len(values)]
    if not isinstance(r, list):
        resolved = [_resolve(values, branch, r, target) for branch, values in written]
        return pc.coalesce(*resolved) if resolved else pa.nulls(len(array), target)
    members: list[list[pa.Array]] = [[] for _ in r]
    for branch, values in written:
        index = _matching_branch(branch, r)
        members[index].append(_resolve(values, branch, r[index], target.field(index).type))
    children = [pc.coalesce(*m) if m else pa.nulls(len(array), f.type) for m, f in zip(members, target)]
    return pa.StructArray.from_arrays(children, fields=list(target), mask=array.is_null())


def _matching_branch(branch: Any, branches: list) -> int:
    """The reader branch a written branch is read as: the first of its type (and name), else the first
    it promotes to (Avro's rule, as Java's resolver applies it)."""
    kind = _type(branch)
    for index, candidate in enumerate(branches):
        if _type(candidate) == kind and (kind not in _NAMED or candidate["name"] == branch["name"]):
            return index
    for index, candidate in enumerate(branches):
        if (kind, _type(candidate)) in _PROMOTIONS:
            return index
    raise _Unresolvable(f"the reader's union has no branch for {kind}")


def _constant(default: Any, schema: Any, target: pa.DataType, count: int) -> pa.Array:
    """A field's default (given in its underlying Avro type) as ``count`` values of ``target``."""
    return pa.array([_default_value(default, schema)] * count, target)


def _default_value(default: Any, schema: Any) -> Any:
    """A default as JSON gives it -> the value of :func:`arrow_type`, at any depth: bytes and fixed from
    strings of code points 0-255, decimals from those bytes, millisecond timestamps in microseconds, a
    union's of the first branch its JSON fits (that member of a union read as a struct), as Avro's Java
    reader (so Spark) picks it: ``["null", "double"]`` with 1.5 is 1.5, not null."""
    if isinstance(schema, list):
        branch = next((b for b in schema if _fits_default(b, default)), schema[0])
        if branch == "null" or default is None:
            return None
        value = _default_value(default, branch)
        if not isinstance(_read_as(schema)[0], list):
            return value
        return {f"member{[b for b in schema if b != 'null'].index(branch)}": value}
    if default is None:
        return None
    kind, logical = _type(schema), _logical(schema)
    if kind == "record":
        return {field["name"]: _default_value(default.get(field["name"], field.get("default")), field["type"])
                for field in schema["fields"]}
    if kind == "array":
        return [_default_value(item, schema["items"]) for item in default]
    if kind == "map":
        return [(key, _default_value(value, schema["values"])) for key, value in default.items()]
    if kind in ("bytes", "fixed"):
        default = default.encode("latin-1")  # a JSON string of code points 0-255, one per byte
        if logical == "decimal":
            unscaled = int.from_bytes(default, "big", signed=True)
            default = decimal.Decimal(unscaled).scaleb(-schema.get("scale", 0), _EXACT)
        return default
    if logical in ("timestamp-millis", "local-timestamp-millis"):
        return default * 1000  # Arrow's timestamps here are in microseconds
    return default


# What Java's Double.parseDouble (Float.parseFloat) takes, after trimming: Avro's Java reader parses a float or
# double field's default given as a JSON string so ("NaN", "-Infinity", "1.5d", "0x1p3"), as Spark reads it
_JAVA_FLOAT = re.compile(r"[+-]?(NaN|Infinity|((\d+\.?\d*|\.\d+)([eE][+-]?\d+)?"
                         r"|0[xX]([0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)[pP][+-]?\d+)[fFdD]?)")
_JAVA_SPACE = "".join(map(chr, range(33)))  # what Java's String.trim takes off
_TEXTS = ("string", "bytes", "enum", "fixed")


def float_defaults(schema: Any, strict: bool = True) -> Any:
    """``schema`` with each float or double field's default given as a string as the number Java makes of it.
    ``strict`` (a parsed reader schema): a string Java refuses there, or as the default of a union with no branch
    of text, fails naming the field (Spark fails on such a reader schema, whether or not the writer has the
    field); else (JSON, named types not yet inlined) such a string is left as it is."""
    if isinstance(schema, list):
        return [float_defaults(branch, strict) for branch in schema]
    if not isinstance(schema, dict):
        return schema
    if schema.get("type") in ("array", "map"):
        key = "items" if schema["type"] == "array" else "values"
        return {**schema, key: float_defaults(schema.get(key), strict)}
    if schema.get("type") != "record" or not isinstance(schema.get("fields"), list):
        return schema
    fields = []
    for field in schema["fields"]:
        field = {**field, "type": float_defaults(field.get("type"), strict)}
        default, kind = field.get("default"), _type(field["type"])
        text = default.strip(_JAVA_SPACE) if isinstance(default, str) else None
        if text is not None and kind in ("float", "double") and _JAVA_FLOAT.fullmatch(text):
            text = text[:-1] if text[-1] in "fFdD" else text
            field["default"] = float.fromhex(text) if "x" in text.lower() else float(text)
        elif text is not None and strict and kind in ("float", "double"):
            raise AvroTypeError(f"the default of the field {field['name']!r}, {default!r}, is not a {kind}: Java "
                                "(so Spark) reads NaN, Infinity, -Infinity or a number there")
        elif text is not None and strict and kind == "union" and not any(_type(b) in _TEXTS for b in field["type"]):
            raise AvroTypeError(f"the default of the field {field['name']!r}, {default!r}, is not one of its union "
                                f"{json.dumps(field['type'])}: Avro's Java parser (so Spark) refuses it")
        elif strict and isinstance(default, (list, dict)) and _float_text(default, field["type"]):
            raise AvroTypeError(f"the default of the field {field['name']!r}, {json.dumps(default)}, holds a string "
                                "where a float or double goes: Avro's Java parser (so Spark) refuses it")
        fields.append(field)
    return {**schema, "fields": fields}


def _float_text(value: Any, schema: Any) -> bool:
    """Whether a default's JSON holds a string where ``schema`` has a float or double, inside arrays, maps
    and records (only a field's own default may be "NaN")."""
    kind = _type(schema)
    if kind in ("float", "double"):
        return isinstance(value, str)
    if kind == "array" and isinstance(value, list):
        return any(_float_text(item, schema["items"]) for item in value)
    if kind == "map" and isinstance(value, dict):
        return any(_float_text(item, schema["values"]) for item in value.values())
    if kind == "record" and isinstance(value, dict):
        return any(_float_text(value[f["name"]], f["type"]) for f in schema["fields"] if f["name"] in value)
    return False


def _fits_default(branch: Any, default: Any) -> bool:
    """Whether a default's JSON fits a union branch, by Avro's Java rule (ResolvingGrammarGenerator's
    isCompatible): by the JSON's kind alone, any number for any number type."""
    kind = _type(branch)
    if kind == "null":
        return default is None
    if kind == "boolean":
        return isinstance(default, bool)
    if kind in ("int", "long", "float", "double"):
        return isinstance(default, (int, float)) and not isinstance(default, bool)
    if kind in ("bytes", "string", "fixed"):
        return isinstance(default, str)
    return True


def _polars_read(container: bytes) -> pa.StructArray:
    import polars  # noqa: PLC0415 - heavy; only workers that decode Avro pay for it

    table = polars.read_avro(io.BytesIO(container)).to_arrow()
    return pa.StructArray.from_arrays([c.combine_chunks() for c in table.columns], names=table.column_names)


_MAPPED_LOGICAL = ("decimal", "date", "timestamp-millis", "timestamp-micros", "local-timestamp-millis",
                   "local-timestamp-micros")


def _for_fastavro(schema: Any, seen: set[str] | None = None, tagged: bool = False, keys: bool = False) -> Any:
    """An expanded schema as fastavro takes it back: a named type defined where first used, then
    referred to by name; logical types that :func:`spark_type` does not map (times, uuid, nanos) as
    the plain type it makes of them. ``tagged`` (to read values as written, not to resolve them): the
    same bytes on the wire read so that no value is lost or guessed: strings as bytes (Spark keeps a
    string's bytes as they are, valid UTF-8 or not), and each unnamed branch of a union read as a struct
    as a one-field record named after its place (zero bytes more), so that ``return_named_type`` tells
    the branch written (a 1 of the int branch of [long, int] is not the long branch's). ``keys`` (tagged too):
    each map as an array of records of ``key`` (bytes) and ``value``, the same bytes on the wire, for map keys
    that are not UTF-8 (fastavro reads keys as text; Spark keeps their bytes)."""
    seen = set() if seen is None else seen
    if isinstance(schema, list):
        inner = _read_as(schema)[0]
        if isinstance(inner, str):  # int and long (float and double) as one number: plain
            schema = [_type(branch) for branch in schema]
        elif tagged and isinstance(inner, list):
            union, branches = len(seen), [branch for branch in schema if branch != "null"]
            out = []
            for branch in schema:
                if branch == "null" or _type(branch) in _NAMED:
                    out.append(_for_fastavro(branch, seen, tagged, keys))
                    continue
                name = f"{_BRANCH}{union}_{branches.index(branch)}"
                seen.add(name)
                out.append({"type": "record", "name": name,
                            "fields": [{"name": "v", "type": _for_fastavro(branch, seen, tagged, keys)}]})
            return out
        return [_for_fastavro(branch, seen, tagged, keys) for branch in schema]
    if not isinstance(schema, dict):
        return "bytes" if tagged and schema == "string" else schema
    if schema["type"] in ("record", "enum", "fixed"):
        if schema["name"] in seen:
            return schema["name"]
        seen.add(schema["name"])
    plain = {k: v for k, v in schema.items() if k != "logicalType" or v in _MAPPED_LOGICAL}
    if schema["type"] == "record":
        plain["fields"] = [{**field, "type": _for_fastavro(field["type"], seen, tagged, keys)}
                           for field in schema["fields"]]
    elif keys and schema["type"] == "map":
        name = f"{_ENTRY}{len(seen)}"
        seen.add(name)
        value = _for_fastavro(schema["values"], seen, tagged, keys)
        fields = [{"name": "key", "type": "bytes"}, {"name": "value", "type": value}]
        return {"type": "array", "items": {"type": "record", "name": name, "fields": fields}}
    elif schema["type"] in ("array", "map"):
        key = "items" if schema["type"] == "array" else "values"
        plain[key] = _for_fastavro(schema[key], seen, tagged, keys)
    elif tagged and schema["type"] == "string":
        return "bytes"
    return plain


_BRANCH = "connectors_union_branch_"  # the records that tag the branches of a union read tagged
_ENTRY = "connectors_map_entry_"  # the records of a map's entries read with ``keys``


def _as_binary(data_type: pa.DataType) -> pa.DataType:
    """``data_type`` with binary for string at every depth: the same layout, so that values built as
    binary are viewed as strings (``Array.view``) without checking that they are UTF-8, as Spark keeps them."""
    if pa.types.is_string(data_type) or pa.types.is_large_string(data_type):
        return pa.binary() if pa.types.is_string(data_type) else pa.large_binary()
    if pa.types.is_struct(data_type):
        return pa.struct([f.with_type(_as_binary(f.type)) for f in data_type])
    if pa.types.is_map(data_type):
        return pa.map_(_as_binary(data_type.key_type), data_type.item_field.with_type(_as_binary(data_type.item_type)))
    if pa.types.is_list(data_type) or pa.types.is_large_list(data_type):
        value = data_type.value_field.with_type(_as_binary(data_type.value_type))
        return pa.large_list(value) if pa.types.is_large_list(data_type) else pa.list_(value)
    return data_type


def _as_read(rows: list, data_type: pa.DataType) -> pa.Array:
    """Values read tagged (strings as bytes) as an Arrow array of ``data_type``."""
    return pa.array(rows, _as_binary(data_type)).view(data_type)


def _untagger(schema: Any, keys: bool = False) -> Callable[[Any], Any] | None:
    """For a schema with a union read as a struct (or any map, read with ``keys``): what turns a value
    fastavro read with ``return_named_type`` into the value of :func:`arrow_type`. None for other schemas:
    fastavro's values are those already (and cheaper to read without the names)."""
    return _converter(schema, keys) if keys or _struct_unions(schema) else None


def _struct_unions(schema: Any) -> bool:
    inner = _read_as(schema)[0]
    kind = "union" if isinstance(inner, list) else _type(inner)
    if kind == "record":
        return any(_struct_unions(field["type"]) for field in inner["fields"])
    if kind in ("array", "map"):
        return _struct_unions(inner["items" if kind == "array" else "values"])
    return kind == "union"


def _converter(schema: Any, keys: bool = False) -> Callable[[Any], Any] | None:
    """A named type in a union, ``(name, value)``, becomes the value; a union read as a struct
    ``{"member<i>": value}`` of the branch written (the other members null); with ``keys``, a map's entries
    a dict of bytes keys. None: nothing to change."""
    if isinstance(schema, list):
        return _union_converter(schema, keys)
    kind = _type(schema)
    if kind == "record":
        fields = [(field["name"], convert) for field in schema["fields"]
                  if (convert := _converter(field["type"], keys))]

        def record(value: dict) -> dict:
            value = dict(value)  # fastavro gives one object for a default in every record: not changed in place
            for name, convert in fields:
                value[name] = convert(value[name])
            return value

        return record if fields else None
    if kind in ("array", "map"):
        item = _converter(schema["items" if kind == "array" else "values"], keys)
        if keys and kind == "map":  # a key written twice: the last, as Avro's Java reader (a HashMap) keeps it
            return lambda value: {e["key"]: item(e["value"]) if item else e["value"] for e in value}
        if item is None:
            return None
        return (lambda value: [item(v) for v in value]) if kind == "array" else (
            lambda value: {k: item(v) for k, v in value.items()})
    return None


def _union_converter(schema: list, keys: bool) -> Callable[[Any], Any] | None:
    branches = [branch for branch in schema if branch != "null"]
    converters = [_converter(branch, keys) for branch in branches]
    struct = isinstance(_read_as(schema)[0], list)
    if not struct and not any(converters) and all(_type(b) not in _NAMED for b in branches):
        return None

    def union(value: Any) -> Any:
        if value is None:
            return None
        index, value = _branch_of(branches, value)
        value = converters[index](value) if converters[index] else value
        return {f"member{index}": value} if struct else value

    return union


_PYTHON_TYPES = {"boolean": bool, "int": int, "long": int, "float": float, "double": float, "bytes": bytes,
                 "fixed": bytes, "string": str, "enum": str, "array": list, "map": dict, "record": dict,
                 "decimal": decimal.Decimal, "date": datetime.date, "timestamp-millis": datetime.datetime,
                 "timestamp-micros": datetime.datetime, "local-timestamp-millis": datetime.datetime,
                 "local-timestamp-micros": datetime.datetime}


def _branch_of(branches: list, value: Any) -> tuple[int, Any]:
    """The union branch a value fastavro read was written with, and the value: read tagged, by the name of
    the record around it; a named type by the name fastavro gives it; any other (read with a reader schema)
    by the first branch whose type holds the value, the rule by which fastavro's writer picks a branch (so
    int and long, float and double in one union are told apart by range and precision only)."""
    if isinstance(value, tuple):
        name, value = value
        if name.rsplit(".", 1)[-1].startswith(_BRANCH):  # read tagged: a record around the value, named
            return int(name.rsplit("_", 1)[1]), value["v"]  # after its branch (in the enclosing namespace)
        return next(i for i, b in enumerate(branches) if _type(b) in _NAMED and b["name"] == name), value
    if len(branches) == 1:  # also a map read as entries, which no type check knows
        return 0, value
    index = next((i for i, branch in enumerate(branches) if _holds_value(branch, value)), None)
    if index is None:
        raise AvroError(f"no branch of the union {[_type(b) for b in branches]} holds {value!r}")
    return index, value


def _holds_value(schema: Any, value: Any) -> bool:
    """Whether a value fastavro read can be of an Avro type: its Python type, and an int's range, a
    float's precision, an enum's symbols, a fixed's size, a record's fields."""
    kind, logical = _type(schema), _logical(schema)
    if type(value) is not _PYTHON_TYPES[logical if logical in _MAPPED_LOGICAL else kind]:
        return False
    if kind == "int" and logical is None:
        return -(1 << 31) <= value < 1 << 31
    if kind == "float":
        return _is_float32(value)
    if kind == "enum":
        return value in schema["symbols"]
    if kind == "fixed" and logical is None:
        return len(value) == schema["size"]
    if kind == "record":
        return set(value) == {field["name"] for field in schema["fields"]}
    return True


def _is_float32(value: float) -> bool:
    try:
        return value != value or struct.unpack("<f", struct.pack("<f", value))[0] == value
    except OverflowError:
        return False


_NOT_UTF8 = ("a string is not valid UTF-8 where the reader schema resolution needs it as text (Spark keeps its bytes): "
             "read it without avroSchema, or as bytes, and convert it in the query")


class Decoder:
    """Avro bodies written with ``writer`` -> Arrow values of the ``reader`` schema (``target`` type)."""

    def __init__(self, writer_json: str, reader: Any, target: pa.DataType):
        self.writer_json = writer_json
        self.writer = parse(writer_json)
        self.reader, self.target = None if reader is None else float_defaults(reader), target
        self.columnar = _polars_can_read(self.writer) and _type(_nullable(self.writer)[0]) == "record"
        plain_writer, tagged_writer = _for_fastavro(self.writer), _for_fastavro(self.writer, tagged=True)
        self._fastavro_writer = fastavro.parse_schema(plain_writer)
        self._tagged_writer = fastavro.parse_schema(tagged_writer)  # to read values as written
        self._fastavro_reader = None if reader is None else fastavro.parse_schema(_for_fastavro(self.reader))
        self._header = container_header(json.dumps(plain_writer))
        self._tagged_header = container_header(json.dumps(tagged_writer), sync=self._header[1])[0]
        self._sizer: Encoder | None = None
        self._untag_writer = _untagger(self.writer)
        self._untag_reader = self._untag_writer if reader is None else _untagger(reader)

    @functools.cached_property
    def _keys(self) -> tuple[Any, bytes, Callable[[Any], Any] | None]:
        """The tagged writer schema with maps read as entries (keys as bytes), its container header and
        untagger: for the rare record whose map key is not UTF-8, so the common path pays nothing."""
        schema = _for_fastavro(self.writer, tagged=True, keys=True)
        header = container_header(json.dumps(schema), sync=self._header[1])[0]
        return fastavro.parse_schema(schema), header, _untagger(self.writer, keys=True)

    def decode(self, bodies: pa.BinaryArray | pa.LargeBinaryArray) -> tuple[pa.Array, dict[int, str]]:
        """The values, and ``{index: reason}`` for bodies that cannot be decoded (null there)."""
        if self.columnar:
            from polars.exceptions import PanicException  # noqa: PLC0415 - polars is heavy to import

            try:
                return self._columnar(bodies), {}
            except (PanicException, Exception):  # noqa: BLE001 - any failure: find the culprits one by one
                pass
        return self._per_record(bodies.to_pylist())

    def decode_block(self, count: int, data: bytes) -> pa.Array:
        """The records of one uncompressed container block (an Avro file's), resolved to the reader schema."""
        header, sync = self._header
        body = container_block(count, data, sync)
        reader = self.writer if self.reader is None else self.reader
        if self.columnar:
            from polars.exceptions import PanicException  # noqa: PLC0415

            try:
                return _resolve(_polars_read(header + body), self.writer, reader, self.target)
            except (PanicException, Exception):  # noqa: BLE001 - fastavro gives the reason, if any
                pass
        # read as written (tagged), then resolved as the columnar path resolves (fastavro gives defaults of
        # bytes, decimals and millisecond timestamps other values, and shares them)
        untag = self._untag_writer
        try:
            rows = list(fastavro.reader(io.BytesIO(self._tagged_header + body), return_named_type=untag is not None))
        except UnicodeDecodeError:  # read tagged, only a map key is text: read the maps as entries
            _, keys_header, untag = self._keys
            rows = list(fastavro.reader(io.BytesIO(keys_header + body), return_named_type=True))
        written = _as_read([untag(row) for row in rows] if untag else rows, arrow_type(self.writer))
        if self.reader is None and written.type == self.target:
            return written
        try:
            return _resolve(written, self.writer, reader, self.target)
        except (_Unresolvable, pa.ArrowException):
            if self.reader is None:
                raise
        untag = self._untag_reader
        try:
            rows = list(fastavro.reader(io.BytesIO(header + body), reader_schema=self._fastavro_reader,
                                        return_named_type=untag is not None))
        except fastavro.read.SchemaResolutionError as exc:  # not a corrupt file: the schemas do not match
            raise AvroTypeError(f"the file's Avro schema cannot be resolved to the reader schema: {exc}") from None
        except UnicodeDecodeError:
            raise AvroTypeError(_NOT_UTF8) from None
        return pa.array([untag(row) for row in rows] if untag else rows, self.target)

    def _columnar(self, bodies: pa.Array) -> pa.Array:
        width = np.int64 if pa.types.is_large_binary(bodies.type) else np.int32
        offsets = np.frombuffer(bodies.buffers()[1], width)[bodies.offset:bodies.offset + len(bodies) + 1]
        data = memoryview(bodies.buffers()[2] or b"")[int(offsets[0]):int(offsets[-1])]
        header, sync = self._header
        block = header + container_block(len(bodies), data, sync)
        decoded = _polars_read(block)
        # The block has no record boundaries: a record with bytes missing or left over shifts the
        # ones after it. Each record's size, computed from its decoded values, must be its body's.
        if self._sizer is None:
            self._sizer = Encoder(self.writer, decoded.type)
        if len(decoded) != len(bodies) or not np.array_equal(self._sizer.sizes(decoded), np.diff(offsets)):
            raise _Unresolvable("a record's size differs from its body's")
        return _resolve(decoded, self.writer, self.reader, self.target)

    def _per_record(self, bodies: list[bytes]) -> tuple[pa.Array, dict[int, str]]:
        """Read with the writer schema, then resolved as the columnar path resolves (fastavro gives the
        defaults of bytes and millisecond timestamps other values); fastavro resolves the rest."""
        rows, bad = self._read_each(bodies, self._tagged_writer, None, self._untag_writer, keys=True)
        try:
            written = _as_read(rows, arrow_type(self.writer))
            return _resolve(written, self.writer, self.writer if self.reader is None else self.reader, self.target), bad
        except (_Unresolvable, AvroError, pa.ArrowException):
            rows, bad = self._read_each(bodies, self._fastavro_writer, self._fastavro_reader, self._untag_reader)
            return pa.array(rows, self.target), bad

    def _read_each(self, bodies: list[bytes], writer: Any, reader_schema: Any,
                   untag: Callable[[Any], Any] | None, keys: bool = False) -> tuple[list, dict[int, str]]:
        """``keys`` (read tagged): a body whose map key is not UTF-8 read again with its maps as entries."""
        rows, bad = [], {}
        reader = fastavro.schemaless_reader
        for index, body in enumerate(bodies):
            try:
                stream = io.BytesIO(body)
                try:
                    row = reader(stream, writer, reader_schema, return_named_type=untag is not None)
                    row = untag(row) if untag else row
                except UnicodeDecodeError:
                    if not keys:
                        raise
                    keys_writer, _, keys_untag = self._keys
                    stream = io.BytesIO(body)
                    row = keys_untag(reader(stream, keys_writer, return_named_type=True))
                if stream.tell() != len(body):
                    raise ValueError(f"{len(body) - stream.tell()} bytes left after the record")
                rows.append(row)
            except Exception as exc:  # noqa: BLE001 - whatever fastavro raises, the record is bad
                rows.append(None)
                bad[index] = f"{type(exc).__name__}: {exc}"
        return rows, bad


# ---------------------------------------------------------------------------------------------
# Encoding


def ranges_mask(length: int, starts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """A mask of ``length`` bytes, true in the disjoint ranges ``[start, start + size)``: cheaper than
    an index per byte."""
    marks = np.zeros(length + 1, np.int8)
    marks[starts] += 1
    marks[starts + sizes] -= 1
    return np.cumsum(marks[:-1], dtype=np.int8).view(bool)


def _ranges(length: int, starts: np.ndarray, sizes: np.ndarray) -> slice | np.ndarray:
    """Selects the bytes of the disjoint ascending ranges ``[start, start + size)`` of an array of
    ``length`` bytes, in order: a slice when they touch, the positions of their bytes when they
    cover less than half of it (a mask costs every byte of the array, positions only theirs), or
    else a mask."""
    total = int(sizes.sum())
    if total == int(starts[-1] + sizes[-1] - starts[0]):
        return slice(int(starts[0]), int(starts[0]) + total)
    if total * 2 < length:
        ends = np.cumsum(sizes)
        return np.arange(total) + np.repeat(starts - (ends - sizes), sizes)
    return ranges_mask(length, starts, sizes)


def _varint_lengths(zz: np.ndarray) -> np.ndarray:
    lengths = np.ones(len(zz), np.int64)
    top = int(zz.max()) if len(zz) else 0
    for k in range(1, 10):  # a pass per byte that the largest value needs: most need one or two
        if top < 1 << (7 * k):
            break
        lengths += zz >= np.uint64(1 << (7 * k))
    return lengths


def _write_varints(out: np.ndarray, pos: np.ndarray, zz: np.ndarray, lengths: np.ndarray) -> None:
    for k in range(10):
        rows = np.flatnonzero(lengths > k)
        if not len(rows):
            return
        byte = (zz[rows] >> np.uint64(7 * k)) & np.uint64(0x7F)
        byte |= np.where(lengths[rows] > k + 1, np.uint64(0x80), np.uint64(0))
        out[pos[rows] + k] = byte.astype(np.uint8)


def _zigzag(values: np.ndarray) -> np.ndarray:
    v = values.astype(np.int64)
    return ((v << 1) ^ (v >> 63)).view(np.uint64)


class _Node:
    """One Avro type's encoder. ``prepare`` computes per-element lengths (0 where absent);
    ``write`` puts the bytes of every present element at ``pos``."""

    lengths: np.ndarray

    def prepare(self, array: pa.Array, present: np.ndarray) -> None:
        raise NotImplementedError

    def write(self, out: np.ndarray, pos: np.ndarray) -> None:
        raise NotImplementedError


def _check_no_nulls(array: pa.Array, present: np.ndarray, path: str) -> None:
    if array.null_count and np.any(present & ~_valid(array)):
        raise AvroError(f"{path} is null in a record, but its Avro type does not allow null")


def _valid(array: pa.Array) -> np.ndarray:
    if array.null_count == 0:
        return np.ones(len(array), bool)
    return np.asarray(array.is_valid().to_numpy(zero_copy_only=False), bool)


class _Varint(_Node):
    def __init__(self, path: str, convert: Callable[[pa.Array], np.ndarray]):
        self.path, self.convert = path, convert

    def prepare(self, array, present):
        _check_no_nulls(array, present, self.path)
        self.zz = _zigzag(self.convert(array))
        self.lengths = np.where(present, _varint_lengths(self.zz), 0)
        self.present = present

    def write(self, out, pos):
        _write_varints(out, pos, self.zz, self.lengths)


class _Fixed(_Node):
    """Fixed-width little-endian values (float, double, boolean)."""

    def __init__(self, path: str, dtype: str):
        self.path, self.dtype = path, np.dtype(dtype)

    def prepare(self, array, present):
        _check_no_nulls(array, present, self.path)
        values = array.fill_null(False if self.dtype == np.uint8 else 0).to_numpy(zero_copy_only=False)
        self.bytes = np.ascontiguousarray(values.astype(self.dtype)).view(np.uint8).reshape(len(array), -1)
        self.lengths = np.where(present, self.dtype.itemsize, 0)

    def write(self, out, pos):
        rows = np.flatnonzero(self.lengths)
        for k in range(self.dtype.itemsize):
            out[pos[rows] + k] = self.bytes[rows, k]


class _Bytes(_Node):
    """string, bytes (a length, then the bytes) and fixed (the bytes only)."""

    def __init__(self, path: str, size: int | None = None):
        self.path, self.size = path, size

    def prepare(self, array, present):
        _check_no_nulls(array, present, self.path)
        if pa.types.is_fixed_size_binary(array.type) or pa.types.is_dictionary(array.type):
            array = array.cast(pa.large_binary())
        array = array.cast(pa.large_binary()) if not pa.types.is_large_binary(array.type) else array
        offsets = np.frombuffer(array.buffers()[1], np.int64)[array.offset:array.offset + len(array) + 1]
        self.data = np.frombuffer(array.buffers()[2] or b"", np.uint8)
        self.starts = offsets[:-1]
        sizes = np.where(present, offsets[1:] - offsets[:-1], 0)
        if self.size is not None:
            wrong = present & (sizes != self.size)
            if wrong.any():
                raise AvroError(f"{self.path} has {sizes[wrong][0]} bytes, but its Avro fixed type {self.size}")
            self.head = np.zeros(len(array), np.int64)
        else:
            self.zz = _zigzag(sizes)
            self.head = np.where(present, _varint_lengths(self.zz), 0)
        self.sizes = sizes
        self.lengths = self.head + sizes

    def write(self, out, pos):
        if self.size is None:
            _write_varints(out, pos, self.zz, self.head)
        rows = np.flatnonzero(self.sizes)
        if len(rows):
            # Source and destination ranges both ascend with the row: the k-th byte taken is the k-th put.
            starts, sizes = self.starts[rows], self.sizes[rows]
            taken = self.data[_ranges(len(self.data), starts, sizes)]
            out[_ranges(len(out), pos[rows] + self.head[rows], sizes)] = taken


class _Record(_Node):
    def __init__(self, fields: list[tuple[str, _Node, Any]], path: str):
        self.fields, self.path = fields, path  # (arrow field name, node, None) or (None, node, count -> defaults)

    def prepare(self, array, present):
        if isinstance(array, pa.ChunkedArray):
            array = array.combine_chunks()
        _check_no_nulls(array, present, self.path or "the record")
        self.lengths = np.zeros(len(array), np.int64)
        for name, node, default in self.fields:
            child = array.field(name) if name is not None else default(len(array))
            node.prepare(child, present)
            self.lengths += node.lengths

    def write(self, out, pos):
        pos = pos.copy()
        for _, node, _ in self.fields:
            node.write(out, pos)
            pos += node.lengths


class _Union(_Node):
    """A union: each present value is written as its branch index, then as one of ``members``
    (branch index, node); a null as the null branch, which writes nothing more. ``by_member``: the
    value is a struct of one field per member, the first set picks it; else every value is of the
    one member."""

    def __init__(self, members: list[tuple[int, _Node]], null_index: int | None, path: str, by_member: bool):
        self.members, self.null_index, self.path, self.by_member = members, null_index, path, by_member

    def prepare(self, array, present):
        if isinstance(array, pa.ChunkedArray):
            array = array.combine_chunks()
        valid = _valid(array) & present
        indexes = _zigzag(np.array([index for index, _ in self.members] + [self.null_index or 0]))
        sizes = _varint_lengths(indexes)
        if self.by_member:
            children = [array.field(i) for i in range(len(self.members))]
            chosen = np.full(len(array), -1)  # -1, no member set: the null branch, last in indexes
            for i in reversed(range(len(children))):
                chosen = np.where(valid & _valid(children[i]), i, chosen)
            self.zz, self.head = indexes[chosen], np.where(present, sizes[chosen], 0)
            unset = present & (chosen < 0)
            picked = [chosen == i for i in range(len(children))]
        else:  # the common ["null", T]: no gathers
            children, unset, picked = [array], present & ~valid, [valid]
            self.zz = np.where(valid, indexes[0], indexes[-1])
            self.head = (present.astype(np.int64) if sizes.max() == 1
                         else np.where(present, np.where(valid, sizes[0], sizes[-1]), 0))
        if self.null_index is None and unset.any():
            what = " (no member set)" if self.by_member else ""
            raise AvroError(f"{self.path or 'the value'} is null{what} in a record, but its Avro union has no null branch")
        self.lengths = self.head.copy()
        for child, (_, node), rows in zip(children, self.members, picked):
            node.prepare(child, rows)
            self.lengths += node.lengths

    def write(self, out, pos):
        if self.head.max(initial=0) == 1:  # branch indexes below 64: a byte each, the zig-zag itself
            rows = np.flatnonzero(self.head)
            out[pos[rows]] = self.zz[rows].astype(np.uint8)
        else:
            _write_varints(out, pos, self.zz, self.head)
        for _, node in self.members:
            node.write(out, pos + self.head)


class _Repeated(_Node):
    """array and map: one block of ``count`` items, then the 0 that ends the blocks."""

    def __init__(self, item: _Node, path: str, is_map: bool):
        self.item, self.path, self.is_map = item, path, is_map

    def prepare(self, array, present):
        if isinstance(array, pa.ChunkedArray):
            array = array.combine_chunks()
        _check_no_nulls(array, present, self.path)
        offsets = np.asarray(array.offsets.to_numpy(), np.int64)
        first = offsets[0]
        counts = np.where(present, offsets[1:] - offsets[:-1], 0)
        values = array.values.slice(first, offsets[-1] - first)
        if self.is_map:
            values = pa.StructArray.from_arrays([array.keys.slice(first, len(values)),
                                                 array.items.slice(first, len(values))], names=["key", "value"])
        owner = np.repeat(np.arange(len(array)), offsets[1:] - offsets[:-1])
        self.item.prepare(values, present[owner] if len(owner) else np.zeros(0, bool))
        item_lengths = self.item.lengths
        cumulative = np.concatenate(([0], np.cumsum(item_lengths)))
        rel = offsets - first
        content = cumulative[rel[1:]] - cumulative[rel[:-1]]
        self.zz = _zigzag(counts)
        self.head = np.where(counts > 0, _varint_lengths(self.zz), 0)
        self.lengths = np.where(present, self.head + content + 1, 0)
        self.counts, self.owner, self.cumulative, self.rel = counts, owner, cumulative, rel

    def write(self, out, pos):
        _write_varints(out, pos, self.zz, self.head)
        if len(self.owner):
            item_pos = pos[self.owner] + self.head[self.owner] + self.cumulative[:-1] - self.cumulative[self.rel[:-1]][self.owner]
            self.item.write(out, item_pos)


class _Python(_Node):
    """Values converted one by one in Python (decimals), then written as bytes (``size`` of them: fixed)."""

    def __init__(self, path: str, convert: Callable[[Any], bytes], size: int | None = None):
        self.path, self.convert = path, convert
        self.inner = _Bytes(path, size)

    def prepare(self, array, present):
        values = [self.convert(v) if v is not None else b"" for v in array.to_pylist()]
        self.inner.prepare(pa.array(values, pa.large_binary()), present)
        self.lengths = self.inner.lengths

    def write(self, out, pos):
        self.inner.write(out, pos)


def _decimal_bytes(scale: int, size: int | None, path: str) -> Callable[[Any], bytes]:
    """The two's-complement unscaled value: as few bytes as hold it, or exactly ``size`` (a fixed type)."""
    def convert(value) -> bytes:
        unscaled = int(value.scaleb(scale, _EXACT))
        try:
            return unscaled.to_bytes(size or (unscaled.bit_length() + 8) // 8, "big", signed=True)
        except OverflowError:
            raise AvroError(f"{path} is {value}, more than its Avro fixed type's {size} bytes hold") from None

    return convert


_PER_SECOND = {"s": 1, "ms": 1000, "us": 1_000_000, "ns": 1_000_000_000}


def _int_values(unit: str = "us") -> Callable[[pa.Array], np.ndarray]:
    """Integers of a column; timestamps in ``unit`` (the Avro logical type's), dates in days."""
    def convert(array: pa.Array) -> np.ndarray:
        kind = array.type
        if pa.types.is_timestamp(kind) or pa.types.is_date(kind):
            array = array.cast(pa.int64() if pa.types.is_timestamp(kind) else pa.int32())
        values = np.asarray(array.fill_null(0).to_numpy(zero_copy_only=False), np.int64)
        return _rescaled(values, kind.unit, unit) if pa.types.is_timestamp(kind) else values

    return convert


def _rescaled(values: np.ndarray, have: str, want: str) -> np.ndarray:
    """Timestamps from unit ``have`` to ``want``, rounded down as Java's ``Instant`` rounds (1969's
    last microsecond is 1969's last millisecond, not 1970's first)."""
    have_per_second, want_per_second = _PER_SECOND[have], _PER_SECOND[want]
    if have_per_second > want_per_second:
        return values // (have_per_second // want_per_second)
    return values * (want_per_second // have_per_second)


def _holds(schema: Any, arrow: pa.DataType) -> bool:
    """Whether every value of an Arrow type has an exact encoding in an Avro leaf type (as spark-avro's
    serializer allows: no narrowing, no rounding, no numbers as text)."""
    kind, logical = _type(schema), _logical(schema)
    arrow = arrow.value_type if pa.types.is_dictionary(arrow) else arrow
    if logical == "decimal":
        return (pa.types.is_decimal(arrow) and arrow.scale == schema.get("scale", 0)
                and arrow.precision <= schema["precision"])
    texts = pa.types.is_string(arrow) or pa.types.is_large_string(arrow)
    binaries = pa.types.is_binary(arrow) or pa.types.is_large_binary(arrow) or pa.types.is_fixed_size_binary(arrow)
    signed, unsigned = pa.types.is_signed_integer(arrow), pa.types.is_unsigned_integer(arrow)
    holds = {
        "null": True, "boolean": pa.types.is_boolean(arrow), "string": texts, "enum": texts,
        "bytes": binaries or texts, "fixed": binaries,
        "int": (signed and arrow.bit_width <= 32) or (unsigned and arrow.bit_width <= 16) or pa.types.is_date32(arrow),
        "long": signed or (unsigned and arrow.bit_width <= 32) or pa.types.is_timestamp(arrow),
        "float": pa.types.is_floating(arrow) and arrow.bit_width <= 32, "double": pa.types.is_floating(arrow),
    }
    return holds.get(kind, False)


def _enum_values(symbols: list[str], path: str) -> Callable[[pa.Array], np.ndarray]:
    def convert(array: pa.Array) -> np.ndarray:
        index = pc.index_in(array.cast(pa.string()), value_set=pa.array(symbols))
        unknown = pc.and_(index.is_null(), array.is_valid())
        if pc.any(unknown).as_py():
            value = array.filter(unknown)[0].as_py()
            raise AvroError(f"{path} is {value!r}, not a symbol of its Avro enum {symbols}")
        return np.asarray(index.fill_null(0).to_numpy(zero_copy_only=False), np.int64)

    return convert


def _union(schema: list, arrow: pa.DataType, path: str) -> _Node:
    """A union written as spark-avro writes it. From the struct it is read as (``member0``,
    ``member1``, ... for the non-null branches), the first member set picks its branch. Any other
    column goes to one branch: the one read as the column's type (a long into int and long is a
    long), else the first that holds every value of it exactly. A null picks the null branch."""
    branches = [(index, branch) for index, branch in enumerate(schema) if branch != "null"]
    null_index = schema.index("null") if "null" in schema else None
    names = [arrow.field(i).name for i in range(arrow.num_fields)] if pa.types.is_struct(arrow) else []
    if len(branches) > 1 and names == [f"member{i}" for i in range(len(branches))]:
        members = [(index, _compile(branch, arrow.field(i).type, f"{path}.member{i}"))
                   for i, (index, branch) in enumerate(branches)]
        return _Union(members, null_index, path, by_member=True)
    if len(branches) == 1:
        index = branches[0][0]
    else:
        column = from_arrow_type(arrow).simpleString()
        read_as = [index for index, branch in branches if spark_type(branch)[0].simpleString() == column]
        holding = [index for index, branch in branches if _type(branch) not in ("record", "array", "map")
                   and _holds(branch, arrow)]
        if not read_as and not holding:
            raise AvroError(f"{path or 'the value'} is {column}, which no branch of its Avro union {json.dumps(schema)} "
                            "holds exactly (a struct of member0, member1, ... picks a branch per row)")
        index = (read_as or holding)[0]
    return _Union([(index, _compile(schema[index], arrow, path))], null_index, path, by_member=False)


def _compile(schema: Any, arrow: pa.DataType, path: str) -> _Node:
    if isinstance(schema, list):
        return _union(schema, arrow, path)
    kind, logical = _type(schema), _logical(schema)
    if kind not in ("record", "array", "map") and not _holds(schema, arrow):
        raise AvroError(f"{path or 'the value'} is {arrow}, which its Avro type {json.dumps(schema)} "
                        "cannot hold exactly")
    if logical == "decimal":
        size = schema.get("size") if kind == "fixed" else None
        return _Python(path, _decimal_bytes(schema.get("scale", 0), size, path), size)
    if logical in ("timestamp-millis", "local-timestamp-millis"):
        return _Varint(path, _int_values("ms"))
    if kind in ("int", "long"):
        return _Varint(path, _int_values())
    if kind == "enum":
        return _Varint(path, _enum_values(schema["symbols"], path))
    if kind in ("float", "double", "boolean"):
        return _Fixed(path, {"float": "<f4", "double": "<f8", "boolean": "u1"}[kind])
    if kind in ("string", "bytes"):
        return _Bytes(path)
    if kind == "fixed":
        return _Bytes(path, schema["size"])
    if kind == "null":
        return _Constant()
    if kind == "record":
        if not pa.types.is_struct(arrow):
            raise AvroError(f"{path or 'the value'} is {arrow}, but its Avro schema is a record")
        names = {arrow.field(i).name: arrow.field(i) for i in range(arrow.num_fields)}
        fields = []
        for field in schema["fields"]:
            prefix = f"{path}." if path else ""
            if field["name"] in names:
                node = _compile(field["type"], names[field["name"]].type, prefix + field["name"])
                fields.append((field["name"], node, None))
            elif "default" in field:
                data_type, _ = spark_type(field["type"])
                default_type = arrow_schema(StructType([StructField("v", data_type)])).field("v").type
                default = functools.partial(_constant, field["default"], field["type"], default_type)
                fields.append((None, _compile(field["type"], default_type, prefix + field["name"]), default))
            else:
                raise AvroError(f"the data has no column {prefix + field['name']} and its Avro field has no default")
        return _Record(fields, path)
    if kind == "array":
        if not (pa.types.is_list(arrow) or pa.types.is_large_list(arrow)):
            raise AvroError(f"{path} is {arrow}, but its Avro schema is an array")
        return _Repeated(_compile(schema["items"], arrow.value_type, path + "[]"), path, is_map=False)
    if kind == "map":
        if not pa.types.is_map(arrow):
            raise AvroError(f"{path} is {arrow}, but its Avro schema is a map")
        if not _holds("string", arrow.key_type):
            raise AvroError(f"{path} has {arrow.key_type} keys, but Avro maps need string keys")
        entry = _Record([("key", _Bytes(path + ".key"), None),
                         ("value", _compile(schema["values"], arrow.item_type, path + "{}"), None)], path)
        return _Repeated(entry, path, is_map=True)
    raise AvroError(f"{path}: Avro type {kind!r} cannot be written")


class _Constant(_Node):
    """The null type: nothing is written."""

    def prepare(self, array, present):
        self.lengths = np.zeros(len(array), np.int64)

    def write(self, out, pos):
        pass


class Encoder:
    """Arrow values -> Avro bodies of ``schema``, each after ``prefix`` (the wire format's 5 bytes)."""

    def __init__(self, schema: Any, arrow: pa.DataType, prefix: bytes = b""):
        self.schema = parse(schema) if isinstance(schema, str) else schema
        self.root = _compile(self.schema, arrow, "")
        self.prefix = np.frombuffer(prefix, np.uint8)

    def sizes(self, array: pa.Array) -> np.ndarray:
        """The encoded size of every value (prefix excluded), without encoding."""
        self.root.prepare(array, np.ones(len(array), bool))
        return self.root.lengths

    def lengths_and_bytes(self, array: pa.Array) -> tuple[np.ndarray, np.ndarray]:
        """Per-record lengths (prefix included) and the concatenated bytes."""
        present = _valid(array)  # a null value stays null (a tombstone), it is not encoded
        self.root.prepare(array, present)
        lengths = self.root.lengths + np.where(present, len(self.prefix), 0)
        offsets = np.concatenate(([0], np.cumsum(lengths)))
        out = np.zeros(int(offsets[-1]), np.uint8)
        starts = offsets[:-1][present]
        for k, byte in enumerate(self.prefix):
            out[starts + k] = byte
        self.root.write(out, offsets[:-1] + len(self.prefix))
        return offsets, out

    def encode(self, array: pa.Array) -> pa.Array:
        """One binary value per input value (a null input gives a null output)."""
        offsets, out = self.lengths_and_bytes(array)
        validity = None if not array.null_count else pa.array(_valid(array)).buffers()[1]
        return pa.LargeBinaryArray.from_buffers(pa.large_binary(), len(array),
                                                [validity, pa.py_buffer(offsets), pa.py_buffer(out)],
                                                null_count=array.null_count)
