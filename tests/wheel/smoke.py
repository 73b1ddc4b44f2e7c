"""Smoke test of the installed wheel: run by ``tests/wheel/run.py`` with a fresh virtual
environment's python, from a directory outside the source tree, never collected by pytest.

Uses the formats by name only (no ``connectors.register``): each must resolve through its
``pyspark_connectors_*`` shim. Needs ``KAFKA_BOOTSTRAP_SERVERS`` and ``POSTGRES_DSN``.
"""

from __future__ import annotations

import importlib.metadata
import importlib.resources
import os
import subprocess
import sys
import sysconfig
import tempfile
import time
import uuid
from pathlib import Path


def check(condition: bool, message: str) -> None:
    if not condition:
        raise SystemExit(f"wheel smoke test FAILED: {message}")


def step(name: str, started: list[float] = [time.monotonic()]) -> None:  # noqa: B006 (a clock)
    now = time.monotonic()
    print(f"  ok  {name} ({now - started[0]:.1f} s)", flush=True)
    started[0] = now


def installed_package() -> None:
    import connectors

    site = Path(sysconfig.get_paths()["purelib"])
    check(Path(connectors.__file__).is_relative_to(site), f"connectors imported from {connectors.__file__}, not {site}")
    check(sorted(connectors.__all__) == ["FORMATS", "__version__", "register"], f"__all__ = {connectors.__all__}")
    check(importlib.resources.files("connectors").joinpath("py.typed").is_file(), "connectors/py.typed is missing")
    step(f"connectors {connectors.__version__} imported from {site}")


def cli() -> None:
    import connectors

    owners = importlib.metadata.packages_distributions().get("connectors", [])
    check(len(set(owners)) == 1, f"distributions providing `connectors`: {owners}")
    dist = importlib.metadata.distribution(owners[0])
    check(dist.version == connectors.__version__, f"metadata version {dist.version} != {connectors.__version__}")
    expected = f"{dist.metadata['Name']} {dist.version}"
    command = Path(sys.executable).with_name("connectors")
    for argv in ([str(command), "--version"], [sys.executable, "-m", "connectors", "--version"]):
        out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        check(out.returncode == 0 and out.stdout.strip() == expected, f"{argv[1:]}: {out.stdout!r} {out.stderr!r}, expected {expected!r}")
    out = subprocess.run([str(command), "--help"], capture_output=True, text=True, timeout=60)
    check(out.returncode == 0 and all(c in out.stdout for c in ("offsets", "lag", "files", "finish")), f"--help: {out}")
    step(f"connectors --version: {expected}; connectors --help")


def formats(spark, work: Path) -> None:
    count = spark.read.format("connectors.numbers").option("end", 999).option("numPartitions", 2).load().count()
    check(count == 1000, f"connectors.numbers counted {count}")
    step("connectors.numbers: read 1000 rows")

    out = str(work / "files")
    spark.range(500).write.format("connectors.files").option("fileFormat", "json").mode("append").save(out)
    back = spark.read.format("connectors.files").option("fileFormat", "json").load(out)
    check(sorted(r.id for r in back.collect()) == list(range(500)), "connectors.files did not read back what it wrote")
    step("connectors.files: wrote and read back 500 rows")

    bootstrap, topic = os.environ["KAFKA_BOOTSTRAP_SERVERS"], f"wheel-{uuid.uuid4().hex[:12]}"
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept until the topic exists
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    kafka = {"kafka.bootstrap.servers": bootstrap}
    spark.range(200).selectExpr("cast(id as string) as value").write.format("connectors.kafka").options(**kafka).option(
        "topic", topic
    ).mode("append").save()
    values = spark.read.format("connectors.kafka").options(**kafka).option("subscribe", topic).load()
    check(sorted(int(r.value) for r in values.collect()) == list(range(200)), "connectors.kafka did not read back what it wrote")
    admin.delete_topics([topic])[topic].result(30)
    step("connectors.kafka: wrote and read back 200 records")

    import psycopg2

    dsn, table = os.environ["POSTGRES_DSN"], f"wheel_{uuid.uuid4().hex[:12]}"
    with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE TABLE {table} (id bigint PRIMARY KEY)")
    spark.range(300).write.format("connectors.jdbc").option("url", dsn).option("dbtable", table).mode("append").save()
    with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT count(*), sum(id) FROM {table}")
        rows = cur.fetchone()
        cur.execute(f"DROP TABLE {table}")
    check(rows == (300, sum(range(300))), f"connectors.jdbc wrote {rows}")
    step("connectors.jdbc: wrote 300 rows")


def worker_startup_hook(spark) -> None:
    """connectors-worker-startup.pth: Spark's Python workers import the installed pyspark, not
    the bundled pyspark.zip that Spark puts first on their path."""

    def where(_):
        import pyspark

        yield pyspark.__file__

    files = set(spark.sparkContext.parallelize([0, 1], 2).mapPartitions(where).collect())
    site = Path(sysconfig.get_paths()["purelib"])
    installed = str(site / "pyspark" / "__init__.py")  # not .../pyspark/python/lib/pyspark.zip/pyspark/...
    check(files == {installed}, f"Python workers imported pyspark from {files}, not {installed}")
    step("Python workers import the installed pyspark (worker startup hook)")


def main() -> None:
    check(not Path.cwd().joinpath("connectors").exists(), f"run from outside the source tree, not {Path.cwd()}")
    installed_package()
    cli()
    from connectors.testing.spark import local_session

    spark = local_session("wheel-smoke")
    step("SparkSession local[2]")
    try:
        with tempfile.TemporaryDirectory(prefix="wheel-smoke-") as work:
            formats(spark, Path(work))
            worker_startup_hook(spark)
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
