"""Example 3: Kafka -> rolling file sink (lake ingestion), killed mid-batch and resumed.

The job runs in a child process which is SIGKILLed in the middle of a micro-batch, then restarted
on the same checkpoint: Kafka offsets and the file sink's state both resume from it, so the
finished files hold every record exactly once.

    python examples/kafka_to_files.py [output dir]
"""

from __future__ import annotations

import sys
import tempfile
import uuid
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from connectors.files import finish
from connectors.testing import services
from connectors.testing.crash import CrashHarness, mark_batches
from connectors.testing.spark import local_session

HERE = Path(__file__).resolve().parent


def ingest(spark, checkpoint: str, bootstrap: str, topic: str, out: str):
    """The job: Kafka records -> JSON part files, one hour bucket per directory."""
    records = (
        spark.readStream.format("connectors.kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", 2000)
        .load()
        .selectExpr("partition", "offset", "CAST(value AS STRING) AS value")
    )
    return (
        mark_batches(records)  # lets the harness kill while a batch is being written
        .writeStream.format("connectors.files")
        .option("path", out)
        .option("fileFormat", "json")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )


def main(out: str) -> None:
    bootstrap = services.kafka_bootstrap_servers(persistent=True)
    topic = f"events-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap})
    for number in range(10_000):
        producer.produce(topic, value=f"event {number}".encode(), partition=number % 2)
    producer.flush(30)

    with tempfile.TemporaryDirectory() as work:
        harness = CrashHarness(job="kafka_to_files:ingest", workdir=Path(work), pythonpath=[str(HERE)],
                               args={"bootstrap": bootstrap, "topic": topic, "out": out})
        report = harness.run(kills=1, kill_at="mid-batch")
    for number, run in enumerate(report.runs):
        how = "SIGKILLed mid-batch" if run.killed else f"exited with {run.exit_code}"
        print(f"run {number}: completed batches {run.completed_batches}, {how} after {run.seconds:.0f} s")
    finish(out)  # publish the parts the finished job left open

    spark = local_session("example-kafka-to-files-check")
    rows = spark.read.option("recursiveFileLookup", "true").json(out)  # hour buckets are sub-directories
    total, distinct = rows.count(), rows.select("partition", "offset").distinct().count()
    print(f"{out} holds {total:,} records, {distinct:,} distinct (partition, offset): "
          f"{'exactly once' if total == distinct == 10_000 else 'MISMATCH'}")
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="events-"))
