"""Example 1: Kafka -> per-key running count (Spark's stateful API) -> PostgreSQL upsert, exactly-once.

The seed's PyFlink ``CountFunction`` keeps a count per key in keyed ValueState; here the same
function is a ``StatefulProcessor`` whose state lives in the query checkpoint (RocksDB), the
Kafka offsets live in the same checkpoint, and the PostgreSQL sink commits each micro-batch's
rows together with its progress record: kill it anywhere, restart it, and every count is right.

    python examples/kafka_count_to_postgres.py     # uses $KAFKA_BOOTSTRAP_SERVERS / $POSTGRES_DSN,
                                                   # or starts local ones
"""

from __future__ import annotations

import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg2
from confluent_kafka import Producer
from pyspark.sql import DataFrame, Row
from pyspark.sql.streaming.stateful_processor import (
    StatefulProcessor,
    StatefulProcessorHandle,
)
from pyspark.sql.types import LongType, StructField, StructType

from connectors.testing import services
from connectors.testing.spark import local_session

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


class CountFunction(StatefulProcessor):
    """PyFlink's ``CountFunction``: ``count_state`` is a ValueState of the key's running count."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.count_state = handle.getValueState("count", StructType([StructField("count", LongType())]))

    def handleInputRows(self, key, rows: Iterator[Row], timerValues) -> Iterator[Row]:
        current = self.count_state.get()
        count = (current[0] if current else 0) + sum(1 for _ in rows)
        self.count_state.update((count,))
        yield Row(word=key[0], count=count)

    def close(self) -> None:
        pass


def running_counts(words: DataFrame) -> DataFrame:
    """``(word, running count)`` of a streaming DataFrame with a ``word`` column."""
    words.sparkSession.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB)
    # Append: every emitted (word, count) is a new row; the upsert keeps the latest per word.
    return words.groupBy("word").transformWithState(CountFunction(), "word string, count long", "Append", "None")


def count_words_into_postgres(spark, bootstrap: str, topic: str, dsn: str, table: str, checkpoint: str):
    """Start the pipeline; returns the StreamingQuery (AvailableNow: it stops when caught up)."""
    words = (
        spark.readStream.format("connectors.kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
        .selectExpr("CAST(value AS STRING) AS word")
    )
    return (
        running_counts(words)
        .writeStream.format("connectors.jdbc")
        .option("url", dsn)
        .option("dbtable", table)
        .option("mode", "upsert")
        .option("keyColumns", "word")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )


def main() -> None:
    bootstrap, dsn = services.kafka_bootstrap_servers(persistent=True), services.postgres_dsn(persistent=True)
    topic, table = f"words-{uuid.uuid4().hex[:8]}", "word_counts"
    words = ["apple", "banana", "cherry", "apple", "banana", "apple"] * 500
    producer = Producer({"bootstrap.servers": bootstrap})
    for word in words:
        producer.produce(topic, value=word.encode())
    producer.flush(30)
    with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS {table}; CREATE TABLE {table} (word text PRIMARY KEY, count bigint)")

    spark = local_session("example-kafka-count-to-postgres")
    with tempfile.TemporaryDirectory() as checkpoint:
        count_words_into_postgres(spark, bootstrap, topic, dsn, table, checkpoint).awaitTermination()
    with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT word, count FROM {table} ORDER BY word")
        counts = dict(cur.fetchall())
    print(f"counted {len(words)} words from Kafka topic {topic} into PostgreSQL table {table}: {counts}")
    spark.stop()


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    main()
