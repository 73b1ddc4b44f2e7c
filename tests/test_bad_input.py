"""Bad input in the middle of a stream: a Kafka record too large for the broker, a row that
violates a PostgreSQL constraint, a value that does not fit its column, a full disk under the file
sink. The query fails with one clear line naming the record, the row or the path, and nothing an
earlier micro-batch committed is lost (the full disk, once given room, even finishes the stream
exactly once).
"""

from __future__ import annotations

import re
import subprocess

import psycopg2
import pytest
from pyspark.errors import StreamingQueryException
from test_file_sink import visible_files
from test_kafka_sink import consume, create_topic

from connectors.files import finish

RECORDS, PER_BATCH, BAD = 4000, 200, 1234  # the bad record is in micro-batch 6


def numbers(spark, *columns: str):
    return (
        spark.readStream.format("connectors.numbers").option("end", RECORDS - 1).option("rowsPerBatch", PER_BATCH)
        .option("numPartitions", 2).load().selectExpr(*columns)
    )  # fmt: skip


def fails(query) -> tuple[str, int]:
    """The Python exception's line the query failed with, and how many micro-batches it committed."""
    try:
        with pytest.raises(StreamingQueryException) as info:
            query.awaitTermination(300)
    finally:
        query.stop()
    line = re.search(r"^(?:[\w.]+\.)?(\w+Error: .*)$", str(info.value), re.MULTILINE)
    assert line, f"no Python error in {info.value}"
    return line[1], len([p for p in query.recentProgress if p["numInputRows"]])


def assert_committed_kept(ids: list[int], batches: int) -> None:
    """Every record of the committed batches there once; of the failed batch, at most what its
    committed partitions wrote; nothing after it."""
    assert len(ids) == len(set(ids)), "duplicates"
    assert set(range(batches * PER_BATCH)) <= set(ids), "records of committed micro-batches are missing"
    assert max(ids) < (batches + 1) * PER_BATCH


def test_kafka_record_too_large_names_the_record(spark, kafka_bootstrap, unique, tmp_path):
    topic = create_topic(kafka_bootstrap, unique)
    query = (
        numbers(spark, f"if(value = {BAD}, repeat('x', 2000000), cast(value as string)) AS value",
                "cast(value as string) AS key")
        .writeStream.format("connectors.kafka").option("kafka.bootstrap.servers", kafka_bootstrap)
        .option("topic", topic).option("deliveryGuarantee", "exactly-once").option("transactionalIdPrefix", unique)
        .option("checkpointLocation", str(tmp_path / "cp")).start()
    )  # fmt: skip
    error, batches = fails(query)
    assert re.match(rf"KafkaSinkError: connectors\.kafka: record \d+ of this task \(topic '{topic}', key '{BAD}', "
                    r"value of 2000000 bytes\): .*MSG_SIZE_TOO_LARGE", error), error  # fmt: skip
    assert_committed_kept([int(r.value) for r in consume(kafka_bootstrap, topic)], batches)


def _jdbc(spark, dsn: str, table: str, name: str, tmp_path):
    return (
        numbers(spark, "value AS id", f"{name} AS name").writeStream.format("connectors.jdbc")
        .option("url", dsn).option("dbtable", table).option("checkpointLocation", str(tmp_path / "cp")).start()
    )  # fmt: skip


def _ids(dsn: str, table: str) -> list[int]:
    connection = psycopg2.connect(dsn)
    try:
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT id FROM {table}")
            return [row[0] for row in cursor.fetchall()]
    finally:
        connection.close()


def test_jdbc_constraint_violation_names_the_row(spark, postgres_dsn, pg, unique, tmp_path):
    pg.execute(f"CREATE TABLE {unique} (id bigint CONSTRAINT not_{BAD} CHECK (id <> {BAD}), name text)")
    error, batches = fails(_jdbc(spark, postgres_dsn, unique, "concat('n', value)", tmp_path))
    assert re.match(rf'JdbcWriteError: connectors\.jdbc: writing to table "public"."{unique}" failed \(constraint '
                    rf'violation, constraint "not_{BAD}", SQLSTATE 23514\): .*Failing row contains \({BAD}, n{BAD}\)',
                    error), error  # fmt: skip
    assert_committed_kept(_ids(postgres_dsn, unique), batches)


def test_jdbc_value_too_long_for_its_column_names_the_row(spark, postgres_dsn, pg, unique, tmp_path):
    pg.execute(f"CREATE TABLE {unique} (id bigint, name varchar(6))")
    error, batches = fails(_jdbc(spark, postgres_dsn, unique, f"if(value = {BAD}, 'much too long', 'short')", tmp_path))
    assert re.match(rf'JdbcWriteError: connectors\.jdbc: writing to table "public"."{unique}" failed .*SQLSTATE '
                    r'22001.*value too long for type character varying\(6\).*line \d+, column name', error), error
    assert_committed_kept(_ids(postgres_dsn, unique), batches)


@pytest.fixture
def small_disk(tmp_path):
    """A 256 KiB tmpfs: full after a few micro-batches of the file sink."""
    mount = tmp_path / "small-disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)], check=True)
    yield mount
    subprocess.run(["umount", str(mount)], check=True)


def test_file_sink_disk_full_fails_clearly_and_finishes_once_given_room(spark, small_disk, tmp_path):
    out = small_disk / "out"

    def start():
        return (
            numbers(spark, "value AS id", "repeat('x', 100) AS padding").writeStream.format("connectors.files")
            .option("path", str(out)).option("fileFormat", "csv").option("bucketAssigner", "basePath")
            .option("partSize", "64k").option("checkpointLocation", str(tmp_path / "cp"))
            .trigger(availableNow=True).start()
        )  # fmt: skip

    error, batches = fails(start())
    assert re.match(rf"FileSinkError: connectors\.files: (writing part files|committing the micro-batch) under {out} "
                    r"failed: OSError: \[Errno 28\] No space left on device", error), error  # fmt: skip
    assert batches >= 2
    subprocess.run(["mount", "-o", "remount,size=4m", str(small_disk)], check=True)
    start().awaitTermination(300)
    finish(str(out))
    ids = [int(line.split(",")[0]) for path in visible_files(out) for line in path.read_text().splitlines()]
    assert len(ids) == RECORDS and sorted(ids) == list(range(RECORDS))
