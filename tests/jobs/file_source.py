"""Crash-harness job: connectors.files (a directory of JSON-lines files) -> per-batch parquet.

Every micro-batch overwrites its own directory ``out/batch=<id>``, so a batch replayed after a
kill replaces its earlier output, and any file read twice or never shows up in the final count.
"""

from connectors.testing.crash import to_idempotent_parquet


def files_to_parquet(spark, checkpoint, source, out, files_per_batch, options=None):
    df = (
        spark.readStream.format("connectors.files")
        .schema("id long, file string")
        .option("fileFormat", "json")
        .option("maxFilesPerTrigger", files_per_batch)
        .option("discoveryInterval", "0")
        .options(**(options or {}))
        .load(source)
    )
    return to_idempotent_parquet(df, checkpoint, out)
