"""connectors.kafka write side, against the real broker: columns, guarantees, retries, crashes, errors.

Everything is read back with confluent-kafka consumers (read_committed unless said otherwise),
until every partition reports its end, so a missing or repeated record shows in the counts.
"""

from __future__ import annotations

import collections
import json
import logging
import multiprocessing
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from jobs.kafka_sink import number_batches, write_numbers, write_task
from pyspark.errors import PySparkException
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from connectors.core.guarantees import DeliveryGuarantee
from connectors.core.options import OptionError
from connectors.kafka import KafkaSink, KafkaSinkOptions
from connectors.kafka.sink.exactly_once import ALL, Progress, WorkUnit, _Skip
from connectors.kafka.sink.records import HEADERS_TYPE, ColumnError, RecordLayout
from connectors.testing.spark import run_available_now

TESTS_DIR = Path(__file__).parent
Record = collections.namedtuple("Record", "topic partition key value headers")


# --- helpers ---------------------------------------------------------------------------------


def create_topic(bootstrap: str, name: str, partitions: int = 2, config: dict[str, str] | None = None) -> str:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, config=config or {})])[name].result(30)
    return name


def consume(bootstrap: str, topic: str, isolation: str = "read_committed", timeout: float = 60) -> list[Record]:
    """Every record of ``topic`` visible at ``isolation``, read until each partition's end."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"check-{topic}", "isolation.level": isolation,
        "enable.partition.eof": True, "enable.auto.commit": False,
    })
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])  # offset 0: from the beginning
        records, ended, deadline = [], set(), time.monotonic() + timeout
        while len(ended) < len(partitions):
            assert time.monotonic() < deadline, f"{topic}: partitions {set(partitions) - ended} never ended"
            message = consumer.poll(1)
            if message is None:
                continue
            if message.error():
                assert message.error().code() == message.error()._PARTITION_EOF, message.error()
                ended.add(message.partition())
                continue
            records.append(Record(message.topic(), message.partition(), message.key(), message.value(),
                                  message.headers()))
        return records
    finally:
        consumer.close()


def values(records: list[Record]) -> list[int]:
    return sorted(int(r.value) for r in records)


def sink_options(bootstrap: str, topic: str, guarantee: str = "at-least-once", prefix: str | None = None) -> dict:
    options = {"kafka.bootstrap.servers": bootstrap, "topic": topic, "deliveryGuarantee": guarantee}
    if prefix:
        options["transactionalIdPrefix"] = prefix
        options["kafka.transaction.timeout.ms"] = "60000"  # bounds a lingering transaction after a kill
    return options


def numbers_stream(spark, end: int, rows_per_batch: int):
    return (
        spark.readStream.format("connectors.numbers")
        .option("end", end).option("rowsPerBatch", rows_per_batch).option("numPartitions", 2).load()
        .selectExpr("cast(value as string) as value")
    )


@pytest.fixture
def free_port() -> int:
    """A port nothing listens on."""
    from connectors.testing.local_service import free_ports

    return free_ports(1)[0]


# --- options and columns (no Spark) ------------------------------------------------------------


def test_typed_options_render_to_the_same_string_options():
    typed = KafkaSinkOptions(topic="orders", delivery_guarantee=DeliveryGuarantee.EXACTLY_ONCE,
                             transactional_id_prefix="orders-sink", extra={"kafka.bootstrap.servers": "b:9092"})
    rendered = typed.to_options()
    assert rendered == {"topic": "orders", "deliveryGuarantee": "exactly-once",
                        "transactionalIdPrefix": "orders-sink", "kafka.bootstrap.servers": "b:9092"}
    assert KafkaSinkOptions.from_options(rendered) == typed
    assert KafkaSink(typed, topic="other").options["topic"] == "other"  # keywords override


B = {"kafka.bootstrap.servers": "localhost:9092"}


@pytest.mark.parametrize(
    "options, message",
    [
        ({"topic": "t"}, "option 'kafka.bootstrap.servers': required option is missing"),
        ({**B, "deliveryGuarantee": "exactly_twice"},
         "option 'deliveryGuarantee' = 'exactly_twice': expected one of none, at-least-once, exactly-once"),
        ({**B, "deliveryGuarantee": "EXACTLY_ONCE"}, "option 'transactionalIdPrefix': required with deliveryGuarantee"),
        ({**B, "deliveryGuarantee": "exactly-once", "transactionalIdPrefix": "p", "kafka.enable.idempotence": "false"},
         "option 'kafka.enable.idempotence' = 'false': must be true with deliveryGuarantee exactly-once"),
        ({**B, "kafka.transactional.id": "x"}, "set the option 'transactionalIdPrefix' instead"),
        ({**B, "kafka.sasl.jaas.config": "x"}, "is a Java client property; use kafka.sasl.username"),
        ({**B, "topik": "t"}, "option 'topik' = 't': unknown option; did you mean 'topic'?"),
        ({**B, "topic": "a b"}, "option 'topic' = 'a b': expected a Kafka topic name"),
        ({**B, "requestTimeout": "soon"}, "option 'requestTimeout' = 'soon': expected a duration"),
        ({**B, "producerCacheSize": "-1"}, "option 'producerCacheSize' = '-1': must not be negative"),
    ],
)
def test_bad_options_name_the_option_and_value(options, message):
    with pytest.raises(OptionError) as info:
        KafkaSinkOptions.from_options(options)
    assert message in str(info.value)
    with pytest.raises(OptionError):  # the foreachBatch callable fails at construction, before the query
        KafkaSink(options)


def _schema(**columns) -> StructType:
    return StructType([StructField(name, dtype) for name, dtype in columns.items()])


@pytest.mark.parametrize(
    "schema, topic, message",
    [
        (_schema(key=StringType()), "t", "input column 'value': required, but the input has only key"),
        (_schema(value=LongType()), "t", "input column 'value': has type bigint; expected string or binary"),
        (_schema(value=StringType(), key=IntegerType()), "t", "input column 'key': has type int"),
        (_schema(value=StringType(), partition=LongType()), "t", "input column 'partition': has type bigint; expected int"),
        (_schema(value=StringType(), headers=StringType()), "t",
         "input column 'headers': has type string; expected array<struct<key:string,value:binary>>"),
        (_schema(value=StringType()), None, "option 'topic': no topic: set the option 'topic' or give the input"),
        (_schema(value=StringType(), topic=BinaryType()), None, "input column 'topic': has type binary"),
    ],
)
def test_bad_columns_are_named(schema, topic, message):
    with pytest.raises((ColumnError, OptionError), match=message.replace("(", r"\(").replace("[", r"\[")):
        RecordLayout.of(schema, topic)


def test_spark_kafka_sink_columns_are_accepted():
    schema = _schema(value=BinaryType(), key=StringType(), topic=StringType(), partition=IntegerType(),
                     headers=HEADERS_TYPE, other=LongType())
    layout = RecordLayout.of(schema, None)
    assert (layout.has_topic, layout.has_key, layout.has_partition, layout.has_headers) == (True, True, True, True)


def test_clients_connect_to_every_broker_at_once_unless_the_user_says_otherwise():
    from connectors.kafka.sink.producer import producer_settings

    base = {"kafka.bootstrap.servers": "b:9092", "topic": "t"}
    assert producer_settings(KafkaSinkOptions.from_options(base))["enable.sparse.connections"] == "false"
    users = KafkaSinkOptions.from_options({**base, "kafka.enable.sparse.connections": "true"})
    assert producer_settings(users)["enable.sparse.connections"] == "true"
    assert users.client_settings()["enable.sparse.connections"] == "true"  # the progress consumer too


def test_progress_counts_committed_records_of_the_same_run_and_batch():
    progress = Progress("query", 4, 300)
    assert progress.committed_of(WorkUnit("query", 4, 0)) == 300
    assert progress.committed_of(WorkUnit("query", 5, 0)) == 0  # the next batch
    assert progress.committed_of(WorkUnit("query", 3, 0)) == ALL  # an older batch: all done
    assert progress.committed_of(WorkUnit("other query", 4, 0)) == 0  # a new checkpoint, same prefix


def test_skip_drops_exactly_the_committed_prefix():
    import pyarrow as pa

    batches = [pa.record_batch({"value": list(range(i, i + 4))}) for i in range(0, 12, 4)]
    skip = _Skip(6)
    rest = [v for b in skip(iter(batches)) for v in b.column("value").to_pylist()]
    assert rest == list(range(6, 12)) and skip.skipped == 6
    skip = _Skip(ALL)
    assert list(skip(iter(batches))) == [] and skip.skipped == 12


# --- writing: columns, batch and stream --------------------------------------------------------


@pytest.mark.smoke
def test_batch_write_honours_topic_partition_key_and_header_columns(spark, kafka_bootstrap, unique):
    first, second = create_topic(kafka_bootstrap, unique + "-a", 3), create_topic(kafka_bootstrap, unique + "-b", 3)
    schema = StructType([
        StructField("value", BinaryType()), StructField("key", StringType()), StructField("topic", StringType()),
        StructField("partition", IntegerType()), StructField("headers", HEADERS_TYPE), StructField("note", LongType()),
    ])
    rows = [
        (b"v0", "k0", first, 2, [("trace", b"t0"), ("empty", None)], 0),
        (b"v1", None, second, 1, None, 1),
        (None, "tombstone", first, 0, [], 2),
        (b"v3", "k3", second, None, [("h", b"x")], 3),  # null partition: the partitioner chooses
    ]
    spark.createDataFrame(rows, schema).write.format("connectors.kafka").option(
        "kafka.bootstrap.servers", kafka_bootstrap).mode("append").save()
    by_value = {r.value: r for r in consume(kafka_bootstrap, first) + consume(kafka_bootstrap, second)}
    assert set(by_value) == {b"v0", b"v1", None, b"v3"}
    assert by_value[b"v0"] == Record(first, 2, b"k0", b"v0", [("trace", b"t0"), ("empty", None)])
    assert by_value[b"v1"][:4] == (second, 1, None, b"v1") and not by_value[b"v1"].headers
    assert by_value[None][:3] == (first, 0, b"tombstone")
    assert by_value[b"v3"][:4] == (second, by_value[b"v3"].partition, b"k3", b"v3")
    assert by_value[b"v3"].headers == [("h", b"x")]


def test_topic_option_overrides_the_topic_column(spark, kafka_bootstrap, unique):
    target = create_topic(kafka_bootstrap, unique, 1)
    df = spark.createDataFrame([("a", "elsewhere"), ("b", "elsewhere")], "value string, topic string")
    df.write.format("connectors.kafka").options(**sink_options(kafka_bootstrap, target)).mode("append").save()
    assert sorted(r.value for r in consume(kafka_bootstrap, target)) == [b"a", b"b"]


def test_same_key_lands_on_the_same_partition_as_with_the_java_client(spark, kafka_bootstrap, unique):
    # Java's default partitioner is murmur2; librdkafka's default (CRC32) would spread keys differently.
    topic = create_topic(kafka_bootstrap, unique, 6)
    df = spark.createDataFrame([(str(i), "same-key") for i in range(20)], "value string, key string")
    df.write.format("connectors.kafka").options(**sink_options(kafka_bootstrap, topic)).mode("append").save()
    partitions = {r.partition for r in consume(kafka_bootstrap, topic)}
    assert partitions == {_java_partition(b"same-key", 6)}


def _java_partition(key: bytes, partitions: int) -> int:
    """Kafka's Java DefaultPartitioner: toPositive(murmur2(key)) % partitions."""
    m, r, h = 0x5BD1E995, 24, (0x9747B28C ^ len(key)) & 0xFFFFFFFF
    data = key + b"\0\0\0"
    for i in range(0, len(key) // 4 * 4, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    tail = len(key) % 4
    if tail:
        for j in range(tail - 1, -1, -1):
            h ^= key[len(key) // 4 * 4 + j] << (8 * j)
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return (h & 0x7FFFFFFF) % partitions


@pytest.mark.parametrize("guarantee", ["at-least-once", pytest.param("exactly-once", marks=pytest.mark.smoke)])
def test_batch_re_executed_after_its_commit_was_lost(spark, kafka_bootstrap, unique, tmp_path, guarantee):
    """The driver died after the tasks of batch 2 committed but before Spark recorded the batch:
    on restart Spark runs batch 2 again. Exactly-once skips it; at-least-once writes it twice."""
    topic = create_topic(kafka_bootstrap, unique)
    options = sink_options(kafka_bootstrap, topic, guarantee, prefix=unique if guarantee == "exactly-once" else None)
    checkpoint = tmp_path / "cp"

    def run() -> None:
        query = run_available_now(numbers_stream(spark, 2999, 1000).writeStream.format("connectors.kafka")
                                  .options(**options).option("checkpointLocation", str(checkpoint)))
        query.awaitTermination(180)
        assert query.exception() is None

    run()
    for name in ("2", ".2.crc"):  # as if the driver died before recording batch 2
        (checkpoint / "commits" / name).unlink()
    run()
    written = values(consume(kafka_bootstrap, topic))
    if guarantee == "exactly-once":
        assert written == list(range(3000))
    else:  # proves batch 2 really ran twice, so the exactly-once assertion above can fail
        assert written == sorted(list(range(3000)) + list(range(2000, 3000)))


def test_foreach_batch_sink_writes_each_batch_once(spark, kafka_bootstrap, unique):
    topic = create_topic(kafka_bootstrap, unique)
    sink = KafkaSink(sink_options(kafka_bootstrap, topic, "exactly-once", prefix=unique))
    first = spark.range(0, 100, numPartitions=2).selectExpr("cast(id as string) as value")
    sink(first, 7)
    sink(first, 7)  # batch 7 again (a re-executed foreachBatch): already committed
    sink(spark.range(100, 150, numPartitions=2).selectExpr("cast(id as string) as value"), 8)
    assert values(consume(kafka_bootstrap, topic)) == list(range(150))


def test_none_guarantee_with_lowered_acks(spark, kafka_bootstrap, unique, tmp_path):
    topic = create_topic(kafka_bootstrap, unique)
    query = (numbers_stream(spark, 499, 250).writeStream.format("connectors.kafka")
             .options(**sink_options(kafka_bootstrap, topic, "none")).option("kafka.acks", "1")
             .option("kafka.enable.idempotence", "false")
             .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert values(consume(kafka_bootstrap, topic)) == list(range(500))


# --- failures ----------------------------------------------------------------------------------


def test_task_retry_writes_every_record_once(kafka_bootstrap, unique, tmp_path):
    """Partition 0's first attempt fails midway, after the sink got records; Spark retries it.

    An upstream failure reaches a Python writer as a normal end of input, so the failed attempt
    commits the records it got: the retry must write exactly the rest (it lost 800 records when
    the sink skipped whole partitions).
    """
    stream_topic, batch_topic = create_topic(kafka_bootstrap, unique + "-s"), create_topic(kafka_bootstrap, unique + "-b")
    args = {
        "checkpoint": str(tmp_path / "cp"),
        "stream_options": sink_options(kafka_bootstrap, stream_topic, "exactly-once", prefix=unique),
        "batch_options": sink_options(kafka_bootstrap, batch_topic, "at-least-once"),
        "end": 1999,
    }
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS_DIR), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "jobs.kafka_sink", json.dumps(args)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr.count("injected failure of the first attempt") >= 2  # in the stream and in the batch
    # At-least-once: nothing lost; what the failed attempt wrote is there twice (so the sink got records).
    written = values(consume(kafka_bootstrap, batch_topic))
    assert set(written) == set(range(2000)) and len(written) > 2000
    # Exactly-once, same failure: each record once.
    assert values(consume(kafka_bootstrap, stream_topic)) == list(range(2000))


def test_unreachable_broker_fails_at_query_start(spark, free_port):
    df = spark.createDataFrame([("v",)], "value string")
    with pytest.raises(PySparkException) as info:
        df.write.format("connectors.kafka").option("kafka.bootstrap.servers", f"127.0.0.1:{free_port}").option(
            "topic", "t").option("requestTimeout", "3s").mode("append").save()
    assert f"option 'kafka.bootstrap.servers' = '127.0.0.1:{free_port}': no broker answered" in str(info.value)


def test_unknown_topic_option_fails_at_query_start(spark, kafka_bootstrap, unique):
    df = spark.createDataFrame([("v",)], "value string")
    with pytest.raises(PySparkException) as info:
        df.write.format("connectors.kafka").options(**sink_options(kafka_bootstrap, unique)).option(
            "kafka.allow.auto.create.topics", "false").mode("append").save()
    assert f"option 'topic' = '{unique}': the topic does not exist" in str(info.value)


def test_unknown_topic_in_column_fails_the_write(spark, kafka_bootstrap, unique):
    df = spark.createDataFrame([("v", unique)], "value string, topic string")
    with pytest.raises(PySparkException) as info:
        df.write.format("connectors.kafka").option("kafka.bootstrap.servers", kafka_bootstrap).option(
            "kafka.allow.auto.create.topics", "false").option("kafka.topic.metadata.propagation.max.ms", "1000").mode("append").save()
    assert "1 record(s) were not delivered" in str(info.value)
    assert f"topic '{unique}'" in str(info.value) and "Unknown topic" in str(info.value)


@pytest.mark.parametrize("guarantee", ["at-least-once", "exactly-once"])
def test_record_too_large_fails_the_write(spark, kafka_bootstrap, unique, guarantee):
    topic = create_topic(kafka_bootstrap, unique, 1, config={"max.message.bytes": "2000"})
    rows = [("small",)] * 50 + [("x" * 5000,)] + [("small",)] * 50
    df = spark.createDataFrame(rows, "value string").coalesce(1)
    options = sink_options(kafka_bootstrap, topic, guarantee, prefix=unique if guarantee == "exactly-once" else None)
    with pytest.raises(PySparkException) as info:
        df.write.format("connectors.kafka").options(**options).mode("append").save()
    # The broker rejects the whole record batch; the error names the size of the largest record.
    assert "MSG_SIZE_TOO_LARGE" in str(info.value) and "the largest failed value has 5000 bytes" in str(info.value)
    if guarantee == "exactly-once":  # the transaction was aborted: nothing half-written is visible
        assert consume(kafka_bootstrap, topic) == []


def test_missing_value_column_fails_at_query_start(spark, kafka_bootstrap, unique):
    df = spark.createDataFrame([("v",)], "payload string")
    with pytest.raises(PySparkException) as info:
        df.write.format("connectors.kafka").options(**sink_options(kafka_bootstrap, unique)).mode("append").save()
    assert "input column 'value': required, but the input has only payload" in str(info.value)


def test_mistyped_value_column_fails_at_stream_start(spark, kafka_bootstrap, unique, tmp_path):
    df = spark.readStream.format("connectors.numbers").option("end", 9).load()  # value is a bigint
    query = (df.writeStream.format("connectors.kafka").options(**sink_options(kafka_bootstrap, unique))
             .option("checkpointLocation", str(tmp_path / "cp")).start())
    with pytest.raises(PySparkException) as info:
        query.awaitTermination(120)
    assert "input column 'value': has type bigint; expected string or binary" in str(info.value)


def test_overwrite_mode_is_rejected(spark, kafka_bootstrap, unique):
    df = spark.createDataFrame([("v",)], "value string")
    with pytest.raises(PySparkException) as info:
        df.write.format("connectors.kafka").options(**sink_options(kafka_bootstrap, unique)).mode("overwrite").save()
    assert "Kafka topics can only be appended to" in str(info.value)


# --- fencing: zombies and producers kept by Python workers --------------------------------------


def test_zombie_attempt_cannot_commit_after_a_newer_attempt_started(kafka_bootstrap, unique):
    """Two attempts of the same (run, batch, partition), as a zombie or speculative task and its
    successor: the older one is midway through its transaction when the newer one initializes
    the same transactional id, writes the whole partition and commits."""
    topic = create_topic(kafka_bootstrap, unique)
    options = sink_options(kafka_bootstrap, topic, "exactly-once", prefix=unique)
    midway, go_on, outcome = threading.Event(), threading.Event(), {}

    def zombie_input():
        yield from number_batches(0, 500)
        time.sleep(1)  # its producer sends what it has: the zombie's records reach the broker
        midway.set()
        go_on.wait(60)
        yield from number_batches(500, 1000)

    def zombie() -> None:
        try:
            outcome["result"] = write_task(options, 4, zombie_input())
        except Exception as exc:  # what the older attempt's task would fail with
            outcome["error"] = exc

    older = threading.Thread(target=zombie)
    older.start()
    assert midway.wait(60)
    assert write_numbers(options, 4, 0, 1000) == (1000, 0)  # the newer attempt: nothing committed yet
    go_on.set()
    older.join(120)
    assert "result" not in outcome and "(_FENCED)" in str(outcome["error"])
    assert values(consume(kafka_bootstrap, topic)) == list(range(1000))  # read_committed: each once
    # The zombie's records did reach the topic, in its aborted transaction, so the line above can fail.
    assert len(consume(kafka_bootstrap, topic, isolation="read_uncommitted")) > 1000


@pytest.mark.parametrize("host", ["same host", "other host"])
def test_kept_producer_fenced_by_another_worker_is_replaced(kafka_bootstrap, unique, tmp_path, monkeypatch,
                                                            caplog, host):
    """Partition 0 runs in this process (which keeps its producer), then in another worker process
    (whose producer fences the kept one), then here again: the task must not fail. On the same
    host the kept producer learns it from the owner file; a worker on another host (here: another
    temp dir) leaves none, so the broker's epoch check must catch it."""
    topic = create_topic(kafka_bootstrap, unique)
    options = sink_options(kafka_bootstrap, topic, "exactly-once", prefix=unique)
    assert write_numbers(options, 0, 0, 300) == (300, 0)
    if host == "other host":
        monkeypatch.setenv("TMPDIR", str(tmp_path))  # read by the spawned worker's tempfile
    with multiprocessing.get_context("spawn").Pool(1) as other_worker:
        assert other_worker.apply(write_numbers, (options, 1, 300, 600)) == (300, 0)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="connectors.kafka.sink.exactly_once"):
        assert write_numbers(options, 2, 600, 900) == (300, 0)
    assert "a newer producer replaced the kept one" in caplog.text
    fenced_by_broker = any("fenced by a newer instance" in r.getMessage()  # librdkafka's own log
                           for r in caplog.records if r.name == "connectors.kafka.librdkafka")
    assert fenced_by_broker == (host == "other host")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="connectors.kafka.sink.exactly_once"):
        assert write_numbers(options, 2, 600, 900) == (0, 300)  # batch 2 again: the kept producer knows it is done
    assert "replaced" not in caplog.text
    assert values(consume(kafka_bootstrap, topic)) == list(range(900))


# --- crashes -----------------------------------------------------------------------------------


@pytest.mark.crash
def test_exactly_once_survives_sigkill(crash_harness, kafka_bootstrap, unique):
    topic = create_topic(kafka_bootstrap, unique)
    harness = crash_harness("jobs.kafka_sink:numbers_to_kafka", end=7999, rows_per_batch=2000,
                            options=sink_options(kafka_bootstrap, topic, "exactly-once", prefix=unique))
    report = harness.run(kills=2, kill_at="mid-batch", seed=3)
    assert report.kills == 2
    assert values(consume(kafka_bootstrap, topic)) == list(range(8000))  # no loss, no duplicate


@pytest.mark.crash
def test_at_least_once_foreach_batch_survives_sigkill(crash_harness, kafka_bootstrap, unique):
    topic = create_topic(kafka_bootstrap, unique)
    harness = crash_harness("jobs.kafka_sink:numbers_to_kafka", end=5999, rows_per_batch=2000, via="foreachBatch",
                            options=sink_options(kafka_bootstrap, topic, "at-least-once"))
    report = harness.run(kills=2, kill_at="mid-batch", seed=5)
    assert report.kills == 2
    assert set(values(consume(kafka_bootstrap, topic))) == set(range(6000))  # no loss
