"""Crash-harness job: connectors.files (a directory of JSON-lines files) -> per-batch parquet.

Every micro-batch overwrites its own directory ``out/batch=<id>``, so a batch replayed after a
kill replaces its earlier output, and any file read twice or never shows up in the final count.
"""

from connectors.testing.crash import mark_batches


def files_to_parquet(spark, checkpoint, source, out, files_per_batch):
    df = (
        spark.readStream.format("connectors.files")
        .schema("id long, file string")
        .option("fileFormat", "json")
        .option("maxFilesPerTrigger", files_per_batch)
        .option("discoveryInterval", "0")
        .load(source)
    )

    def write(batch_df, batch_id):
        batch_df.write.mode("overwrite").parquet(f"{out}/batch={batch_id}")

    return (
        mark_batches(df)
        .writeStream.foreachBatch(write)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
