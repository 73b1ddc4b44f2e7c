"""connectors.files sink vs Spark's own file sink: same rows, same format (csv), one run.

1. Throughput: ``--rows`` numbers in 10 micro-batches (``Trigger.AvailableNow``) into each sink;
   ours includes publishing the parts left open at the end (``connectors.files.finish``, which
   compacts them into one file); ``--repeat`` runs per sink round robin, the fastest counting.
   A third writer in the same round, a Python sink that only counts its rows
   (:class:`benchmarks.common.CountingSink`), is the ceiling: Spark's JVM -> Python hop and its
   fixed costs per micro-batch without writing anything. Ours can pass it (a ratio above 1): the
   workers that create and commit its writer run no connector code, so they keep PySpark's full
   garbage collection after every micro-batch (``connectors/core/worker_gc.py``). Before timing,
   each writer runs once, so the Python workers exist and the JVM's code is compiled for all
   three alike.
2. Small files: ``--batches`` micro-batches with a 1-second trigger into each sink, then the
   number of visible files. Spark writes one per partition per batch (P per second). Ours (default
   rolling policy: 128 MB / 60 s / 60 s) rolls every partition's part of a bucket in the same
   commit, and compaction (``autoCompaction``, on by default) publishes them as one file: one
   file per rolloverInterval R, so in the long run 1 / (R x P) of Spark's count (0.83 % with
   R = 60 s and P = 2 cores); without compaction one file per partition per R, 1 / R (1.7 %).
   A run of T seconds ends with the parts still open, published by ``finish`` as one more file:
   (floor(T / R) + 1) / (P x T), 1 % at T = 100 s, P = 2.

``python -m benchmarks.bench_file_sink [--rows N] [--batches N] [--rollover 5min] [--compaction false]``
(env BENCH_FILE_SINK_ROWS, BENCH_FILE_SINK_BATCHES); the defaults run in a few minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from benchmarks.common import CountingSink, Result, fastest, local_spark, report


def visible_files(base: Path) -> int:
    return sum(
        1
        for root, dirs, files in os.walk(base)
        if not any(p.startswith(("_", ".")) for p in Path(root).relative_to(base).parts)
        for name in files
        if not name.startswith((".", "_"))
    )


def done(query, rows: int) -> bool:
    """The query has committed the batch that reaches offset ``rows`` (then only idles)."""
    progress = query.lastProgress
    return bool(progress) and json.loads(progress["sources"][0]["endOffset"] or "{}").get("next") == rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=int(os.environ.get("BENCH_FILE_SINK_ROWS", 5_000_000)))
    parser.add_argument("--batches", type=int, default=int(os.environ.get("BENCH_FILE_SINK_BATCHES", 100)))
    parser.add_argument("--rollover", default="60s", help="our rolloverInterval (Flink's default 60s)")
    parser.add_argument("--repeat", type=int, default=3, help="throughput runs per sink; the fastest counts")
    parser.add_argument("--compaction", default="true", choices=("true", "false"), help="our autoCompaction")
    args = parser.parse_args(argv)
    spark = local_spark()
    spark.dataSource.register(CountingSink)
    cores = spark.sparkContext.defaultParallelism
    from connectors.files import finish

    def numbers(end: int, per_batch: int):
        return (
            spark.readStream.format("connectors.numbers").option("end", end - 1).option("rowsPerBatch", per_batch)
            .option("numPartitions", cores).load()
        )  # fmt: skip

    def ours(writer, out: Path):
        return writer.format("connectors.files").option("path", str(out)).option("fileFormat", "csv").option(
            "bucketAssigner", "basePath"
        ).option("rolloverInterval", args.rollover).option("autoCompaction", args.compaction)

    def spark_csv(writer, out: Path):
        return writer.format("csv").option("path", str(out))

    def counting(writer, out: Path):
        return writer.format(CountingSink.name())

    def available_now(sink, rows: int, out: Path, checkpoint: str) -> None:
        sink(numbers(rows, rows // 10).writeStream, out).option("checkpointLocation", checkpoint).trigger(
            availableNow=True
        ).start().awaitTermination()

    def one_second_trigger(sink, out: Path, checkpoint: str) -> int:
        """Run ``--batches`` one-second micro-batches; returns the rows written."""
        per_batch, batches = 10_000, args.batches
        query = sink(numbers(per_batch * batches, per_batch).writeStream, out).option(
            "checkpointLocation", checkpoint
        ).trigger(processingTime="1 second").start()
        while not done(query, per_batch * batches):
            time.sleep(0.5)
        query.stop()
        return per_batch * batches

    results: list[Result] = []
    files: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        writers = (("connectors.files csv", ours), ("spark csv", spark_csv), ("Python sink doing nothing", counting))
        for name, sink in writers:  # starts the Python workers and warms the JVM's code for each
            available_now(sink, 100_000, work / f"warm-{name}", str(work / f"warm-{name}-cp"))

        def throughput(sink, name: str):
            def run():
                out = Path(tempfile.mkdtemp(prefix="throughput-", dir=work))
                available_now(sink, args.rows, out, str(out) + "-cp")
                if sink is ours:
                    finish(str(out))

            return run

        results += fastest({f"{name} (10 batches)": throughput(sink, name) for name, sink in writers},
                           args.rows, args.repeat)  # fmt: skip
        for name, sink in (("connectors.files csv", ours), ("spark csv", spark_csv)):
            out = work / f"{name}-trigger"
            started = time.perf_counter()
            rows = one_second_trigger(sink, out, str(work / f"{name}-trigger-cp"))
            if sink is ours:
                finish(str(out))
            results.append(Result(f"{name} (1 s trigger)", rows, time.perf_counter() - started))
            files[name] = visible_files(out)
    report(
        "file_sink",
        results,
        {
            "connectors.files/spark csv (throughput)": (
                "connectors.files csv (10 batches)", "spark csv (10 batches)", "Python sink doing nothing (10 batches)"),
            "Python sink doing nothing/spark csv": ("Python sink doing nothing (10 batches)", "spark csv (10 batches)"),
        },
        notes={
            "rows": args.rows, "repeat": args.repeat,
            "cores": cores, "one_second_batches": args.batches, "rollover": args.rollover,
            "compaction": args.compaction,
            "files_after_one_second_trigger": files,
            "file_count_ratio": files["connectors.files csv"] / max(1, files["spark csv"]),
        },
    )  # fmt: skip
    print(f"  files after {args.batches} one-second batches: {files}; ratio "
          f"{files['connectors.files csv'] / max(1, files['spark csv']):.2%}")  # fmt: skip
    spark.stop()


if __name__ == "__main__":
    main()
