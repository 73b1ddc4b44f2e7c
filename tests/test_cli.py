"""The `connectors` command line: checkpoint offsets and consumer group lag."""

from __future__ import annotations

import subprocess
import sys

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "connectors", *args], capture_output=True, text=True, timeout=120)


def test_offsets_of_a_checkpoint(spark, tmp_path):
    checkpoint = tmp_path / "cp"
    (
        spark.readStream.format("connectors.numbers").option("end", 99).option("rowsPerBatch", 40)
        .option("numPartitions", 3).load()
        .writeStream.format("noop").option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True).start().awaitTermination(120)
    )
    result = run_cli("offsets", str(checkpoint))
    assert result.returncode == 0, result.stderr
    assert "last committed:  batch 2" in result.stdout
    assert 'source 0:        {"next": 100, "numPartitions": 3}' in result.stdout


def test_offsets_of_a_non_checkpoint_is_a_clear_error(tmp_path):
    result = run_cli("offsets", str(tmp_path))
    assert result.returncode == 2
    assert "is not a streaming checkpoint" in result.stderr


def test_group_lag(kafka_bootstrap, unique):
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(unique, 2, 1)])[unique].result(30)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(10):
        producer.produce(unique, value=b"x", partition=i % 2)
    producer.flush(30)
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": unique, "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition(unique, 0, 3), TopicPartition(unique, 1, 5)], asynchronous=False)
    consumer.close()
    result = run_cli("lag", "--bootstrap-servers", kafka_bootstrap, "--group", unique)
    assert result.returncode == 0, result.stderr
    assert "total lag: 2" in result.stdout  # partition 0: 5 - 3, partition 1: 5 - 5


def test_file_sink_status_and_finish(spark, tmp_path):
    out, checkpoint = tmp_path / "out", tmp_path / "cp"
    (
        spark.readStream.format("connectors.numbers").option("end", 99).load()
        .writeStream.format("connectors.files").option("path", str(out)).option("fileFormat", "json")
        .option("bucketAssigner", "basePath").option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True).start().awaitTermination(120)
    )
    before = run_cli("files", str(out))
    assert before.returncode == 0, before.stderr
    assert "last committed batch 0" in before.stdout
    assert "in-progress" in before.stdout and "finished part files: 0" in before.stdout
    finished = run_cli("finish", str(out))
    assert finished.returncode == 0 and "published" in finished.stdout, finished.stderr
    after = run_cli("files", str(out))
    assert "in-progress" not in after.stdout and "finished part files: 0" not in after.stdout
    assert sorted(r.value for r in spark.read.json(str(out)).collect()) == list(range(100))


def test_abort_transactions_of_a_query_that_is_gone(kafka_bootstrap, unique):
    """A stopped query's partition 0 left a transaction open: the command aborts it, and
    read_committed consumers see the records written after it at once."""
    from jobs.kafka_sink import number_batches, write_task
    from test_kafka_sink import (
        consume,
        create_topic,
        leave_transaction_open,
        sink_options,
    )

    topic = create_topic(kafka_bootstrap, unique, 1)
    write_task(sink_options(kafka_bootstrap, topic, "exactly-once", prefix=unique), 0, number_batches(0, 10))
    leave_transaction_open(kafka_bootstrap, f"{unique}-0", topic, b"-1")
    result = run_cli("abort-transactions", "--bootstrap-servers", kafka_bootstrap, "--prefix", unique)
    assert result.returncode == 0, result.stderr
    assert f"initialized 1 transactional ids, {unique}-0 .. {unique}-0" in result.stdout
    assert sorted(int(r.value) for r in consume(kafka_bootstrap, topic)) == list(range(10)) + [1_000_000]
    nothing = run_cli("abort-transactions", "--bootstrap-servers", kafka_bootstrap, "--prefix", unique + "x")
    assert nothing.returncode == 0 and "no transactional id of prefix" in nothing.stdout
