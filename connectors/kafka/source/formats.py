"""``keyFormat`` / ``valueFormat`` ``avro-confluent`` on the read side: bytes -> decoded structs.

The reader schema is fixed when the query starts (the subject's latest or pinned version, or
``valueSchema``) and gives the column's Spark type. In the tasks, each batch of raw records is
grouped by the schema id in its wire header; every group is decoded at once
(:class:`connectors.core.avro.Decoder`) and resolved to the reader schema. A record that cannot
be decoded (short, wrong magic byte, unknown id, incompatible schema, bad body) fails the task
under ``mode=FAILFAST`` with its topic, partition, offset and schema id, or, under PERMISSIVE,
gets a null struct and its raw bytes in the corrupt-record column.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import BinaryType, StructField, StructType

from connectors.core import avro
from connectors.core.options import OptionError
from connectors.kafka import FORMAT, registry
from connectors.kafka.registry import WIRE_HEADER, RegistryError

FAILFAST, PERMISSIVE = "FAILFAST", "PERMISSIVE"


class DecodeError(ValueError):
    """FAILFAST: a record whose key or value cannot be decoded."""


@dataclasses.dataclass
class AvroColumn:
    """One column read as avro-confluent: its reader schema (JSON) and where corrupt bytes go."""

    name: str  # "key" or "value"
    reader_json: str
    corrupt_column: str | None  # PERMISSIVE only
    union_prefix: str | None = None  # enableStableIdentifiersForUnionType's prefix

    @functools.cached_property
    def reader(self) -> Any:
        return avro.parse(self.reader_json)

    @functools.cached_property
    def spark_type(self):
        return avro.read_type(self.reader, self.union_prefix)

    @functools.cached_property
    def decoded_type(self) -> pa.DataType:
        """The type decoded to: union members named member0, ..., viewed as :attr:`arrow_type` after."""
        return avro.arrow_type(self.reader)

    @functools.cached_property
    def arrow_type(self) -> pa.DataType:
        return avro.renamed(self.decoded_type, avro.arrow_type(self.reader, self.union_prefix))


def _topic_of(options) -> str | None:
    if options.subscribe is not None and len(options.subscribe) == 1:
        return options.subscribe[0]
    if options.assign is not None and len(options.assign) == 1:
        return next(iter(options.assign))
    return None


def _reader_schema(options, column: str) -> str:
    """At query start: the column's reader schema, from the option or from the registry."""
    given = options.column_option(column, "schema")
    if given is not None:
        return given
    subject = options.column_option(column, "subject")
    if subject is None:
        topic = _topic_of(options)
        if topic is None:
            raise OptionError(FORMAT, f"{column}Subject", None,
                              f"required with {column}Format avro-confluent when reading several topics or a "
                              f"pattern (or give {column}Schema)")
        subject = f"{topic}-{column}"
    try:
        _, schema_json = registry.subject_version(options.registry_settings(), subject,
                                                  options.column_option(column, "schema_version"))
    except RegistryError as exc:
        raise OptionError(FORMAT, f"{column}Subject", subject, str(exc)) from None
    return schema_json


class RecordDecoder:
    """Turns the raw batches of the source into batches with decoded key/value columns."""

    def __init__(self, options, columns: tuple[AvroColumn, ...]):
        self.settings = options.registry_settings()
        self.mode = options.mode
        self.columns = columns
        self._decoders: dict[tuple[str, int], avro.Decoder] = {}

    @classmethod
    def of(cls, options) -> RecordDecoder:
        """On the driver, at query start, when the key or the value is avro-confluent."""
        names = options.avro_columns()
        corrupt = options.column_name_of_corrupt_record if options.mode == PERMISSIVE else None
        columns = []
        for name in names:
            reader_json = _reader_schema(options, name)
            try:
                avro.spark_type(avro.parse(reader_json), options.union_prefix)
            except avro.AvroError as exc:
                raise OptionError(FORMAT, f"{name}Format", "avro-confluent", f"the {name} schema: {exc}") from None
            column_corrupt = None if corrupt is None else corrupt if name == "value" else f"{corrupt}_key"
            columns.append(AvroColumn(name, reader_json, column_corrupt, options.union_prefix))
        return cls(options, tuple(columns))

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_decoders": {}}

    @property
    def reads(self) -> frozenset[str]:
        """The raw columns a batch must have: those decoded, and where a bad record is (FAILFAST)."""
        return frozenset({"topic", "partition", "offset", *(c.name for c in self.columns)})

    def schema(self, base: StructType) -> StructType:
        """The source's schema with the decoded columns (and the corrupt-record columns)."""
        types = {c.name: c.spark_type for c in self.columns}
        fields = [StructField(f.name, types.get(f.name, f.dataType), True) for f in base.fields]
        fields += [StructField(c.corrupt_column, BinaryType(), True) for c in self.columns if c.corrupt_column]
        return StructType(fields)

    def __call__(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        names, arrays = list(batch.schema.names), list(batch.columns)
        corrupt = []
        for column in self.columns:
            index = names.index(column.name)
            raw = batch.column(index)
            decoded, bad = self._decode(column, raw)
            if bad and self.mode == FAILFAST:
                row, (schema_id, reason) = next(iter(sorted(bad.items())))
                raise DecodeError(
                    f"{FORMAT}: cannot decode the {column.name} of the record at topic {batch.column('topic')[row]} "
                    f"partition {batch.column('partition')[row]} offset {batch.column('offset')[row]}"
                    f"{'' if schema_id is None else f' (schema id {schema_id})'}: {reason}. "
                    f"{len(bad)} record(s) of this batch fail; mode=PERMISSIVE reads them as null")
            arrays[index] = decoded.view(column.arrow_type)
            if column.corrupt_column:
                mask = np.zeros(len(raw), bool)
                mask[list(bad)] = True
                corrupt.append((column.corrupt_column, pc.if_else(pa.array(mask), raw, pa.nulls(len(raw), raw.type))))
        for name, array in corrupt:
            names.append(name)
            arrays.append(array.cast(pa.binary()))
        return pa.RecordBatch.from_arrays(arrays, names=names)

    def _decoder(self, column: AvroColumn, schema_id: int) -> avro.Decoder:
        key = (column.name, schema_id)
        if key not in self._decoders:
            writer_json = registry.schema_by_id(self.settings, schema_id)
            self._decoders[key] = avro.Decoder(writer_json, column.reader, column.decoded_type)
        return self._decoders[key]

    def _decode(self, column: AvroColumn, raw: pa.Array) -> tuple[pa.Array, dict[int, tuple[int | None, str]]]:
        """Decoded values (null where bad) and ``{row: (schema id, reason)}`` of the bad rows."""
        target = column.decoded_type
        n = len(raw)
        raw = raw.cast(pa.binary())
        offsets = np.frombuffer(raw.buffers()[1], np.int32)[raw.offset:raw.offset + n + 1].astype(np.int64)
        data = np.frombuffer(raw.buffers()[2] or b"", np.uint8)
        valid = np.asarray(raw.is_valid().to_numpy(zero_copy_only=False), bool)
        lengths = offsets[1:] - offsets[:-1]
        framed = valid & (lengths >= WIRE_HEADER)
        if n and framed.all():  # as a rule: every header at once, in Arrow's C++
            headers = pc.binary_slice(raw, 0, WIRE_HEADER).buffers()[2]
            header = np.frombuffer(headers, np.uint8, n * WIRE_HEADER).reshape(n, WIRE_HEADER)
        else:
            starts = np.where(framed, offsets[:-1], 0)
            header = data[starts[:, None] + np.arange(WIRE_HEADER)] if len(data) else np.zeros((n, WIRE_HEADER), np.uint8)
        ok = framed & (header[:, 0] == 0)
        ids = np.ascontiguousarray(header[:, 1:]).view(">i4").ravel()  # a signed int32, as Java writes it
        bad: dict[int, tuple[int | None, str]] = {}
        for row in np.flatnonzero(valid & ~ok):
            bad[int(row)] = (None, f"not in the Schema Registry wire format (magic byte 0, 4-byte schema id): "
                                   f"{lengths[row]} bytes starting {bytes(data[offsets[row]:offsets[row] + 5])!r}")
        pieces, placed = [], []
        for schema_id in np.unique(ids[ok]):
            rows = np.flatnonzero(ok & (ids == schema_id))
            try:
                decoder = self._decoder(column, int(schema_id))
            except (RegistryError, avro.AvroError) as exc:
                bad.update((int(r), (int(schema_id), str(exc))) for r in rows)
                continue
            # binary_slice, in Arrow's C++, drops the headers some 30 times faster than a numpy byte mask.
            framed_rows = raw if len(rows) == n else raw.take(pa.array(rows))
            bodies = pc.binary_slice(framed_rows, WIRE_HEADER, int(lengths[rows].max()))
            values, failed = decoder.decode(bodies)
            bad.update((int(rows[i]), (int(schema_id), reason)) for i, reason in failed.items())
            pieces.append(values)
            placed.append(rows)
        if len(placed) == 1 and len(placed[0]) == n:  # every record in one group, in order
            return pieces[0].cast(target), bad
        rest = np.setdiff1d(np.arange(n), np.concatenate(placed) if placed else [], assume_unique=True)
        pieces.append(pa.nulls(len(rest), target))
        placed.append(rest)
        order = np.argsort(np.concatenate(placed), kind="stable")
        return pa.concat_arrays([p.cast(target) for p in pieces]).take(pa.array(order)), bad
