"""Peak memory of the Python worker that writes one large partition through connectors.jdbc.

One micro-batch of ONE partition holding ``--gb`` GB of Arrow (2 by default: rows of a bigint and
a 1000-character string, from Spark's ``rate-micro-batch`` source, so the only Python process at
work is the sink's) goes into an UNLOGGED PostgreSQL table through ``connectors.jdbc``
(exactly-once, the default options plus ``--option``), and the same rows into a Python sink that
only counts them: what a worker needs to receive the rows at all. Each writer runs in a process
of its own (a new JVM and new Python workers), which reads the peak resident set size (``VmHWM``)
of every Python process under its JVM before it stops.

``python -m benchmarks.bench_jdbc_memory [--gb 2] [--option maxBufferedBytes=256MB ...]``
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

from benchmarks.common import CountingSink, Result, local_spark, process_peaks, report
from connectors.testing.services import postgres_dsn

PAYLOAD = 1000  # characters of the string column
ROW_BYTES = 8 + PAYLOAD + 4  # Arrow: the bigint, the string's bytes, its offset
TABLE = "bench_jdbc_memory"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gb", type=float, default=float(os.environ.get("BENCH_JDBC_MEMORY_GB", 2)))
    parser.add_argument("--option", action="append", default=[], help="a connectors.jdbc option, key=value")
    parser.add_argument("--writer", choices=("counting", "jdbc"), help=argparse.SUPPRESS)  # one run, in this process
    args = parser.parse_args(argv)
    rows = int(args.gb * 2**30 / ROW_BYTES)
    options = dict(item.split("=", 1) for item in args.option)
    if args.writer:
        print(json.dumps(run(args.writer, rows, options)))
        return
    measured = {}
    for writer in ("counting", "jdbc"):
        command = [sys.executable, "-m", "benchmarks.bench_jdbc_memory", "--writer", writer, "--gb", str(args.gb),
                   *(f"--option={item}" for item in args.option)]  # fmt: skip
        output = subprocess.run(command, check=True, stdout=subprocess.PIPE, text=True).stdout
        measured[writer] = json.loads(output.strip().splitlines()[-1])
    names = {"counting": "source -> Python sink doing nothing", "jdbc": "connectors.jdbc (stream, 1 partition)"}
    results = [Result(names[w], rows, m["seconds"]) for w, m in measured.items()]
    for writer, m in measured.items():
        print(f"  {names[writer]:<40} peak RSS of the Python worker {m['peak_rss_mb']:>8,.0f} MB")
    report("jdbc_memory", results, {}, notes={
        "rows": rows, "arrow_bytes": rows * ROW_BYTES, "partitions": 1, "options": options,
        "peak_rss_mb": {names[w]: m["peak_rss_mb"] for w, m in measured.items()},
        "python_processes": {names[w]: m["processes"] for w, m in measured.items()},
    })  # fmt: skip


def run(writer: str, rows: int, options: dict[str, str]) -> dict:
    import time

    import psycopg2

    dsn = postgres_dsn()
    spark = local_spark(app_name=f"bench-jdbc-memory-{writer}")
    spark.dataSource.register(CountingSink)
    admin = psycopg2.connect(dsn)
    admin.autocommit = True
    admin.cursor().execute(f"DROP TABLE IF EXISTS {TABLE}; CREATE UNLOGGED TABLE {TABLE} (id bigint, payload text)")
    df = (
        spark.readStream.format("rate-micro-batch").option("rowsPerBatch", rows).option("numPartitions", 1).load()
        .selectExpr("value AS id", f"concat(lpad(CAST(value AS STRING), 20, '0'), repeat('x', {PAYLOAD - 20})) AS payload")
    )  # fmt: skip
    with tempfile.TemporaryDirectory() as checkpoint:
        stream = df.writeStream.option("checkpointLocation", checkpoint).trigger(once=True)
        if writer == "jdbc":
            stream = stream.format("connectors.jdbc").option("url", dsn).option("dbtable", TABLE).options(**options)
        else:
            stream = stream.format(CountingSink.name())
        started = time.perf_counter()
        query = stream.start()
        query.awaitTermination()
        seconds = time.perf_counter() - started
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()))
    processes = python_processes()
    if writer == "jdbc":
        cursor = admin.cursor()
        cursor.execute(f"SELECT count(*) FROM {TABLE}")
        if cursor.fetchone()[0] != rows:
            raise AssertionError(f"{TABLE} does not hold {rows} rows")
    admin.cursor().execute(f"DROP TABLE {TABLE}")
    spark.stop()
    return {"seconds": seconds, "peak_rss_mb": max(p["peak_rss_mb"] for p in processes), "processes": processes}


def python_processes() -> list[dict]:
    """The Python processes under this driver (Spark's Python workers), with their peak RSS."""
    return [p for p in process_peaks(os.getpid()) if "python" in p["program"]]


if __name__ == "__main__":
    main()
