"""Services failing under a running query: the Kafka broker SIGKILLed and restarted, or frozen
past every request timeout; PostgreSQL restarted; the S3 server throttling (503) and resetting
connections. The query rides it out or fails with a clear error within a bounded time, and after
restarts from its checkpoint every record is there exactly once.

The broker and the database are private instances started here from the launchers (their own
ports and directories): the shared ones are never stopped or frozen.
"""

from __future__ import annotations

import functools
import json
import re
import shutil
import signal
import socket
import threading
import time
from collections.abc import Callable
from urllib.parse import urlparse

import pytest
from jobs.kafka_sink import kafka_to_kafka as kafka_to_kafka_job
from pyspark.errors import StreamingQueryException
from test_kafka_sink import consume, create_topic
from test_kafka_source import produce

from connectors.files import finish
from connectors.testing.kafka_broker import KafkaBroker
from connectors.testing.postgres_server import PostgresServer
from connectors.testing.s3_server import FlakyProxy

RECORDS = 4000


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    server = KafkaBroker(runtime_dir=tmp_path_factory.mktemp("private-kafka"))
    address = server.start()
    yield server, address
    try:
        server.signal(signal.SIGCONT)  # a failed test may leave it frozen
    except RuntimeError:  # not running: a failed test left it killed
        pass
    server.stop()


@pytest.fixture(scope="module")
def database(tmp_path_factory):
    server = PostgresServer(runtime_dir=tmp_path_factory.mktemp("private-postgres"))
    dsn = server.start()
    yield server, dsn
    server.stop()
    shutil.rmtree(server.data_dir.parent, ignore_errors=True)  # outside the runtime dir when root


def through_fault(start: Callable, fault: Callable[[], None], within: float, clear: str) -> list[str]:
    """Start the query, inject ``fault`` once two micro-batches have data, then restart the query
    from its checkpoint each time it fails, until it finishes. No run may go ``within`` seconds
    without completing a micro-batch, finishing or failing (a slow broker may make it crawl, never
    hang), and a failure must end with the connector's own one-line error matching ``clear``.
    Returns the failures."""
    query = start()
    deadline = time.monotonic() + 300
    while query.isActive and sum(1 for p in query.recentProgress if p["numInputRows"]) < 2:
        assert time.monotonic() < deadline, "the query made no progress"
        time.sleep(0.2)
    fault()
    failures = []
    for _ in range(3):
        began = time.monotonic()
        try:
            await_steps(query, within, failures)
        except StreamingQueryException as exc:
            error = re.search(r"^(?:[\w.]+\.)?(\w+Error): (.*)$", str(exc), re.MULTILINE)  # the Python exception
            assert error and re.match(clear, f"{error[1]}: {error[2]}"), f"not a clear error: {exc}"
            failures.append(f"after {time.monotonic() - began:.0f} s: {error[1]}: {error[2]}")
            query = start()
            continue
        return failures
    raise AssertionError(f"the query failed 3 times: {failures}")


def await_steps(query, within: float, failures: list[str]) -> None:
    """Wait for ``query`` to finish (raises if it fails); fail the test if it goes ``within``
    seconds without completing a micro-batch."""
    batch, since = None, time.monotonic()
    while not query.awaitTermination(1):
        progress = query.lastProgress
        if progress is not None and progress["batchId"] != batch:
            batch, since = progress["batchId"], time.monotonic()
        elif time.monotonic() - since > within:
            status = query.status
            query.stop()
            raise AssertionError(f"the query went {within} s without a micro-batch, an end or a failure "
                                 f"(status {status}, last batch {batch}); failures: {failures}")


# --- Kafka -----------------------------------------------------------------------------------


def kafka_to_kafka(spark, address: str, source: str, target: str, checkpoint) -> Callable:
    """Starts ``source`` -> ``target`` on the private broker, exactly-once, 20 micro-batches,
    with timeouts short enough for the faults."""
    sink = {"kafka.bootstrap.servers": address, "topic": target, "deliveryGuarantee": "exactly-once",
            "transactionalIdPrefix": target, "requestTimeout": "10s", "kafka.transaction.timeout.ms": "30000"}
    return functools.partial(kafka_to_kafka_job, spark, str(checkpoint), sink, address, source, RECORDS // 20,
                             **{"kafkaConsumer.pollTimeoutMs": "30000"})


KAFKA_ERROR = r"(KafkaSourceError|KafkaSinkError|StuckCallError|TimeoutError|OptionError): connectors\.kafka: "


def kafka_input(address: str, name: str) -> list[str]:
    create_topic(address, f"{name}-in", partitions=4)
    create_topic(address, f"{name}-out")
    values = [str(i) for i in range(RECORDS)]
    for partition in range(4):
        produce(address, f"{name}-in", values[partition::4], partition=partition)
    return values


def test_kafka_broker_killed_and_restarted(spark, broker, unique, tmp_path):
    server, address = broker
    values = kafka_input(address, unique)

    def crash() -> None:
        server.signal(signal.SIGKILL)
        time.sleep(3)
        server.restart()

    failures = through_fault(kafka_to_kafka(spark, address, f"{unique}-in", f"{unique}-out", tmp_path / "cp"), crash,
                             180, KAFKA_ERROR)
    print(failures)
    assert sorted(r.value.decode() for r in consume(address, f"{unique}-out")) == sorted(values)


def test_kafka_broker_frozen_past_the_timeouts(spark, broker, unique, tmp_path):
    server, address = broker
    values = kafka_input(address, unique)

    def freeze() -> None:
        server.signal(signal.SIGSTOP)
        time.sleep(45)
        server.signal(signal.SIGCONT)

    failures = through_fault(kafka_to_kafka(spark, address, f"{unique}-in", f"{unique}-out", tmp_path / "cp"), freeze,
                             180, KAFKA_ERROR)
    print(failures)
    assert sorted(r.value.decode() for r in consume(address, f"{unique}-out")) == sorted(values)


def test_kafka_broker_frozen_under_the_exactly_once_sink(spark, broker, unique, tmp_path):
    """No Kafka source to time out first: the sink's own calls must end (requestTimeout,
    kafka.transaction.timeout.ms)."""
    server, address = broker
    create_topic(address, unique)

    def start():
        return (
            spark.readStream.format("connectors.numbers").option("end", RECORDS - 1)
            .option("rowsPerBatch", RECORDS // 20).option("numPartitions", 2).load()
            .selectExpr("cast(value as string) AS value")
            .writeStream.format("connectors.kafka").option("kafka.bootstrap.servers", address)
            .option("topic", unique).option("deliveryGuarantee", "exactly-once")
            .option("transactionalIdPrefix", unique).option("requestTimeout", "10s")
            .option("kafka.transaction.timeout.ms", "30000")
            .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start()
        )  # fmt: skip

    def freeze() -> None:
        server.signal(signal.SIGSTOP)
        time.sleep(45)
        server.signal(signal.SIGCONT)

    failures = through_fault(start, freeze, 180, KAFKA_ERROR)
    print(failures)
    assert sorted(int(r.value) for r in consume(address, unique)) == list(range(RECORDS))


# --- PostgreSQL ------------------------------------------------------------------------------


def test_postgres_restarted(spark, database, unique, tmp_path):
    import psycopg2

    server, dsn = database
    with psycopg2.connect(dsn) as connection, connection.cursor() as cursor:
        cursor.execute(f"CREATE TABLE {unique} (id bigint, name text)")  # no key: a duplicate stays
    connection.close()

    def start():
        return (
            spark.readStream.format("connectors.numbers").option("end", RECORDS - 1)
            .option("rowsPerBatch", RECORDS // 20).option("numPartitions", 2).load()
            .selectExpr("value AS id", "concat('n', value) AS name")
            .writeStream.format("connectors.jdbc").option("url", dsn).option("dbtable", unique)
            .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start()
        )  # fmt: skip

    def restart() -> None:
        server.shutdown()
        time.sleep(2)
        server.restart()

    failures = through_fault(start, restart, 120, r"(JdbcWriteError|OptionError): connectors\.jdbc: ")
    print(failures)
    with psycopg2.connect(dsn) as connection, connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*), count(DISTINCT id), min(id), max(id) FROM {unique}")
        assert cursor.fetchone() == (RECORDS, RECORDS, 0, RECORDS - 1)
    connection.close()


@pytest.mark.smoke  # on every Spark line: the commit runner is found by its module's name
def test_postgres_down_when_a_task_fails_shows_the_tasks_error(spark, database, unique, tmp_path):
    """The server stops while a task waits on a row lock and stays down until the query has
    failed. Spark then makes a new writer to abort the batch, which cannot reach the server
    either: the query must still fail with the task's own error, not "Writing job failed"."""
    import psycopg2

    server, dsn = database
    blocker = psycopg2.connect(dsn)
    with blocker.cursor() as cursor:
        cursor.execute(f"CREATE TABLE {unique} (id bigint PRIMARY KEY, name text)")
        blocker.commit()
        cursor.execute(f"INSERT INTO {unique} VALUES (5, 'uncommitted')")  # the task's row 5 waits on it

    def start():  # one micro-batch: Spark 4.1's AvailableNow runs just one per start
        return (
            spark.readStream.format("connectors.numbers").option("end", 399).option("rowsPerBatch", 400)
            .option("numPartitions", 2).load()
            .selectExpr("value AS id", "concat('n', value) AS name")
            .writeStream.format("connectors.jdbc").option("url", dsn).option("dbtable", unique)
            .option("maxRetries", 1).option("checkpointLocation", str(tmp_path / "cp"))
            .trigger(availableNow=True).start()
        )  # fmt: skip

    query = start()
    try:
        watcher = psycopg2.connect(dsn)
        watcher.autocommit = True  # pg_stat_activity is a snapshot per transaction
        with watcher.cursor() as cursor:
            deadline = time.monotonic() + 120
            waiting = 0
            while not waiting:
                assert query.isActive and time.monotonic() < deadline, "no task came to wait on row 5"
                time.sleep(0.2)
                cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'")
                waiting = cursor.fetchone()[0]
        watcher.close()
        server.shutdown()  # ends the blocker's transaction too: row 5 is free once the server is back
        with pytest.raises(StreamingQueryException) as info:
            query.awaitTermination(120)
    finally:
        blocker.close()
        if query.isActive:
            query.stop()
        try:
            server.restart()
        except RuntimeError:  # still running: the query never got to the shutdown
            pass
    error = re.search(r"^(?:[\w.]+\.)?(\w+Error): (.*)$", str(info.value), re.MULTILINE)
    assert error and error[1] == "JdbcWriteError" and error[2].startswith("connectors.jdbc: "), str(info.value)

    query = start()
    assert query.awaitTermination(120), "the restarted query did not finish within 120 s"
    with psycopg2.connect(dsn) as connection, connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*), count(DISTINCT id), min(id), max(id) FROM {unique}")
        assert cursor.fetchone() == (400, 400, 0, 399)
    connection.close()


# --- S3 --------------------------------------------------------------------------------------


def test_proxy_resets_a_connection_waiting_for_its_answer():
    """A client that sent its request and waits for the answer when the outage starts sees the
    reset at once: a proxy that left it waiting let an S3 client hang out its 60 s read timeout
    per pooled connection, past the S3 test's 180 s bound (a flaky failure of that test)."""
    server = socket.create_server(("127.0.0.1", 0))

    def answer_late() -> None:
        conn, _ = server.accept()
        conn.recv(100)
        time.sleep(10)  # still thinking when the proxy fails
        conn.close()

    threading.Thread(target=answer_late, daemon=True).start()
    proxy = FlakyProxy(f"http://127.0.0.1:{server.getsockname()[1]}")
    client = socket.create_connection(("127.0.0.1", urlparse(proxy.endpoint_url).port), timeout=5)
    try:
        client.sendall(b"GET / HTTP/1.1\r\n\r\n")
        time.sleep(0.3)
        proxy.fail("reset")
        with pytest.raises(ConnectionResetError):
            client.recv(100)
    finally:
        client.close()
        proxy.stop()
        server.close()


def test_s3_throttling_and_resetting_connections(spark, s3_server, unique, tmp_path):
    import s3fs

    proxy = FlakyProxy(s3_server.endpoint_url)
    base = f"{s3_server.create_bucket(unique)}/out"

    def start():
        return (
            spark.readStream.format("connectors.numbers").option("end", RECORDS - 1)
            .option("rowsPerBatch", RECORDS // 20).option("numPartitions", 2).load()
            .selectExpr("value AS id")
            .writeStream.format("connectors.files").option("path", base).option("fileFormat", "csv")
            .option("bucketAssigner", "basePath").option("storageOptions", json.dumps(proxy.storage_options()))
            .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start()
        )  # fmt: skip

    def outage() -> None:
        proxy.fail("503")
        time.sleep(20)
        proxy.fail("reset")
        time.sleep(10)
        proxy.heal()

    try:
        failures = through_fault(start, outage, 180, rf"FileSinkError: connectors\.files: .* under {base} failed: ")
    finally:
        proxy.stop()
    print(failures, proxy.failures)
    assert proxy.failures > 0
    finish(base, s3_server.storage_options())
    fs = s3fs.S3FileSystem(**s3_server.storage_options())
    fs.invalidate_cache()
    finals = [path for path in fs.find(base) if path.rsplit("/", 1)[1].startswith("part-")]
    ids = [int(line) for path in finals for line in fs.cat(path).decode().splitlines()]
    assert len(ids) == RECORDS and sorted(ids) == list(range(RECORDS))
