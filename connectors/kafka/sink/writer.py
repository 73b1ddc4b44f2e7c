"""``connectors.kafka`` write side: Flink's KafkaSink on Spark (``df.write`` and ``df.writeStream``).

Input columns are those of Spark's Kafka sink (see :mod:`connectors.kafka.sink.records`).
``deliveryGuarantee``:

- ``at-least-once`` (default): an idempotent producer; a task succeeds only when every delivery
  report came back without error, so a successful batch is in Kafka, and a failed one is
  rewritten (possibly duplicating records) when Spark retries it.
- ``exactly-once``: one Kafka transaction per (batch, Spark partition) that also records the
  partition's progress, so retried tasks and re-executed batches never commit twice
  (see :mod:`connectors.kafka.sink.exactly_once`).
- ``none``: as at-least-once but without idempotence (``kafka.acks`` may be lowered); the
  producer's own retries may duplicate records.

Every task writes and, for exactly-once, commits inside ``write()``; the driver-side
``commit()`` reports, and for exactly-once fails a re-executed batch whose records moved from a
partition it no longer has (:func:`connectors.kafka.sink.recovery.check_moved`). Before an
exactly-once query's first tasks, the driver aborts the transactions earlier runs left open and
refuses to re-run a batch whose progress expired (:mod:`connectors.kafka.sink.recovery`).
Producers are kept in the Python worker between tasks (``producerCacheSize``, see
:mod:`connectors.kafka.sink.producer`).
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from connectors.core.commit import current_task
from connectors.core.options import OptionError
from connectors.kafka import FORMAT
from connectors.kafka.sink.exactly_once import SINK_RUN, WorkUnit, write_exactly_once
from connectors.kafka.sink.options import KafkaSinkOptions
from connectors.kafka.sink.producer import cached_producer, check_cluster
from connectors.kafka.sink.records import RecordLayout
from connectors.kafka.sink.recovery import check_moved, on_query_start
from connectors.testing.faults import fault_point

if TYPE_CHECKING:
    from connectors.kafka.sink.formats import RecordEncoder

__all__ = ["writer", "stream_writer"]

log = logging.getLogger(__name__)


@dataclasses.dataclass
class KafkaCommitMessage(WriterCommitMessage):
    """What one task wrote."""

    partition: int
    records: int
    skipped: int = 0  # exactly-once: records an earlier attempt of this (run, batch, partition) committed
    run: str | None = None  # exactly-once: the run the progress is keyed by (see WorkUnit)
    spark_run_id: str | None = None  # exactly-once: Spark's runId of the query (TaskAttempt.run_id)


def _encoder(config: KafkaSinkOptions, schema: StructType) -> RecordEncoder | None:
    """None while key and value are written as given; the Avro modules load only when needed
    (as :func:`connectors.kafka.source.reader._decoder`)."""
    if not config.avro_columns():
        return None
    from connectors.kafka.sink.formats import RecordEncoder  # noqa: PLC0415

    return RecordEncoder.of(config, schema)


def _prepare(options: Mapping[str, str], schema: StructType) -> tuple[KafkaSinkOptions, RecordLayout,
                                                                    RecordEncoder | None]:
    config = KafkaSinkOptions.from_options(options)
    encoder = _encoder(config, schema)
    layout = RecordLayout.of(schema if encoder is None else encoder.schema(schema), config.topic)
    check_cluster(config)
    if config.exactly_once:
        on_query_start(config, options)
    return config, layout, encoder


def writer(options: Mapping[str, str], schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
    """``df.write.format("connectors.kafka")``: append only, like Spark's Kafka sink."""
    if overwrite:
        raise OptionError(FORMAT, "mode", "overwrite", "Kafka topics can only be appended to; use mode('append')")
    config, layout, encoder = _prepare(options, schema)
    # One id for the whole write job: a retried task finds its partition already committed.
    return KafkaBatchWriter(config, layout, encoder, run=uuid.uuid4().hex)


def stream_writer(options: Mapping[str, str], schema: StructType, overwrite: bool) -> DataSourceStreamArrowWriter:
    """``df.writeStream.format("connectors.kafka")``; complete mode appends the whole result each
    batch, as Spark's Kafka sink does."""
    config, layout, encoder = _prepare(options, schema)
    return KafkaStreamWriter(config, layout, encoder)


class _KafkaWrite:
    """The write of one task, shared by the batch and the stream writer."""

    def __init__(self, config: KafkaSinkOptions, layout: RecordLayout, encoder: RecordEncoder | None = None,
                 run: str | None = None):
        self.config, self.layout, self.encoder, self.run = config, layout, encoder, run

    def write(self, iterator: Iterator[pa.RecordBatch]) -> KafkaCommitMessage:
        task = current_task()
        if self.encoder is not None:  # avro-confluent struct columns -> their wire-format bytes
            iterator = map(self.encoder, iterator)
        if self.config.exactly_once:
            # Streams: the query id, stable across restarts; without one, the sink's prefix alone.
            run = self.run if self.run is not None else task.query_id or SINK_RUN
            unit = WorkUnit(run, task.batch_id or 0, task.partition_id)
            records, skipped = write_exactly_once(self.config, self.layout, iterator, unit)
            return KafkaCommitMessage(task.partition_id, records, skipped, run, task.run_id)
        with cached_producer(self.config) as producer:
            records = producer.produce(iterator, self.layout)
            producer.flush()
        return KafkaCommitMessage(task.partition_id, records)

    def _report(self, messages: list[KafkaCommitMessage | None], what: str) -> None:
        done = [m for m in messages if m is not None]
        skipped = sum(m.skipped for m in done)
        log.info("%s: %s, %d records from %d tasks%s", FORMAT, what, sum(m.records for m in done), len(done),
                 f", {skipped} more committed by earlier attempts" if skipped else "")


class KafkaBatchWriter(_KafkaWrite, DataSourceArrowWriter):
    def commit(self, messages: list[KafkaCommitMessage | None]) -> None:
        self._report(messages, "write committed")

    def abort(self, messages: list[KafkaCommitMessage | None]) -> None:
        # Records of the successful tasks stay in Kafka: topics cannot be rolled back.
        self._report(messages, "write failed; records of successful tasks stay written")


class KafkaStreamWriter(_KafkaWrite, DataSourceStreamArrowWriter):
    def commit(self, messages: list[KafkaCommitMessage | None], batchId: int) -> None:
        fault_point("kafka.commit.before", self.config.transactional_id_prefix or self.config.topic)
        done = [m for m in messages if m is not None]
        if self.config.exactly_once and done and done[0].run is not None:
            check_moved(self.config, done[0].run, batchId, len(messages), any(m.skipped for m in done),
                        done[0].spark_run_id)
        self._report(messages, f"batch {batchId} committed")
        fault_point("kafka.commit.after", self.config.transactional_id_prefix or self.config.topic)

    def abort(self, messages: list[KafkaCommitMessage | None], batchId: int) -> None:
        # Exactly-once: committed records are skipped when the batch is re-executed.
        self._report(messages, f"batch {batchId} failed; it is rewritten when re-executed")
