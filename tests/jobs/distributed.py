"""Jobs the distributed tests run on a standalone cluster (driver in a harness child process)."""

from connectors.testing.crash import mark_batches


def kafka_to_files(spark, checkpoint, bootstrap, topic, out):
    records = (
        spark.readStream.format("connectors.kafka").option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic).option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", 1000)
        .load().selectExpr("partition", "offset")
    )
    return (
        mark_batches(records, dawdle=3.0).writeStream.format("connectors.files").option("path", out)
        .option("fileFormat", "json").option("bucketAssigner", "basePath").option("rollingPolicy", "onCheckpoint")
        .option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
    )


def files_to_postgres(spark, checkpoint, landing, dsn, table):
    rows = (
        spark.readStream.format("connectors.files").schema("id long").option("fileFormat", "csv")
        .option("maxFilesPerTrigger", 2).load(landing)
    )
    return (
        mark_batches(rows, dawdle=3.0).writeStream.format("connectors.jdbc").option("url", dsn)
        .option("dbtable", table).option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
    )
