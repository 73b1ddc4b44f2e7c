"""Run by tests/test_secrets.py in a child process: Spark tasks fail with a secret in their
settings, on a Spark session of this process, so that the test reads all of the output: this
driver's Python logging, the JVM's log and the Python workers' stderr (with their logging at
DEBUG). Prints one JSON line: each scenario's error message.

    python -m jobs.secrets_in_tasks SECRET POSTGRES_DSN KAFKA_BOOTSTRAP STORAGE_OPTIONS_JSON
"""

from __future__ import annotations

import json
import logging
import sys
import uuid


def _debug_logging() -> None:
    logging.basicConfig(level=logging.DEBUG, stream=sys.stderr, force=True)
    # py4j's DEBUG log echoes every call into the JVM, option values included: PySpark's own,
    # not the connectors'.
    logging.getLogger("py4j").setLevel(logging.INFO)


def jdbc_connect_task(url: str, password: str | None):
    """A task's first step in a JDBC write: borrow a connection."""

    def task(batches):
        import pyarrow as pa

        from connectors.jdbc import JdbcConnectionOptions
        from connectors.jdbc.task_writer import borrow

        _debug_logging()
        list(batches)
        borrow(JdbcConnectionOptions(url=url, password=password, connection_check_timeout_seconds=5))
        yield pa.RecordBatch.from_pylist([{"id": 0}])

    return task


def kafka_read_task(options: dict[str, str]):
    """A Kafka source task: read one offset range."""

    def task(batches):
        import pyarrow as pa

        from connectors.kafka.source.offsets import OffsetRange
        from connectors.kafka.source.options import KafkaSourceOptions
        from connectors.kafka.source.split_reader import RangeReader

        _debug_logging()
        list(batches)
        list(RangeReader(KafkaSourceOptions.from_options(options), OffsetRange("secrets-topic", 0, 0, 1)))
        yield pa.RecordBatch.from_pylist([{"id": 0}])

    return task


def main(secret: str, postgres_dsn: str, bootstrap: str, storage: str) -> None:
    from connectors.testing.spark import local_session

    _debug_logging()
    spark = local_session("secrets", conf={"spark.task.maxFailures": "1"})
    user, _, rest = postgres_dsn.removeprefix("postgresql://").partition(":")
    host = rest.partition("@")[2]
    sasl = {"kafka.bootstrap.servers": bootstrap, "subscribe": "secrets-topic", "kafka.security.protocol": "SASL_PLAINTEXT",
            "kafka.sasl.mechanism": "PLAIN", "kafka.sasl.username": "u", "kafka.sasl.password": secret,
            "kafkaConsumer.pollTimeoutMs": "3s"}  # fmt: skip
    scenarios = {
        "jdbc wrong password": lambda: spark.range(1).mapInArrow(
            jdbc_connect_task(postgres_dsn, secret), "id long").collect(),
        "jdbc password libpq cannot parse": lambda: spark.range(1).mapInArrow(
            jdbc_connect_task(f"postgresql://{user}:{secret[:20]}@{secret[20:]}@{host}", None), "id long").collect(),
        "kafka source with bad SASL": lambda: spark.range(1).mapInArrow(kafka_read_task(sasl), "id long").collect(),
        "file sink to a missing bucket": lambda: (
            spark.range(10).selectExpr("id AS value").write.format("connectors.files")
            .options(fileFormat="json", storageOptions=storage).mode("append").save(f"s3://missing-{uuid.uuid4().hex}/out")
        ),
    }  # fmt: skip
    errors: dict[str, str | None] = {}
    for name, scenario in scenarios.items():
        try:
            scenario()
            errors[name] = None
        except Exception as exc:  # noqa: BLE001 - every failure is reported to the test
            errors[name] = str(exc)
    spark.stop()
    print(json.dumps(errors))


if __name__ == "__main__":
    main(*sys.argv[1:5])
