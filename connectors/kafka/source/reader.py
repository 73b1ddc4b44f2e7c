"""``connectors.kafka`` read side: Spark's Kafka source on confluent-kafka, with Flink's semantics.

Streams keep their position in Spark's checkpoint as ``{"topic": {"partition": next_offset}}``;
a restarted query resumes from there and ignores ``startingOffsets`` and any group offsets.
With ``kafka.group.id`` set, every committed micro-batch also commits its end offsets to that
group, only so that lag monitoring sees progress (Flink's commit.offsets.on.checkpoint).

Planning (offsets, partitions) runs on the driver with one long-lived consumer per query that
never joins a group; offset ranges are packed into tasks (:func:`~connectors.kafka.source.offsets.pack`)
and each Spark task reads its ranges with one consumer of its own
(:mod:`connectors.kafka.source.split_reader`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.types import StructType

from connectors.core.arrow import Projection
from connectors.core.spark_compat import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from connectors.kafka import FORMAT
from connectors.kafka.source.client import BrokerClient, KafkaSourceError
from connectors.kafka.source.offsets import (
    SPLIT,
    START,
    Offsets,
    TaskRanges,
    data_loss_handler,
    from_json,
    pack,
    plan,
    rate_limit,
    split,
    to_json,
)
from connectors.kafka.source.options import EARLIEST, LATEST, KafkaSourceOptions
from connectors.kafka.source.split_reader import RangeReader, schema_for

if TYPE_CHECKING:
    from connectors.kafka.source.formats import RecordDecoder


def schema(options) -> StructType:
    config = KafkaSourceOptions.from_options(options)
    return _schema(config, _decoder(config))


def _decoder(config: KafkaSourceOptions) -> RecordDecoder | None:
    """None while key and value stay raw bytes; only otherwise are the Avro modules imported:
    Spark starts a fresh Python process for every stream query's reader, and importing them
    there delayed every query's first trigger (docs/kafka-source.md, *Query start*)."""
    if not config.avro_columns():
        return None
    from connectors.kafka.source.formats import RecordDecoder  # noqa: PLC0415

    return RecordDecoder.of(config)


def _schema(config: KafkaSourceOptions, decoder: RecordDecoder | None) -> StructType:
    return schema_for(config) if decoder is None else decoder.schema(schema_for(config))


def reader(options, schema: StructType) -> DataSourceReader:
    config = KafkaSourceOptions.from_options(options).for_batch()
    decoder = _decoder(config)
    return KafkaBatchReader(config, decoder, Projection.of(FORMAT, _schema(config, decoder), schema))


def stream_reader(options, schema: StructType) -> DataSourceStreamReader:
    config = KafkaSourceOptions.from_options(options).for_stream()
    decoder = _decoder(config)
    return KafkaStreamReader(config, decoder, Projection.of(FORMAT, _schema(config, decoder), schema))


class _PlansRanges:
    """Turns start/end offsets into checked, split offset ranges packed into tasks, and reads a task."""

    options: KafkaSourceOptions
    decoder: RecordDecoder | None  # avro-confluent key/value: raw batches -> decoded ones
    projection: Projection  # the columns of a schema the user gave, or all

    def _tasks(self, broker: BrokerClient, start: Offsets, end: Offsets,
               layout: dict | None = None) -> list[TaskRanges]:
        """``layout``: the split recorded in a stream's end offset; by default the options'."""
        earliest = broker.earliest(end.keys())
        ranges = plan(start, end, earliest, data_loss_handler(self.options.fail_on_data_loss))
        layout = layout or self._layout()
        low, high = layout["minPartitions"], layout["maxRecordsPerPartition"]
        # An end offset of a version before packing has no target: its batch had one task per range.
        return pack(split(ranges, low, high), layout.get("targetRecordsPerPartition", 1), low, high)

    def _layout(self) -> dict:
        return {"minPartitions": self.options.min_partitions,
                "maxRecordsPerPartition": self.options.max_records_per_partition,
                "targetRecordsPerPartition": self.options.target_records_per_partition}  # fmt: skip

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, TaskRanges):  # Spark's stand-in when nothing was planned
            return iter(())
        batches = iter(RangeReader(self.options, *partition.ranges, columns=self._raw_columns()))
        batches = batches if self.decoder is None else map(self.decoder, batches)
        return batches if self.projection.names is None else map(self.projection, batches)

    def _raw_columns(self) -> frozenset[str] | None:
        """The Kafka columns a task builds: all, or those a given schema selects and the decoder reads."""
        if self.projection.names is None:
            return None
        return frozenset(self.projection.names) | (self.decoder.reads if self.decoder is not None else frozenset())


class KafkaBatchReader(_PlansRanges, DataSourceReader):
    """``spark.read``: from ``startingOffsets`` (default earliest) to ``endingOffsets`` (default latest)."""

    def __init__(self, options: KafkaSourceOptions, decoder: RecordDecoder | None = None,
                 projection: Projection = Projection()):
        self.options, self.decoder, self.projection = options, decoder, projection

    def partitions(self) -> Sequence[InputPartition]:
        broker = BrokerClient(self.options)
        try:
            tps = broker.starting_partitions()
            strategy = self.options.starting_offsets_by_timestamp_strategy
            kind, spec = self.options.starting(EARLIEST)
            starting = _option_name("starting", kind)
            end_kind, end_spec = self.options.ending()
            ending = _option_name("ending", end_kind)
            _check_timestamps(tps, (kind, spec, starting), (end_kind, end_spec, ending))
            start = broker.resolve(tps, kind, spec, starting, strategy)
            end = broker.resolve(tps, end_kind, end_spec, ending, "latest")
            # Both ends come from the options, resolved now: a start past the end is a wrong option,
            # not data loss (which failOnDataLoss=false would turn into a read from the earliest
            # offset). Spark's batch read fails the same way.
            for (topic, partition), offset in sorted(start.items()):
                if offset > end[topic, partition]:
                    raise KafkaSourceError(
                        f"{FORMAT}: topic {topic} partition {partition}: the start offset {offset} (option "
                        f"'{starting}') is after the end offset {end[topic, partition]} (option '{ending}')")
            return self._tasks(broker, start, end)
        finally:
            broker.close()


class KafkaStreamReader(_PlansRanges, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream``: micro-batches of offset ranges, admission control, AvailableNow."""

    def __init__(self, options: KafkaSourceOptions, decoder: RecordDecoder | None = None,
                 projection: Projection = Projection()):
        self.options, self.decoder, self.projection = options, decoder, projection
        self._broker: BrokerClient | None = None
        self._latest: tuple[float, Offsets] | None = None  # (monotonic time fetched, offsets)
        self._target: Offsets | None = None  # Trigger.AvailableNow: read up to here, then stop
        self._last_trigger = -math.inf  # when minOffsetsPerTrigger last let a batch run: the first always runs
        self._group_committed: Offsets | None = None
        self._gone: set[tuple[str, int]] = set()  # partitions planning found deleted: no longer carried

    def __getstate__(self) -> dict:
        # read() runs on an unpickled copy in an executor: no client, no driver-side caches.
        return {"options": self.options, "decoder": self.decoder, "projection": self.projection}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["options"], state["decoder"], state["projection"])

    @property
    def broker(self) -> BrokerClient:
        if self._broker is None:
            self._broker = BrokerClient(self.options)
        return self._broker

    def initialOffset(self) -> dict:
        tps = self.broker.starting_partitions()
        kind, spec = self.options.starting(LATEST)
        start = self.broker.resolve(tps, kind, spec, _option_name("starting", kind),
                                    self.options.starting_offsets_by_timestamp_strategy)
        if kind == "offsets" and isinstance(spec, dict):
            self._check_given_starts(start)
        return to_json(start)

    def _check_given_starts(self, start: Offsets) -> None:
        """A ``startingOffsets`` offset past its partition's latest offset fails the query at its
        start, whatever ``failOnDataLoss``: offsets never written cannot have been lost. The first
        micro-batch took it for data loss (as Spark's does), naming no option, and with
        failOnDataLoss=false read from the earliest offset instead."""
        latest = self.broker.latest(start.keys())
        past = [f"offset {offset} of topic {topic} partition {partition} is past its latest offset "
                f"{latest[topic, partition]}" for (topic, partition), offset in sorted(start.items())
                if offset > latest[topic, partition]]  # fmt: skip
        if past:
            raise self.options.error("startingOffsets", "; ".join(past) + " (-1 starts at the latest offset)")

    def latest(self, fresh: bool = False) -> Offsets:
        """Latest offsets of every partition read now; reused for ``fetchOffset.minIntervalMs``
        because Spark asks every ~10 ms when idle."""
        now = time.monotonic()
        if fresh or self._latest is None or now - self._latest[0] >= self.options.fetch_offset_min_interval.total_seconds():
            self._latest = (now, self.broker.latest(self.broker.partitions()))
        return self._latest[1]

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_offsets_per_trigger
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin, latest = from_json(start), self.latest()
        # Spark plans the next batch only once the previous one is complete, so ``start`` has
        # been processed: commit it now; Spark's own commit() call comes a batch later.
        self._commit_to_group(begin)
        if self._target is not None:  # nothing that arrived after the AvailableNow target
            latest = {tp: min(offset, self._target[tp]) for tp, offset in latest.items() if tp in self._target}
        # A partition read so far stays in the end offset (Spark logs it) even if this listing left
        # it out: dropped on one glitchy metadata answer, every replay of the batch reported it
        # deleted and the next batch read it again from its earliest offset. Planning decides.
        latest = {**{tp: offset for tp, offset in begin.items() if tp not in self._gone}, **latest}
        if self._delay(begin, latest):
            latest = begin
        elif isinstance(limit, ReadMaxRows):
            new = [tp for tp in latest if tp not in begin]
            base = {**self.broker.earliest(new), **begin} if new else begin
            # A start past the end (topic recreated) counts as no backlog; partitions() reports it.
            latest = rate_limit({tp: min(base[tp], end) for tp, end in latest.items()}, latest, limit.max_rows)
        # Spark runs a query's first batch even if empty, and asks initialOffset() again to replay
        # it: its start goes into its end offset. Only end offsets have SPLIT (an offset of an
        # older version is taken for an initial one: at most one empty batch after an upgrade).
        first = SPLIT not in start
        if latest == begin and not first:
            return start  # no new batch, even if the split options changed
        end = {**to_json(latest), SPLIT: self._layout()}
        if first:
            end[START] = to_json(begin)
        return end

    def _delay(self, begin: Offsets, latest: Offsets) -> bool:
        """``minOffsetsPerTrigger``: hold the batch back until enough offsets or ``maxTriggerDelay``."""
        minimum = self.options.min_offsets_per_trigger
        if minimum is None or self._target is not None:
            return False
        now = time.monotonic()
        if now - self._last_trigger < self.options.max_trigger_delay.total_seconds():
            if sum(max(0, end - begin.get(tp, 0)) for tp, end in latest.items()) < minimum:
                return True
        self._last_trigger = now
        return False

    def reportLatestOffset(self) -> dict:
        return to_json(self.latest())

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = dict(self.latest(fresh=True))

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        # Offsets of older versions have neither key: planned with today's options and start.
        begin, until = from_json(end.get(START, start)), from_json(end)
        # A partition latestOffset carried forward (or any, on a replay) may be gone: listed again,
        # one that is not is left out of the end, and plan() reports it deleted.
        unlisted = until.keys() - (self._latest[1].keys() if self._latest else set())
        self._gone = unlisted - set(self.broker.partitions()) if unlisted else set()
        until = {tp: offset for tp, offset in until.items() if tp not in self._gone}
        return self._tasks(self.broker, begin, until, end.get(SPLIT))

    def commit(self, end: dict) -> None:
        self._commit_to_group(from_json(end))

    def _commit_to_group(self, processed: Offsets) -> None:
        """With ``kafka.group.id``: commit processed offsets for monitoring, once per new position."""
        if self.options.group_id is None or processed == self._group_committed:
            return
        self.broker.commit(processed)
        self._group_committed = processed

    def stop(self) -> None:
        if self._broker is not None:
            self._broker.close()


def _check_timestamps(tps: list[tuple[str, int]], start: tuple, end: tuple) -> None:
    """``startingOffsetsByTimestamp`` and ``endingOffsetsByTimestamp`` both given: a partition's
    start timestamp after its end timestamp fails the read, naming both options, before either is
    resolved, as Spark's does, also where both resolve to one offset (the latest of a partition
    without records there) and the read would be empty. Spark checks only these two options
    against each other: with ``startingTimestamp`` or ``endingTimestamp`` on either side its read
    goes on (empty, or failing on the resolved offsets), and so does ours."""
    (start_kind, start_spec, starting), (end_kind, end_spec, ending) = start, end
    if start_kind != "timestamps" or end_kind != "timestamps":
        return
    for topic, partition in tps:
        first, last = start_spec.get(topic, {}).get(partition), end_spec.get(topic, {}).get(partition)
        if first is not None and last is not None and first > last:
            raise KafkaSourceError(
                f"{FORMAT}: topic {topic} partition {partition}: the start timestamp {first} (option '{starting}') "
                f"is after the end timestamp {last} (option '{ending}')")


def _option_name(side: str, kind: str) -> str:
    """The option a start/end spec came from, for errors."""
    return {"timestamp": f"{side}Timestamp", "timestamps": f"{side}OffsetsByTimestamp"}.get(kind, f"{side}Offsets")
