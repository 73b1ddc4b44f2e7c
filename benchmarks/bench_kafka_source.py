"""connectors.kafka vs Spark's built-in Kafka source, on the same topic, in one run.

One topic (8 partitions, ``--records`` records of 100 bytes; BENCH_KAFKA_SOURCE_RECORDS, default
1M; the issue's full size is 5M) on the local test broker is read

1. by the ceiling of any Python Kafka source: confluent-kafka alone, one process per core (a
   pool started before timing), each reading its share of the partitions one after another with
   batched ``consume(num_messages=...)`` and making every batch of messages into the Arrow columns
   of Spark's Kafka schema with our own conversion (``split_reader.to_arrow``); no Spark;
2. by ``connectors.kafka`` and by Spark's ``kafka`` source, as a batch (``spark.read``) and as a
   stream (``Trigger.AvailableNow``), each into Spark's ``noop`` sink.

Spark's connector is spark-sql-kafka-0-10 **4.2.0**: the newest on Maven Central (there is no
4.3.0 artifact yet), run on the installed pyspark. Each reader first reads the topic once
untimed (a reader's first read of it took up to 2x as long as its later ones, Spark's and ours
alike: docs/kafka-source.md, *Warm readers, in turn*), then all five read it ``--repeat`` times
(default 3) round robin, so load from other processes hits each alike; each one's fastest run
counts.
"""

from __future__ import annotations

import argparse
import functools
import multiprocessing
import os
import tempfile
import time
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition

from benchmarks.common import fastest, local_spark, new_topic, report
from connectors.kafka.source.formats import RecordDecoder
from connectors.kafka.source.split_reader import to_arrow
from connectors.testing.services import kafka_bootstrap_servers

SPARK_KAFKA = "org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0"
PARTITIONS = 8
VALUE_BYTES = 100
CEILING = "confluent-kafka -> Arrow, a process per core"
CONSUME_BATCH = 50_000  # messages per consume(), as our read tasks ask


def create_topic(bootstrap: str, records: int, partitions: int = PARTITIONS) -> str:
    """A new topic of ``records`` records of VALUE_BYTES, spread evenly (round robin) over its partitions."""
    name = new_topic(bootstrap, "bench", partitions)
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


def ceiling_share(bootstrap: str, topic: str, partitions: list[int], decoder: RecordDecoder | None = None) -> int:
    """One process' share of the ceiling: its partitions, each from the start to the end it has
    now, through batched consume() into Arrow (and ``decoder``, for avro-confluent values);
    returns the rows. Fetches and connects as our tasks do: librdkafka's 1 MiB per partition,
    1 s backoff on a full queue and on-demand connections are slower."""
    rows = 0
    for partition in partitions:
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4()}",
                             "enable.auto.commit": False, "max.partition.fetch.bytes": 10 << 20,
                             "fetch.queue.backoff.ms": 10, "enable.sparse.connections": False})
        position, end = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        consumer.assign([TopicPartition(topic, partition, position)])
        while position < end:
            # no more than the partition holds: consume() waits out its timeout for a batch it cannot fill
            messages = consumer.consume(num_messages=min(end - position, CONSUME_BATCH), timeout=1.0)
            data = [m for m in messages if m.error() is None]
            if data:
                batch = to_arrow(data, topic, headers=False)
                rows += (batch if decoder is None else decoder(batch)).num_rows
                position = data[-1].offset() + 1
        consumer.close()
    return rows


def ceiling(pool, processes: int, bootstrap: str, topic: str, records: int,
            decoder: RecordDecoder | None = None) -> None:
    shares = [list(range(PARTITIONS))[n::processes] for n in range(processes)]
    rows = sum(pool.starmap(ceiling_share, [(bootstrap, topic, share, decoder) for share in shares]))
    assert rows == records, (rows, records)


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
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    bootstrap = kafka_bootstrap_servers(persistent=True)
    started = time.perf_counter()
    topic = create_topic(bootstrap, args.records)
    print(f"produced {args.records:,} records of {VALUE_BYTES} bytes in {time.perf_counter() - started:.1f} s",
          flush=True)
    spark = local_spark([SPARK_KAFKA], app_name="bench-kafka-source")
    cores = os.cpu_count() or 1
    with multiprocessing.get_context("spawn").Pool(cores) as pool:  # spawned: this process runs py4j's threads
        runs = {CEILING: lambda: ceiling(pool, cores, bootstrap, topic, args.records)}
        for stream in (False, True):
            mode = "stream" if stream else "batch"
            for ours, label in ((True, "connectors.kafka"), (False, "spark kafka")):
                runs[f"{label} {mode}"] = functools.partial(spark_read, spark, ours, bootstrap, topic, stream)
        for name, run in runs.items():  # warm-up, untimed: each reader's first read of a session is slow
            print(f"  warm-up: {name}", flush=True)
            run()
        results = fastest(runs, args.records, args.repeat)
    report(
        "kafka_source",
        results,
        {
            "ours/spark batch rows/s": ("connectors.kafka batch", "spark kafka batch", CEILING),
            "ours/spark stream rows/s": ("connectors.kafka stream", "spark kafka stream", CEILING),
        },
        {"records": args.records, "repeat": args.repeat, "partitions": PARTITIONS, "value_bytes": VALUE_BYTES, "spark_kafka": SPARK_KAFKA,
         "cores": cores},
    )
    spark.stop()


if __name__ == "__main__":
    main()
