"""Crash-harness jobs: connectors.numbers -> the file sink (format and foreachBatch callable).

Both read a bounded number sequence with ``Trigger.AvailableNow`` so the last run finishes by
itself; the test then publishes what is left open and counts every number in the finished files.
"""

from connectors.testing.crash import mark_batches


def _numbers(spark, end, rows_per_batch):
    return (
        spark.readStream.format("connectors.numbers")
        .option("end", end)
        .option("rowsPerBatch", rows_per_batch)
        .option("numPartitions", 2)
        .load()
    )


def numbers_to_csv(spark, checkpoint, out, end, rows_per_batch, part_size):
    """Row format, default rolling policy with a small part size: parts stay open across batches
    and roll in the middle of the run, so kills hit appends, rolls and publications."""
    return (
        mark_batches(_numbers(spark, end, rows_per_batch))
        .writeStream.format("connectors.files")
        .option("path", out)
        .option("fileFormat", "csv")
        .option("bucketAssigner", "basePath")
        .option("partSize", part_size)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )


def numbers_to_csv_header(spark, checkpoint, out, end, rows_per_batch, part_size, compression):
    """csv with a header, compressed, parts compacted when they roll (the default): kills hit
    header writes, appends, and concatenations logged but not yet published."""
    return (
        mark_batches(_numbers(spark, end, rows_per_batch))
        .selectExpr("value", "concat('n;', value) AS name")
        .writeStream.format("connectors.files")
        .option("path", out)
        .option("fileFormat", "csv")
        .option("header", "true")
        .option("sep", ";")
        .option("compression", compression)
        .option("partSuffix", ".csv")  # the codec's extension is appended
        .option("bucketAssigner", "basePath")
        .option("partSize", part_size)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )


def numbers_to_parquet_callable(spark, checkpoint, out, end, rows_per_batch):
    """Bulk format through the foreachBatch callable: every batch publishes its parts."""
    from connectors.files import FileSink

    return (
        mark_batches(_numbers(spark, end, rows_per_batch))
        .writeStream.foreachBatch(FileSink(out, fileFormat="parquet", bucketAssigner="basePath"))
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
