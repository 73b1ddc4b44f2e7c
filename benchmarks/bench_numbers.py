"""connectors.numbers vs spark.range and the rate-micro-batch source, same row count, and against
the ceiling of any Python source.

Each reader's rows go to Spark's ``noop`` sink, so what is measured is the source. The ceiling is
a Python source that yields one prebuilt Arrow batch per partition
(:class:`benchmarks.common.PrebuiltBatchSource`: ``connectors.numbers``' partitions and offsets,
no rows to make), so Spark's Python worker round trip and the Arrow hop to the JVM are all it
costs. Every reader runs once untimed (the Python workers start, the ceiling's batches are built),
then ``--repeat`` times round robin, the fastest run counting.

``python -m benchmarks.bench_numbers [--rows N] [--repeat R]`` (env BENCH_NUMBERS_ROWS, default 50M).
"""

from __future__ import annotations

import argparse
import os
import tempfile

from benchmarks.common import PrebuiltBatchSource, fastest, local_spark, report

STREAM_BATCHES = 10


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=int(os.environ.get("BENCH_NUMBERS_ROWS", 50_000_000)))
    parser.add_argument("--repeat", type=int, default=2, help="runs per reader; the fastest counts (shared cores)")
    args = parser.parse_args(argv)
    rows = args.rows
    spark = local_spark()
    spark.dataSource.register(PrebuiltBatchSource)
    partitions = spark.sparkContext.defaultParallelism

    def batch(fmt: str):
        return lambda: spark.read.format(fmt).option("end", rows - 1).load().write.format("noop").mode("overwrite").save()

    def range_batch():
        spark.range(0, rows, 1, partitions).write.format("noop").mode("overwrite").save()

    def stream(fmt: str, options: dict[str, str]):
        def run():
            with tempfile.TemporaryDirectory() as checkpoint:
                query = (
                    spark.readStream.format(fmt).options(**options).load().writeStream.format("noop")
                    .option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
                )  # fmt: skip
                query.awaitTermination()

        return run

    per_batch = str(rows // STREAM_BATCHES)
    sequence = {"end": str(rows - 1), "rowsPerBatch": per_batch}
    runs = {
        "connectors.numbers (batch)": batch("connectors.numbers"),
        "spark.range (batch)": range_batch,
        "prebuilt Arrow batch source (batch)": batch(PrebuiltBatchSource.name()),
        "connectors.numbers (stream, 10 batches)": stream("connectors.numbers", sequence),
        "rate-micro-batch (stream, 10 batches)": stream("rate-micro-batch", {
            "rowsPerBatch": per_batch, "numPartitions": str(partitions), "advanceMillisPerBatch": "1000"}),
        "prebuilt Arrow batch source (stream, 10 batches)": stream(PrebuiltBatchSource.name(), sequence),
    }
    for run in runs.values():  # warm-up, untimed
        run()
    results = fastest(runs, rows, args.repeat)
    report(
        "numbers",
        results,
        {
            "numbers/range (batch)": (
                "connectors.numbers (batch)", "spark.range (batch)", "prebuilt Arrow batch source (batch)"),
            "numbers/rate-micro-batch (stream)": (
                "connectors.numbers (stream, 10 batches)", "rate-micro-batch (stream, 10 batches)",
                "prebuilt Arrow batch source (stream, 10 batches)"),
        },
        notes={"rows": rows, "cores": partitions, "repeat": args.repeat, "stream_batches": STREAM_BATCHES},
    )  # fmt: skip
    spark.stop()


if __name__ == "__main__":
    main()
