"""Exactly-once: one Kafka transaction per (micro-batch, Spark partition), with its progress inside.

Each Spark partition ``p`` of the sink has the stable transactional id ``<prefix>-<p>``. A task:

1. ``init_transactions()``: fences any older producer of the same id (a zombie or speculative
   attempt) and aborts its lingering transaction, or waits for one that was committing;
2. reads the partition's progress: the last (run, batch) committed, kept as the committed
   offset of consumer group ``<prefix>-<p>`` on partition 0 of ``progressTopic`` (offset
   ``batch + 1``, the run and batch in the offset's metadata);
3. if this (run, batch) is already committed (the task is a retry, or the batch is re-executed
   after the driver died before Spark recorded it) writes nothing;
4. otherwise produces every record in a transaction, adds the new progress to the same
   transaction (``send_offsets_to_transaction``) and commits: data and progress become visible
   to ``read_committed`` consumers together, or not at all.

The run is the streaming query id (stable across restarts from the same checkpoint), or a fresh
id per batch write; the batch is Spark's batch id. A transaction lives only inside one task, so
``transaction.timeout.ms`` bounds how long one task may take to write its partition.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import logging
from collections.abc import Callable, Iterable
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


@dataclasses.dataclass(frozen=True)
class WorkUnit:
    """What one task writes: Spark partition ``partition`` of batch ``batch`` of run ``run``."""

    run: str
    batch: int
    partition: int

    def marker(self) -> str:
        return json.dumps({"run": self.run, "batch": self.batch}, separators=(",", ":"))


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
    """The last (run, batch) the sink committed for one Spark partition.

    A consumer of group ``group`` that never subscribes: it reads the group's committed offset
    on ``topic``-0 with ``isolation.level=read_committed`` (so librdkafka asks for stable
    offsets, never a pending transaction's) and provides the group metadata that ties the
    producer's transactional offset commit to the group.
    """

    def __init__(self, client_settings: dict[str, str], group: str, topic: str, timeout: float):
        self.group, self.anchor, self.timeout = group, TopicPartition(topic, 0), timeout
        self.consumer = Consumer({
            **client_settings,
            "group.id": group,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        })

    def committed(self) -> WorkUnit | None:
        """The last committed (run, batch), partition unknown (-1), or None."""
        (position,) = _call("reading the sink's progress", lambda: self.consumer.committed([self.anchor], self.timeout))
        if position.error is not None:
            raise KafkaSinkError(f"reading the sink's progress failed: {describe(position.error)}")
        if position.offset < 0 or not position.metadata:
            return None
        try:
            marker = json.loads(position.metadata)
            return WorkUnit(str(marker["run"]), int(marker["batch"]), -1)
        except (ValueError, KeyError, TypeError):
            raise KafkaSinkError(
                f"consumer group '{self.group}' has offsets on '{self.anchor.topic}' that this sink did "
                "not write: is transactionalIdPrefix shared with another application?") from None

    def is_done(self, unit: WorkUnit) -> bool:
        last = self.committed()
        return last is not None and last.run == unit.run and last.batch >= unit.batch

    def add_to_transaction(self, producer: SinkProducer, unit: WorkUnit) -> None:
        position = TopicPartition(self.anchor.topic, 0, unit.batch + 1, unit.marker())
        metadata = self.consumer.consumer_group_metadata()
        _call("adding the sink's progress to the transaction",
              lambda: producer.producer.send_offsets_to_transaction([position], metadata, self.timeout))

    def close(self) -> None:
        self.consumer.close()


def write_exactly_once(
    options: KafkaSinkOptions, layout: RecordLayout, batches: Iterable[pa.RecordBatch], unit: WorkUnit
) -> tuple[int, bool]:
    """Write ``batches`` as ``unit`` in one transaction; returns (records written, skipped)."""
    assert options.transactional_id_prefix is not None  # validated at query start
    txn_id = transactional_id(options.transactional_id_prefix, unit.partition)
    timeout = options.request_timeout.total_seconds()
    producer = SinkProducer(producer_settings(options, txn_id))
    _call(f"initializing transactional id '{txn_id}'", lambda: producer.producer.init_transactions(timeout))
    batches = iter(batches)
    first = next(batches, None)
    if first is None:  # nothing to write; init_transactions still aborted a lingering transaction
        return 0, False
    progress = PartitionProgress(options.client_settings(), txn_id, options.progress_topic, timeout)
    try:
        if progress.is_done(unit):
            log.info("%s: batch %d of run %s already committed; skipping", txn_id, unit.batch, unit.run)
            return 0, True
        producer.producer.begin_transaction()
        try:
            count = producer.produce(itertools.chain([first], batches), layout)
            progress.add_to_transaction(producer, unit)
            producer.producer.commit_transaction()  # flushes; fails if any delivery failed
        except BaseException as exc:
            _abort(producer, txn_id)
            producer.reports.raise_if_failed()  # the delivery error says more than the commit error
            if isinstance(exc, KafkaException):
                raise KafkaSinkError(f"committing transaction '{txn_id}' failed: {describe(exc.args[0])}") from None
            raise
        return count, False
    finally:
        progress.close()


def _abort(producer: SinkProducer, txn_id: str) -> None:
    """Best effort: the next init_transactions() of this id aborts the transaction anyway."""
    try:
        producer.producer.abort_transaction(10)
    except KafkaException as exc:
        log.warning("aborting transaction '%s' failed (%s); the next attempt aborts it", txn_id, exc)
