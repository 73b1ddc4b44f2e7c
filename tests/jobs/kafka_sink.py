"""Jobs for the Kafka sink tests: crash-harness queries and a task-retry run in its own Spark.

Input is ``connectors.numbers`` (replayable, deterministic partitions), so every number must end
up in the topic; the tests count them with read_committed consumers.
"""

from __future__ import annotations

import json
import sys

from connectors.testing.crash import mark_batches


def _records(df, *extra: str):
    return df.selectExpr("cast(value as string) as value", "cast(value % 10 as string) as key", *extra)


# Spark feeds a writer through a 64 KiB socket buffer: rows this big reach the sink (and Kafka)
# before the injected failure, so the retry really meets records of the failed attempt.
_PADDING = "repeat('x', 1000) as padding"  # ignored by the sink, like any extra column


def numbers_to_kafka(spark, checkpoint, options, end, rows_per_batch, via="format", coalesce=None):
    """Crash-harness job: numbers 0..end -> Kafka, through the format or the KafkaSink callable;
    the source's two partitions ``coalesce``d into fewer when given."""
    from connectors.kafka import KafkaSink

    df = (
        spark.readStream.format("connectors.numbers")
        .option("end", end).option("rowsPerBatch", rows_per_batch).option("numPartitions", 2)
        .load()
    )
    records = _records(mark_batches(df))
    if coalesce is not None:
        records = records.coalesce(coalesce)
    if via == "format":
        writer = records.writeStream.format("connectors.kafka").options(**options)
    else:
        writer = records.writeStream.foreachBatch(KafkaSink(options))
    return writer.option("checkpointLocation", checkpoint).trigger(availableNow=True).start()


def kafka_to_kafka(spark, checkpoint, options, bootstrap, source_topic, max_offsets, **source_options):
    """Crash-harness job (and the service-fault tests' query): connectors.kafka -> Kafka; with few
    records per partition, one task reads every partition of a micro-batch (task packing) and
    writes them in one transaction."""
    df = (
        spark.readStream.format("connectors.kafka").option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source_topic).option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", max_offsets).options(**source_options).load()
    )
    return (df.select("value").writeStream.format("connectors.kafka").options(**options)
            .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())


def fail_first_attempt(df, after_batches: int):
    """Partition 0's first attempt passes ``after_batches`` Arrow batches on, then fails."""

    def inject(batches):
        import time

        from pyspark import TaskContext

        ctx = TaskContext.get()
        doomed = ctx.partitionId() == 0 and ctx.attemptNumber() == 0
        for index, batch in enumerate(batches):
            if doomed and index == after_batches:
                time.sleep(1)  # the sink's producer sends what it has: the retry meets written records
                raise RuntimeError("injected failure of the first attempt")
            yield batch

    return df.mapInArrow(inject, df.schema)


def task_retry(checkpoint, stream_options, batch_options, end):
    """In a Spark that retries tasks (local[2,3]): a stream and a batch write whose partition 0
    fails once midway; Spark's retry must complete both."""
    from connectors.testing.spark import local_session

    spark = local_session("kafka-sink-retry", conf={
        "spark.master": "local[2,3]",  # tasks get 3 attempts (local mode's default is 1)
        "spark.sql.execution.arrow.maxRecordsPerBatch": "100",  # many batches: fail midway
    })
    stream = spark.readStream.format("connectors.numbers").option("end", end).option("numPartitions", 2).load()
    (
        _records(fail_first_attempt(stream, after_batches=3), _PADDING)
        .writeStream.format("connectors.kafka").options(**stream_options)
        .option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
        .awaitTermination()
    )
    batch = spark.read.format("connectors.numbers").option("end", end).option("numPartitions", 2).load()
    _records(fail_first_attempt(batch, after_batches=3), _PADDING).write.format("connectors.kafka").options(**batch_options).mode("append").save()
    spark.stop()


def number_batches(start: int, stop: int, size: int = 100):
    """Arrow batches of the numbers start..stop-1 as a string ``value`` column."""
    import pyarrow as pa

    return [pa.record_batch({"value": [str(i) for i in range(low, min(low + size, stop))]})
            for low in range(start, stop, size)]


def write_task(options, batch, batches, partition=0):
    """One exactly-once task outside Spark: ``batches`` as partition ``partition`` of batch
    ``batch`` of run "run". Returns (records written, records skipped)."""
    from pyspark.sql.types import StringType, StructField, StructType

    from connectors.kafka import KafkaSinkOptions
    from connectors.kafka.sink.exactly_once import WorkUnit, write_exactly_once
    from connectors.kafka.sink.producer import check_cluster
    from connectors.kafka.sink.records import RecordLayout

    config = KafkaSinkOptions.from_options(options)
    check_cluster(config)  # as the driver does at query start: creates the progress topic
    layout = RecordLayout.of(StructType([StructField("value", StringType())]), config.topic)
    return write_exactly_once(config, layout, iter(batches), WorkUnit("run", batch, partition))


def write_numbers(options, batch, start, stop):
    """:func:`write_task` of the numbers start..stop-1 (picklable: runs in another process too)."""
    return write_task(options, batch, number_batches(start, stop))


def leave_transaction_open(bootstrap, txn_id, topic, value):
    """What a task killed mid-transaction leaves: ``value`` produced to ``topic`` in an open
    transaction of ``txn_id``, then SIGKILL (run it in a process of its own)."""
    import os
    import signal

    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                         "transaction.timeout.ms": "900000"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, value)
    producer.flush(30)  # on the broker, in the open transaction
    os.kill(os.getpid(), signal.SIGKILL)


def connect_foreach_batch(options, checkpoints, end):
    """Under Spark Connect: numbers 0..end through ``foreachBatch(KafkaSink(options))``, once per
    checkpoint in ``checkpoints`` (each a new query with the same transactionalIdPrefix); prints
    each query's outcome as a JSON line."""
    from pyspark.sql import SparkSession

    from connectors.kafka import KafkaSink

    spark = SparkSession.builder.remote("local[2]").config("spark.ui.enabled", "false").getOrCreate()
    for checkpoint in checkpoints:
        stream = (spark.readStream.format("connectors.numbers").option("end", end).option("rowsPerBatch", 500)
                  .option("numPartitions", 2).load().selectExpr("cast(value as string) as value"))
        query = (stream.writeStream.foreachBatch(KafkaSink(options)).option("checkpointLocation", checkpoint)
                 .trigger(availableNow=True).start())
        try:
            query.awaitTermination()
            error = None
        except Exception as exc:
            error = str(exc)
        print(json.dumps({"checkpoint": checkpoint, "error": error}), flush=True)
    spark.stop()


if __name__ == "__main__":
    job = json.loads(sys.argv[1])
    {"task_retry": task_retry, "connect_foreach_batch": connect_foreach_batch}[job.pop("job", "task_retry")](**job)
