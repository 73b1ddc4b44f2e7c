"""connectors.numbers vs spark.range and the rate-micro-batch source, same row count.

Each reader's rows go to Spark's ``noop`` sink, so what is measured is the source.
"""

from __future__ import annotations

import argparse
import os
import tempfile

from benchmarks.common import local_spark, measure, report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=int(os.environ.get("BENCH_NUMBERS_ROWS", 50_000_000)))
    args = parser.parse_args(argv)
    rows = args.rows
    spark = local_spark()
    partitions = spark.sparkContext.defaultParallelism

    def numbers_batch():
        spark.read.format("connectors.numbers").option("end", rows - 1).load().write.format("noop").mode("overwrite").save()

    def range_batch():
        spark.range(0, rows, 1, partitions).write.format("noop").mode("overwrite").save()

    def stream(fmt: str, options: dict[str, str]):
        with tempfile.TemporaryDirectory() as checkpoint:
            reader = spark.readStream.format(fmt)
            for key, value in options.items():
                reader = reader.option(key, value)
            query = (
                reader.load().writeStream.format("noop").option("checkpointLocation", checkpoint)
                .trigger(availableNow=True).start()
            )
            query.awaitTermination()

    per_batch = rows // 10
    numbers_batch()  # warm-up: the first Python data source query starts the worker machinery
    results = [
        measure("connectors.numbers (batch)", rows, numbers_batch),
        measure("spark.range (batch)", rows, range_batch),
        measure("connectors.numbers (stream, 10 batches)", rows, lambda: stream(
            "connectors.numbers", {"end": str(rows - 1), "rowsPerBatch": str(per_batch)})),
        measure("rate-micro-batch (stream, 10 batches)", rows, lambda: stream(
            "rate-micro-batch", {"rowsPerBatch": str(per_batch), "numPartitions": str(partitions),
                                 "advanceMillisPerBatch": "1000"})),
    ]
    report(
        "numbers",
        results,
        {
            "numbers/range (batch)": ("connectors.numbers (batch)", "spark.range (batch)"),
            "numbers/rate-micro-batch (stream)": (
                "connectors.numbers (stream, 10 batches)", "rate-micro-batch (stream, 10 batches)"),
        },
        notes={"rows": rows, "cores": partitions},
    )
    spark.stop()


if __name__ == "__main__":
    main()
