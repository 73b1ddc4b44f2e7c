"""``connectors.numbers``: Flink's NumberSequenceSource as a Spark data source.

Batch: the range ``start..end`` is split into ``numPartitions`` contiguous sub-sequences (the
first ``count % p`` one longer), each produced in order, so one partition gives one ordered
sequence. Streaming: the offset ``{"next": n, "numPartitions": p}`` is the next number to emit
and the split of the batch ending there; each micro-batch covers ``[start.next, end.next)`` (at
most ``rowsPerBatch`` numbers) split into the end offset's ``p`` ranges, so a restart from the
checkpoint resumes at the exact next number and replays a batch with the partitions of its first
run, whatever ``numPartitions`` or the host's cores are now (an offset of an older version
without ``numPartitions`` is split as the options say).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.types import LongType, StructField, StructType

from connectors.core.arrow import Projection
from connectors.core.spark_compat import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from connectors.numbers import FORMAT
from connectors.numbers.options import NumberSequenceOptions

SCHEMA = StructType([StructField("value", LongType(), nullable=False)])
_ARROW_SCHEMA = pa.schema([pa.field("value", pa.int64(), nullable=False)])
_ROWS_PER_ARROW_BATCH = 1 << 20


class NumberRange(InputPartition):
    """Numbers ``first`` .. ``last`` (inclusive), emitted in order."""

    def __init__(self, first: int, last: int):
        super().__init__((first, last))
        self.first, self.last = first, last


def split(first: int, last: int, parts: int) -> list[NumberRange]:
    """Flink's split: ``parts`` contiguous ranges, the first ``count % parts`` one longer."""
    count = last - first + 1
    if count <= 0:
        return []
    parts = min(parts, count)
    size, longer = divmod(count, parts)
    ranges, position = [], first
    for index in range(parts):
        length = size + (1 if index < longer else 0)
        ranges.append(NumberRange(position, position + length - 1))
        position += length
    return ranges


def read_range(partition: NumberRange) -> Iterator[pa.RecordBatch]:
    for low in range(partition.first, partition.last + 1, _ROWS_PER_ARROW_BATCH):
        high = min(partition.last + 1, low + _ROWS_PER_ARROW_BATCH)
        yield pa.RecordBatch.from_arrays([pa.array(np.arange(low, high, dtype=np.int64))], schema=_ARROW_SCHEMA)


def default_parallelism() -> int:
    # Planning runs in a Python worker without a SparkContext; cores of this host stand in for
    # Spark's default parallelism (they are equal in local mode).
    return os.cpu_count() or 1


def schema(options) -> StructType:
    NumberSequenceOptions.from_options(options)
    return SCHEMA


def reader(options, schema: StructType) -> DataSourceReader:
    return NumberSequenceReader(NumberSequenceOptions.from_options(options), Projection.of(FORMAT, SCHEMA, schema))


def stream_reader(options, schema: StructType) -> DataSourceStreamReader:
    return NumberSequenceStreamReader(NumberSequenceOptions.from_options(options), Projection.of(FORMAT, SCHEMA, schema))


class NumberSequenceReader(DataSourceReader):
    def __init__(self, config: NumberSequenceOptions, projection: Projection = Projection()):
        self.config, self.projection = config, projection

    def partitions(self) -> Sequence[InputPartition]:
        return split(self.config.start, self.config.end, self.config.num_partitions or default_parallelism())

    def read(self, partition: NumberRange) -> Iterator[pa.RecordBatch]:
        return map(self.projection, read_range(partition))


class NumberSequenceStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, config: NumberSequenceOptions, projection: Projection = Projection()):
        self.config, self.projection = config, projection

    def _offset(self, next_number: int) -> dict:
        return {"next": next_number, "numPartitions": self.config.num_partitions or default_parallelism()}

    def initialOffset(self) -> dict:
        return self._offset(self.config.start)

    def getDefaultReadLimit(self) -> ReadLimit:
        rows = self.config.rows_per_batch
        return ReadAllAvailable() if rows is None else ReadMaxRows(rows)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        end = self.config.end + 1  # the sequence is bounded: nothing past `end` ever appears
        if isinstance(limit, ReadMaxRows):
            end = min(end, start["next"] + limit.max_rows)
        if end <= start["next"]:
            return start  # no new batch, even if the split options changed
        return self._offset(end)

    def reportLatestOffset(self) -> dict:
        return {"next": self.config.end + 1}

    def prepareForTriggerAvailableNow(self) -> None:
        # Bounded by `end` already: every latestOffset() stays within the target.
        pass

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        parts = end.get("numPartitions") or self.config.num_partitions or default_parallelism()
        return split(start["next"], end["next"] - 1, parts)

    def read(self, partition: NumberRange) -> Iterator[pa.RecordBatch]:
        return map(self.projection, read_range(partition))
