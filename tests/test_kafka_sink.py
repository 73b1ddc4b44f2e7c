"""connectors.kafka write side, against the real broker: columns, guarantees, retries, crashes, errors.

Everything is read back with confluent-kafka consumers (read_committed unless said otherwise),
until every partition reports its end, so a missing or repeated record shows in the counts.
"""

from __future__ import annotations

import collections
import dataclasses
import gc
import json
import logging
import multiprocessing
import os
import subprocess
import sys
import threading
import time
import types
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from jobs.kafka_sink import leave_transaction_open as leave_transaction_open_job
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
from connectors.kafka.sink.exactly_once import (
    ALL,
    SINK_RUN,
    PartitionProgress,
    Progress,
    WorkUnit,
    _Replay,
)
from connectors.kafka.sink.producer import KafkaSinkError, check_cluster
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
        ({**B, "topik": "t"}, "option 'topik': unknown option; did you mean 'topic'?"),
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


def _string_batches(values: list[str], size: int) -> list:
    import pyarrow as pa

    return [pa.record_batch({"value": values[i:i + size]}) for i in range(0, len(values), size)]


def _committed_by(unit: WorkUnit, values: list[str]) -> Progress:
    """The progress a first attempt of ``unit`` that committed ``values`` left."""
    first = _Replay("p-0", unit, None, ("value",))
    assert [v for b in first(_string_batches(values, 4)) for v in b.column("value").to_pylist()] == values
    return Progress(unit.run, unit.batch, len(values), first.digest.hexdigest())


def test_replay_skips_exactly_the_committed_prefix_whatever_the_batch_sizes():
    unit = WorkUnit("query", 3, 0)
    rows = [str(i) for i in range(12)]
    replay = _Replay("p-0", unit, _committed_by(unit, rows[:6]), ("value",))
    rest = [v for b in replay(_string_batches(rows, 5)) for v in b.column("value").to_pylist()]
    assert rest == rows[6:] and replay.skipped == 6
    assert replay.digest.hexdigest() == _committed_by(unit, rows).digest  # the progress the retry commits


@pytest.mark.parametrize("replayed, problem", [
    ([str(i) for i in range(6, 18)], "now holds other records than the 6 an earlier attempt committed"),
    (["0", "1", "2"], "now holds only 3 records, but an earlier attempt committed 6"),
])
def test_replay_with_other_records_fails(replayed, problem):
    unit = WorkUnit("query", 3, 1)
    replay = _Replay("p-1", unit, _committed_by(unit, [str(i) for i in range(6)]), ("value",))
    with pytest.raises(KafkaSinkError) as info:
        list(replay(_string_batches(replayed, 4)))
    assert f"transactional id 'p-1': batch 3 is re-run and its partition 1 {problem}" in str(info.value)
    assert "restart with the partitioning the batch first ran with" in str(info.value)


def test_without_a_query_id_an_older_batch_fails_instead_of_counting_as_committed():
    with pytest.raises(KafkaSinkError) as info:
        _Replay("p-0", WorkUnit(SINK_RUN, 0, 0), Progress(SINK_RUN, 5, 10), ("value",))
    assert "transactional id 'p-0' has committed batch 5, so batch 0 is not a batch of this sink" in str(info.value)
    assert "A new query needs a new transactionalIdPrefix" in str(info.value)


def test_an_older_batch_of_the_query_fails_instead_of_counting_as_committed():
    """A rolled-back checkpoint re-plans batch 2 up to today's offsets: taken for committed, the
    records past what batch 3 wrote would be lost."""
    with pytest.raises(KafkaSinkError) as info:
        _Replay("p-0", WorkUnit("query", 2, 0), Progress("query", 3, 10), ("value",))
    assert "transactional id 'p-0' has committed batch 3 of this query, so batch 2 was committed before it" in str(
        info.value)
    assert "or the checkpoint was rolled back" in str(info.value)


def test_a_replay_of_every_committed_record_in_another_order_skips_them_all():
    """A shuffle's fetch order changes between attempts; all records committed, any order is fine."""
    unit = WorkUnit("query", 3, 0)
    rows = [str(i) for i in range(12)]
    replay = _Replay("p-0", unit, _committed_by(unit, rows), ("value",))
    assert list(replay(_string_batches(rows[::-1], 5))) == [] and replay.skipped == 12


def test_a_replay_of_the_committed_records_in_another_order_with_more_after_them_fails():
    """Only a prefix was committed: which records it held is unknown when the order changed."""
    unit = WorkUnit("query", 3, 0)
    rows = [str(i) for i in range(12)]
    replay = _Replay("p-0", unit, _committed_by(unit, rows[:6]), ("value",))
    with pytest.raises(KafkaSinkError) as info:
        list(replay(_string_batches(rows[:6][::-1] + rows[6:], 5)))
    assert "now holds the 6 records an earlier attempt committed in another order, and more after them" in str(
        info.value)


def test_a_reordered_replay_against_progress_without_a_row_hash_fails():
    """Progress from an older release, or another polars, has only the ordered digest."""
    unit = WorkUnit("query", 3, 0)
    rows = [str(i) for i in range(12)]
    committed = _committed_by(unit, rows)
    for digest in (committed.digest.split(" ")[0], committed.digest.split(" ")[0] + " polars-0.0-x:0"):
        replay = _Replay("p-0", unit, dataclasses.replace(committed, digest=digest), ("value",))
        with pytest.raises(KafkaSinkError, match="now holds other records than the 12"):
            list(replay(_string_batches(rows[::-1], 5)))


# --- writing: columns, batch and stream --------------------------------------------------------


@pytest.mark.smoke
class _OffsetsProducer:
    """Stands in for librdkafka's producer in one call: send_offsets_to_transaction() fails with
    ``error`` every time."""

    def __init__(self, error: KafkaError):
        self.error, self.calls = error, 0

    def send_offsets_to_transaction(self, positions, metadata, timeout):
        self.calls += 1
        raise KafkaException(self.error)


@pytest.mark.parametrize(("error", "calls"), [
    (KafkaError(KafkaError._TIMED_OUT, "Timed out", retriable=True), 1),
    (KafkaError(KafkaError.COORDINATOR_LOAD_IN_PROGRESS, "loading", retriable=True), 3),
])  # fmt: skip
def test_a_timed_out_progress_add_is_never_resumed(kafka_bootstrap, unique, error, calls):
    """Resuming a timed-out send_offsets_to_transaction() can block for good (librdkafka#5456):
    the task fails at once instead; other transient errors are retried."""
    progress = PartitionProgress({"bootstrap.servers": kafka_bootstrap}, unique, unique, 5.0)
    producer = _OffsetsProducer(error)
    try:
        with pytest.raises(KafkaSinkError, match="adding the sink's progress to the transaction failed"):
            progress.add_to_transaction(types.SimpleNamespace(producer=producer), Progress("run", 0, 1))  # type: ignore[arg-type]
    finally:
        progress.close()
    assert producer.calls == calls


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


def test_topic_option_overrides_a_topic_column_of_any_type(spark, kafka_bootstrap, unique):
    # The column is never read then; it failed the query at its start (Spark's sink writes).
    target = create_topic(kafka_bootstrap, unique, 1)
    assert RecordLayout.of(_schema(value=StringType(), topic=IntegerType()), target).columns == ("value",)
    df = spark.createDataFrame([("a", 1), ("b", None)], "value string, topic int")
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
    sink(first.sortWithinPartitions(first.value.desc()), 7)  # again, in another order (after a shuffle)
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


# --- the sink's identity and replays -----------------------------------------------------------


def progress_of(bootstrap: str, group: str, topic: str = "connectors-sink-progress") -> dict | None:
    """The progress the sink committed for consumer group ``group`` (``<prefix>-<partition>``)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        (position,) = consumer.committed([TopicPartition(topic, 0)], 30)
        return json.loads(position.metadata) if position.offset >= 0 else None
    finally:
        consumer.close()


def test_foreach_batch_in_a_query_keys_its_progress_by_the_query_id(spark, kafka_bootstrap, unique, tmp_path):
    """Classic Spark tells a foreachBatch function its query id: a second query (new checkpoint)
    with the same prefix is another run, and writes its batches 0 and 1 again."""
    topic = create_topic(kafka_bootstrap, unique)
    sink = KafkaSink(sink_options(kafka_bootstrap, topic, "exactly-once", prefix=unique))
    ids = []
    for checkpoint in ("cp1", "cp2"):
        query = (numbers_stream(spark, 999, 500).writeStream.foreachBatch(sink)
                 .option("checkpointLocation", str(tmp_path / checkpoint)).trigger(availableNow=True).start())
        query.awaitTermination(180)
        assert query.exception() is None
        ids.append(query.id)
        assert progress_of(kafka_bootstrap, f"{unique}-0")["run"] == query.id
    assert ids[0] != ids[1]
    assert values(consume(kafka_bootstrap, topic)) == sorted(list(range(1000)) * 2)


def test_sink_without_a_query_id_writes_a_batch_once_and_refuses_an_older_one(spark, kafka_bootstrap, unique):
    """Called outside a query (as under Spark Connect), the prefix alone names the sink: the same
    batch again is skipped, an older batch (a new query reusing the prefix) fails; it used to
    count as committed and was dropped."""
    topic = create_topic(kafka_bootstrap, unique)
    sink = KafkaSink(sink_options(kafka_bootstrap, topic, "exactly-once", prefix=unique))
    rows = spark.range(0, 100, numPartitions=2).selectExpr("cast(id as string) as value")
    sink(rows, 5)
    sink(rows, 5)
    assert progress_of(kafka_bootstrap, f"{unique}-0")["run"] == ""
    with pytest.raises(PySparkException) as info:
        sink(spark.range(100, 200, numPartitions=2).selectExpr("cast(id as string) as value"), 0)
    assert f"transactional id '{unique}-" in str(info.value)
    assert "has committed batch 5, so batch 0 is not a batch of this sink" in str(info.value)
    assert values(consume(kafka_bootstrap, topic)) == list(range(100))


def test_spark_connect_foreach_batch_has_no_query_id_and_a_new_query_fails(kafka_bootstrap, unique, tmp_path):
    """Spark Connect runs foreachBatch in a worker that cannot learn the query id: the first query
    writes every record once; a second query with a new checkpoint and the same prefix fails at
    its first batch (it used to skip batches 0..k as committed)."""
    topic = create_topic(kafka_bootstrap, unique)
    job = {"job": "connect_foreach_batch", "end": 999,
           "options": sink_options(kafka_bootstrap, topic, "exactly-once", prefix=unique),
           "checkpoints": [str(tmp_path / "cp1"), str(tmp_path / "cp2")]}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS_DIR), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "jobs.kafka_sink", json.dumps(job)], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    first, second = (json.loads(line) for line in done.stdout.splitlines() if line.startswith("{"))
    assert first["error"] is None
    assert "has committed batch 1, so batch 0 is not a batch of this sink" in second["error"]
    assert progress_of(kafka_bootstrap, f"{unique}-0")["run"] == ""
    assert values(consume(kafka_bootstrap, topic)) == list(range(1000))


def test_replay_with_other_partitioning_fails_and_writes_nothing(spark, kafka_bootstrap, unique):
    """Batch 5 runs again with the same rows in other partitions (as after a change of the
    source's partition count): each partition's committed prefix differs, so the batch fails.
    Skipping by count used to drop some rows and write others twice."""
    topic = create_topic(kafka_bootstrap, unique)
    sink = KafkaSink(sink_options(kafka_bootstrap, topic, "exactly-once", prefix=unique))
    rows = spark.range(0, 1000, numPartitions=2).selectExpr("cast(id as string) as value")
    sink(rows, 5)
    with pytest.raises(PySparkException) as info:
        sink(rows.repartition(2, "value"), 5)
    assert f"transactional id '{unique}-" in str(info.value)
    assert "batch 5 is re-run and its partition" in str(info.value)
    assert values(consume(kafka_bootstrap, topic)) == list(range(1000))


def test_a_replay_that_lost_a_partition_fails_instead_of_duplicating_silently(spark, kafka_bootstrap, unique,
                                                                              monkeypatch):
    """Batch 5 committed, then the driver died before Spark's commit log, and the batch runs again
    with one partition instead of two (a source's partition count, a repartition changed before the
    restart). Partition 0 begins with the records it committed (their digest matches), skips them and
    writes partition 1's again; no task sees partition 1 gone, so the commit must: at a batch a task
    found partly committed, and at the first commit after a query start."""
    from connectors.kafka.sink import recovery

    def values_of(df):
        return df.selectExpr("cast(id as string) as value")

    topic = create_topic(kafka_bootstrap, unique)
    sink = KafkaSink(sink_options(kafka_bootstrap, topic, "exactly-once", prefix=unique))
    sink(values_of(spark.range(0, 100, 1, 2)), 5)  # partition 0: 0..49, partition 1: 50..99
    for _ in range(2):  # and every time the batch runs again, until someone looks
        with pytest.raises(KafkaSinkError, match=r"batch 5 was re-executed with 1 Spark partitions, but in an "
                                                 r"earlier attempt partition 1 committed 50 records of it"):
            sink(values_of(spark.range(0, 100, 1, 1)), 5)
    assert values(consume(kafka_bootstrap, topic)) == sorted([*range(100), *range(50, 100)])

    # Partition 0 was empty, so it committed no progress: no task of the replay skips anything,
    # and only the query start (here: this process planned no batch of the sink for a minute) tells.
    topic = create_topic(kafka_bootstrap, f"{unique}-b")
    sink = KafkaSink(sink_options(kafka_bootstrap, topic, "exactly-once", prefix=f"{unique}-b"))
    sink(values_of(spark.range(0, 100, 1, 2).where("id >= 50")), 5)  # partition 0 empty, 1: 50..99
    assert progress_of(kafka_bootstrap, f"{unique}-b-0") is None
    monkeypatch.setattr(recovery, "_planned", {})
    with pytest.raises(KafkaSinkError, match=f"partition 1 committed 50 records of it .* --delete --group "
                                             f"{unique}-b-1\\)"):
        sink(values_of(spark.range(50, 100, 1, 1)), 5)
    # A later batch with fewer partitions is no replay: partition 1's progress is of batch 5.
    monkeypatch.setattr(recovery, "_planned", {})
    sink(values_of(spark.range(100, 200, 1, 1)), 6)
    assert values(consume(kafka_bootstrap, topic)) == sorted([*range(50, 100), *range(50, 200)])

    # The query restarted within a minute in the same application: this process planned a batch of
    # the sink moments ago, so only Spark's runId of the query tells. The tasks read it from the
    # local properties a stream's jobs carry, set here as a query sets them.
    topic = create_topic(kafka_bootstrap, f"{unique}-c", 1)  # one partition: an open transaction holds back all
    sink = KafkaSink(sink_options(kafka_bootstrap, topic, "exactly-once", prefix=f"{unique}-c"))
    context = spark.sparkContext
    try:
        context.setLocalProperty("sql.streaming.queryId", "00000000-0000-0000-0000-00000000000c")  # no query's
        context.setLocalProperty("spark.jobGroup.id", "run-1")
        sink(values_of(spark.range(0, 100, 1, 2).where("id >= 50")), 5)
        sink(values_of(spark.range(100, 200, 1, 2).where("id >= 150")), 6)
        context.setLocalProperty("spark.jobGroup.id", "run-2")
        with pytest.raises(KafkaSinkError, match="batch 6 was re-executed with 1 Spark partitions, but in an "
                                                 "earlier attempt partition 1 committed 50 records of it"):
            sink(values_of(spark.range(150, 200, 1, 1)), 6)
        # Partition 1's task of batch 7 was killed mid-transaction; the query restarts at once with
        # one partition, so no task aborts what that id left open: the first commit does.
        leave_transaction_open(kafka_bootstrap, f"{unique}-c-1", topic, b"-1")
        context.setLocalProperty("spark.jobGroup.id", "run-3")
        sink(values_of(spark.range(200, 300, 1, 1)), 7)
    finally:
        context.setLocalProperty("sql.streaming.queryId", None)
        context.setLocalProperty("spark.jobGroup.id", None)
    assert values(consume(kafka_bootstrap, topic)) == sorted([*range(50, 100), *range(150, 200), *range(150, 300),
                                                              1_000_000])


@pytest.mark.parametrize("writer", ["format", "foreachBatch"])
def test_a_restart_in_the_same_application_with_fewer_partitions_fails_the_batch(spark, kafka_bootstrap, unique,
                                                                                tmp_path, writer):
    """Batch 1 fails after partition 1 committed and before partition 0 wrote anything; the query
    starts again at once, in the same application, with a coalesce(1) added. Partition 0 finds no
    progress of this batch, skips nothing and writes partition 1's records again, and the driver's
    Python workers planned batches of the sink moments ago: Spark's new runId of the query tells the
    commit that this is a restart. It used to pass with 1000 records twice when the commit ran in
    a worker that had planned the failed run; and through foreachBatch, when the function set a job
    group of its own, which its jobs then carried instead of the runId, at every start."""
    from pyspark.errors import StreamingQueryException

    topic, prefix = create_topic(kafka_bootstrap, unique), unique
    options = sink_options(kafka_bootstrap, topic, "exactly-once", prefix=prefix)

    def fail_batch_1_partition_0_once_1_committed(batches):
        from confluent_kafka import Consumer, TopicPartition
        from pyspark import TaskContext

        context = TaskContext.get()
        if context.getLocalProperty("streaming.sql.batchId") == "1" and context.partitionId() == 0:
            consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": f"{prefix}-1"})
            deadline = time.monotonic() + 60
            while consumer.committed([TopicPartition("connectors-sink-progress", 0)])[0].offset < 2:
                assert time.monotonic() < deadline, "partition 1 never committed batch 1"
                time.sleep(0.2)
            consumer.close()
            raise RuntimeError("partition 0 fails before writing")
        yield from batches

    def in_a_job_group_of_its_own(df, batch_id):
        df.sparkSession.sparkContext.setJobGroup("mine", "the function's jobs")
        KafkaSink(options)(df, batch_id)

    def run(df):
        stream = (df.writeStream.format("connectors.kafka").options(**options) if writer == "format"
                  else df.writeStream.foreachBatch(in_a_job_group_of_its_own))
        query = stream.option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start()
        with pytest.raises(StreamingQueryException) as info:
            query.awaitTermination(180)
        return str(info.value)

    numbers = (spark.readStream.format("connectors.numbers").option("end", 3999).option("rowsPerBatch", 2000)
               .option("numPartitions", 2).load().selectExpr("cast(value as string) as value"))
    assert "partition 0 fails before writing" in run(numbers.mapInArrow(fail_batch_1_partition_0_once_1_committed,
                                                                        numbers.schema))
    assert progress_of(kafka_bootstrap, f"{prefix}-0")["batch"] == 0
    assert values(consume(kafka_bootstrap, topic)) == [*range(2000), *range(3000, 4000)]
    assert ("batch 1 was re-executed with 1 Spark partitions, but in an earlier attempt partition 1 committed 1000 "
            "records of it") in run(numbers.coalesce(1))
    assert values(consume(kafka_bootstrap, topic)) == sorted([*range(4000), *range(3000, 4000)])


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


SASL = {"kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.username": "u", "kafka.sasl.password": "pw-3xq7"}


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"kafka.linger.ms": "-5"}, "option 'kafka.linger.ms' = '-5': librdkafka refuses it: Configuration property "
                                    '"queue.buffering.max.ms" value -5 is outside allowed range'),
        ({"kafka.compression.type": "zzz"}, "option 'kafka.compression.type' = 'zzz': librdkafka refuses it"),
        # refused only beside the idempotence the sink turns on for at-least-once
        ({"kafka.acks": "1"}, "option 'kafka.acks' = '1': librdkafka refuses it: Failed to create producer: "
                              "`acks` must be set to `all` when `enable.idempotence` is true"),
        # refused only beside security.protocol=ssl: named as the setting librdkafka's reason names
        ({"kafka.security.protocol": "ssl", "kafka.ssl.ca.location": "/nonexistent/ca.pem"},
         "option 'kafka.ssl.ca.location' = '/nonexistent/ca.pem': librdkafka refuses it: Failed to create producer: "
         "ssl.ca.location failed"),
        # refused only beside a SASL security.protocol, itself refused alone (no GSSAPI): named as
        # the setting whose value librdkafka's reason quotes, not the protocol
        ({**SASL, "kafka.sasl.mechanism": "PLAINX"},
         "option 'kafka.sasl.mechanism' = 'PLAINX': librdkafka refuses it: Failed to create producer: "
         "Unsupported SASL mechanism: PLAINX"),
        ({**SASL, "kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "SCRAM-SHA-999"},
         "option 'kafka.sasl.mechanism' = 'SCRAM-SHA-999': librdkafka refuses it: Failed to create producer: "
         "Unsupported hash function: SCRAM-SHA-999"),
        ({"kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "PLAIN"},
         "option 'kafka.security.protocol, kafka.sasl.mechanism': librdkafka refuses these settings together: "
         "Failed to create producer: sasl.username and sasl.password must be set"),
    ],
)
def test_settings_librdkafka_refuses_are_named_at_query_start(kafka_bootstrap, settings, message):
    with pytest.raises(OptionError) as info:
        check_cluster(KafkaSinkOptions.from_options(sink_options(kafka_bootstrap, "t") | settings))
    assert message in str(info.value)
    assert SASL["kafka.sasl.password"] not in str(info.value)


def test_a_refused_setting_fails_the_write_before_any_task(spark, kafka_bootstrap, unique):
    df = spark.createDataFrame([("v",)], "value string")
    with pytest.raises(PySparkException) as info:
        df.write.format("connectors.kafka").options(**sink_options(kafka_bootstrap, unique)).option(
            "kafka.acks", "1").mode("append").save()
    assert "option 'kafka.acks' = '1': librdkafka refuses it" in str(info.value)


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


@pytest.mark.parametrize("partition", [-1, -2])
def test_negative_partition_fails_the_write(spark, kafka_bootstrap, unique, partition):
    # librdkafka takes -1 for "the partitioner chooses": it was written to some partition unnoticed
    # (Spark's sink fails: "Invalid partition: -1").
    topic = create_topic(kafka_bootstrap, unique, 2)
    df = spark.createDataFrame([("a", 0), ("b", partition)], "value string, partition int").coalesce(1)
    with pytest.raises(PySparkException) as info:
        df.write.format("connectors.kafka").options(**sink_options(kafka_bootstrap, topic)).mode("append").save()
    assert f"row 1 of the batch has partition {partition}: a partition must not be negative" in str(info.value)
    assert consume(kafka_bootstrap, topic) == []


@pytest.mark.parametrize("header", [("k", None), None], ids=["null key", "null header"])
def test_header_with_null_key_fails_the_write(spark, kafka_bootstrap, unique, header):
    # A null key was written as the header key 'None'; Spark's sink fails (a NullPointerException).
    topic = create_topic(kafka_bootstrap, unique, 1)
    schema = StructType([StructField("value", StringType()), StructField("headers", HEADERS_TYPE)])
    rows = [("a", [("h", b"1")]), ("b", None), ("c", [("h", b"2"), header and (None, b"x")])]
    with pytest.raises(PySparkException) as info:
        spark.createDataFrame(rows, schema).coalesce(1).write.format("connectors.kafka").options(
            **sink_options(kafka_bootstrap, topic)).mode("append").save()
    assert "row 2 of the batch has a null header or a header with a null key" in str(info.value)
    assert consume(kafka_bootstrap, topic) == []


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


def test_failed_task_closes_its_producer(kafka_bootstrap, unique):
    """The producer and progress consumer of a failed exactly-once task are closed, not left to
    the garbage collector (the traceback Spark keeps holds the task's frames)."""
    topic = create_topic(kafka_bootstrap, unique)

    def librdkafka_threads() -> int:
        tasks = Path("/proc/self/task").iterdir()
        return sum((task / "comm").read_text().startswith("rdk:") for task in tasks)

    def failing_input():
        yield from number_batches(0, 300)
        raise RuntimeError("input failed")

    gc.collect()  # clients earlier tests dropped would otherwise stop their threads during this one
    before = librdkafka_threads()
    with pytest.raises(RuntimeError, match="input failed") as info:
        write_task(sink_options(kafka_bootstrap, topic, "exactly-once", prefix=unique), 0, failing_input())
    assert info.traceback  # still referenced, as by Spark's worker while it reports the error
    assert librdkafka_threads() <= before
    assert consume(kafka_bootstrap, topic) == []  # the transaction was aborted


def test_owner_files_live_in_a_private_directory(tmp_path, monkeypatch):
    from connectors.core.private_dir import private_dir

    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    directory = private_dir("kafka-sink-owners")
    assert directory == tmp_path / "connectors" / "kafka-sink-owners"
    for path in (directory, directory.parent):
        assert path.stat().st_uid == os.getuid() and path.stat().st_mode & 0o777 == 0o700
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))  # read by tempfile.gettempdir()
    monkeypatch.setattr("tempfile.tempdir", None)
    (tmp_path / "tmp").mkdir()
    (tmp_path / "tmp" / f"connectors-{os.getuid()}").symlink_to(tmp_path / "connectors")  # planted
    with pytest.raises(PermissionError, match="is not a directory"):
        private_dir("kafka-sink-owners")
    (tmp_path / "tmp" / f"connectors-{os.getuid()}").unlink()
    (tmp_path / "tmp" / f"connectors-{os.getuid()}").mkdir(mode=0o777)
    os.chmod(tmp_path / "tmp" / f"connectors-{os.getuid()}", 0o777)
    with pytest.raises(PermissionError, match="other users may enter it"):
        private_dir("kafka-sink-owners")
    if os.getuid() == 0:  # only root can hand a directory to another user
        os.chmod(tmp_path / "tmp" / f"connectors-{os.getuid()}", 0o700)
        os.chown(tmp_path / "tmp" / f"connectors-{os.getuid()}", 65534, 65534)
        with pytest.raises(PermissionError, match="is owned by uid 65534"):
            private_dir("kafka-sink-owners")


# --- lingering transactions and expired progress -------------------------------------------------


def leave_transaction_open(bootstrap: str, txn_id: str, topic: str, value: bytes) -> None:
    """A killed task's transaction: ``value`` in ``topic``, never committed nor aborted; checks
    that it really holds back read_committed consumers."""
    killed = multiprocessing.get_context("spawn").Process(
        target=leave_transaction_open_job, args=(bootstrap, txn_id, topic, value))
    killed.start()
    killed.join(120)
    assert killed.exitcode == -9
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(topic, b"1000000")  # after the open transaction: invisible until it ends
    producer.flush(30)
    assert b"1000000" not in [r.value for r in consume(bootstrap, topic)]


def test_query_start_aborts_transactions_of_partitions_that_no_longer_run(spark, kafka_bootstrap, unique, tmp_path):
    """A query with 4 partitions left partition 3's transaction open (its task was killed); the
    query restarts with 2 partitions, so no task of partition 3 ever aborts it: the start does,
    and read_committed consumers see the new records at once, not after transaction.timeout.ms
    (15 minutes)."""
    topic = create_topic(kafka_bootstrap, unique, 1)
    options = sink_options(kafka_bootstrap, topic, "exactly-once", prefix=unique)
    for partition in range(4):
        write_task(options, 0, number_batches(10_000 + partition, 10_001 + partition), partition)
    leave_transaction_open(kafka_bootstrap, f"{unique}-3", topic, b"-1")
    query = (numbers_stream(spark, 99, 100).writeStream.format("connectors.kafka").options(**options)
             .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start())
    query.awaitTermination(180)
    assert query.exception() is None
    assert values(consume(kafka_bootstrap, topic)) == list(range(100)) + list(range(10_000, 10_004)) + [1_000_000]


def test_progress_topic_replication_factor(spark, kafka_bootstrap, unique):
    df = spark.createDataFrame([("v",)], "value string")
    options = {**sink_options(kafka_bootstrap, unique, "exactly-once", prefix=unique), "progressTopic": unique + "-p"}
    with pytest.raises(PySparkException) as info:  # one broker: two replicas cannot be placed
        df.write.format("connectors.kafka").options(**options).option("progressTopicReplicationFactor", 2) \
            .mode("append").save()
    assert "option 'progressTopicReplicationFactor' = 2: creating progressTopic" in str(info.value)
    df.write.format("connectors.kafka").options(**options).option("progressTopicReplicationFactor", 1) \
        .mode("append").save()
    topics = AdminClient({"bootstrap.servers": kafka_bootstrap}).list_topics(timeout=30).topics
    assert len(topics[unique + "-p"].partitions[0].replicas) == 1


def test_restart_whose_progress_expired_refuses_to_rerun_the_batch(spark, unique, tmp_path):
    """A broker of our own that drops the offsets of empty groups after a minute (the brokers'
    default is 7 days): the query stops while batch 1 is pending, stays down until its progress
    expired, and restarts. Re-running batch 1 would write it twice; the start refuses, naming
    progressTopic and what to do."""
    from connectors.testing.kafka_broker import KafkaBroker

    broker = KafkaBroker(tmp_path / "broker", settings={"offsets.retention.minutes": "1",
                                                        "offsets.retention.check.interval.ms": "1000"})
    bootstrap = broker.start()
    try:
        topic = create_topic(bootstrap, unique)
        # No producers kept in the session's Python workers: they would retry the stopped broker.
        options = {**sink_options(bootstrap, topic, "exactly-once", prefix=unique), "producerCacheSize": "0"}
        checkpoint = tmp_path / "cp"

        def start():
            return (numbers_stream(spark, 1999, 1000).writeStream.format("connectors.kafka").options(**options)
                    .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())

        query = start()
        query.awaitTermination(180)
        assert query.exception() is None
        for name in ("1", ".1.crc"):  # as if the driver died before recording batch 1
            (checkpoint / "commits" / name).unlink()
        admin, deadline = AdminClient({"bootstrap.servers": bootstrap}), time.monotonic() + 180
        while any(g.group_id.startswith(unique) for g in admin.list_consumer_groups().result(30).valid):
            assert time.monotonic() < deadline, "the progress groups never expired"
            time.sleep(5)
        query = start()
        with pytest.raises(PySparkException) as info:
            query.awaitTermination(180)
        assert (f"the checkpoint re-runs batch 1, but progressTopic 'connectors-sink-progress' holds no progress of "
                f"transactionalIdPrefix '{unique}'") in str(info.value)
        assert f"delete {checkpoint}/offsets/1" in str(info.value)
        assert values(consume(bootstrap, topic)) == list(range(2000))
    finally:
        broker.stop()


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
    runtime dir) leaves none, so the broker's epoch check must catch it."""
    topic = create_topic(kafka_bootstrap, unique)
    options = sink_options(kafka_bootstrap, topic, "exactly-once", prefix=unique)
    assert write_numbers(options, 0, 0, 300) == (300, 0)
    if host == "other host":
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))  # where the spawned worker keeps owner files
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


def test_kept_producer_whose_check_never_returns_is_dropped(kafka_bootstrap, unique, caplog):
    """librdkafka's send_offsets_to_transaction() can block past its timeout after a broker
    restart (confluentinc/librdkafka#5456): a kept producer stuck in its check is given up within
    requestTimeout plus a grace, left untouched (closing it would block too), and the task goes on
    with a new producer."""
    from connectors.kafka.sink.producer import IDLE

    topic = create_topic(kafka_bootstrap, unique)
    options = {**sink_options(kafka_bootstrap, topic, "exactly-once", prefix=unique), "requestTimeout": "2s"}
    assert write_numbers(options, 0, 0, 300) == (300, 0)
    (kept,) = [txn for _, txn in IDLE._idle.values() if getattr(txn, "txn_id", None) == f"{unique}-0"]
    release, calls = threading.Event(), []

    class NeverReturns:  # the kept librdkafka producer, with the hang of librdkafka#5456
        def __init__(self, real):
            self.real = real

        def __getattr__(self, name):
            calls.append(name)
            return getattr(self.real, name)

        def send_offsets_to_transaction(self, *args):
            calls.append("send_offsets_to_transaction")
            release.wait(60)  # longer than the test allows

    real = kept.sink.producer
    kept.sink.producer = NeverReturns(real)
    began = time.monotonic()
    try:
        with caplog.at_level(logging.INFO, logger="connectors.kafka.sink.exactly_once"):
            assert write_numbers(options, 1, 300, 600) == (300, 0)
        assert time.monotonic() - began < 2 + 5 + 30  # the timeout, the grace, a new producer's start
        assert "did not return within 7 s" in caplog.text
        assert calls == ["begin_transaction", "send_offsets_to_transaction"]  # no abort, purge or close after
    finally:
        release.set()
        real.close()
    assert values(consume(kafka_bootstrap, topic)) == list(range(600))


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
def test_a_restart_with_fewer_partitions_fails_the_batch_it_wrote_twice(crash_harness, kafka_bootstrap, unique):
    """Killed after batch 0's two tasks committed and before Spark's commit log, then restarted with
    a coalesce(1) added: partition 0 now holds its 1000 committed records followed by partition 1's,
    skips its own and writes partition 1's again. The query must fail and say so; it used to finish
    with 1000 records twice and no error."""
    topic = create_topic(kafka_bootstrap, unique)
    harness = crash_harness("jobs.kafka_sink:numbers_to_kafka", end=3999, rows_per_batch=2000,
                            options=sink_options(kafka_bootstrap, topic, "exactly-once", prefix=unique))
    harness.kill_at("kafka.commit.before:1")
    assert values(consume(kafka_bootstrap, topic)) == list(range(2000))
    harness.args["coalesce"] = 1
    number, run = harness.restart()
    assert run.exit_code != 0
    assert ("batch 0 was re-executed with 1 Spark partitions, but in an earlier attempt partition 1 committed 1000 "
            "records of it") in harness.log(number).read_text()
    assert values(consume(kafka_bootstrap, topic)) == sorted([*range(2000), *range(1000, 2000)])


@pytest.mark.crash
def test_packed_kafka_source_into_exactly_once_sink_survives_a_kill_at_each_step(crash_harness, kafka_bootstrap,
                                                                                  unique):
    """Four Kafka partitions per micro-batch read by one task and written in one transaction,
    killed before and after that commit and before and after Spark's: every record once."""
    source = create_topic(kafka_bootstrap, f"{unique}-in", partitions=4)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for number in range(6000):
        producer.produce(source, str(number), partition=number % 4)
    assert producer.flush(30) == 0
    sink = create_topic(kafka_bootstrap, f"{unique}-out")
    options = sink_options(kafka_bootstrap, sink, "exactly-once", prefix=unique)
    harness = crash_harness("jobs.kafka_sink:kafka_to_kafka", bootstrap=kafka_bootstrap, source_topic=source,
                            max_offsets=2000, options=options)
    harness.run_faults(["kafka.task.before_commit:1", "kafka.task.after_commit:1", "kafka.commit.before:1",
                        "kafka.commit.after:1"])
    assert values(consume(kafka_bootstrap, sink)) == list(range(6000))  # no loss, no duplicate


@pytest.mark.crash
def test_at_least_once_foreach_batch_survives_sigkill(crash_harness, kafka_bootstrap, unique):
    topic = create_topic(kafka_bootstrap, unique)
    harness = crash_harness("jobs.kafka_sink:numbers_to_kafka", end=5999, rows_per_batch=2000, via="foreachBatch",
                            options=sink_options(kafka_bootstrap, topic, "at-least-once"))
    report = harness.run(kills=2, kill_at="mid-batch", seed=5)
    assert report.kills == 2
    assert set(values(consume(kafka_bootstrap, topic))) == set(range(6000))  # no loss
