"""connectors.kafka vs Spark's Kafka source on 1,000 partitions, in micro-batches of 20k records.

One topic of ``--partitions`` partitions (default 1,000) holds ``--triggers`` x 20,000 records of
100 bytes (default 5 triggers), spread evenly. Each source reads it as a stream
(``Trigger.AvailableNow``, ``maxOffsetsPerTrigger=20000``, ``startingOffsets=earliest``) into
Spark's ``noop`` sink, so every micro-batch reads 20 records of each partition. Per micro-batch:
its duration, the part of it spent outside running the batch (``triggerExecution`` minus
``addBatch``: latest offsets, offset log, query planning; both sources plan their tasks inside
``addBatch``), the tasks it ran and the size of its end offset in the checkpoint (the
``offsets/N`` file); over the whole stream, rows/s of the micro-batches' durations. Spark's
connector is spark-sql-kafka-0-10 4.2.0, as in ``bench_kafka_source``. If Spark's side is too slow
on a machine, lower ``--triggers``, not ``--partitions``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.bench_kafka_source import SPARK_KAFKA, create_topic
from benchmarks.common import Result, local_spark, report
from connectors.testing.services import kafka_bootstrap_servers

RECORDS_PER_TRIGGER = 20_000


def stream(spark, ours: bool, bootstrap: str, topic: str) -> dict:
    """Read ``topic`` to its end in micro-batches of 20k records; the query's figures."""
    checkpoint = Path(tempfile.mkdtemp(prefix="bench-kafka-partitions-"))
    df = (spark.readStream.format("connectors.kafka" if ours else "kafka").option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", topic).option("startingOffsets", "earliest")
          .option("maxOffsetsPerTrigger", RECORDS_PER_TRIGGER).load())
    started = time.perf_counter()
    query = (df.writeStream.format("noop").option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    wall = time.perf_counter() - started
    batches = [p for p in query.recentProgress if p["numInputRows"]]
    tracker = spark.sparkContext.statusTracker()
    jobs = [tracker.getJobInfo(job) for job in tracker.getJobIdsForGroup(str(query.runId))]  # a query's job group
    tasks = [sum(tracker.getStageInfo(stage).numTasks for stage in job.stageIds) for job in jobs if job]
    offsets = [(checkpoint / "offsets" / str(p["batchId"])).stat().st_size for p in batches]
    figures = {
        "micro-batches": len(batches),
        "rows": sum(p["numInputRows"] for p in batches),
        "batch ms (median)": statistics.median(p["durationMs"]["triggerExecution"] for p in batches),
        "planning ms (median)": statistics.median(
            p["durationMs"]["triggerExecution"] - p["durationMs"].get("addBatch", 0) for p in batches),
        "batch seconds (sum)": sum(p["durationMs"]["triggerExecution"] for p in batches) / 1000,
        "tasks per micro-batch (median)": statistics.median(tasks) if tasks else None,
        "offset bytes (median)": statistics.median(offsets),
        "wall seconds": round(wall, 2),
    }
    print(f"  {'connectors.kafka' if ours else 'spark kafka':<17} {figures}", flush=True)
    return figures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--triggers", type=int, default=5)
    args = parser.parse_args(argv)
    bootstrap = kafka_bootstrap_servers(persistent=True)
    records = args.triggers * RECORDS_PER_TRIGGER
    started = time.perf_counter()
    topic = create_topic(bootstrap, records, args.partitions)
    print(f"produced {records:,} records on {args.partitions:,} partitions in {time.perf_counter() - started:.1f} s",
          flush=True)
    warm_up = create_topic(bootstrap, 1000)
    spark = local_spark([SPARK_KAFKA], app_name="bench-kafka-partitions")
    figures, results = {}, []
    for ours, name in ((True, "connectors.kafka"), (False, "spark kafka")):
        stream(spark, ours, bootstrap, warm_up)
        figures[name] = stream(spark, ours, bootstrap, topic)
        assert figures[name]["rows"] == records, (name, figures[name]["rows"], records)
        results.append(Result(name, records, figures[name]["batch seconds (sum)"]))
    ours, theirs = figures["connectors.kafka"], figures["spark kafka"]
    print(f"  batch duration: spark / ours {theirs['batch ms (median)'] / ours['batch ms (median)']:.1f}x; "
          f"planning: spark / ours {theirs['planning ms (median)'] / ours['planning ms (median)']:.1f}x")
    report(
        "kafka_partitions",
        results,
        {"ours/spark rows/s over micro-batches": ("connectors.kafka", "spark kafka")},
        {"partitions": args.partitions, "records per trigger": RECORDS_PER_TRIGGER, "triggers": args.triggers,
         "spark_kafka": SPARK_KAFKA, "cores": os.cpu_count(), "load average": os.getloadavg(), **{
             f"{name}: {key}": value for name, values in figures.items() for key, value in values.items()}},
    )
    spark.stop()


if __name__ == "__main__":
    main()
