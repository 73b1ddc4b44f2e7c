"""Example 2: a monitored directory of JSON files -> Kafka, exactly-once.

The file source reads each new file exactly once (its offset, a modification-time watermark plus
a bounded window of recent files, lives in the checkpoint); the Kafka sink writes each micro-batch
in Kafka transactions, so a ``read_committed`` consumer sees every record once.

    python examples/files_to_kafka.py
"""

from __future__ import annotations

import json
import os
import tempfile
import uuid
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from connectors.testing import services
from connectors.testing.spark import local_session


def land_files(directory: Path, files: int, rows_per_file: int) -> None:
    """Write files elsewhere and rename them in, as a producer of a landing directory should."""
    for number in range(files):
        staged = directory.parent / f"staging-{number}.json"
        staged.write_text("".join(
            json.dumps({"order": number * rows_per_file + i, "amount": i * 1.5}) + "\n" for i in range(rows_per_file)
        ))
        os.replace(staged, directory / f"orders-{number}.json")


def files_to_kafka(spark, landing: str, bootstrap: str, topic: str, checkpoint: str):
    return (
        spark.readStream.format("connectors.files")
        .schema("order long, amount double")
        .option("fileFormat", "json")
        .option("maxFilesPerTrigger", 2)
        .load(landing)
        .selectExpr("CAST(order AS STRING) AS key", "to_json(struct(*)) AS value")
        .writeStream.format("connectors.kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", topic)
        .option("deliveryGuarantee", "exactly-once")
        .option("transactionalIdPrefix", f"example-{topic}")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )


def committed_records(bootstrap: str, topic: str) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4().hex}",
                         "isolation.level": "read_committed", "enable.partition.eof": True,
                         "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, 0)])
    values = []
    while True:
        message = consumer.poll(10)
        if message is None or message.error():
            break
        values.append(message.value())
    consumer.close()
    return values


def main() -> None:
    bootstrap = services.kafka_bootstrap_servers(persistent=True)
    topic = f"orders-{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory() as work:
        landing = Path(work) / "landing"
        landing.mkdir()
        land_files(landing, files=6, rows_per_file=500)
        spark = local_session("example-files-to-kafka")
        query = files_to_kafka(spark, str(landing), bootstrap, topic, str(Path(work) / "checkpoint"))
        query.awaitTermination()
        batches = len(query.recentProgress)
        spark.stop()
    records = committed_records(bootstrap, topic)
    orders = {json.loads(value)["order"] for value in records}
    print(f"{batches} micro-batches moved 6 files into Kafka topic {topic}: {len(records)} committed records, "
          f"{len(orders)} distinct orders")


if __name__ == "__main__":
    main()
