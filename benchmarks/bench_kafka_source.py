"""connectors.kafka vs Spark's built-in Kafka source, on the same topic, in one run.

One topic (8 partitions, ``--records`` records of 100 bytes; BENCH_KAFKA_SOURCE_RECORDS, default
1M; the issue's full size is 5M) on the local test broker is read

1. by a plain confluent-kafka consumer loop in this process (the client's own limit: it only
   touches each message's value, no Spark, no Arrow);
2. by ``connectors.kafka`` and by Spark's ``kafka`` source, as a batch (``spark.read``) and as a
   stream (``Trigger.AvailableNow``), each into Spark's ``noop`` sink.

Spark's connector is spark-sql-kafka-0-10 **4.2.0**: the newest on Maven Central (there is no
4.3.0 artifact yet), run on the installed pyspark. Each reader first reads a small topic, then
the big one ``--repeat`` times (default 2); the best run counts, so JIT warm-up and other load
on a shared machine weigh less.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import uuid

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from benchmarks.common import Result, local_spark, measure, report
from connectors.testing.services import kafka_bootstrap_servers

SPARK_KAFKA = "org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0"
PARTITIONS = 8
VALUE_BYTES = 100


def create_topic(bootstrap: str, records: int, partitions: int = PARTITIONS) -> str:
    """A new topic of ``records`` records of VALUE_BYTES, spread evenly (round robin) over its partitions."""
    name = f"bench-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})  # must outlive the future
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(60)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.size": 1 << 20,
                         "compression.type": "none", "queue.buffering.max.messages": 1_000_000})
    value = b"x" * VALUE_BYTES
    for i in range(records):
        while True:
            try:
                producer.produce(name, value=value, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.1)
    assert producer.flush(120) == 0
    return name


def consumer_loop(bootstrap: str, topic: str, records: int) -> None:
    """Every record once through confluent-kafka's batch consume(), touching its value."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4()}",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    seen, finished, size = 0, 0, 0
    while finished < PARTITIONS:
        for message in consumer.consume(10_000, timeout=1.0):
            if message.error() is None:
                seen += 1
                size += len(message.value())
            elif message.error().code() == KafkaError._PARTITION_EOF:
                finished += 1
    consumer.close()
    assert seen == records, (seen, records)


def spark_read(spark, ours: bool, bootstrap: str, topic: str, stream: bool) -> None:
    reader = spark.readStream if stream else spark.read
    df = (reader.format("connectors.kafka" if ours else "kafka").option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", topic).option("startingOffsets", "earliest").load())
    if not stream:
        df.write.format("noop").mode("overwrite").save()
        return
    query = (df.writeStream.format("noop").option("checkpointLocation", tempfile.mkdtemp(prefix="bench-kafka-"))
             .trigger(availableNow=True).start())
    query.awaitTermination()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=int(os.environ.get("BENCH_KAFKA_SOURCE_RECORDS", 1_000_000)))
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args(argv)
    bootstrap = kafka_bootstrap_servers(persistent=True)
    started = time.perf_counter()
    topic = create_topic(bootstrap, args.records)
    print(f"produced {args.records:,} records of {VALUE_BYTES} bytes in {time.perf_counter() - started:.1f} s",
          flush=True)
    warm_up = create_topic(bootstrap, 1000)
    spark = local_spark([SPARK_KAFKA], app_name="bench-kafka-source")

    def best(name: str, fn) -> Result:
        runs = [measure(name, args.records, fn) for _ in range(args.repeat)]
        return min(runs, key=lambda r: r.seconds)

    results = [best("confluent-kafka consumer loop", lambda: consumer_loop(bootstrap, topic, args.records))]
    for stream in (False, True):
        mode = "stream" if stream else "batch"
        for ours, label in ((True, "connectors.kafka"), (False, "spark kafka")):
            spark_read(spark, ours, bootstrap, warm_up, stream)
            results.append(best(f"{label} {mode}", lambda: spark_read(spark, ours, bootstrap, topic, stream)))
    report(
        "kafka_source",
        results,
        {
            "ours/spark batch rows/s": ("connectors.kafka batch", "spark kafka batch"),
            "ours/spark stream rows/s": ("connectors.kafka stream", "spark kafka stream"),
            "ours stream/confluent-kafka loop": ("connectors.kafka stream", "confluent-kafka consumer loop"),
        },
        {"records": args.records, "repeat": args.repeat, "partitions": PARTITIONS, "value_bytes": VALUE_BYTES, "spark_kafka": SPARK_KAFKA,
         "cores": os.cpu_count()},
    )
    spark.stop()


if __name__ == "__main__":
    main()
