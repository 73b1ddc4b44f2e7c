"""avro-confluent: connectors.kafka vs Spark's ``kafka`` connector with spark-avro, in one run.

``--records`` Avro records (BENCH_AVRO_RECORDS, default 1M) of 10 fields of mixed types (long,
int, double, float, boolean, strings, a timestamp, nullable string and long) in the Schema
Registry wire format, on a fresh 8-partition topic of the local test broker, the schema
registered in the local registry:

1. decoding: ``connectors.kafka`` with ``valueFormat=avro-confluent`` against Spark's ``kafka``
   source + ``from_avro`` on ``substring(value, 6)`` (the 5-byte header cut off) with the same
   schema, both ``spark.read`` into the ``noop`` sink, every field selected; and the ceiling of a
   Python reader, without Spark: confluent-kafka's batched ``consume()`` into Arrow and our
   vectorised decoder, a process per core (``bench_kafka_source``'s, with the decoder);
2. encoding: the same rows made by ``spark.range`` written by ``connectors.kafka`` with
   ``valueFormat=avro-confluent`` (at-least-once) against ``to_avro`` behind the same 5-byte
   header into Spark's Kafka sink; the ceiling: the same rows into a Python sink that only
   counts them (:class:`benchmarks.common.CountingSink`), the JVM -> Python hop every Python
   sink pays before encoding or producing anything.

Spark's connectors are spark-sql-kafka-0-10 and spark-avro **4.2.0**, the newest on Maven
Central (no 4.3.0 artifacts), on the installed pyspark. Each side first runs on a small topic,
then ``--repeat`` times (default 2), round robin; the fastest run counts.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os

import numpy as np
import pyarrow as pa
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from benchmarks.bench_kafka_source import ceiling
from benchmarks.common import CountingSink, fastest, local_spark, new_topic, report
from connectors.core import avro
from connectors.kafka.source.formats import RecordDecoder
from connectors.kafka.source.options import KafkaSourceOptions
from connectors.testing.services import kafka_bootstrap_servers, schema_registry_url

PACKAGES = ["org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0", "org.apache.spark:spark-avro_2.13:4.2.0"]
PARTITIONS = 8
SCHEMA = {"type": "record", "name": "topLevelRecord", "fields": [
    {"name": "id", "type": "long"},
    {"name": "customer", "type": "string"},
    {"name": "amount", "type": "double"},
    {"name": "quantity", "type": "int"},
    {"name": "paid", "type": "boolean"},
    {"name": "note", "type": ["null", "string"], "default": None},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-micros"}},
    {"name": "score", "type": "float"},
    {"name": "country", "type": "string"},
    {"name": "ref", "type": ["null", "long"], "default": None},
]}
# The same rows as Spark SQL, for the sinks (the schema derived from them is SCHEMA).
COLUMNS = [
    "id", "concat('customer-', cast(id % 1000 as string)) as customer", "cast(id as double) / 2 as amount",
    "cast(id % 100 as int) as quantity", "id % 2 = 0 as paid",
    "if(id % 3 = 0, concat('note ', cast(id as string)), null) as note",
    "timestamp_micros(1767225600000000 + id) as at", "cast(id % 7 as float) as score", "'DE' as country",
    "if(id % 5 = 0, null, id) as ref",
]
CHUNK = 50_000
CEILING = "confluent-kafka -> Arrow -> decoder, a process per core"
SINK_CEILING = "Python sink doing nothing"


def rows(start: int, count: int) -> pa.StructArray:
    i = np.arange(start, start + count, dtype=np.int64)
    note = pa.array([f"note {k}" if k % 3 == 0 else None for k in range(start, start + count)], pa.string())
    return pa.StructArray.from_arrays([
        pa.array(i), pa.array([f"customer-{k % 1000}" for k in range(start, start + count)]), pa.array(i / 2),
        pa.array((i % 100).astype(np.int32)), pa.array(i % 2 == 0), note,
        pa.array(1767225600000000 + i, pa.timestamp("us", "UTC")), pa.array((i % 7).astype(np.float32)),
        pa.array(["DE"] * count), pa.array(i, mask=i % 5 == 0),
    ], names=[f["name"] for f in SCHEMA["fields"]])


def produce(bootstrap: str, topic: str, records: int, schema_id: int) -> None:
    """Records in the wire format, encoded with our encoder (byte-exact with fastavro's, tested)."""
    first = rows(0, 1)
    encoder = avro.Encoder(avro.parse(SCHEMA), first.type, b"\x00" + schema_id.to_bytes(4, "big"))
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.size": 1 << 20,
                         "queue.buffering.max.messages": 1_000_000})
    for start in range(0, records, CHUNK):
        for n, value in enumerate(encoder.encode(rows(start, min(CHUNK, records - start))).to_pylist()):
            while True:
                try:
                    producer.produce(topic, value=value, partition=(start + n) % PARTITIONS)
                    break
                except BufferError:
                    producer.poll(0.1)
    assert producer.flush(120) == 0


def count(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-avro-check"})
    total = sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(PARTITIONS))
    consumer.close()
    return total


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=int(os.environ.get("BENCH_AVRO_RECORDS", 1_000_000)))
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args(argv)
    bootstrap, url = kafka_bootstrap_servers(persistent=True), schema_registry_url(persistent=True)
    registry = SchemaRegistryClient({"url": url})
    schema_json = json.dumps(SCHEMA)

    def topic_with(records: int) -> str:
        topic = new_topic(bootstrap, "bench-avro", PARTITIONS)
        schema_id = registry.register_schema(f"{topic}-value", Schema(schema_json, "AVRO"))
        produce(bootstrap, topic, records, schema_id)
        return topic

    big, small = topic_with(args.records), topic_with(1000)
    spark = local_spark(PACKAGES, app_name="bench-avro")
    spark.dataSource.register(CountingSink)
    from pyspark.sql import functions as F  # noqa: PLC0415
    from pyspark.sql.avro.functions import from_avro, to_avro  # noqa: PLC0415

    def read_ours(topic: str) -> None:
        (spark.read.format("connectors.kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
         .option("valueFormat", "avro-confluent").option("schema.registry.url", url).load()
         .select("value.*").write.format("noop").mode("overwrite").save())

    def read_spark(topic: str) -> None:
        (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic).load()
         .select(from_avro(F.expr("substring(value, 6)"), schema_json).alias("v")).select("v.*")
         .write.format("noop").mode("overwrite").save())

    def source_rows(records: int):
        return spark.range(records, numPartitions=2).selectExpr(*COLUMNS).select(F.struct("*").alias("value"))

    sink_topics: dict[str, str] = {}
    header = {}

    def write_ours(records: int, topic: str) -> None:
        (source_rows(records).write.format("connectors.kafka").option("kafka.bootstrap.servers", bootstrap)
         .option("topic", topic).option("valueFormat", "avro-confluent").option("schema.registry.url", url)
         .mode("append").save())

    def write_spark(records: int, topic: str) -> None:
        if topic not in header:  # the id our sink registered for the same schema under this subject
            header[topic] = registry.register_schema(f"{topic}-value", Schema(schema_json, "AVRO"))
        prefix = F.lit(b"\x00" + header[topic].to_bytes(4, "big"))
        (source_rows(records).select(F.concat(prefix, to_avro(F.col("value"), schema_json)).alias("value"))
         .write.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", topic)
         .mode("append").save())

    cores = os.cpu_count() or 1
    decoder = RecordDecoder.of(KafkaSourceOptions.from_options({
        "kafka.bootstrap.servers": bootstrap, "subscribe": big, "valueFormat": "avro-confluent",
        "schema.registry.url": url}))
    pool = multiprocessing.get_context("spawn").Pool(cores)  # spawned: this process runs py4j's threads
    ceiling(pool, cores, bootstrap, small, 1000, decoder)

    def write_nowhere(records: int) -> None:
        source_rows(records).write.format(CountingSink.name()).mode("append").save()

    read_ours(small), read_spark(small)
    warm = new_topic(bootstrap, "bench-avro-sink", PARTITIONS)
    write_ours(1000, warm), write_spark(1000, warm), write_nowhere(1000)

    def before(name: str) -> None:
        sink_topics[name] = new_topic(bootstrap, "bench-avro-sink", PARTITIONS) if "write" in name else ""

    def after(name: str) -> None:
        if "write" in name:
            assert count(bootstrap, sink_topics[name]) == args.records, name

    results = fastest({
        CEILING: lambda: ceiling(pool, cores, bootstrap, big, args.records, decoder),
        "connectors.kafka avro read": lambda: read_ours(big),
        "spark kafka + from_avro read": lambda: read_spark(big),
        "connectors.kafka avro write": lambda: write_ours(args.records, sink_topics["connectors.kafka avro write"]),
        "to_avro + spark kafka write": lambda: write_spark(args.records, sink_topics["to_avro + spark kafka write"]),
        SINK_CEILING: lambda: write_nowhere(args.records),
    }, args.records, args.repeat, before=before, after=after)
    pool.close()
    report(
        "avro",
        results,
        {
            "ours/spark decode rows/s": ("connectors.kafka avro read", "spark kafka + from_avro read", CEILING),
            "ours/spark encode rows/s": ("connectors.kafka avro write", "to_avro + spark kafka write", SINK_CEILING),
        },
        {"records": args.records, "repeat": args.repeat, "partitions": PARTITIONS, "fields": len(SCHEMA["fields"]),
         "packages": PACKAGES, "cores": os.cpu_count()},
    )
    spark.stop()


if __name__ == "__main__":
    main()
