"""connectors.kafka read side against fake consumers: what a glitchy metadata answer, a kept
consumer's stale position or a lagging replica's end of partition must not turn into lost or
re-read records, and real data loss still reported."""

from __future__ import annotations

import logging
import types

import pytest
from confluent_kafka import KafkaError, Message, TopicPartition

from connectors.core.idle import IdleClients
from connectors.core.spark_compat import ReadAllAvailable
from connectors.kafka.source import split_reader
from connectors.kafka.source.client import KafkaSourceError, consumer_config
from connectors.kafka.source.offsets import DataLossError, OffsetRange, from_json
from connectors.kafka.source.options import KafkaSourceOptions
from connectors.kafka.source.reader import KafkaStreamReader
from connectors.kafka.source.split_reader import RangeReader


def options(**extra: str) -> KafkaSourceOptions:
    return KafkaSourceOptions.from_options({"kafka.bootstrap.servers": "x:9092", "subscribe": "t",
                                            "fetchOffset.minIntervalMs": "0", **extra})


# -- driver: the end offset of a micro-batch ------------------------------------------------


class Brokers:
    """The driver's consumer: topic ``t`` of two partitions at ``log_end``; its next ``glitches``
    metadata answers (or all, once ``deleted``) carry ``error`` for it instead of partitions."""

    def __init__(self):
        self.log_end = {("t", 0): 100, ("t", 1): 100}
        self.glitches, self.deleted, self.error = 0, False, KafkaError.UNKNOWN_TOPIC_OR_PART
        self.listed = 0

    def list_topics(self, topic=None, timeout=None):
        self.listed += 1
        if self.glitches or self.deleted:
            self.glitches = max(self.glitches - 1, 0)
            t = types.SimpleNamespace(error=KafkaError(self.error), partitions={})
        else:
            t = types.SimpleNamespace(error=None, partitions={0: None, 1: None})
        return types.SimpleNamespace(topics={"t": t})

    def offsets_for_times(self, query, timeout=None):
        assert not self.deleted, "offsets of a deleted topic asked for"
        return [TopicPartition(q.topic, q.partition, 0 if q.offset == -2 else self.log_end[q.topic, q.partition])
                for q in query]  # fmt: skip

    def poll(self, timeout):
        return None

    def close(self):
        pass


def stream(brokers: Brokers, **extra: str) -> KafkaStreamReader:
    reader = KafkaStreamReader(options(**extra).for_stream())
    reader.broker._consumer = brokers
    return reader


def ranges(tasks) -> list[tuple]:
    return [(r.topic, r.partition, r.start, r.end) for task in tasks for r in task.ranges]


@pytest.mark.parametrize("glitches", [1, 10])  # answered by a retry; or more than fetchOffset.numRetries
def test_a_glitchy_metadata_answer_keeps_the_partitions_in_the_end_offset(glitches):
    """A restarting broker answered UNKNOWN_TOPIC_OR_PART for the subscribed topic once: its
    partitions left the batch's end offset, every replay failed as "partition was deleted" (or,
    with failOnDataLoss=false, the next batch read the topic again from offset 0)."""
    brokers = Brokers()
    reader = stream(brokers)
    start = reader.latestOffset(reader.initialOffset(), ReadAllAvailable())
    reader.partitions(reader.initialOffset(), start)
    brokers.glitches = glitches
    end = reader.latestOffset(start, ReadAllAvailable())
    assert from_json(end) == {("t", 0): 100, ("t", 1): 100}
    brokers.glitches = 0
    assert reader.partitions(start, end) == []  # no data loss reported (failOnDataLoss=true)
    brokers.log_end = {("t", 0): 110, ("t", 1): 110}
    after = reader.latestOffset(end, ReadAllAvailable())
    assert ranges(reader.partitions(end, after)) == [("t", 0, 100, 110), ("t", 1, 100, 110)]


def test_a_topic_read_before_is_asked_again_but_one_never_seen_is_not():
    brokers = Brokers()
    reader = stream(brokers)
    brokers.glitches = 1
    assert reader.broker.partitions() == []  # not created yet: read once it is
    assert brokers.listed == 1
    assert reader.broker.partitions() == [("t", 0), ("t", 1)]
    brokers.glitches = 1
    assert reader.broker.partitions() == [("t", 0), ("t", 1)]
    assert brokers.listed == 4


def test_a_topic_answered_with_another_error_fails_naming_it():
    brokers = Brokers()
    reader = stream(brokers)
    reader.broker.partitions()
    brokers.glitches, brokers.error = 10, KafkaError.TOPIC_AUTHORIZATION_FAILED
    with pytest.raises(KafkaSourceError, match="cannot list topics from the brokers .*topic t: .*authorization"):
        reader.broker.partitions()


@pytest.mark.parametrize("fail", [True, False])
def test_a_deleted_topic_is_still_data_loss(fail, caplog):
    brokers = Brokers()
    reader = stream(brokers, failOnDataLoss=str(fail).lower())
    start = reader.latestOffset(reader.initialOffset(), ReadAllAvailable())
    brokers.deleted = True
    end = reader.latestOffset(start, ReadAllAvailable())
    if fail:
        with pytest.raises(DataLossError, match="topic t partition 0 was deleted"):
            reader.partitions(start, end)
        return
    with caplog.at_level(logging.WARNING):
        assert reader.partitions(start, end) == []
    assert "topic t partition 0 was deleted" in caplog.text
    # Not carried on once planning found it gone.
    assert from_json(reader.latestOffset(end, ReadAllAvailable())) == {}


# -- executor: a task's read ----------------------------------------------------------------


def message(offset: int, partition: int = 0, eof: bool = False) -> Message:
    error = KafkaError(KafkaError._PARTITION_EOF) if eof else None
    return Message(topic="t", partition=partition, offset=offset, key=None, value=b"%d" % offset,
                   error=error, timestamp=(1, 1000))


class TaskConsumer:
    """A task's consumer of partition ``t-0``: each consume() call takes from the first of
    ``deliveries`` (an empty one: that call finds nothing fetched yet), dropped once empty;
    position() is the last task's ``stale`` one until a message comes; ``latest`` is the leader's."""

    def __init__(self, *deliveries: list[Message], stale: int = -1001, latest: int = 300):
        self.deliveries, self.at, self.latest = [list(d) for d in deliveries], stale, latest

    def consume(self, most, timeout=None):
        if not self.deliveries:
            return []
        batch, self.deliveries[0] = self.deliveries[0][:most], self.deliveries[0][most:]
        if not self.deliveries[0]:
            self.deliveries.pop(0)
        if batch:
            self.at = batch[-1].offset() + (0 if batch[-1].error() else 1)
        return batch

    def position(self, partitions):
        return [TopicPartition(p.topic, p.partition, self.at) for p in partitions]

    def offsets_for_times(self, partitions, timeout=None):
        return [TopicPartition(p.topic, p.partition, self.latest) for p in partitions]

    def assign(self, partitions):
        pass

    resume = pause = seek = assign

    def close(self):
        pass


@pytest.fixture
def fake_task(monkeypatch):
    """Runs a task of ``ranges`` with ``consumer``, taken as kept by the last task or opened anew."""
    monkeypatch.setattr(split_reader, "_CONSUME_WAIT", 0)
    monkeypatch.setattr(split_reader, "IDLE", IdleClients())

    def run(consumer: TaskConsumer, *ranges: OffsetRange, kept: bool = False, **extra: str) -> list[int]:
        reader = RangeReader(options(**extra), *ranges)
        if kept:
            split_reader.IDLE.keep(reader._cache_key(consumer_config(reader.options), reader.starts), consumer, 8)
        else:
            monkeypatch.setattr(split_reader, "Consumer", lambda config: consumer)
        return [offset for batch in reader for offset in batch.column("offset").to_pylist()]

    return run


def test_a_kept_consumers_stale_position_never_ends_a_range(fake_task):
    """The last task took records past its end (its consumer at 200); right after the assign()
    at 100 position() still said 200 until librdkafka's thread caught up, and if the first
    consume() found nothing queued the range [100, 150) counted as read: 50 records lost."""
    consumer = TaskConsumer([], [], [message(o) for o in range(100, 300)], stale=200)  # nothing within a consume wait
    assert fake_task(consumer, OffsetRange("t", 0, 100, 150), kept=True) == list(range(100, 150))


def test_an_end_of_partition_below_the_leaders_end_is_no_data_loss(fake_task):
    """A replica whose high watermark lags the leader's (a leader change, client.rack) reached
    its end at 60 of a range planned to 100: the leader has them all, so reading goes on."""
    consumer = TaskConsumer([message(o) for o in range(60)] + [message(60, eof=True)], [],
                            [message(o) for o in range(60, 100)], latest=100)
    assert fake_task(consumer, OffsetRange("t", 0, 0, 100)) == list(range(100))


@pytest.mark.parametrize("fail", [True, False])
def test_an_end_of_partition_below_the_leaders_end_too_is_data_loss(fake_task, fail, caplog):
    consumer = TaskConsumer([message(o) for o in range(60)] + [message(60, eof=True)], latest=60)
    if fail:
        with pytest.raises(DataLossError, match="topic t partition 0 ends at offset 60, but offsets up to 100"):
            fake_task(consumer, OffsetRange("t", 0, 0, 100))
        return
    with caplog.at_level(logging.WARNING):
        assert fake_task(consumer, OffsetRange("t", 0, 0, 100), failOnDataLoss="false") == list(range(60))
    assert "ends at offset 60, but offsets up to 100 were planned" in caplog.text
