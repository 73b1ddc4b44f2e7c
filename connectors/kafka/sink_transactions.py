"""Exactly-once: Kafka transactions per (micro-batch, Spark partition) that carry their own progress.

Each Spark partition ``p`` of the sink has the stable transactional id ``<prefix>-<p>``. A task:

1. ``init_transactions()``: fences any older producer of the same id (a zombie or speculative
   attempt) and aborts its lingering transaction, or waits for one that was committing;
2. reads the partition's progress: how many records of which (run, batch) are committed, kept as
   the committed offset of consumer group ``<prefix>-<p>`` on partition 0 of ``progressTopic``
   (offset ``batch + 1``; run, batch and record count in the offset's metadata);
3. skips the records of this (run, batch) already committed: all of them when the task is a
   retry of a committed one or the batch is re-executed after the driver died before Spark
   recorded it;
4. produces the rest in one transaction, adds the new progress to the same transaction
   (``send_offsets_to_transaction``) and commits: records and progress become visible to
   ``read_committed`` consumers together, or not at all.

Why a record count, not a done flag: when a task's *input* fails (an upstream error), Spark ends
the Python writer's input as if it were complete, so ``write()`` commits what it got, and Spark
discards the attempt. The count lets the retry write exactly the records that are missing.
Precondition, as for any replay: a re-executed partition yields the same records in the same order.

The run is the streaming query id (stable across restarts from the same checkpoint), or a fresh
id per batch write; the batch is Spark's batch id. A transaction lives only inside one task, so
``transaction.timeout.ms`` bounds how long one task may take to write its partition.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import logging
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

import pyarrow as pa
from confluent_kafka import Consumer, KafkaException, TopicPartition

from connectors.core.retry import retry
from connectors.kafka.sink_options import KafkaSinkOptions
from connectors.kafka.sink_producer import KafkaSinkError, SinkProducer, describe, producer_settings
from connectors.kafka.sink_records import RecordLayout

T = TypeVar("T")
log = logging.getLogger(__name__)

_ATTEMPTS = 3  # of a blocking transactional call that timed out or hit a retriable error
# Producer-only librdkafka settings a user may pass; the progress consumer would warn about each.
_PRODUCER_ONLY = frozenset({
    "acks", "request.required.acks", "enable.idempotence", "transaction.timeout.ms", "linger.ms",
    "queue.buffering.max.ms", "queue.buffering.max.messages", "queue.buffering.max.kbytes", "batch.size",
    "batch.num.messages", "compression.type", "compression.codec", "compression.level", "message.timeout.ms",
    "delivery.timeout.ms", "request.timeout.ms", "retries", "message.send.max.retries", "partitioner",
    "sticky.partitioning.linger.ms", "enable.gapless.guarantee",
})
ALL = sys.maxsize  # "every record of the unit is committed"


@dataclasses.dataclass(frozen=True)
class WorkUnit:
    """What one task writes: Spark partition ``partition`` of batch ``batch`` of run ``run``."""

    run: str
    batch: int
    partition: int


@dataclasses.dataclass(frozen=True)
class Progress:
    """``records`` records of batch ``batch`` of run ``run`` are committed."""

    run: str
    batch: int
    records: int

    def marker(self) -> str:
        return json.dumps(dataclasses.asdict(self), separators=(",", ":"))

    def committed_of(self, unit: WorkUnit) -> int:
        """How many records of ``unit`` are committed (ALL when a later batch is)."""
        if self.run != unit.run or self.batch < unit.batch:
            return 0
        return self.records if self.batch == unit.batch else ALL


def transactional_id(prefix: str, partition: int) -> str:
    return f"{prefix}-{partition}"


def _transient(exc: BaseException) -> bool:
    return isinstance(exc, KafkaException) and exc.args[0].retriable()


def _call(what: str, call: Callable[[], T]) -> T:
    try:
        return retry(call, attempts=_ATTEMPTS, retry_on=_transient, backoff=0.5, what=what)
    except KafkaException as exc:
        raise KafkaSinkError(f"{what} failed: {describe(exc.args[0])}") from None


class PartitionProgress:
    """The progress of one Spark partition of the sink, in consumer group ``group``.

    A consumer that never subscribes: it reads the group's committed offset on ``topic``-0 with
    ``isolation.level=read_committed`` (so librdkafka asks for stable offsets, never a pending
    transaction's) and provides the group metadata that ties the producer's transactional offset
    commit to the group.
    """

    def __init__(self, client_settings: dict[str, str], group: str, topic: str, timeout: float):
        self.group, self.anchor, self.timeout = group, TopicPartition(topic, 0), timeout
        self.consumer = Consumer({
            **{name: value for name, value in client_settings.items() if name not in _PRODUCER_ONLY},
            "group.id": group,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        })

    def read(self) -> Progress | None:
        (position,) = _call("reading the sink's progress", lambda: self.consumer.committed([self.anchor], self.timeout))
        if position.error is not None:
            raise KafkaSinkError(f"reading the sink's progress failed: {describe(position.error)}")
        if position.offset < 0 or not position.metadata:
            return None
        try:
            return Progress(**json.loads(position.metadata))
        except (ValueError, TypeError):
            raise KafkaSinkError(
                f"consumer group '{self.group}' has offsets on '{self.anchor.topic}' that this sink did not "
                "write: is transactionalIdPrefix shared with another application?") from None

    def add_to_transaction(self, producer: SinkProducer, progress: Progress) -> None:
        position = TopicPartition(self.anchor.topic, 0, progress.batch + 1, progress.marker())
        metadata = self.consumer.consumer_group_metadata()
        _call("adding the sink's progress to the transaction",
              lambda: producer.producer.send_offsets_to_transaction([position], metadata, self.timeout))

    def close(self) -> None:
        self.consumer.close()


@dataclasses.dataclass
class _Skip:
    """Drops the first ``count`` records of a stream of Arrow batches; ``skipped`` says how many it did."""

    count: int
    skipped: int = 0

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            drop = min(self.count - self.skipped, batch.num_rows)
            self.skipped += drop
            if drop < batch.num_rows:
                yield batch.slice(drop) if drop else batch


def write_exactly_once(
    options: KafkaSinkOptions, layout: RecordLayout, batches: Iterable[pa.RecordBatch], unit: WorkUnit
) -> tuple[int, int]:
    """Write the records of ``unit`` not yet committed, in one transaction.

    Returns (records written, records skipped because an earlier attempt committed them).
    """
    assert options.transactional_id_prefix is not None  # validated at query start
    txn_id = transactional_id(options.transactional_id_prefix, unit.partition)
    timeout = options.request_timeout.total_seconds()
    producer = SinkProducer(producer_settings(options, txn_id))
    _call(f"initializing transactional id '{txn_id}'", lambda: producer.producer.init_transactions(timeout))
    progress = PartitionProgress(options.client_settings(), txn_id, options.progress_topic, timeout)
    try:
        last = progress.read()
        skip = _Skip(last.committed_of(unit) if last else 0)
        remaining = skip(batches)
        first = next(remaining, None)
        _log_skipped(txn_id, unit, skip)
        if first is None:  # nothing (left) to write; init_transactions aborted any lingering transaction
            return 0, skip.skipped
        producer.producer.begin_transaction()
        try:
            count = producer.produce(itertools.chain([first], remaining), layout)
            progress.add_to_transaction(producer, Progress(unit.run, unit.batch, skip.skipped + count))
            producer.producer.commit_transaction()  # flushes; fails if any delivery failed
        except BaseException as exc:
            _abort(producer, txn_id)
            producer.reports.raise_if_failed()  # the delivery error says more than the commit error
            if isinstance(exc, KafkaException):
                raise KafkaSinkError(f"committing transaction '{txn_id}' failed: {describe(exc.args[0])}") from None
            raise
        return count, skip.skipped
    finally:
        progress.close()


def _log_skipped(txn_id: str, unit: WorkUnit, skip: _Skip) -> None:
    if skip.skipped:
        log.info("%s: %d records of batch %d (run %s) were committed before; skipped",
                 txn_id, skip.skipped, unit.batch, unit.run)
    if skip.count not in (0, ALL) and skip.skipped < skip.count:
        log.warning("%s: batch %d has %d records now but %d were committed before: the input is not "
                    "deterministic, so exactly-once cannot hold", txn_id, unit.batch, skip.skipped, skip.count)


def _abort(producer: SinkProducer, txn_id: str) -> None:
    """Best effort: the next init_transactions() of this id aborts the transaction anyway."""
    try:
        producer.producer.abort_transaction(10)
    except KafkaException as exc:
        log.warning("aborting transaction '%s' failed (%s); the next attempt aborts it", txn_id, exc)
