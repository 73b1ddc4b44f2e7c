"""`make demo`: the whole suite in one pipeline, with local Kafka and PostgreSQL started for it.

    numbers --(exactly-once)--> Kafka --(running count per key)--> PostgreSQL (upsert, exactly-once)
                                  \\------------------------------> rolling JSON files

One progress line per micro-batch (rows, rows/s, Kafka lag), then a summary of what was written where.
"""

from __future__ import annotations

import shutil
import sys
import uuid
from pathlib import Path

import psycopg2
from pyspark import cloudpickle

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import kafka_count_to_postgres  # noqa: E402  (example 1: the CountFunction pipeline)

from connectors.files import finish  # noqa: E402
from connectors.testing import services  # noqa: E402
from connectors.testing.spark import local_session  # noqa: E402
from connectors.tools.progress import ProgressListener  # noqa: E402

OUTPUT = HERE / "output" / "demo"
NUMBERS = 200_000


def main() -> None:
    shutil.rmtree(OUTPUT, ignore_errors=True)
    print("starting (or reusing) local Kafka and PostgreSQL ...", flush=True)
    bootstrap, dsn = services.kafka_bootstrap_servers(persistent=True), services.postgres_dsn(persistent=True)
    topic, table = f"demo-numbers-{uuid.uuid4().hex[:8]}", "demo_counts"
    with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS {table}; CREATE TABLE {table} (word text PRIMARY KEY, count bigint)")

    spark = local_session("connectors-demo")
    cloudpickle.register_pickle_by_value(kafka_count_to_postgres)  # workers don't import examples/
    progress = ProgressListener()
    spark.streams.addListener(progress)

    def run(name: str, query) -> None:
        print(f"-- {name}", flush=True)
        query.awaitTermination()

    run("numbers -> Kafka (exactly-once)", (
        spark.readStream.format("connectors.numbers").option("end", NUMBERS - 1).option("rowsPerBatch", 50_000).load()
        .selectExpr("CAST(value % 10 AS STRING) AS key", "CAST(value AS STRING) AS value")
        .writeStream.queryName("numbers_to_kafka").format("connectors.kafka")
        .option("kafka.bootstrap.servers", bootstrap).option("topic", topic)
        .option("deliveryGuarantee", "exactly-once").option("transactionalIdPrefix", f"demo-{topic}")
        .option("checkpointLocation", str(OUTPUT / "checkpoints" / "numbers_to_kafka"))
        .trigger(availableNow=True).start()
    ))
    kafka = (
        spark.readStream.format("connectors.kafka").option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic).option("startingOffsets", "earliest")
        .option("kafka.isolation.level", "read_committed").option("maxOffsetsPerTrigger", 50_000)
    )
    words = kafka.load().selectExpr("CAST(key AS STRING) AS word")
    run("Kafka -> running count per key -> PostgreSQL (upsert, exactly-once)", (
        kafka_count_to_postgres.running_counts(words)
        .writeStream.queryName("counts_to_postgres").format("connectors.jdbc")
        .option("url", dsn).option("dbtable", table).option("mode", "upsert").option("keyColumns", "word")
        .option("checkpointLocation", str(OUTPUT / "checkpoints" / "counts_to_postgres"))
        .trigger(availableNow=True).start()
    ))
    files = OUTPUT / "files"
    run("Kafka -> rolling JSON files (exactly-once)", (
        kafka.load().selectExpr("partition", "offset", "CAST(value AS STRING) AS value")
        .writeStream.queryName("kafka_to_files").format("connectors.files")
        .option("path", str(files)).option("fileFormat", "json")
        .option("checkpointLocation", str(OUTPUT / "checkpoints" / "kafka_to_files"))
        .trigger(availableNow=True).start()
    ))
    finish(str(files))  # publish the parts the finished job left open

    with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT word, count FROM {table} ORDER BY word")
        counts = dict(cur.fetchall())
    lines = spark.read.option("recursiveFileLookup", "true").json(str(files)).count()
    part_files = [p for p in files.rglob("*") if p.is_file() and not any(s.startswith((".", "_")) for s in p.parts)]
    print("\nsummary")
    print(f"  Kafka topic {topic} at {bootstrap}: {NUMBERS:,} records (exactly-once)")
    print(f"  PostgreSQL table {table} at {dsn.split('@')[-1]}: {len(counts)} keys, "
          f"{sum(counts.values()):,} counted ({counts})")
    print(f"  files under {files}: {lines:,} records in {len(part_files)} part files")
    print(f"  checkpoints under {OUTPUT / 'checkpoints'}")
    spark.stop()


if __name__ == "__main__":
    main()
