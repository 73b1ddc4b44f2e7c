"""connectors.kafka read side, against the real local broker: options, batch, streams, offsets
in the checkpoint, partition discovery, data loss, read_committed, group commits, crash recovery."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterable

import pyarrow.parquet as pq
import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from pyspark.errors import PySparkException
from pyspark.errors.exceptions.captured import StreamingQueryException
from pyspark.sql.types import ArrayType, BinaryType, StringType, StructField, StructType

from connectors.core.arrow import Projection
from connectors.core.idle import IdleClients
from connectors.core.options import OptionError
from connectors.core.spark_compat import ADMISSION_CONTROL
from connectors.kafka.source import client, split_reader
from connectors.kafka.source.client import BrokerClient, consumer_config
from connectors.kafka.source.offsets import (
    SPLIT,
    DataLossError,
    OffsetRange,
    from_json,
    pack,
    plan,
    rate_limit,
    split,
    to_json,
)
from connectors.kafka.source.options import KafkaSourceOptions
from connectors.kafka.source.reader import KafkaStreamReader
from connectors.kafka.source.split_reader import RangeReader

FORMAT = "connectors.kafka"


# -- helpers --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def admin(kafka_bootstrap) -> AdminClient:
    return AdminClient({"bootstrap.servers": kafka_bootstrap})


@pytest.fixture
def topic(admin, unique) -> Callable[..., str]:
    """``topic(partitions=1, name=...)`` creates a topic and returns its name."""

    def make(partitions: int = 1, name: str | None = None) -> str:
        name = name or f"{unique}-{partitions}p"
        admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
        return name

    return make


def produce(bootstrap: str, topic: str, values: Iterable[bytes | str], partition: int = 0, **kwargs) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for value in values:
        producer.produce(topic, value=value, partition=partition, **kwargs)
    assert producer.flush(30) == 0


def values(df) -> list[str]:
    return sorted(row.value.decode() for row in df.select("value").collect())


def source(spark, bootstrap: str, stream: bool = False, **options):
    reader = spark.readStream if stream else spark.read
    return reader.format(FORMAT).option("kafka.bootstrap.servers", bootstrap).options(**options).load()


def memory_stream(df, name: str, checkpoint, **trigger):
    writer = df.writeStream.format("memory").queryName(name).option("checkpointLocation", str(checkpoint))
    return (writer.trigger(**trigger) if trigger else writer).start()


def wait_for(condition: Callable[[], object], timeout: float = 60, what: str = "condition") -> object:
    deadline = time.monotonic() + timeout
    while not (result := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.2)
    return result


def options(bootstrap: str, **extra: str) -> KafkaSourceOptions:
    return KafkaSourceOptions.from_options({"kafka.bootstrap.servers": bootstrap, **extra})


# -- offset arithmetic (no broker) ----------------------------------------------------------


def test_rate_limit_splits_by_backlog_and_never_starves_small_partitions():
    start = {("t", 0): 0, ("t", 1): 0, ("t", 2): 10}
    latest = {("t", 0): 1000, ("t", 1): 10, ("t", 2): 11}
    # 100 offsets: 1000/1011 of them to partition 0; partitions 1 and 2 still get at least one.
    assert rate_limit(start, latest, 100) == {("t", 0): 98, ("t", 1): 1, ("t", 2): 11}
    assert rate_limit(start, latest, 5000) == latest
    # Spark computes each share as limit * (size / total) in doubles and floors it: 22 * (30 / 44) is
    # 14.999..., so 14 + 7 offsets where 22 * 30 / 44 gave 15 + 7 (found by a differential run). A
    # backlog within the limit is read whole, where Spark's shares leave one of 15 + 7 under 22 behind.
    zero = {("t", 0): 0, ("t", 1): 0}
    assert rate_limit(zero, {("t", 0): 30, ("t", 1): 14}, 22) == {("t", 0): 14, ("t", 1): 7}
    assert rate_limit(zero, {("t", 0): 15, ("t", 1): 7}, 22) == {("t", 0): 15, ("t", 1): 7}


def test_split_honours_min_partitions_and_max_records():
    ranges = [OffsetRange("t", 0, 0, 1000), OffsetRange("t", 1, 0, 10), OffsetRange("t", 2, 5, 5)]
    assert [(r.partition, r.start, r.end) for r in split(ranges, None, None)] == [(0, 0, 1000), (1, 0, 10)]
    pieces = split(ranges, 5, None)
    assert [(r.partition, r.start, r.end) for r in pieces] == [
        (0, 0, 250), (0, 250, 500), (0, 500, 750), (0, 750, 1000), (1, 0, 10)]
    assert [(r.start, r.end) for r in split(ranges[:1], None, 400)] == [(0, 333), (333, 666), (666, 1000)]


def layout(tasks) -> list[list[tuple[int, int, int]]]:
    return [[(r.partition, r.start, r.end) for r in task.ranges] for task in tasks]


def test_pack_fills_tasks_in_order_and_leaves_big_ranges_alone():
    ranges = [OffsetRange("t", p, 0, size) for p, size in enumerate([30, 30, 30, 100, 5, 5])]
    assert layout(pack(ranges, 60, None, None)) == [
        [(0, 0, 30), (1, 0, 30)], [(2, 0, 30)], [(3, 0, 100)], [(4, 0, 5), (5, 0, 5)]]
    assert layout(pack(ranges, 60, None, None)) == layout(pack(list(ranges), 60, None, None))  # deterministic
    assert layout(pack(ranges, 1, None, None)) == [[(r.partition, r.start, r.end)] for r in ranges]  # Spark's
    assert layout(pack(ranges, 1000, None, 40)) == [  # maxRecordsPerPartition caps a task too
        [(0, 0, 30)], [(1, 0, 30)], [(2, 0, 30)], [(3, 0, 100)], [(4, 0, 5), (5, 0, 5)]]
    # A thousand small ranges: the tasks follow the records, not the partitions.
    many = [OffsetRange("t", p, 0, 20) for p in range(1000)]
    assert [task.size for task in pack(many, 50_000, None, None)] == [20_000]
    assert [task.size for task in pack(many, 5000, None, None)] == [5000] * 4


def test_pack_keeps_at_least_min_partitions_tasks():
    many = [OffsetRange("t", p, 0, 20) for p in range(1000)]
    assert [task.size for task in pack(split(many, 200, None), 50_000, 200, None)] == [100] * 200
    # Few records in many ranges: never fewer tasks than minPartitions, even when the target is not reached.
    skewed = [OffsetRange("t", 0, 0, 1000), *(OffsetRange("t", p, 0, 1) for p in range(1, 5))]
    assert layout(pack(split(skewed, 4, None), 50_000, 4, None)) == [
        [(0, 0, 1000)], [(1, 0, 1), (2, 0, 1)], [(3, 0, 1)], [(4, 0, 1)]]
    # A big range cut by minPartitions stays cut.
    assert layout(pack(split([OffsetRange("t", 0, 0, 100)], 4, None), 50_000, 4, None)) == [
        [(0, 0, 25)], [(0, 25, 50)], [(0, 50, 75)], [(0, 75, 100)]]
    # A task reads at most one range per partition: pieces of one that share a task join again.
    pieces = [OffsetRange("t", 0, 0, 25), OffsetRange("t", 0, 25, 50), OffsetRange("t", 1, 0, 25)]
    assert layout(pack(pieces, 60, None, None)) == [[(0, 0, 50)], [(1, 0, 25)]]


def test_plan_reports_every_kind_of_data_loss():
    reports: list[str] = []
    ranges = plan(
        start={("t", 0): 5, ("t", 1): 50, ("t", 2): 3, ("gone", 0): 7},
        end={("t", 0): 20, ("t", 1): 8, ("t", 2): 9, ("new", 0): 4, ("new", 1): 6},
        earliest={("t", 0): 10, ("t", 1): 0, ("t", 2): 0, ("new", 0): 1, ("new", 1): 0},
        on_loss=reports.append,
    )
    assert [(r.topic, r.partition, r.start, r.end) for r in ranges] == [
        ("new", 0, 1, 4), ("new", 1, 0, 6), ("t", 0, 10, 20), ("t", 1, 0, 8), ("t", 2, 3, 9)]
    assert len(reports) == 4
    assert "gone partition 0 was deleted" in reports[0]
    # as Spark's "Added partition ... starts from 1 instead of 0": retention deleted records unread
    assert "topic new partition 0 was added and starts at offset 1, not 0" in reports[1]
    assert "t partition 0: offset 5 was deleted; earliest available offset is 10" in reports[2]
    assert "t partition 1: offset 50 is past the end" in reports[3]


# -- options --------------------------------------------------------------------------------


BAD_OPTIONS = [
    ({"subscribe": "a", "assign": '{"a":[0]}'}, "Only one of the options assign, subscribe, subscribePattern"),
    ({}, "One of the options assign, subscribe, subscribePattern must be given"),
    ({"assign": "[0,1]"}, 'expected JSON such as {"topicA":[0,1],"topicB":[0,1]}'),
    # An empty list read nothing of its topic without a word; -1 failed in the offsets request.
    ({"assign": '{"a":[0],"b":[]}'}, "option 'assign' = '{\"a\":[0],\"b\":[]}': topic b: expected a list of "
                                     "partition numbers (>= 0)"),
    ({"assign": '{"a":[-1]}'}, "topic a: expected a list of partition numbers (>= 0)"),
    # librdkafka waited out its socket timeout (60 s), then failed with "Broker transport failure".
    ({"subscribe": "a", "kafka.bootstrap.servers": " "}, "option 'kafka.bootstrap.servers' = ' ': expected host:port"),
    ({"subscribePattern": "("}, "not a regular expression"),
    # A name no topic can have was subscribed to without a word: a batch read nothing, a stream waited.
    ({"subscribe": "a;b, c"}, "option 'subscribe' = 'a;b, c': 'a;b': expected comma-separated Kafka topic names"),
    ({"subscribe": "a", "startingOffsets": "oldest"}, "expected earliest, latest or JSON"),
    ({"subscribe": "a", "startingOffsets": '{"a":{"x":1}}'}, "expected integer partitions and offsets"),
    ({"subscribe": "a", "kafka.auto.offset.reset": "earliest"}, "set the source option 'startingOffsets'"),
    ({"subscribe": "a", "kafka.value.deserializer": "x"}, "values are always read as bytes"),
    ({"subscribe": "a", "kafka.enable.auto.commit": "true"}, "offsets are kept in the query's checkpoint"),
    ({"subscribe": "a", "kafka.ssl.truststore.location": "/x.jks"}, "use kafka.ssl.ca.location"),
    ({"subscribe": "a", "kafka.fetch.max.wait.ms": "50"}, "is a Java client property; use kafka.fetch.wait.max.ms"),
    ({"subscribe": "a", "maxOffsetsPerTrigger": "0"}, "option 'maxOffsetsPerTrigger' = '0': must be greater than 0"),
    ({"subscribe": "a", "minOffsetsPerTrigger": "10", "maxOffsetsPerTrigger": "5"}, "must not exceed maxOffsetsPerTrigger"),
    ({"subscribe": "a", "startingOffsetsByTimestampStrategy": "skip"}, "expected one of error, latest"),
    ({"subscribe": "a", "failOnDataLos": "false"}, "unknown option; did you mean 'failOnDataLoss'?"),
    ({"subscribe": "a", "maxBytesPerBatch": "lots"}, "option 'maxBytesPerBatch' = 'lots': expected a size"),
    ({"subscribe": "a", "maxBytesPerBatch": "2g"}, "option 'maxBytesPerBatch' = 2147483648: must be at most 1g"),
    ({"subscribe": "a", "targetRecordsPerPartition": "0"},
     "option 'targetRecordsPerPartition' = '0': must be greater than 0"),
    # The broker read -3 as "the record with the largest timestamp": a read from there, without a word.
    ({"subscribe": "a", "startingOffsets": '{"a":{"0":-3,"1":-2}}'},
     "option 'startingOffsets' = '{\"a\":{\"0\":-3,\"1\":-2}}': offset -3 of topic a partition 0: expected an "
     "offset (>= 0), -2 for earliest or -1 for latest"),
    ({"subscribe": "a", "endingOffsets": '{"a":{"0":-1,"1":-7}}'}, "offset -7 of topic a partition 1: expected"),
]


@pytest.mark.parametrize("raw, message", BAD_OPTIONS)
def test_bad_options_are_named_with_their_value(kafka_bootstrap, raw, message):
    with pytest.raises(OptionError, match=re.escape(message)):
        options(kafka_bootstrap, **raw)


def test_missing_bootstrap_servers():
    with pytest.raises(OptionError, match="'kafka.bootstrap.servers': required option is missing"):
        KafkaSourceOptions.from_options({"subscribe": "a"})


@pytest.mark.parametrize(
    "raw, stream, message",
    [
        ({"startingOffsets": "latest"}, False, "starting offset can't be latest for batch queries"),
        ({"startingOffsets": '{"a":{"0":-1}}'}, False, "offset for a-0 can't be latest for batch queries"),
        ({"endingOffsets": "earliest"}, False, "ending offset can't be earliest for batch queries"),
        ({"maxOffsetsPerTrigger": "5"}, False, "is only valid in streaming queries"),
        ({"endingOffsets": "latest"}, True, "ending offsets are not valid in streaming queries"),
        ({"kafka.key.deserializer": "x"}, True, "keys are always read as bytes"),
        # librdkafka's word for it is its alias fetch.message.max.bytes, and without the value
        ({"kafka.max.partition.fetch.bytes": "abc"}, False,
         "option 'kafka.max.partition.fetch.bytes' = 'abc': librdkafka refuses it"),
        ({"kafka.isolation.level": "sometimes"}, True, "option 'kafka.isolation.level' = 'sometimes': librdkafka "
                                                       'refuses it: Invalid value "sometimes"'),
        # was named as kafka.security.protocol, which alone librdkafka refuses too (no GSSAPI)
        ({"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "SCRAM-SHA-999", "kafka.sasl.username": "u",
          "kafka.sasl.password": "pw-3xq7"}, False,
         "option 'kafka.sasl.mechanism' = 'SCRAM-SHA-999': librdkafka refuses it: Failed to create consumer: "
         "Unsupported hash function: SCRAM-SHA-999"),
    ],
)
def test_bad_options_fail_at_query_start(spark, kafka_bootstrap, tmp_path, raw, stream, message):
    df_options = {"subscribe": "a", **raw}
    with pytest.raises((PySparkException, StreamingQueryException)) as info:
        df = source(spark, kafka_bootstrap, stream, **df_options)
        if stream:
            memory_stream(df, "bad_options", tmp_path).awaitTermination(60)
        else:
            df.collect()
    assert message in str(info.value) and "pw-3xq7" not in str(info.value)


def test_client_secrets_stay_out_of_repr(kafka_bootstrap):
    config = options(kafka_bootstrap, subscribe="a", **{"kafka.sasl.password": "hunter2"})
    assert config.client["sasl.password"] == "hunter2" and "hunter2" not in repr(config)


def test_typed_options_render_to_the_same_string_options(kafka_bootstrap):
    typed = KafkaSourceOptions(assign={"t": (0, 1)}, starting_offsets={"t": {0: 5, 1: -2}},
                               max_offsets_per_trigger=100, include_headers=True,
                               extra={"kafka.bootstrap.servers": kafka_bootstrap})
    rendered = typed.to_options()
    assert rendered["assign"] == '{"t": [0, 1]}' and rendered["includeHeaders"] == "true"
    assert KafkaSourceOptions.from_options(rendered) == typed


def test_consumer_defaults_differ_from_librdkafkas_unless_set(kafka_bootstrap):
    # librdkafka's 1 MiB read a 4-partition task 3-4x slower, its 1 s backoff on a full queue one
    # partition of 500k records 2x slower (docs/kafka-source.md, Speed), and its sparse connections
    # often held a new consumer's first request ~50 ms (Query start).
    defaults = consumer_config(options(kafka_bootstrap, subscribe="t"))
    assert defaults["max.partition.fetch.bytes"] == 10 << 20 and defaults["fetch.queue.backoff.ms"] == 10
    assert defaults["enable.sparse.connections"] is False
    given = consumer_config(options(kafka_bootstrap, subscribe="t", **{"kafka.max.partition.fetch.bytes": "1048576",
                                                                       "kafka.fetch.queue.backoff.ms": "1000",
                                                                       "kafka.enable.sparse.connections": "true"}))
    assert given["max.partition.fetch.bytes"] == "1048576" and given["fetch.queue.backoff.ms"] == "1000"
    assert given["enable.sparse.connections"] == "true"


# -- batch reads ----------------------------------------------------------------------------


@pytest.mark.smoke
def test_batch_read_schema_columns_and_headers(spark, kafka_bootstrap, topic):
    name = topic(2)
    produce(kafka_bootstrap, name, [b"a0", b"a1"], partition=0, key=b"k", timestamp=1_700_000_000_000)
    produce(kafka_bootstrap, name, [b"b0"], partition=1, headers=[("h1", b"x"), ("h2", None)])
    df = source(spark, kafka_bootstrap, subscribe=name, includeHeaders="true")
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,timestamp:timestamp,"
        "timestampType:int,headers:array<struct<key:string,value:binary>>>")
    rows = sorted(df.collect(), key=lambda r: (r.partition, r.offset))
    assert [(r.key, r.value, r.topic, r.partition, r.offset, r.timestampType) for r in rows] == [
        (b"k", b"a0", name, 0, 0, 0), (b"k", b"a1", name, 0, 1, 0), (None, b"b0", name, 1, 0, 0)]
    assert rows[0].timestamp.timestamp() == 1_700_000_000
    assert rows[0].headers is None
    assert [(h.key, h.value) for h in rows[2].headers] == [("h1", b"x"), ("h2", None)]
    assert "headers" not in source(spark, kafka_bootstrap, subscribe=name).columns


def test_a_given_schema_selects_those_columns_in_its_order(spark, kafka_bootstrap, topic, tmp_path):
    name = topic(2)
    produce(kafka_bootstrap, name, [b"a0", b"a1"], partition=0)
    produce(kafka_bootstrap, name, [b"b0"], partition=1)
    reader = spark.read.format(FORMAT).schema("OFFSET long, value binary, partition int")
    df = reader.option("kafka.bootstrap.servers", kafka_bootstrap).option("subscribe", name).load()
    assert df.schema.simpleString() == "struct<OFFSET:bigint,value:binary,partition:int>"
    assert sorted(tuple(row) for row in df.collect()) == [(0, b"a0", 0), (0, b"b0", 1), (1, b"a1", 0)]
    stream = (spark.readStream.format(FORMAT).schema("value binary").option("kafka.bootstrap.servers", kafka_bootstrap)
              .option("subscribe", name).option("startingOffsets", "earliest").load())  # fmt: skip
    memory_stream(stream, "given_schema", tmp_path, availableNow=True).awaitTermination(120)
    assert sorted(row.value for row in spark.table("given_schema").collect()) == [b"a0", b"a1", b"b0"]


@pytest.mark.parametrize(
    "given, message",
    [
        ("value string", "option 'schema' = 'value string': column 'value' is binary in this source"),
        ("nope int", "option 'schema' = 'nope': the source has no column 'nope'"),
        ("value binary not null", "option 'schema' = 'value NOT NULL': column 'value' can be null"),
        ("value binary, VALUE binary", "a column is named twice"),
    ],
)
def test_a_given_schema_the_source_cannot_give_fails_at_query_start(spark, kafka_bootstrap, given, message):
    reader = spark.read.format(FORMAT).schema(given).option("kafka.bootstrap.servers", kafka_bootstrap)
    with pytest.raises(PySparkException) as info:
        reader.option("subscribe", "a").load().collect()
    assert message in str(info.value)


def test_a_given_schema_may_not_forbid_nulls_the_source_can_give():
    """Spark casts each batch to the given schema: a NOT NULL inside a nullable type would fail a
    task at the first null, so it fails at query start instead."""

    def headers(key_nullable: bool) -> StructType:
        entry = StructType([StructField("key", StringType(), key_nullable), StructField("value", BinaryType())])
        return StructType([StructField("headers", ArrayType(entry))])

    with pytest.raises(OptionError, match="field 'key' of an element of column 'headers' can be null"):
        Projection.of(FORMAT, split_reader.SCHEMA_WITH_HEADERS, headers(key_nullable=False))
    assert Projection.of(FORMAT, split_reader.SCHEMA_WITH_HEADERS, headers(key_nullable=True)).names == ("headers",)


def test_batch_offsets_json_assign_and_min_partitions(spark, kafka_bootstrap, topic):
    name = topic(2)
    produce(kafka_bootstrap, name, [f"p0-{i}" for i in range(100)], partition=0)
    produce(kafka_bootstrap, name, [f"p1-{i}" for i in range(10)], partition=1)
    df = source(spark, kafka_bootstrap, assign=json.dumps({name: [0, 1]}),
                startingOffsets=json.dumps({name: {"0": 90, "1": -2}}),
                endingOffsets=json.dumps({name: {"0": -1, "1": 3}}))
    assert values(df) == sorted([f"p0-{i}" for i in range(90, 100)] + ["p1-0", "p1-1", "p1-2"])
    only_p0 = source(spark, kafka_bootstrap, assign=json.dumps({name: [0]}), minPartitions="4")
    assert only_p0.rdd.getNumPartitions() == 4 and only_p0.count() == 100
    with pytest.raises(PySparkException, match="must name every partition read"):
        source(spark, kafka_bootstrap, subscribe=name, startingOffsets=json.dumps({name: {"0": 1}})).collect()


def test_many_partitions_are_read_once_each_by_a_few_tasks(spark, kafka_bootstrap, topic, tmp_path, batch_partitions):
    name, partitions = topic(210), 210
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 20})
    for partition in range(partitions):
        for i in range(partition % 7 + 1):
            producer.produce(name, value=f"{partition}:{i}", partition=partition)
    assert producer.flush(30) == 0
    every = sorted(f"{p}:{i}" for p in range(partitions) for i in range(p % 7 + 1))
    read = lambda df: sorted(r.value.decode() for r in df.collect()  # noqa: E731
                             if r.value.decode() == f"{r.partition}:{r.offset}")

    packed, spark_like = (source(spark, kafka_bootstrap, subscribe=name, **extra)
                          for extra in ({}, {"targetRecordsPerPartition": "1"}))
    assert (packed.rdd.getNumPartitions(), spark_like.rdd.getNumPartitions()) == (1, partitions)
    assert read(packed) == read(spark_like) == every

    df = source(spark, kafka_bootstrap, True, subscribe=name, startingOffsets="earliest", maxOffsetsPerTrigger="300",
                targetRecordsPerPartition="100")
    batches = batch_partitions(df.selectExpr("CAST(value AS STRING)"), str(tmp_path / "cp"))
    for tasks in batches.values():  # a task is closed when the next range (at most 7 records) does not fit
        sizes = [len(tasks[task]) for task in sorted(tasks)]
        assert max(sizes) <= 100 and min(sizes[:-1], default=94) > 93, sizes
    assert sorted(value for tasks in batches.values() for rows in tasks.values() for value in rows) == every


def test_batch_by_timestamps(spark, kafka_bootstrap, topic):
    name, base = topic(1), 1_700_000_000_000
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(10):
        producer.produce(name, value=f"v{i}", partition=0, timestamp=base + i * 1000)
    producer.flush(30)
    read = lambda **o: values(source(spark, kafka_bootstrap, subscribe=name, **o))  # noqa: E731
    assert read(startingTimestamp=str(base + 7000)) == ["v7", "v8", "v9"]
    assert read(startingOffsetsByTimestamp=json.dumps({name: {"0": base + 2500}}),
                endingTimestamp=str(base + 5000)) == ["v3", "v4"]
    assert read(startingTimestamp=str(base + 99_000), startingOffsetsByTimestampStrategy="latest") == []
    with pytest.raises(PySparkException, match=f"no record at or after timestamp {base + 99_000} in topic {name}"):
        read(startingTimestamp=str(base + 99_000))
    # Per-partition start and end timestamps, the start after the end: the read fails before either
    # is resolved, as Spark's ("The specified start timestamp ... is greater than the end timestamp"),
    # also where both resolve to one offset and the read would be empty: it was read without a word
    # (found by a differential run against Spark's source). Spark checks only these two options
    # against each other; with startingTimestamp or endingTimestamp both read on.
    per_partition = lambda start, end: read(  # noqa: E731
        startingOffsetsByTimestamp=json.dumps({name: {"0": start}}),
        endingOffsetsByTimestamp=json.dumps({name: {"0": end}}), startingOffsetsByTimestampStrategy="latest")
    with pytest.raises(PySparkException, match=f"topic {name} partition 0: the start timestamp {base + 99_001} "
                                               f".option 'startingOffsetsByTimestamp'. is after the end timestamp "
                                               f"{base + 99_000} .option 'endingOffsetsByTimestamp'."):
        per_partition(base + 99_001, base + 99_000)
    assert per_partition(base + 99_000, base + 99_000) == []
    assert read(startingTimestamp=str(base + 99_001), endingTimestamp=str(base + 99_000),
                startingOffsetsByTimestampStrategy="latest") == []


@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
def test_batch_start_after_its_end_fails_naming_both_options(spark, kafka_bootstrap, topic, fail_on_data_loss):
    # Was taken for data loss: "topic recreated?" or, with failOnDataLoss=false, a read from the
    # earliest offset of records before the start asked for. Spark's batch read fails too.
    name = topic(2)
    produce(kafka_bootstrap, name, [f"p0-{i}" for i in range(5)], partition=0)
    read = lambda **o: values(  # noqa: E731
        source(spark, kafka_bootstrap, subscribe=name, failOnDataLoss=fail_on_data_loss, **o))
    with pytest.raises(PySparkException) as info:
        read(startingOffsets=json.dumps({name: {"0": 3, "1": -2}}), endingOffsets=json.dumps({name: {"0": 2, "1": -1}}))
    assert (f"topic {name} partition 0: the start offset 3 (option 'startingOffsets') is after the end offset 2 "
            "(option 'endingOffsets')") in str(info.value)
    with pytest.raises(PySparkException, match="start offset 9 .*is after the end offset 5 .option 'endingOffsets'"):
        read(startingOffsets=json.dumps({name: {"0": 9, "1": -2}}))
    assert read(startingOffsets=json.dumps({name: {"0": 2, "1": -2}}),
                endingOffsets=json.dumps({name: {"0": 2, "1": -1}})) == []


def test_an_assigned_partition_that_does_not_exist_fails_at_query_start(spark, kafka_bootstrap, topic, unique):
    # Failed in the offsets request, naming the partition but not the option, or for a missing
    # topic neither ("cannot fetch the earliest offsets ...: Unknown partition").
    name = topic(2)
    with pytest.raises(PySparkException) as info:
        source(spark, kafka_bootstrap, assign=json.dumps({name: [0, 99]})).collect()
    assert (f"option 'assign' = {{'{name}': (0, 99)}}: topic {name} has no partition 99 (its partitions: 0 to 1)"
            in str(info.value))
    stream = KafkaStreamReader(options(kafka_bootstrap, assign=json.dumps({name: [1], f"{unique}-x": [0]})))
    try:
        with pytest.raises(OptionError, match=f"option 'assign' = .*: topic {unique}-x does not exist"):
            stream.initialOffset()
    finally:
        stream.stop()


def test_a_stream_starting_past_the_latest_offset_fails_at_query_start(spark, kafka_bootstrap, topic, tmp_path):
    # Was data loss at the first micro-batch, naming no option ("topic recreated?"), and with
    # failOnDataLoss=false a read from the earliest offset. Offsets never written cannot be lost.
    name = topic(2)
    produce(kafka_bootstrap, name, [f"v{i}" for i in range(5)])
    starting = json.dumps({name: {"0": 9, "1": -2}})
    query = memory_stream(source(spark, kafka_bootstrap, True, subscribe=name, startingOffsets=starting),
                          "past_latest", tmp_path / "cp")
    with pytest.raises(StreamingQueryException) as info:
        query.awaitTermination(60)
    assert (f"OptionError: connectors.kafka: option 'startingOffsets' = {{'{name}': {{0: 9, 1: -2}}}}: offset 9 of "
            f"topic {name} partition 0 is past its latest offset 5 (-1 starts at the latest offset)") in str(info.value)
    assert "DataLossError" not in str(info.value)

    def initial_offset(first: int, fail_on_data_loss: str) -> dict:
        stream = KafkaStreamReader(options(kafka_bootstrap, subscribe=name, failOnDataLoss=fail_on_data_loss,
                                           startingOffsets=json.dumps({name: {"0": first, "1": -2}})))
        try:
            return stream.initialOffset()
        finally:
            stream.stop()

    with pytest.raises(OptionError, match="option 'startingOffsets' = .*: offset 9 of topic"):
        initial_offset(9, fail_on_data_loss="false")
    assert initial_offset(5, fail_on_data_loss="true") == {name: {"0": 5, "1": 0}}  # the latest offset itself


def test_unreachable_broker_fails_at_query_start(spark, tmp_path):
    dead = {"kafka.socket.timeout.ms": "1500", "fetchOffset.numRetries": "1"}
    message = "cannot list topics from the brokers at kafka.bootstrap.servers = '127.0.0.1:9'"
    with pytest.raises(PySparkException, match=message):
        source(spark, "127.0.0.1:9", subscribe="a", **dead).collect()
    query = memory_stream(source(spark, "127.0.0.1:9", True, subscribe="a", **dead), "unreachable", tmp_path)
    with pytest.raises(StreamingQueryException, match=message):
        query.awaitTermination(120)


# -- streams --------------------------------------------------------------------------------


@pytest.mark.smoke
def test_stream_starts_at_latest_and_restart_resumes_from_checkpoint(spark, kafka_bootstrap, topic, tmp_path):
    name = topic(2)
    produce(kafka_bootstrap, name, ["old"])
    df = source(spark, kafka_bootstrap, True, subscribe=name)
    query = memory_stream(df, "from_latest", tmp_path / "a")
    try:
        query.processAllAvailable()
        produce(kafka_bootstrap, name, ["new0"], partition=0)
        produce(kafka_bootstrap, name, ["new1"], partition=1)
        wait_for(lambda: len(spark.table("from_latest").collect()) == 2, what="the new records")
        query.processAllAvailable()
        assert values(spark.table("from_latest")) == ["new0", "new1"]
        if ADMISSION_CONTROL:  # Spark 4.1 never asks reportLatestOffset()
            assert json.loads(query.lastProgress["sources"][0]["latestOffset"]) == {name: {"0": 2, "1": 1}}
    finally:
        query.stop()

    # A restarted query ignores startingOffsets: it resumes exactly after what it processed.
    checkpoint, out = str(tmp_path / "b"), tmp_path / "out"
    for run, value in enumerate(["x", "y"]):
        produce(kafka_bootstrap, name, [value])
        df = source(spark, kafka_bootstrap, True, subscribe=name, startingOffsets="earliest" if run == 0 else "latest")
        (df.select("value").writeStream.format("parquet").option("path", str(out / str(run)))
         .option("checkpointLocation", checkpoint).trigger(availableNow=True).start().awaitTermination(120))
    written = lambda run: sorted(v.decode() for v in pq.read_table(out / run).column("value").to_pylist())  # noqa: E731
    assert written("0") == ["new0", "new1", "old", "x"]
    assert written("1") == ["y"]


def test_replayed_batch_keeps_its_partitions_when_the_split_changes(spark, kafka_bootstrap, topic, tmp_path,
                                                                    batch_partitions):
    name = topic(1)
    produce(kafka_bootstrap, name, [str(i) for i in range(30)])

    def stream(**options):
        options = {"subscribe": name, "startingOffsets": "earliest", "maxOffsetsPerTrigger": "10", **options}
        return source(spark, kafka_bootstrap, True, **options).select("offset")

    checkpoint = str(tmp_path / "cp")
    first = batch_partitions(stream(minPartitions="2"), checkpoint, fail_at=1)
    assert first[1] == {0: list(range(10, 15)), 1: list(range(15, 20))}
    after = batch_partitions(stream(minPartitions="3"), checkpoint)  # restarted with another split
    assert after[1] == first[1]  # the replay: the rows of the first run's partitions
    assert after[2] == {0: list(range(20, 23)), 1: list(range(23, 26)), 2: list(range(26, 30))}  # a new batch


def test_replayed_first_batch_starts_where_it_first_did(spark, kafka_bootstrap, topic, tmp_path, batch_partitions):
    name = topic(1)
    produce(kafka_bootstrap, name, ["old"] * 5)
    df = source(spark, kafka_bootstrap, True, subscribe=name).select("offset")  # from latest: offset 5
    checkpoint = str(tmp_path / "cp")
    assert batch_partitions(df, checkpoint, fail_at=0) == {0: {}}  # Spark runs a first batch, even empty
    produce(kafka_bootstrap, name, ["new"] * 5)
    # Spark asks initialOffset() again to replay a first batch: "latest" is 10 by now, past its end
    assert batch_partitions(df, checkpoint) == {0: {}, 1: {0: [5, 6, 7, 8, 9]}}


def test_replayed_batch_of_an_older_version_keeps_one_task_per_range(spark, kafka_bootstrap, topic, tmp_path,
                                                                     batch_partitions):
    name = topic(3)
    for partition in range(3):
        produce(kafka_bootstrap, name, [f"{partition}-{i}" for i in range(5)], partition=partition)
    df = source(spark, kafka_bootstrap, True, subscribe=name, startingOffsets="earliest")
    df = df.selectExpr("CAST(value AS STRING)")
    checkpoint = tmp_path / "cp"
    every = sorted(f"{p}-{i}" for p in range(3) for i in range(5))
    first = batch_partitions(df, str(checkpoint), fail_at=0)
    assert list(first[0]) == [0] and sorted(first[0][0]) == every  # packed into one task
    # What the version before packing wrote: a split without a target.
    log = checkpoint / "offsets" / "0"
    lines = log.read_text().split("\n")
    end = json.loads(lines[-1])
    del end[SPLIT]["targetRecordsPerPartition"]
    log.write_text("\n".join([*lines[:-1], json.dumps(end)]))
    replayed = batch_partitions(df, str(checkpoint))
    assert {part: sorted(rows) for part, rows in replayed[0].items()} == {
        p: [f"{p}-{i}" for i in range(5)] for p in range(3)}


def test_available_now_with_max_offsets_per_trigger(spark, kafka_bootstrap, topic, tmp_path):
    name = topic(3)
    for partition in range(3):
        produce(kafka_bootstrap, name, [f"{partition}-{i}" for i in range(100)], partition=partition)
    df = source(spark, kafka_bootstrap, True, subscribe=name, startingOffsets="earliest", maxOffsetsPerTrigger="120")
    query = memory_stream(df, "capped", tmp_path, availableNow=True)
    query.awaitTermination(180)
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sizes == [120, 120, 60]
    assert spark.table("capped").count() == 300
    assert spark.table("capped").select("partition", "offset").distinct().count() == 300


def topics(offset: dict) -> dict:
    """An offset's topics (without the split and start of its batch)."""
    return to_json(from_json(offset))


def test_min_offsets_per_trigger_waits_until_enough_or_max_delay(kafka_bootstrap, topic):
    name = topic(1)
    reader = KafkaStreamReader(options(kafka_bootstrap, subscribe=name, minOffsetsPerTrigger="5",
                                       maxTriggerDelay="2s", **{"fetchOffset.minIntervalMs": "0"}))
    start = reader.initialOffset()
    limit = reader.getDefaultReadLimit()
    assert topics(reader.latestOffset(start, limit)) == start  # the very first trigger always runs (Spark's rule)
    produce(kafka_bootstrap, name, ["a", "b"])
    assert topics(reader.latestOffset(start, limit)) == start  # 2 < 5, delay not yet over
    produce(kafka_bootstrap, name, ["c", "d", "e"])
    after = reader.latestOffset(start, limit)
    assert topics(after) == {name: {"0": 5}}  # enough
    produce(kafka_bootstrap, name, ["f"])
    assert reader.latestOffset(after, limit) == after
    delayed = wait_for(lambda: (end := reader.latestOffset(after, limit)) != after and end, timeout=10,
                       what="maxTriggerDelay")
    assert topics(delayed) == {name: {"0": 6}}
    reader.stop()


def test_subscribe_asks_for_its_topics_metadata_only(kafka_bootstrap, topic, unique, monkeypatch):
    """Every trigger lists the partitions read; with subscribe that is the named topics' metadata,
    never the whole cluster's, which grows with every topic on it. A missing topic has none, and
    asking does not create it."""
    first, second = topic(3), topic(2, name=f"{unique}-second")
    missing = f"{unique}-missing"
    asked = []

    class Recording(Consumer):
        def list_topics(self, topic=None, timeout=-1):
            asked.append(topic)
            return super().list_topics(topic, timeout)

    monkeypatch.setattr(client, "Consumer", Recording)
    broker = BrokerClient(options(kafka_bootstrap, subscribe=f"{first},{missing},{second}"))
    try:
        assert broker.partitions() == [(first, 0), (first, 1), (first, 2), (second, 0), (second, 1)]
    finally:
        broker.close()
    assert sorted(asked) == sorted([first, missing, second])
    assert missing not in AdminClient({"bootstrap.servers": kafka_bootstrap}).list_topics(timeout=10).topics


def test_subscribe_pattern_matches_anywhere_in_a_topic_name_as_sparks(kafka_bootstrap, topic, unique):
    """Spark 4.2's source finds the topics of ``subscribePattern`` with Scala's ``findFirstIn``: a
    match anywhere in the name, not the Java consumer's full match. Found by a differential run
    against it: ``<prefix>-plain0|logappend3`` read ``<prefix>-logappend3`` too in Spark's source,
    only ``<prefix>-plain0`` in ours; with ``startingOffsets`` JSON for that one topic Spark's read
    then failed and ours read it."""
    names = [topic(1, name=f"{unique}-a"), topic(2, name=f"x{unique}"), topic(1, name=f"{unique}b-c")]

    def read(pattern: str) -> list[tuple[str, int]]:
        broker = BrokerClient(options(kafka_bootstrap, subscribePattern=pattern))
        try:
            return [tp for tp in broker.partitions() if unique in tp[0]]
        finally:
            broker.close()

    everything = [(names[0], 0), (names[2], 0), (names[1], 0), (names[1], 1)]
    assert read(unique) == everything
    assert read(f"{unique}-a|b-c") == [(names[0], 0), (names[2], 0)]
    assert read(f"^{unique}-a$") == [(names[0], 0)]  # anchors still ask for the whole name


def test_subscribe_pattern_skips_only_kafkas_internal_topics(kafka_bootstrap, topic, unique):
    """Spark's source lists topics through Kafka's admin client, which leaves out Kafka's internal
    topics alone: a user topic whose name starts with "__" is read (ours skipped every "__" name)."""
    name = topic(1, name=f"__{unique}")
    committer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": unique})
    try:  # a group's committed offset makes the broker create __consumer_offsets, if no test did
        committer.commit(offsets=[TopicPartition(name, 0, 0)], asynchronous=False)
    finally:
        committer.close()
    broker = BrokerClient(options(kafka_bootstrap, subscribePattern=f"^__({unique}|consumer_offsets)$"))
    try:
        assert broker.partitions() == [(name, 0)]
    finally:
        broker.close()


def test_latest_offsets_are_throttled(kafka_bootstrap, topic):
    name = topic(1)
    reader = KafkaStreamReader(options(kafka_bootstrap, subscribe=name, **{"fetchOffset.minIntervalMs": "1h"}))
    start = reader.initialOffset()
    assert topics(reader.latestOffset(start, reader.getDefaultReadLimit())) == start
    produce(kafka_bootstrap, name, ["a"])
    assert topics(reader.latestOffset(start, reader.getDefaultReadLimit())) == start  # the cached answer
    reader.prepareForTriggerAvailableNow()  # always fresh
    assert topics(reader.latestOffset(start, reader.getDefaultReadLimit())) == {name: {"0": 1}}
    reader.stop()


def test_partition_added_mid_stream_is_read_from_earliest(spark, kafka_bootstrap, admin, topic, tmp_path):
    name = topic(1)
    df = source(spark, kafka_bootstrap, True, subscribe=name, **{"fetchOffset.minIntervalMs": "0"})
    query = memory_stream(df, "added_partition", tmp_path)
    try:
        query.processAllAvailable()
        admin.create_partitions([NewPartitions(name, 2)])[name].result(30)
        produce(kafka_bootstrap, name, ["p1-0", "p1-1"], partition=1)
        produce(kafka_bootstrap, name, ["p0-0"], partition=0)
        wait_for(lambda: spark.table("added_partition").count() == 3, what="records of the new partition")
        rows = spark.table("added_partition").where("partition = 1").orderBy("offset").collect()
        assert [(r.offset, r.value) for r in rows] == [(0, b"p1-0"), (1, b"p1-1")]
    finally:
        query.stop()


def test_pattern_subscription_picks_up_new_topics_from_earliest(spark, kafka_bootstrap, topic, unique, tmp_path):
    first = topic(1, name=f"{unique}-a")
    produce(kafka_bootstrap, first, ["a-before"])
    df = source(spark, kafka_bootstrap, True, subscribePattern=f"{unique}-.*", **{"fetchOffset.minIntervalMs": "0"})
    query = memory_stream(df, "pattern", tmp_path)
    try:
        query.processAllAvailable()
        second = topic(2, name=f"{unique}-b")
        topic(1, name=f"other{unique}")  # does not match
        produce(kafka_bootstrap, second, ["b0"], partition=0)
        produce(kafka_bootstrap, second, ["b1"], partition=1)
        produce(kafka_bootstrap, first, ["a-after"])
        wait_for(lambda: spark.table("pattern").count() == 3, what="records of the new topic")
        assert values(spark.table("pattern")) == ["a-after", "b0", "b1"]  # latest for the first topic
    finally:
        query.stop()


def test_group_commits_are_visible_to_an_admin_client(spark, kafka_bootstrap, admin, topic, unique, tmp_path):
    name, group = topic(2), f"{unique}-group"
    produce(kafka_bootstrap, name, ["a", "b", "c"], partition=0)
    produce(kafka_bootstrap, name, ["d"], partition=1)
    df = source(spark, kafka_bootstrap, True, subscribe=name, startingOffsets="earliest", **{"kafka.group.id": group})
    query = memory_stream(df, "group_commits", tmp_path)

    def committed() -> dict[int, int]:
        result = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(30)
        return {tp.partition: tp.offset for tp in result.topic_partitions if tp.offset >= 0}

    try:
        wait_for(lambda: committed() == {0: 3, 1: 1}, what="offsets committed to the group")
        produce(kafka_bootstrap, name, ["e"], partition=1)
        wait_for(lambda: committed() == {0: 3, 1: 2}, what="the next commit")
    finally:
        query.stop()


# -- data loss ------------------------------------------------------------------------------


def _delete_before(admin: AdminClient, name: str, offset: int) -> None:
    for future in admin.delete_records([TopicPartition(name, 0, offset)]).values():
        future.result(30)


@pytest.mark.parametrize("fail", [True, False])
def test_data_loss_in_a_stream(spark, kafka_bootstrap, admin, topic, tmp_path, fail):
    name, out = topic(1), tmp_path / "out"
    produce(kafka_bootstrap, name, [f"v{i}" for i in range(10)])

    def run():
        df = source(spark, kafka_bootstrap, True, subscribe=name, startingOffsets="earliest",
                    failOnDataLoss=str(fail).lower())
        return (df.select("value").writeStream.format("parquet").option("path", str(out))
                .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start())

    run().awaitTermination(120)
    produce(kafka_bootstrap, name, [f"v{i}" for i in range(10, 20)])
    _delete_before(admin, name, 15)  # offsets 10..14 were never read: lost
    query = run()
    if fail:
        with pytest.raises(StreamingQueryException,
                           match=f"topic {name} partition 0: offset 10 was deleted; earliest available offset is 15"):
            query.awaitTermination(120)
    else:
        query.awaitTermination(120)
        read = sorted(v.decode() for v in pq.read_table(out).column("value").to_pylist())
        assert read == sorted(f"v{i}" for i in [*range(10), *range(15, 20)])


def read_rows(reader: RangeReader) -> list[tuple]:
    """(topic, partition, offset, value) of every record a task reads, in the order read per partition."""
    rows = [row for batch in reader for row in zip(*(batch.column(c).to_pylist()
                                                       for c in ("topic", "partition", "offset", "value")))]
    return sorted(rows, key=lambda row: row[:2])  # stable: offsets keep the order they were read in


def test_data_loss_while_a_task_reads(kafka_bootstrap, admin, topic):
    """Records deleted between planning and reading: the task reports it, or skips to earliest,
    and goes on reading its other partitions."""
    name = topic(2)
    produce(kafka_bootstrap, name, [f"v{i}" for i in range(20)])
    produce(kafka_bootstrap, name, ["w0", "w1"], partition=1)
    _delete_before(admin, name, 15)
    planned = [OffsetRange(name, 0, 5, 20), OffsetRange(name, 1, 0, 2)]
    with pytest.raises(DataLossError, match=f"topic {name} partition 0: offset 5 was deleted; earliest available offset is 15"):
        list(RangeReader(options(kafka_bootstrap, subscribe=name), *planned))
    rows = read_rows(RangeReader(options(kafka_bootstrap, subscribe=name, failOnDataLoss="false"), *planned))
    assert [(p, o, v.decode()) for _, p, o, v in rows] == [
        *((0, i, f"v{i}") for i in range(15, 20)), (1, 0, "w0"), (1, 1, "w1")]


def test_one_consumer_reads_every_range_of_a_task_up_to_its_end(kafka_bootstrap, topic, unique):
    first, second = topic(3), topic(1, name=f"{unique}-second")
    for partition in range(3):
        produce(kafka_bootstrap, first, [f"{partition}-{i}" for i in range(500)], partition=partition,
                headers=[("h", str(partition).encode())])
    produce(kafka_bootstrap, second, [f"s-{i}" for i in range(10)])
    planned = [OffsetRange(first, 0, 0, 3), OffsetRange(first, 1, 100, 400), OffsetRange(first, 2, 499, 500),
               OffsetRange(second, 0, 4, 6)]  # past every end but the last there are more records
    expected = [(first, 0, i, b"0-%d" % i) for i in range(3)] + [(first, 1, i, b"1-%d" % i) for i in range(100, 400)]
    expected += [(first, 2, 499, b"2-499"), (second, 0, 4, b"s-4"), (second, 0, 5, b"s-5")]
    for tasks in (planned, planned[:3]):  # several topics, and one
        config = options(kafka_bootstrap, subscribe=first, includeHeaders="true", maxBytesPerBatch="1k")
        batches = list(RangeReader(config, *tasks))
        assert max(batch.num_rows for batch in batches) < 300  # maxBytesPerBatch still bounds every batch
        headers = {h and h[0]["value"] for batch in batches for h in batch.column("headers").to_pylist()}
        assert headers == ({b"0", b"1", b"2", None} if len(tasks) == 4 else {b"0", b"1", b"2"})
        assert read_rows(RangeReader(config, *tasks)) == [row for row in expected if row[0] == first or len(tasks) == 4]


def test_a_task_hands_its_ranges_over_one_after_another_in_offset_order(kafka_bootstrap, topic):
    """The exactly-once sinks skip what an earlier attempt committed by counting rows, so every
    attempt of a task must see them in the same order, however the partitions' fetches interleave.
    Later ranges fetch meanwhile, held back within their share of maxBytesPerBatch (paused past it)."""
    name = topic(4)
    for partition in range(4):
        produce(kafka_bootstrap, name, [f"{partition}-{i}-".encode() + bytes(1000) for i in range(3000)],
                partition=partition)
    planned = [OffsetRange(name, p, 100 * p, 3000 - p) for p in range(4)]
    config = options(kafka_bootstrap, subscribe=name, maxBytesPerBatch="128k")
    expected = [(p, o) for r in planned for p, o in zip([r.partition] * r.size, range(r.start, r.end))]
    for _ in range(2):
        read = [(p, o) for batch in RangeReader(config, *planned)
                for p, o in zip(batch.column("partition").to_pylist(), batch.column("offset").to_pylist())]
        assert read == expected


@pytest.fixture
def recording(monkeypatch) -> type[Consumer]:
    """Tasks' consumers keep what their consume() calls delivered, and the size of each pause()."""

    class Recording(Consumer):
        delivered: list = []
        pauses: list = []

        def consume(self, *args, **kwargs):
            messages = super().consume(*args, **kwargs)
            self.delivered.extend(m for m in messages if m.error() is None)
            return messages

        def pause(self, partitions):
            self.pauses.append(len(partitions))
            return super().pause(partitions)

    monkeypatch.setattr(split_reader, "Consumer", Recording)
    return Recording


def test_a_task_takes_a_deep_backlog_past_its_ranges_ends_into_python_once(kafka_bootstrap, topic, recording):
    """Small ranges with a deep backlog behind each, as when a backlog is read in small triggers:
    after one small first call, each consume() asks for the rest of the range at the head of
    librdkafka's queue, so what was fetched past an end is dropped inside librdkafka (the range's
    partition is paused), not made into Python messages only to be thrown away."""
    name = topic(20)
    for partition in range(20):
        produce(kafka_bootstrap, name, [f"{partition}-{i}" for i in range(500)], partition=partition)
    rows = read_rows(RangeReader(options(kafka_bootstrap, subscribe=name), *(OffsetRange(name, p, 40, 50)
                                                                             for p in range(20))))
    assert [(p, o, v.decode()) for _, p, o, v in rows] == [(p, o, f"{p}-{o}") for p in range(20) for o in range(40, 50)]
    # the first call asks for what 16 ranges need (160), then no record past an end comes
    assert 200 <= len(recording.delivered) <= 200 + 160


def test_a_task_closes_many_small_ranges_a_few_calls_at_a_time(kafka_bootstrap, topic, recording):
    """With few records past the ends (a stream keeping up), one consume() asks for what every
    open range needs and one pause() closes all the ranges it finished: a task of many small
    ranges makes a few calls, not a consume() and a pause() per range."""
    name = topic(20)
    for partition in range(20):
        produce(kafka_bootstrap, name, [f"{partition}-{i}" for i in range(12)], partition=partition)
    rows = read_rows(RangeReader(options(kafka_bootstrap, subscribe=name), *(OffsetRange(name, p, 0, 10)
                                                                             for p in range(20))))
    assert [(p, o, v.decode()) for _, p, o, v in rows] == [(p, o, f"{p}-{o}") for p in range(20) for o in range(10)]
    assert sum(recording.pauses) == 20 and len(recording.pauses) <= 5, recording.pauses


def test_a_task_builds_only_the_columns_asked_for(kafka_bootstrap, topic):
    name = topic(2)
    produce(kafka_bootstrap, name, [b"a0", b"a1"], partition=0, key=b"k")
    produce(kafka_bootstrap, name, [b"b0"], partition=1)
    ranges = [OffsetRange(name, 0, 0, 2), OffsetRange(name, 1, 0, 1)]
    config = options(kafka_bootstrap, subscribe=name, includeHeaders="true")
    batches = list(RangeReader(config, *ranges, columns=frozenset({"offset", "value", "nope"})))
    assert {tuple(batch.schema.names) for batch in batches} == {("value", "offset")}
    assert sorted((row["value"], row["offset"]) for batch in batches for row in batch.to_pylist()) == [
        (b"a0", 0), (b"a1", 1), (b"b0", 0)]
    everything = list(RangeReader(config, *ranges))
    assert everything[0].schema.names == [*split_reader.SCHEMA.names, "headers"]


def test_a_task_never_waits_out_consume_while_records_are_queued(kafka_bootstrap, topic, monkeypatch):
    """consume(n, timeout) waits its whole timeout unless n messages come. At the end of a topic
    fewer than asked are left, so a waiting call must ask for one message only (the next fetch's
    first); every other call takes what is queued without waiting."""
    name = topic(8)
    for partition in range(8):
        produce(kafka_bootstrap, name, [f"{partition}-{i}" for i in range(50)], partition=partition)
    calls = []

    class Recording(Consumer):
        def consume(self, num_messages=1, timeout=-1):
            messages = super().consume(num_messages, timeout)
            calls.append((num_messages, timeout, len(messages)))
            return messages

    monkeypatch.setattr(split_reader, "Consumer", Recording)
    rows = read_rows(RangeReader(options(kafka_bootstrap, subscribe=name), *(OffsetRange(name, p, 40, 50)
                                                                             for p in range(8))))
    assert len(rows) == 80
    assert calls and all(asked == 1 or timeout == 0 for asked, timeout, _ in calls), calls


def test_the_next_task_goes_on_with_the_consumer_the_last_one_kept(kafka_bootstrap, topic, monkeypatch):
    """A micro-batch's task usually starts where the last one ended: it takes the consumer that
    task kept in this worker instead of opening one, and starts exactly at its ranges' starts
    even when the last task took records past its ends into Python (and dropped them)."""
    name = topic(2)
    for partition in range(2):
        produce(kafka_bootstrap, name, [f"{partition}-{i}" for i in range(100)], partition=partition)
    opened = []

    class Counting(Consumer):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            opened.append(self)

    monkeypatch.setattr(split_reader, "Consumer", Counting)
    monkeypatch.setattr(split_reader, "IDLE", IdleClients())
    source_options = options(kafka_bootstrap, subscribe=name)
    with monkeypatch.context() as greedy:  # every consume() asks for more than the ranges hold
        greedy.setattr(RangeReader, "_wanted", lambda self, head, reading: 1000)
        first = read_rows(RangeReader(source_options, *(OffsetRange(name, p, 0, 10) for p in range(2))))
    assert [(p, o) for _, p, o, _ in first] == [(p, o) for p in range(2) for o in range(10)]
    (kept,) = opened
    assert max(at.offset for at in kept.position([TopicPartition(name, p) for p in range(2)])) > 10
    second = read_rows(RangeReader(source_options, *(OffsetRange(name, p, 10, 30) for p in range(2))))
    assert [(p, o, v.decode()) for _, p, o, v in second] == [(p, o, f"{p}-{o}") for p in range(2) for o in range(10, 30)]
    assert opened == [kept]


def test_a_consumer_is_kept_only_after_a_read_to_the_end(kafka_bootstrap, topic, monkeypatch):
    """A read Spark abandoned leaves its consumer mid-range, and consumerCacheSize=0 keeps none."""
    name = topic(1)
    produce(kafka_bootstrap, name, [b"x" * 1000] * 100)
    idle = IdleClients()
    monkeypatch.setattr(split_reader, "IDLE", idle)
    batches = iter(RangeReader(options(kafka_bootstrap, subscribe=name, maxBytesPerBatch="10k"), OffsetRange(name, 0, 0, 100)))
    assert next(batches).num_rows < 100
    batches.close()
    assert not idle._idle
    assert sum(b.num_rows for b in RangeReader(options(kafka_bootstrap, subscribe=name, consumerCacheSize="0"),
                                               OffsetRange(name, 0, 0, 100))) == 100
    assert not idle._idle
    assert sum(b.num_rows for b in RangeReader(options(kafka_bootstrap, subscribe=name), OffsetRange(name, 0, 0, 100))) == 100
    assert len(idle._idle) == 1


def test_a_task_hands_spark_batches_of_at_most_max_bytes_per_batch(kafka_bootstrap, topic):
    name = topic(1)
    produce(kafka_bootstrap, name, [bytes(100_000)] * 20, key=b"k" * 1000)
    reader = RangeReader(options(kafka_bootstrap, subscribe=name, maxBytesPerBatch="250k"), OffsetRange(name, 0, 0, 20))
    batches = list(reader)
    # a batch is handed over as soon as it holds 250 KiB: 3 records of 101 kB
    assert [batch.num_rows for batch in batches] == [3] * 6 + [2]
    assert [batch.column("offset").to_pylist() for batch in batches][-1] == [18, 19]


def test_range_past_the_end_of_a_recreated_topic(kafka_bootstrap, topic):
    name = topic(2)
    produce(kafka_bootstrap, name, ["a", "b"])
    produce(kafka_bootstrap, name, ["c"], partition=1)
    # planned before the topic was recreated smaller
    planned = [OffsetRange(name, 0, 0, 10), OffsetRange(name, 1, 0, 1)]
    with pytest.raises(DataLossError, match=f"topic {name} partition 0 ends at offset 2, but offsets up to 10"):
        list(RangeReader(options(kafka_bootstrap, subscribe=name), *planned))
    rows = read_rows(RangeReader(options(kafka_bootstrap, subscribe=name, failOnDataLoss="false"), *planned))
    assert [v for *_, v in rows] == [b"a", b"b", b"c"]


# -- transactions ---------------------------------------------------------------------------


def test_read_committed_skips_aborted_records_and_never_hangs(spark, kafka_bootstrap, topic, unique, tmp_path):
    name = topic(1)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": unique})
    producer.init_transactions(30)
    for kind, count in [("c", 3), ("a", 4), ("c", 2), ("a", 3)]:  # ends in an aborted transaction
        producer.begin_transaction()
        for i in range(count):
            producer.produce(name, value=f"{kind}{i}", partition=0)
        producer.flush(30)  # the aborted records must reach the log, not just be dropped
        producer.commit_transaction(30) if kind == "c" else producer.abort_transaction(30)
    producer.begin_transaction()  # left open while reading: beyond the last stable offset
    producer.produce(name, value="open", partition=0)
    producer.flush(30)
    committed = ["c0", "c0", "c1", "c1", "c2"]
    strict = {"kafka.isolation.level": "read_committed", "kafkaConsumer.pollTimeoutMs": "20s"}
    try:
        assert values(source(spark, kafka_bootstrap, subscribe=name, **strict)) == committed
        assert len(values(source(spark, kafka_bootstrap, subscribe=name))) == 13  # read_uncommitted: all
        # Micro-batches of 2 offsets end on markers and aborted records again and again.
        df = source(spark, kafka_bootstrap, True, subscribe=name, startingOffsets="earliest",
                    maxOffsetsPerTrigger="2", **strict)
        memory_stream(df, "committed_only", tmp_path, availableNow=True).awaitTermination(300)
        assert values(spark.table("committed_only")) == committed
    finally:
        producer.abort_transaction(30)


def test_read_committed_ranges_of_one_task_end_on_markers(kafka_bootstrap, topic, unique):
    name = topic(3)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": unique})
    producer.init_transactions(30)
    # In each partition: c0 c1 c2 (0-2), marker 3, a0 a1 (4-5) aborted, marker 6, c0 c1 (7-8), marker 9.
    for kind, count in [("c", 3), ("a", 2), ("c", 2)]:
        producer.begin_transaction()
        for i in range(count):
            for partition in range(3):
                producer.produce(name, value=f"{kind}{i}", partition=partition)
        producer.flush(30)
        producer.commit_transaction(30) if kind == "c" else producer.abort_transaction(30)
    config = options(kafka_bootstrap, subscribe=name, **{"kafka.isolation.level": "read_committed",
                                                         "kafkaConsumer.pollTimeoutMs": "20s"})
    started = time.monotonic()
    planned = [OffsetRange(name, 0, 0, 4), OffsetRange(name, 1, 3, 7), OffsetRange(name, 2, 0, 10)]
    rows = read_rows(RangeReader(config, *planned))
    assert [(p, o, v) for _, p, o, v in rows] == [
        (0, 0, b"c0"), (0, 1, b"c1"), (0, 2, b"c2"), (2, 0, b"c0"), (2, 1, b"c1"), (2, 2, b"c2"), (2, 7, b"c0"),
        (2, 8, b"c1")]
    assert time.monotonic() - started < 10  # ranges ending on a marker or aborted records finish


# -- crash recovery -------------------------------------------------------------------------


@pytest.mark.crash
@pytest.mark.parametrize("assigned", [None, [0, 1, 3]], ids=["subscribe", "assign"])
def test_sigkill_mid_batch_delivers_every_offset_exactly_once(crash_harness, kafka_bootstrap, topic, tmp_path,
                                                              assigned):
    """``assigned``: the partitions to read with ``assign`` (planned every trigger from the topic's
    metadata) instead of subscribing; the one left out (2) stays unread across the restarts."""
    name, per_partition = topic(4), 1500
    for partition in range(4):
        produce(kafka_bootstrap, name, [f"{partition}-{i}" for i in range(per_partition)], partition=partition)
    subscription = ["assign", json.dumps({name: assigned})] if assigned else ["subscribe", name]
    read = assigned or range(4)
    out = tmp_path / "out"
    harness = crash_harness("jobs.kafka_source:kafka_to_parquet", out=str(out), bootstrap=kafka_bootstrap,
                            subscription=subscription, max_offsets=2000)
    report = harness.run(kills=2, kill_at="mid-batch", seed=3)
    assert report.kills == 2
    table = pq.read_table(out, columns=["partition", "offset", "value"])
    seen = list(zip(table.column("partition").to_pylist(), table.column("offset").to_pylist()))
    assert len(seen) == len(read) * per_partition
    assert sorted(seen) == [(p, o) for p in read for o in range(per_partition)]
    assert sorted(v.decode() for v in table.column("value").to_pylist()) == sorted(
        f"{p}-{i}" for p in read for i in range(per_partition))
