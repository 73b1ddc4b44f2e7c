"""The one fixture module: services, the shared SparkSession, scratch space.

Services come from ``connectors.testing.services``: the environment (KAFKA_BOOTSTRAP_SERVERS,
POSTGRES_DSN, SCHEMA_REGISTRY_URL) first, then testcontainers when a Docker engine answers, else
the local launchers.
Nothing is skipped for lack of a service: if none can be had, the fixture fails.
"""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path

import pytest

TESTS_DIR = Path(__file__).parent


def pytest_sessionstart(session):
    """Every Spark driver of the run, in this process or a child, starts from one class archive."""
    from connectors.testing import class_archive

    class_archive.ensure("jobs.class_archive", pythonpath=[str(TESTS_DIR)])


@pytest.fixture(scope="session")
def spark():
    from connectors.testing.spark import local_session

    session = local_session("connectors-tests")
    yield session
    session.stop()


@pytest.fixture
def utc_session(spark):
    """The shared session with its time zone set to UTC for one test."""
    zone = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    yield spark
    spark.conf.set("spark.sql.session.timeZone", zone)


@pytest.fixture(scope="session")
def kafka_bootstrap() -> str:
    from connectors.testing import services

    return services.kafka_bootstrap_servers()


@pytest.fixture(scope="session")
def postgres_dsn() -> str:
    from connectors.testing import services

    return services.postgres_dsn()


@pytest.fixture(scope="session")
def schema_registry_url() -> str:
    """The Confluent-compatible API of a Schema Registry, for ``SchemaRegistryClient({"url": ...})``."""
    from connectors.testing import services

    return services.schema_registry_url()


@pytest.fixture
def pg(postgres_dsn):
    """An autocommit cursor on the test PostgreSQL."""
    import psycopg2

    connection = psycopg2.connect(postgres_dsn)
    connection.autocommit = True
    yield connection.cursor()
    connection.close()


@pytest.fixture
def unique() -> str:
    """A short unique name for topics, tables, prefixes."""
    return "t" + uuid.uuid4().hex[:10]


@pytest.fixture
def crash_harness(tmp_path):
    """Build a CrashHarness for a job in tests/jobs/ (``jobs.module:function``)."""
    from connectors.testing.crash import CrashHarness

    def make(job: str, **args) -> CrashHarness:
        return CrashHarness(job=job, args=args, workdir=tmp_path / "crash", pythonpath=[str(TESTS_DIR)])

    return make



@pytest.fixture(scope="session")
def s3_server():
    """A local S3 API server; also exported as AWS_* environment variables for s3fs."""
    from connectors.testing.s3_server import S3Server

    server = S3Server().start()
    yield server
    server.stop()


@pytest.fixture
def batch_partitions():
    """Run a stream to its end (AvailableNow) through foreachBatch and return each batch's rows
    by source partition: ``{batch id: {partition: [first column's values in read order]}}``.
    ``fail_at``: that batch fails after being recorded, so it is planned and never committed
    (Spark replays it when the query restarts)."""
    from pyspark.errors.exceptions.captured import StreamingQueryException
    from pyspark.sql.functions import spark_partition_id

    def run(df, checkpoint: str, fail_at: int | None = None) -> dict[int, dict[int, list]]:
        batches: dict[int, dict[int, list]] = {}

        def record(batch, batch_id: int) -> None:
            parts: dict[int, list] = {}
            for row in batch.select(spark_partition_id(), df.columns[0]).collect():
                parts.setdefault(row[0], []).append(row[1])
            batches[batch_id] = parts
            if batch_id == fail_at:
                raise RuntimeError(f"batch {batch_id} stopped before its commit")

        query = df.writeStream.foreachBatch(record).option("checkpointLocation", checkpoint)
        query = query.trigger(availableNow=True).start()
        if fail_at is None:
            query.awaitTermination(180)
        else:
            with pytest.raises(StreamingQueryException, match=f"batch {fail_at} stopped before its commit"):
                query.awaitTermination(180)
        return batches

    return run


os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
