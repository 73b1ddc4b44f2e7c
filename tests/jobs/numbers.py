"""Crash-harness job: connectors.numbers -> a per-batch idempotent parquet sink.

Every micro-batch overwrites its own directory ``out/batch=<id>``, so a batch replayed after a
kill replaces its earlier output (idempotent), and any gap or repeat in the numbers the source
delivers shows up in the final count.
"""

from connectors.testing.crash import to_idempotent_parquet


def numbers_to_parquet(spark, checkpoint, out, end, rows_per_batch):
    df = (
        spark.readStream.format("connectors.numbers")
        .option("end", end)
        .option("rowsPerBatch", rows_per_batch)
        .option("numPartitions", 2)
        .load()
    )
    return to_idempotent_parquet(df, checkpoint, out)
