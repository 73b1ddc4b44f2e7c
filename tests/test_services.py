"""Smoke tests of the real services the suite runs against (fixtures from tests/conftest.py)."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

import psycopg2
import pytest
import yaml
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from connectors.testing import kafka_broker, postgres_server, schema_registry, services

COMPOSE = Path(__file__).resolve().parents[1] / "docker" / "docker-compose.yml"


def _topic(bootstrap: str) -> str:
    topic = f"smoke-{uuid.uuid4().hex[:12]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})  # must outlive the future
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=30)
    return topic


def _consume(bootstrap: str, topic: str, isolation: str, count: int) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"smoke-{uuid.uuid4().hex[:12]}",
            "auto.offset.reset": "earliest",
            "isolation.level": isolation,
        }
    )
    consumer.subscribe([topic])
    values: list[bytes] = []
    try:
        for _ in range(60):  # up to ~60 s, mostly the first group join
            message = consumer.poll(1.0)
            if message is None:
                continue
            value = message.value()
            assert message.error() is None and value is not None, message.error()
            values.append(value)
            if len(values) == count:
                break
    finally:
        consumer.close()
    return values


def test_kafka_produce_consume(kafka_bootstrap: str) -> None:
    topic = _topic(kafka_bootstrap)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    producer.produce(topic, b"hello")
    assert producer.flush(30) == 0
    assert _consume(kafka_bootstrap, topic, "read_uncommitted", 1) == [b"hello"]


def test_kafka_transaction_visible_to_read_committed(kafka_bootstrap: str) -> None:
    topic = _topic(kafka_bootstrap)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": f"smoke-{uuid.uuid4().hex}"})
    producer.init_transactions(60)
    producer.begin_transaction()
    producer.produce(topic, b"aborted")
    producer.abort_transaction(30)
    producer.begin_transaction()
    producer.produce(topic, b"committed")
    producer.commit_transaction(30)
    # The aborted record is skipped, so reading one record means reaching the committed one.
    assert _consume(kafka_bootstrap, topic, "read_committed", 1) == [b"committed"]


def test_postgres_round_trip_and_prepared_transactions(postgres_dsn: str) -> None:
    table = f"smoke_{uuid.uuid4().hex[:12]}"
    with psycopg2.connect(postgres_dsn) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, name text)")
        cur.execute(f"INSERT INTO {table} VALUES (%s, %s)", (1, "one"))
        cur.execute(f"SELECT name FROM {table} WHERE id = 1")
        assert cur.fetchone() == ("one",)
        cur.execute("SHOW max_prepared_transactions")
        (max_prepared,) = cur.fetchone()
    # The JDBC exactly-once sink relies on two-phase commit.
    assert int(max_prepared) > 0
    conn = psycopg2.connect(postgres_dsn)
    try:
        xid = conn.xid(0, f"smoke-{table}", "b")
        conn.tpc_begin(xid)
        conn.cursor().execute(f"INSERT INTO {table} VALUES (2, 'two')")
        conn.tpc_prepare()
        conn.tpc_commit()
        with conn.cursor() as cur:
            cur.execute(f"SELECT count(*) FROM {table}")
            assert cur.fetchone() == (2,)
            cur.execute(f"DROP TABLE {table}")
        conn.commit()
    finally:
        conn.close()


def _avro(*fields: dict[str, object]) -> Schema:
    record = {"type": "record", "name": "Smoke", "namespace": "connectors.smoke", "fields": list(fields)}
    return Schema(json.dumps(record), "AVRO")


def _fresh(url: str) -> SchemaRegistryClient:
    """A client with nothing cached, so what it returns comes from the registry."""
    return SchemaRegistryClient({"url": url})


def test_schema_registry_avro_schemas_evolve_under_backward_compatibility(schema_registry_url: str) -> None:
    subject = f"smoke-{uuid.uuid4().hex[:12]}-value"
    v1 = _avro({"name": "id", "type": "long"})
    with SchemaRegistryClient({"url": schema_registry_url}) as client:
        v1_id = client.register_schema(subject, v1)
        with _fresh(schema_registry_url) as reader:
            by_id = reader.get_schema(v1_id)
            latest = reader.get_latest_version(subject)
        assert by_id.schema_type == "AVRO" and json.loads(by_id.schema_str) == json.loads(v1.schema_str)
        assert (latest.schema_id, latest.subject, latest.version) == (v1_id, subject, 1)
        assert json.loads(latest.schema.schema_str) == json.loads(v1.schema_str)

        client.set_compatibility(subject, "BACKWARD")
        assert client.get_compatibility(subject) == "BACKWARD"
        # A field added with a default: readers of v2 can read v1 data.
        v2 = _avro({"name": "id", "type": "long"}, {"name": "name", "type": "string", "default": ""})
        assert client.test_compatibility(subject, v2)
        v2_id = client.register_schema(subject, v2)
        assert v2_id != v1_id
        # A field added without a default: v1 data has no value for it, so it is refused.
        v3 = _avro({"name": "id", "type": "long"}, {"name": "name", "type": "string", "default": ""},
                   {"name": "email", "type": "string"})
        assert not client.test_compatibility(subject, v3)
        with pytest.raises(SchemaRegistryError) as refused:
            client.register_schema(subject, v3)
        assert refused.value.http_status_code == 409

    with _fresh(schema_registry_url) as reader:
        latest = reader.get_latest_version(subject)
        assert (latest.schema_id, latest.version) == (v2_id, 2)
        assert json.loads(latest.schema.schema_str) == json.loads(v2.schema_str)
        assert reader.get_schema(v1_id).schema_str == by_id.schema_str  # v1 is still served by id


def test_docker_compose_runs_what_the_launchers_run():
    """docker/docker-compose.yml (no Docker engine needed to read it): the launchers' versions and
    settings, as the testcontainers path of connectors.testing.services gives them."""
    compose = yaml.safe_load(COMPOSE.read_text())["services"]
    kafka, postgres, registry = compose["kafka"], compose["postgres"], compose["schema-registry"]

    assert kafka["image"] == services.KAFKA_IMAGE == f"apache/kafka:{kafka_broker.KAFKA_VERSION}"
    env = {name: str(value) for name, value in kafka["environment"].items()}
    assert {key: env.get("KAFKA_" + key.upper().replace(".", "_")) for key in kafka_broker.SETTINGS} == kafka_broker.SETTINGS
    assert env["KAFKA_ADVERTISED_LISTENERS"] == "PLAINTEXT://localhost:9092" and "9092:9092" in kafka["ports"]

    assert postgres["image"] == services.POSTGRES_IMAGE
    command = postgres["command"]
    assert command[0] == "postgres" and set(command[1::2]) == {"-c"}
    assert dict(arg.split("=", 1) for arg in command[2::2]) == postgres_server.SETTINGS
    assert postgres["environment"] == {"POSTGRES_USER": postgres_server.USER, "POSTGRES_PASSWORD": postgres_server.PASSWORD,
                                       "POSTGRES_DB": postgres_server.DATABASE}
    installed = postgres_server._bin_dir()
    if installed is not None:  # the local launcher runs the PostgreSQL Debian gives: the same major
        assert services.POSTGRES_IMAGE == f"postgres:{installed.parent.name}"

    assert registry["image"] == services.SCHEMA_REGISTRY_IMAGE
    quarkus_env = {re.sub(r"[.-]", "_", key).upper(): value for key, value in schema_registry.SETTINGS.items()}
    assert registry["environment"] == quarkus_env
    assert schema_registry.CCOMPAT_PATH in " ".join(registry["healthcheck"]["test"])
