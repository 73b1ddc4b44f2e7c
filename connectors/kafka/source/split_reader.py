"""Executor side of the Kafka source: the offset ranges of one task -> Arrow record batches.

One consumer per task, opened inside the task (never at planning time, never pickled) or kept
from an earlier task of this worker that ended where this one starts (``consumerCacheSize``),
set to the first offset of every range of the task (librdkafka fetches the partitions in parallel),
and read until each partition's position passes its range's end; a finished partition is paused,
which also drops what was fetched past its end. Ending on the *position* rather than on seeing
the last offset matters: under read_committed, transaction markers and aborted records occupy
offsets that are never delivered, and compaction leaves gaps, so the last offset of a range may
never arrive.
"""

from __future__ import annotations

import functools
import itertools
import time
from collections.abc import Iterator
from typing import Any, cast

import numpy as np
import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, KafkaException, Message
from confluent_kafka import TopicPartition as KafkaTopicPartition
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from connectors.core.idle import IdleClients
from connectors.kafka import FORMAT
from connectors.kafka.source.client import consumer_config
from connectors.kafka.source.offsets import OffsetRange, data_loss_handler
from connectors.kafka.source.options import LATEST_OFFSET, KafkaSourceOptions

_HEADERS = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
SCHEMA = StructType([
    StructField("key", BinaryType()),
    StructField("value", BinaryType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
    StructField("timestamp", TimestampType()),
    StructField("timestampType", IntegerType()),
])
SCHEMA_WITH_HEADERS = StructType([*SCHEMA.fields, StructField("headers", ArrayType(_HEADERS))])

_ARROW_HEADERS = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
_ARROW_FIELDS = [
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", pa.timestamp("us", tz="UTC")),
    pa.field("timestampType", pa.int32()),
]
_ARROW_SCHEMA = pa.schema(_ARROW_FIELDS)
_ARROW_SCHEMA_WITH_HEADERS = pa.schema([*_ARROW_FIELDS, pa.field("headers", _ARROW_HEADERS)])

_ROWS_PER_BATCH = 50_000  # or maxBytesPerBatch
_MESSAGES_PER_CONSUME = 50_000
# How many messages a consume() asks for (RangeReader._wanted): all that the task's open ranges
# need while the records delivered past their range's end average at most this many per closed
# range;
_PAST_END_PER_RANGE = 64
# until a range has closed (none past an end seen yet), what this many open ranges need, so that
# a deep backlog behind every range costs one small call to find out;
_FIRST_RANGES = 16
# past that average, the rest of the range at the head of librdkafka's queue, but for a range
# already partly delivered never fewer than this: its last offsets may be markers or gaps (never
# delivered), which must not slow the others to one record per call.
_FEWEST_PER_CONSUME = 64
# Held messages of a range waiting for its turn: at least this many bytes before it is paused.
_HELD_BYTES_MIN = 1 << 16
_CONSUME_WAIT = 0.1  # seconds; how long a consume() waits for a first message when none is queued
# librdkafka's timestamp types (0 none, 1 create, 2 log append) -> Kafka's ids as Spark shows them.
_TIMESTAMP_TYPE = np.array([-1, 0, 1], dtype=np.int32)

IDLE = IdleClients()  # this worker's consumers kept between tasks (consumerCacheSize)


def schema_for(options: KafkaSourceOptions) -> StructType:
    return SCHEMA_WITH_HEADERS if options.include_headers else SCHEMA


def to_arrow(messages: list[Message], topic: str | None, headers: bool,
             columns: frozenset[str] | None = None) -> pa.RecordBatch:
    """Data messages as a RecordBatch of the source's schema, or of its ``columns`` only (a
    schema the user gave selects some: the others are never built); ``topic``: the one topic of
    them all, or None when they come from several.

    Columns are pulled with ``map`` over the unbound Message methods: the loops stay in C, which
    makes this several times faster than a Python loop per record.
    """
    schema = _ARROW_SCHEMA_WITH_HEADERS if headers else _ARROW_SCHEMA
    if columns is not None:
        schema = pa.schema([field for field in schema if field.name in columns])
    count = len(messages)
    stamps = list(map(Message.timestamp, messages)) if {"timestamp", "timestampType"} & set(schema.names) else []
    build = {
        "key": lambda: _binary(list(map(Message.key, messages))),
        "value": lambda: _binary(list(map(Message.value, messages))),
        "topic": lambda: pa.array(list(map(Message.topic, messages)), pa.string()) if topic is None
        else pa.DictionaryArray.from_arrays(pa.array(np.zeros(count, np.int8)), [topic]).cast(pa.string()),
        "partition": lambda: pa.array(np.fromiter(map(Message.partition, messages), np.int32, count)),
        "offset": lambda: pa.array(np.fromiter(map(Message.offset, messages), np.int64, count)),
        "timestamp": lambda: pa.array(np.fromiter((ms for _, ms in stamps), np.int64, count) * 1000,
                                      pa.timestamp("us", tz="UTC")),
        "timestampType": lambda: pa.array(_TIMESTAMP_TYPE[np.fromiter((kind for kind, _ in stamps), np.int32, count)]),
        # Spark gives null, not an empty list, for a record without headers.
        "headers": lambda: pa.array([[{"key": k, "value": v} for k, v in h] if (h := m.headers()) else None
                                     for m in messages], _ARROW_HEADERS),
    }  # fmt: skip
    return pa.RecordBatch.from_arrays([build[name]() for name in schema.names], schema=schema)


def _sizes(messages: list[Message]) -> np.ndarray:
    """Key and value bytes of each message (len() of a Message is its value's)."""
    sizes = np.fromiter(map(len, messages), np.int64, len(messages))
    keys = list(map(Message.key, messages))
    keyed = np.fromiter(map(bool, keys), np.bool_, len(keys))
    sizes[keyed] += np.fromiter(map(len, filter(None, keys)), np.int64, int(keyed.sum()))
    return sizes


class _Pending:
    """Messages waiting to go to Spark as one Arrow batch. A batch is full at ``_ROWS_PER_BATCH``
    messages or once its keys and values reach ``max_bytes`` (it holds less than one message more):
    a task's memory stays bounded whatever the message size."""

    def __init__(self, max_bytes: int):
        self.max_bytes, self.messages, self.bytes = max_bytes, [], 0
        self.read_count = self.read_bytes = 0

    def wanted(self, most: int) -> int:
        """How many messages to consume next: ``most``, or fewer if that many would overfill the
        batch at the mean size so far (what does not fit is held until the next batch)."""
        if not self.read_bytes:
            return most
        return min(most, max(1, (self.max_bytes - self.bytes) * self.read_count // self.read_bytes))

    def add(self, data: list[Message]) -> Iterator[list[Message]]:
        """Add ``data``; yields each batch as it fills up."""
        if not data:
            return
        ends = np.cumsum(_sizes(data))  # bytes of data up to and including each message
        self.read_count, self.read_bytes = self.read_count + len(data), self.read_bytes + int(ends[-1])
        start = 0
        while start < len(data):
            before = int(ends[start - 1]) if start else 0
            reaching = int(np.searchsorted(ends, before + self.max_bytes - self.bytes))  # the message filling it
            stop = min(reaching + 1, start + _ROWS_PER_BATCH - len(self.messages), len(data))
            self.messages.extend(data[start:stop])
            self.bytes += int(ends[stop - 1]) - before
            start = stop
            if self.bytes >= self.max_bytes or len(self.messages) >= _ROWS_PER_BATCH:
                yield self.take()

    def take(self) -> list[Message]:
        messages, self.messages, self.bytes = self.messages, [], 0
        return messages


def _consume(consumer: Consumer, most: int) -> list[Message]:
    """Up to ``most`` messages: those queued now, or, with none queued, those of the first fetch
    to arrive within ``_CONSUME_WAIT``. ``consume(n, timeout)`` alone waits out its whole timeout
    unless n messages come, which it did every time fewer were left: at a topic's end, at the
    last ranges of a task (docs/kafka-source.md, Speed)."""
    messages = consumer.consume(most, timeout=0)
    if not messages:
        messages = consumer.consume(1, timeout=_CONSUME_WAIT)
        if messages and most > 1:
            messages += consumer.consume(most - 1, timeout=0)
    return messages


def _resume(consumer: Consumer, partitions: list[KafkaTopicPartition]) -> None:
    """Resume paused partitions at the given offsets. resume() alone leaves the next fetch to
    librdkafka's fetcher timer when nothing else is being fetched: about a second; a seek
    fetches at once."""
    consumer.resume(partitions)
    for partition in partitions:
        consumer.seek(partition)


def _binary(values: list[bytes | None]) -> pa.Array:
    # pyarrow converts a list of bytes much faster when it infers the type than when told
    # pa.binary(); only an all-null list infers to the null type.
    array = pa.array(values)
    return array if array.type == pa.binary() else array.cast(pa.binary())


class RangeReader:
    """Reads offset ranges, at most one per Kafka partition (a task's), with one consumer;
    iterate to get RecordBatches (of ``columns`` only, when given)."""

    def __init__(self, options: KafkaSourceOptions, *ranges: OffsetRange, columns: frozenset[str] | None = None):
        self.options, self.ranges, self.columns = options, [r for r in ranges if r.size > 0], columns
        self.on_loss = data_loss_handler(options.fail_on_data_loss)
        topics = {r.topic for r in self.ranges}
        self.topic = topics.pop() if len(topics) == 1 else None
        # Messages find their range by partition alone when there is one topic: no topic string per message.
        self._key = Message.partition if self.topic else lambda m: (m.topic(), m.partition())
        self._slot = {(r.partition if self.topic else (r.topic, r.partition)): i for i, r in enumerate(self.ranges)}
        self.ends = np.array([r.end for r in self.ranges], np.int64)
        self.starts = np.array([r.start for r in self.ranges], np.int64)
        self.positions = self.starts.copy()  # the next offset of each range
        # Delivered since assign(): only then is position() trusted (a kept consumer's is the last task's till then).
        self._heard = np.zeros(len(self.ranges), np.bool_)
        self._past_end = 0  # records delivered at or past their range's end, dropped
        self._by_head = False  # see _wanted

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        if not self.ranges:
            return
        config = consumer_config(self.options)
        kept = cast("Consumer | None", IDLE.take(self._cache_key(config, self.starts)))
        consumer = kept or Consumer(config)
        try:
            if kept is None:
                consumer.assign([self._partition(slot, int(start)) for slot, start in enumerate(self.starts)])
            else:
                self._go_on(consumer)
            yield from self._read(consumer)
        except BaseException:  # a failed or abandoned read leaves its consumer in an unknown state
            consumer.close()
            raise
        # every partition is paused now (done), so a kept consumer fetches nothing while idle
        IDLE.keep(self._cache_key(config, self.ends), consumer, self.options.consumer_cache_size)

    def _cache_key(self, config: dict[str, Any], offsets: np.ndarray) -> tuple:
        """Kept consumers are found by settings (but the generated group.id), partitions and the
        offsets they go on from: the next micro-batch's task usually starts where this one ended."""
        settings = tuple(sorted((k, v) for k, v in config.items() if k != "group.id"))
        return settings, tuple(sorted((r.topic, r.partition, int(o)) for r, o in zip(self.ranges, offsets)))

    def _go_on(self, consumer: Consumer) -> None:
        """A kept consumer, its partitions all paused where the last task ended, delivers from
        this task's starts (a task that took messages past an end dropped them). One assign()
        sets every start at once, cheaper than a seek per partition over many partitions
        (docs/kafka-source.md); it leaves paused partitions paused, hence the resume() first."""
        starts = [self._partition(slot, int(start)) for slot, start in enumerate(self.starts)]
        consumer.resume(starts)
        consumer.assign(starts)

    def _read(self, consumer: Consumer) -> Iterator[pa.RecordBatch]:
        """Range by range, each in offset order: the exactly-once sinks skip what an earlier
        attempt of the task committed by counting its rows, so every attempt must hand them over
        in the same order. The later ranges fetch meanwhile; what they deliver is held here, and
        a range holding more than its share of ``maxBytesPerBatch`` is paused until its turn."""
        pending = _Pending(self.options.max_bytes_per_batch)
        # map() drops each batch's messages once converted, before Spark takes the batch
        convert = functools.partial(to_arrow, topic=self.topic, headers=self.options.include_headers,
                                    columns=self.columns)
        share = max(self.options.max_bytes_per_batch // len(self.ranges), _HELD_BYTES_MIN)
        held: list[list[Message]] = [[] for _ in self.ranges]
        held_bytes = np.zeros(len(self.ranges), np.int64)
        waiting = np.zeros(len(self.ranges), np.bool_)  # paused until its turn
        reading, last_progress = self.positions < self.ends, time.monotonic()
        head: int | None = None  # the range of the last message delivered
        for current in range(len(self.ranges)):
            if waiting[current]:
                _resume(consumer, consumer.position([self._partition(current)]))
                waiting[current] = False
            yield from map(convert, pending.add(held[current]))
            held[current] = []
            while reading[current]:
                most = pending.wanted(min(self._wanted(head, reading), _MESSAGES_PER_CONSUME))
                messages = _consume(consumer, most)
                if messages:
                    last_progress = time.monotonic()
                errors = list(map(Message.error, messages))
                events = [(m, e) for m, e in zip(messages, errors) if e is not None] if any(errors) else []
                data = [m for m, e in zip(messages, errors) if e is None] if events else messages
                head = self._slot[self._key(data[-1])] if data else None
                yield from map(convert, pending.add(self._hold_others(current, data, held, held_bytes)))
                for message, error in events:
                    slot = self._slot[self._key(message)]
                    self._heard[slot] = True
                    if error.code() == KafkaError._PARTITION_EOF:
                        end_of_partition = self._at_end_of_partition(consumer, slot, message.offset())
                        self.positions[slot] = max(self.positions[slot], end_of_partition)
                    elif error.code() == KafkaError._AUTO_OFFSET_RESET:
                        self.positions[slot] = self._restart_after_loss(consumer, slot)
                        waiting[slot] = False  # assigned again: fetching
                    else:
                        raise KafkaException(error)
                # Markers and aborted or compacted records advance a position without a message. Asking
                # costs per open partition: only when the queue ran dry or that is no more than a call's messages.
                if len(messages) < most or np.count_nonzero(reading) <= len(messages):
                    self._advance(consumer, reading)
                done = reading & (self.positions >= self.ends)
                full = reading & ~done & ~waiting & (held_bytes > share)
                full[current] = False
                if full.any():
                    consumer.pause([self._partition(slot) for slot in np.flatnonzero(full)])
                    waiting |= full
                if done.any():
                    consumer.pause([self._partition(slot) for slot in np.flatnonzero(done)])
                    reading &= ~done
                elif time.monotonic() - last_progress > self.options.poll_timeout.total_seconds():
                    raise TimeoutError(self._stuck(reading))
        if pending.messages:
            yield convert(pending.take())

    def _wanted(self, head: int | None, reading: np.ndarray) -> int:
        """How many messages the next consume() asks for. librdkafka queues each partition's
        fetch whole, records past the range's end included; they are dropped inside librdkafka
        when the range's partition is paused, a round trip to librdkafka's thread.

        While few records come past the ends, one call asks for what all open ranges need, and
        one pause() closes every range it finished: many small ranges cost a few calls, not two
        per range. Once more than ``_PAST_END_PER_RANGE`` per closed range came (a deep backlog
        read in small triggers), making them into Python messages costs more than those calls:
        the queue's head is most likely the rest of the range that delivered last, or else a
        range not yet started, and asking for just that range's rest keeps the records past its
        end out of Python (docs/kafka-source.md, Many partitions)."""
        if not self._by_head:
            closed = len(self.ranges) - np.count_nonzero(reading)
            # Set for the rest of the task: asking by head keeps records past the ends out of
            # Python, so the average would sink below the threshold again and flip back.
            self._by_head = self._past_end > _PAST_END_PER_RANGE * closed
            if not self._by_head:
                needed = (self.ends - self.positions)[reading]
                return int(needed.sum() if closed else needed[:_FIRST_RANGES].sum())
        if head is not None and reading[head]:
            return max(int(self.ends[head] - self.positions[head]), _FEWEST_PER_CONSUME)
        fresh = reading & (self.positions == self.starts)
        if fresh.any():
            return int((self.ends - self.positions)[fresh].min())
        return max(int((self.ends - self.positions)[reading].min()), _FEWEST_PER_CONSUME)

    def _hold_others(self, current: int, data: list[Message], held: list[list[Message]],
                     held_bytes: np.ndarray) -> list[Message]:
        """The messages of range ``current`` (before its end); those of later ranges are added to
        ``held``; anything at or past its range's end closes that range and is dropped."""
        if not data:
            return data
        slots = np.fromiter(map(self._slot.__getitem__, map(self._key, data)), np.intp, len(data))
        offsets = np.fromiter(map(Message.offset, data), np.int64, len(data))
        ends = self.ends[slots]
        np.maximum.at(self.positions, slots, np.minimum(offsets + 1, ends))
        self._heard[slots] = True
        keep = offsets < ends
        self._past_end += len(data) - int(np.count_nonzero(keep))
        mine = keep & (slots == current)
        if mine.all():
            return data
        others = keep & ~mine
        if others.any():
            sizes = _sizes(data)
            for index in np.flatnonzero(others):
                held[slots[index]].append(data[index])
            np.add.at(held_bytes, slots[others], sizes[others])
        return list(itertools.compress(data, mine))

    def _partition(self, slot: int, *offset: int) -> KafkaTopicPartition:
        r = self.ranges[slot]
        return KafkaTopicPartition(r.topic, r.partition, *offset)

    def _advance(self, consumer: Consumer, reading: np.ndarray) -> None:
        slots = np.flatnonzero(reading & self._heard)
        positions = consumer.position([self._partition(slot) for slot in slots])
        self.positions[slots] = np.maximum(self.positions[slots], [p.offset for p in positions])  # -1001: none yet

    def _stuck(self, reading: np.ndarray) -> str:
        slots = np.flatnonzero(reading)
        r, seconds = self.ranges[slots[0]], self.options.poll_timeout.total_seconds()
        others = f" (and {len(slots) - 1} more partitions)" if len(slots) > 1 else ""
        return (f"{FORMAT}: topic {r.topic} partition {r.partition}{others} delivered nothing for {seconds:.0f} s "
                f"(kafkaConsumer.pollTimeoutMs) while reading offsets [{r.start}, {r.end}), stuck at "
                f"{self.positions[slots[0]]}")

    def _at_end_of_partition(self, consumer: Consumer, slot: int, end_of_partition: int) -> int:
        """The log ends at ``end_of_partition``: offsets up to there that were not delivered are
        markers or gaps; a range reaching beyond it lost records (topic truncated or recreated),
        unless the leader says otherwise: the end comes from the high watermark of the replica
        that served the fetch, which lags the leader's (planning's) after a leader change or when
        a follower serves it (``client.rack``); reading then goes on, within kafkaConsumer.pollTimeoutMs."""
        r = self.ranges[slot]
        if end_of_partition < r.end and self._latest(consumer, slot) < r.end:
            self.on_loss(f"topic {r.topic} partition {r.partition} ends at offset {end_of_partition}, but offsets up "
                         f"to {r.end} were planned (topic recreated?)")
            return r.end  # nothing more will come
        return end_of_partition

    def _latest(self, consumer: Consumer, slot: int) -> int:
        """The partition's latest offset by its leader now (the last stable one under read_committed)."""
        (answer,) = consumer.offsets_for_times([self._partition(slot, LATEST_OFFSET)], timeout=10)
        return answer.offset

    def _restart_after_loss(self, consumer: Consumer, slot: int) -> int:
        """The next offset was deleted (retention) after planning: report, then go on from earliest."""
        r, wanted = self.ranges[slot], int(self.positions[slot])
        earliest, _ = consumer.get_watermark_offsets(self._partition(slot), timeout=10)
        self.on_loss(f"topic {r.topic} partition {r.partition}: offset {wanted} was deleted; earliest available "
                     f"offset is {earliest}")
        if earliest >= r.end:
            return r.end
        # seek() fails on a partition in this error state; assigning it again restarts its fetches.
        consumer.incremental_unassign([self._partition(slot)])
        consumer.incremental_assign([self._partition(slot, earliest)])
        return earliest
