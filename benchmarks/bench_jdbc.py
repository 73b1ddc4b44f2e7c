"""connectors.jdbc vs Spark's JDBC writer in foreachBatch vs ``psql \\copy``: the same rows into
the same PostgreSQL table.

Both Spark queries read the same parquet files with Spark's own file stream source (a JVM source,
far cheaper than the sinks measured, so it does not hide them), ``maxFilesPerTrigger`` files of
``--rows / --files`` rows per micro-batch: one file per core, so each micro-batch has one partition
per core and is large enough (500k rows by default) that Spark's fixed per-batch costs do not hide
the sinks' throughput. ``\\copy`` loads the same rows from one CSV file written beforehand, which
is the limit for one client: the ceiling of the report. Spark's writer uses the PostgreSQL JDBC
driver from Maven Central with its defaults (batchsize 1000); ours uses its defaults (COPY,
exactly-once). Two references
show where the time goes: the source alone into Spark's ``noop`` sink, and into a Python Arrow
stream writer that only counts rows (Spark's JVM -> Python worker hop and its fixed costs,
without a database).

``python -m benchmarks.bench_jdbc [--rows N] [--files F] [--repeat R]`` (or ``BENCH_JDBC_ROWS``);
default 2M rows in 4 files (2 micro-batches of 2 files), the fastest of 2 runs per writer, the
writers taking turns (round robin). Each run starts on a new table without autovacuum, after a
checkpoint, so no run pays for the vacuum or the dirty buffers of the one before.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
from pathlib import Path
from urllib.parse import urlsplit

import psycopg2

from benchmarks.common import CountingSink, fastest, local_spark, report
from connectors.testing.services import postgres_dsn

POSTGRES_JDBC = "org.postgresql:postgresql:42.7.4"
COLUMNS = ["id AS id", "concat('customer-', id % 100000) AS name", "id * 0.25 AS amount",
           "timestamp_seconds(1700000000 + id) AS ts"]  # fmt: skip
DDL = "id bigint, name text, amount double precision, ts timestamptz"
CORES = 2


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=int(os.environ.get("BENCH_JDBC_ROWS", 2_000_000)))
    parser.add_argument("--files", type=int, default=4, help=f"parquet files; {CORES} per micro-batch")
    parser.add_argument("--repeat", type=int, default=2, help="runs per writer; the fastest counts (shared machines)")
    args = parser.parse_args(argv)
    rows, dsn = args.rows, postgres_dsn()
    parts = urlsplit(dsn)
    jdbc_url = f"jdbc:postgresql://{parts.hostname}:{parts.port}{parts.path}"
    admin = psycopg2.connect(dsn)
    admin.autocommit = True
    cursor = admin.cursor()
    table = "bench_jdbc"

    def fresh_table(_name: str = "") -> None:
        # No autovacuum on the table, and a checkpoint first: a run must not pay for the vacuum
        # or the dirty buffers of the load before it.
        cursor.execute(f"DROP TABLE IF EXISTS {table}; CREATE TABLE {table} ({DDL}) WITH (autovacuum_enabled = false)")
        cursor.execute("CHECKPOINT")

    def check(expected: int) -> None:
        cursor.execute(f"SELECT count(*) FROM {table}")
        (found,) = cursor.fetchone()
        if found != expected:
            raise AssertionError(f"{table} holds {found} rows, expected {expected}")

    spark = local_spark([POSTGRES_JDBC], app_name="bench-jdbc")
    spark.dataSource.register(CountingSink)
    load_before = os.getloadavg()[0]  # the ratios are noisy on a shared machine: say how busy it was

    with tempfile.TemporaryDirectory() as scratch:
        parquet, csv = Path(scratch) / "rows", Path(scratch) / "rows.csv"
        # the input, written once and not timed: one parquet file per range partition
        source = spark.range(0, rows, 1, args.files).selectExpr(*COLUMNS)
        source.write.parquet(str(parquet))
        spark.read.parquet(str(parquet)).coalesce(1).write.csv(str(csv), timestampFormat="yyyy-MM-dd HH:mm:ss.SSSSSSXXX")
        csv_file = next(csv.glob("part-*.csv"))

        def stream(sink) -> None:
            with tempfile.TemporaryDirectory() as checkpoint:
                df = spark.readStream.schema(source.schema).option("maxFilesPerTrigger", CORES).parquet(str(parquet))
                query = sink(df.writeStream.option("checkpointLocation", checkpoint).trigger(availableNow=True)).start()
                query.awaitTermination()
                if query.exception() is not None:
                    raise RuntimeError(str(query.exception()))

        def ours() -> None:
            stream(lambda w: w.format("connectors.jdbc").option("url", dsn).option("dbtable", table))

        def spark_jdbc() -> None:
            def write(batch_df, _batch_id):
                (batch_df.write.mode("append").format("jdbc").option("url", jdbc_url).option("dbtable", table)
                 .option("user", parts.username).option("password", parts.password)
                 .option("driver", "org.postgresql.Driver").save())  # fmt: skip

            stream(lambda w: w.foreachBatch(write))

        env = {**os.environ, "PGPASSWORD": parts.password or ""}
        dsn_without_password = dsn.replace(f":{parts.password}@", "@")

        def psql_copy() -> None:
            subprocess.run(["psql", dsn_without_password, "-v", "ON_ERROR_STOP=1", "-qc",
                            f"\\copy {table} FROM '{csv_file}' WITH (FORMAT csv)"], check=True, env=env)  # fmt: skip

        fresh_table()
        ours()  # warm-up: JVM, Python workers, the driver's class loading
        stream(lambda w: w.format(CountingSink.name()))
        runs = {
            "source only (noop sink)": lambda: stream(lambda w: w.format("noop")),
            "source -> Python sink doing nothing": lambda: stream(lambda w: w.format(CountingSink.name())),
            "connectors.jdbc (stream)": ours,
            "Spark jdbc in foreachBatch (stream)": spark_jdbc,
            "psql \\copy (CSV file)": psql_copy,
        }
        writes = ("jdbc", "copy")
        results = fastest(runs, rows, args.repeat, before=fresh_table,
                          after=lambda name: check(rows) if any(w in name for w in writes) else None)  # fmt: skip
    report(
        "jdbc",
        results,
        {
            # goal to the ceiling, psql \copy: >= 0.7
            "connectors.jdbc / Spark jdbc (goal >= 3)": (
                "connectors.jdbc (stream)", "Spark jdbc in foreachBatch (stream)", "psql \\copy (CSV file)"),
            "connectors.jdbc / Python sink doing nothing": ("connectors.jdbc (stream)", "source -> Python sink doing nothing"),
        },
        notes={"rows": rows, "source": "Spark file stream source, parquet", "files": args.files,
               "micro_batches": -(-args.files // CORES), "repeat": args.repeat, "partitions_per_batch": CORES,
               "postgres_jdbc": POSTGRES_JDBC, "spark_jdbc_batchsize": 1000, "columns": DDL,
               "load_average_1min": {"start": load_before, "end": os.getloadavg()[0]}, "cores": os.cpu_count()},
    )  # fmt: skip
    cursor.execute(f"DROP TABLE IF EXISTS {table}")
    spark.stop()


if __name__ == "__main__":
    main()
