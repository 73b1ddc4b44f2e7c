"""On a real Spark standalone cluster (a worker killed mid-run) and through Spark Connect."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psycopg2
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from connectors.testing.cluster import ConnectServer, StandaloneCluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with StandaloneCluster(tmp_path_factory.mktemp("cluster"), workers=2) as running:
        yield running


def produce(bootstrap: str, topic: str, count: int, partitions: int = 2) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap})
    for number in range(count):
        producer.produce(topic, value=str(number).encode(), partition=number % partitions)
    producer.flush(30)


@pytest.mark.crash
def test_kafka_to_files_on_a_cluster_survives_a_killed_worker(cluster, crash_harness, kafka_bootstrap, unique, tmp_path):
    produce(kafka_bootstrap, unique, 4000)
    out = tmp_path / "out"
    harness = crash_harness("jobs.distributed:kafka_to_files", bootstrap=kafka_bootstrap, topic=unique, out=str(out))
    harness.spark_master = cluster.url
    report = harness.run(kills=1, kill_at="mid-batch", kill=lambda child: cluster.kill_worker(0))
    assert report.runs[0].killed and report.runs[-1].exit_code == 0
    records = [json.loads(line) for path in out.glob("part-*") for line in path.read_text().splitlines()]
    assert sorted((r["partition"], r["offset"]) for r in records) == sorted((n % 2, n // 2) for n in range(4000))


@pytest.mark.crash
def test_files_to_postgres_on_a_cluster_survives_a_killed_worker(cluster, crash_harness, postgres_dsn, unique, tmp_path):
    landing = tmp_path / "landing"
    landing.mkdir()
    for number in range(6):
        (landing / f"ids-{number}.csv").write_text("".join(f"{number * 500 + i}\n" for i in range(500)))
    with psycopg2.connect(postgres_dsn) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE TABLE {unique} (id bigint)")  # no key: a duplicate would be counted
    cluster.restart_worker(0)  # the previous test may have killed it
    harness = crash_harness("jobs.distributed:files_to_postgres", landing=str(landing), dsn=postgres_dsn, table=unique)
    harness.spark_master = cluster.url
    report = harness.run(kills=1, kill_at="mid-batch", kill=lambda child: cluster.kill_worker(0))
    assert report.runs[0].killed
    with psycopg2.connect(postgres_dsn) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT count(*), count(DISTINCT id), min(id), max(id) FROM {unique}")
        assert cur.fetchone() == (3000, 3000, 0, 2999)


def test_every_format_through_spark_connect(tmp_path, kafka_bootstrap, postgres_dsn, unique):
    with ConnectServer(tmp_path / "connect") as server:
        result = subprocess.run(
            [sys.executable, "-m", "jobs.connect_client", server.url, str(tmp_path), kafka_bootstrap, postgres_dsn,
             unique],
            cwd=Path(__file__).parent, capture_output=True, text=True, timeout=600,
        )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "every format worked through Spark Connect" in result.stdout
