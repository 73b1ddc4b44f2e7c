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


@pytest.fixture(scope="session")
def spark():
    from connectors.testing.spark import local_session

    session = local_session("connectors-tests")
    yield session
    session.stop()


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


os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
