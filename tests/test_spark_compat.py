"""connectors.core.spark_compat: Spark 4.1's stream reader protocol, driven as Spark 4.1.4 drives
it (checked against its PythonMicroBatchStream and MicroBatchExecution), on whatever Spark runs."""

from __future__ import annotations

import pyspark
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from connectors.core.spark_compat import (
    ADMISSION_CONTROL,
    ReadLimitAdapter,
    stream_reader,
)
from connectors.kafka.source.options import KafkaSourceOptions
from connectors.kafka.source.reader import KafkaStreamReader
from connectors.numbers.options import NumberSequenceOptions
from connectors.numbers.reader import NumberSequenceStreamReader


def numbers(**options: str) -> NumberSequenceStreamReader:
    return NumberSequenceStreamReader(NumberSequenceOptions.from_options(options))


def test_the_adapter_is_used_exactly_where_spark_lacks_admission_control():
    assert ADMISSION_CONTROL == (tuple(map(int, pyspark.__version__.split(".")[:2])) >= (4, 2))
    reader = numbers(end="9")
    assert (stream_reader(reader) is reader) == ADMISSION_CONTROL


def test_read_limit_applies_from_the_start_spark_41_planned_last():
    adapter = ReadLimitAdapter(numbers(end="249", rowsPerBatch="100"))
    # A new query: Spark 4.1 asks for the latest offset before the initial one.
    assert adapter.latestOffset()["next"] == 100
    assert adapter.initialOffset()["next"] == 0
    assert sum(p.last - p.first + 1 for p in adapter.partitions({"next": 0}, {"next": 100})) == 100
    assert adapter.latestOffset()["next"] == 200
    adapter.partitions({"next": 100}, {"next": 200})
    assert adapter.latestOffset()["next"] == 250
    adapter.partitions({"next": 200}, {"next": 250})
    assert adapter.latestOffset()["next"] == 250  # caught up: no new batch

    # A restarted query: Spark 4.1 first plans (end, end) with the last end in the checkpoint.
    restarted = ReadLimitAdapter(numbers(end="249", rowsPerBatch="100"))
    assert restarted.partitions({"next": 200}, {"next": 200}) == []
    assert restarted.latestOffset()["next"] == 250


def test_initial_offset_is_resolved_once(kafka_bootstrap, unique):
    """Spark 4.1 asks latestOffset() first and initialOffset() after it: a Kafka ``latest`` resolved
    a second time would start the query past records the first batch was planned to read."""
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})  # kept until the topic exists
    admin.create_topics([NewTopic(unique, 1, 1)])[unique].result(30)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    adapter = ReadLimitAdapter(KafkaStreamReader(KafkaSourceOptions.from_options(
        {"kafka.bootstrap.servers": kafka_bootstrap, "subscribe": unique, "fetchOffset.minIntervalMs": "0"}
    ).for_stream()))
    try:
        assert adapter.latestOffset()[unique] == {"0": 0}  # beside the split layout it pins
        producer.produce(unique, b"x")
        assert producer.flush(30) == 0
        assert adapter.initialOffset()[unique] == {"0": 0}
        assert adapter.latestOffset()[unique] == {"0": 1}
    finally:
        adapter.stop()

