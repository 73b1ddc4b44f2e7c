"""The librdkafka producer of the sink: its settings, the produce loop, delivery reports.

Records are produced one ``produce()`` call each (measured faster than ``produce_batch``, which
needs a dict per record), straight from Arrow columns; librdkafka batches them on the wire. The
producer reports only failed deliveries (``delivery.report.only.error``), so success costs no
Python callback, and a task succeeds only when ``flush()`` left nothing undelivered and no
report came back with an error.

Producers outlive tasks: Spark reuses its Python worker processes (``spark.python.worker.reuse``,
on by default), and a new librdkafka producer costs a connection, a metadata round trip and a
producer id (with idempotence about 0.5 s before its first record is acknowledged), so each
worker keeps up to ``producerCacheSize`` idle producers (:data:`IDLE`) for the next task of the
same sink. A producer goes back only after a task that ended cleanly (nothing left undelivered);
a failed task drops it.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterable, Iterator
from typing import cast

import pyarrow as pa
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from connectors.core.guarantees import DeliveryGuarantee
from connectors.core.idle import IdleClients
from connectors.core.options import OptionError
from connectors.kafka import FORMAT
from connectors.kafka.config import refusal, with_logger
from connectors.kafka.sink.options import KafkaSinkOptions
from connectors.kafka.sink.records import RecordError, RecordLayout

log = logging.getLogger(__name__)

# Producer defaults of the sink; any kafka.* option overrides them.
JAVA_COMPATIBLE_PARTITIONER = "murmur2_random"  # keyed records land where Java producers put them
TRANSACTION_TIMEOUT_MS = 900_000  # the brokers' default transaction.max.timeout.ms (15 min)
_HINTS = {
    KafkaError.MSG_SIZE_TOO_LARGE: "the record is larger than the producer's kafka.message.max.bytes or the "
    "topic's max.message.bytes",
    KafkaError.UNKNOWN_TOPIC_OR_PART: "the topic or partition does not exist (and is not created automatically)",
    KafkaError._UNKNOWN_TOPIC: "the topic does not exist (and is not created automatically)",
    KafkaError._UNKNOWN_PARTITION: "the partition does not exist in the topic",
    KafkaError._MSG_TIMED_OUT: "no broker acknowledged it within kafka.message.timeout.ms: is the broker reachable?",
    KafkaError.TOPIC_AUTHORIZATION_FAILED: "the principal may not write to the topic",
}


class KafkaSinkError(RuntimeError):
    """A record could not be written; the task fails so Spark retries it or stops the query."""

    def __init__(self, reason: str):
        super().__init__(f"{FORMAT}: {reason}")


def producer_settings(options: KafkaSinkOptions, transactional_id: str | None = None) -> dict[str, str]:
    """librdkafka settings: the sink's defaults, then the user's ``kafka.*`` settings."""
    settings = {"partitioner": JAVA_COMPATIBLE_PARTITIONER}
    if options.delivery_guarantee is not DeliveryGuarantee.NONE:
        settings["enable.idempotence"] = "true"  # no duplicates from the producer's own retries
    if options.exactly_once:
        settings["transaction.timeout.ms"] = str(TRANSACTION_TIMEOUT_MS)
    settings.update(options.client_settings())
    if transactional_id is not None:
        settings["transactional.id"] = transactional_id
    return settings


def describe(error: KafkaError) -> str:
    hint = _HINTS.get(error.code())
    return f"{error.str()} ({error.name()}{': ' + hint if hint else ''})"


def _size(value: str | bytes | None) -> int:
    return 0 if value is None else len(value.encode() if isinstance(value, str) else value)


def _describe_record(topic: str, value: str | bytes | None, key: str | bytes | None) -> str:
    shown_key = "" if key is None else f", key {key[:40]!r}"
    return f"topic '{topic}'{shown_key}, value of {_size(value)} bytes"


class DeliveryReports:
    """The producer's delivery callback: counts failed deliveries, keeps the first one and the
    largest value (the broker rejects whole batches, so the first is not always the culprit)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Forget earlier reports: a reused producer starts every task clean."""
        self.failed = 0
        self.first: str | None = None
        self.largest = 0

    def __call__(self, error: KafkaError | None, message) -> None:
        if error is None:
            return
        self.failed += 1
        self.largest = max(self.largest, _size(message.value()))
        if self.first is None:
            where = _describe_record(message.topic(), message.value(), message.key())
            self.first = f"{where}, partition {message.partition()}: {describe(error)}"

    def error(self) -> KafkaSinkError | None:
        if not self.failed:
            return None
        return KafkaSinkError(f"{self.failed} record(s) were not delivered; the first: {self.first}; "
                              f"the largest failed value has {self.largest} bytes")

    def raise_if_failed(self) -> None:
        error = self.error()
        if error is not None:
            raise error


class SinkProducer:
    """One librdkafka producer writing the records of one task."""

    def __init__(self, settings: dict[str, str]):
        self.reports = DeliveryReports()
        try:
            self.producer = Producer(with_logger({**settings, "delivery.report.only.error": True, "on_delivery": self.reports}))
        except KafkaException as exc:  # a bad kafka.* setting that slipped past the start-up check
            raise KafkaSinkError(f"invalid producer settings: {exc.args[0].str()}") from None

    def produce(self, batches: Iterable[pa.RecordBatch], layout: RecordLayout) -> int:
        """Queue every record of ``batches``; raise on the first record that cannot be queued
        or as soon as a delivery report came back with an error. Returns the record count."""
        count = 0
        for batch in batches:
            try:
                records = layout.records(batch)
            except RecordError as exc:
                raise KafkaSinkError(str(exc)) from None
            count += self._produce_batch(records, count)
            self.producer.poll(0)  # serve delivery reports: fail fast instead of at the end
            self.reports.raise_if_failed()
        return count

    def _produce_batch(self, records, first_index: int) -> int:
        produce, n = self.producer.produce, 0
        try:
            for topic, value, key, partition, headers in records:
                while True:
                    try:
                        if headers is None:
                            produce(topic, value, key, partition)
                        else:
                            produce(topic, value, key, partition, headers=headers)
                        break
                    except BufferError:  # queue.buffering.max.messages reached: let it drain
                        self.producer.poll(0.05)
                n += 1
        except KafkaException as exc:
            where = _describe_record(topic, value, key)
            raise KafkaSinkError(f"record {first_index + n} of this task ({where}): {describe(exc.args[0])}") from None
        return n

    def flush(self) -> None:
        """Wait for every delivery report; raise if any record was not delivered."""
        left = self.producer.flush()
        self.reports.raise_if_failed()
        if left:
            raise KafkaSinkError(f"{left} record(s) still undelivered after flush")

    def close(self) -> None:
        """Close the producer, dropping what it still queues (nothing in a kept producer; a failed
        task's records, which its aborted transaction discards anyway): closing never waits for
        deliveries to a broker that may be gone."""
        try:
            self.producer.purge()
            # confluent-kafka warns on stderr when a transactional producer cannot abort on close
            # (fenced, or another call pending after a timeout): dropping it is enough, as the
            # next init_transactions() of its id aborts the transaction anyway.
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                self.producer.close()
            for warning in caught:
                log.info("%s: closing a producer: %s", FORMAT, warning.message)
        except KafkaException:  # a fenced transactional producer refuses to abort; dropping it is enough
            pass


IDLE = IdleClients()  # this worker's idle producers (transactional ones too)


def settings_key(settings: dict[str, str]) -> tuple:
    return tuple(sorted(settings.items()))


@contextlib.contextmanager
def cached_producer(options: KafkaSinkOptions) -> Iterator[SinkProducer]:
    """A producer for one non-transactional task: this worker's idle one for these settings, or
    a new one. It is kept for the next task only if the task succeeds (then nothing is queued)."""
    settings = producer_settings(options)
    key = settings_key(settings)
    producer = cast("SinkProducer | None", IDLE.take(key)) or SinkProducer(settings)
    producer.reports.reset()
    yield producer  # an exception leaves the producer out of the cache (the worker exits anyway)
    IDLE.keep(key, producer, options.producer_cache_size)


_checked: set[tuple] = set()  # clusters this process already checked (streamWriter runs every batch)


def check_cluster(options: KafkaSinkOptions) -> None:
    """At query start, on the driver: the producer settings are valid, a broker answers, the
    ``topic`` exists when the producer may not create it, and (exactly-once) the progress
    topic exists or is created. Raises OptionError naming the option at fault."""
    settings = producer_settings(options, _probe_id(options))
    key = (settings_key(settings), options.topic, options.exactly_once and options.progress_topic)
    if key in _checked:
        return
    try:
        producer = Producer(with_logger(settings))
    except KafkaException as exc:
        raise refusal(FORMAT, options.extra, settings, exc, Producer) from None
    timeout = options.request_timeout.total_seconds()
    try:
        topics = producer.list_topics(timeout=timeout).topics
    except KafkaException as exc:
        raise OptionError(FORMAT, "kafka.bootstrap.servers", settings["bootstrap.servers"],
                          f"no broker answered within requestTimeout ({timeout:g}s): {exc.args[0].str()}") from None
    auto_create = settings.get("allow.auto.create.topics", "true").strip().lower() == "true"
    if options.topic and not auto_create and options.topic not in topics:
        raise OptionError(FORMAT, "topic", options.topic,
                          "the topic does not exist (and kafka.allow.auto.create.topics is false)")
    if options.exactly_once and options.progress_topic not in topics:
        _create_progress_topic(options, timeout)
    elif options.exactly_once and options.progress_topic_replication_factor is not None:
        replicas = len(topics[options.progress_topic].partitions[0].replicas)
        if replicas != options.progress_topic_replication_factor:
            log.warning("%s: progressTopic '%s' exists with replication factor %d, not %d "
                        "(progressTopicReplicationFactor applies when the sink creates the topic)",
                        FORMAT, options.progress_topic, replicas, options.progress_topic_replication_factor)
    _checked.add(key)


def _probe_id(options: KafkaSinkOptions) -> str | None:
    # Only makes the probe's settings those of the tasks; constructing a producer fences nothing.
    return f"{options.transactional_id_prefix}-0" if options.exactly_once else None


def _create_progress_topic(options: KafkaSinkOptions, timeout: float) -> None:
    admin = AdminClient(with_logger(options.client_settings()))
    replication = options.progress_topic_replication_factor or -1  # -1: the brokers' default
    topic = NewTopic(options.progress_topic, 1, replication_factor=replication)
    future = admin.create_topics([topic], request_timeout=timeout)[options.progress_topic]
    try:
        future.result()
    except KafkaException as exc:
        if exc.args[0].code() == KafkaError.INVALID_REPLICATION_FACTOR:
            reason = f"creating progressTopic '{options.progress_topic}' failed: {describe(exc.args[0])}"
            raise OptionError(FORMAT, "progressTopicReplicationFactor", options.progress_topic_replication_factor,
                              reason) from None
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise OptionError(FORMAT, "progressTopic", options.progress_topic,
                              f"the topic does not exist and creating it failed: {describe(exc.args[0])}") from None
