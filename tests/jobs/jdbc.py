"""Crash-harness job: connectors.numbers -> PostgreSQL through connectors.jdbc, exactly-once.

The table has no key, so a partition written twice after a kill shows up as duplicates and a
lost one as a gap. ``amount`` is a Spark decimal, sent as binary COPY into the table's numeric
or double precision column; ``foreach_batch`` chooses ``foreachBatch(JdbcSink(...))`` over the format.
"""

from connectors.jdbc import JdbcSink
from connectors.testing.crash import mark_batches


def numbers_to_postgres(spark, checkpoint, url, table, end, rows_per_batch, foreach_batch,
                        isolation_level="READ_UNCOMMITTED"):
    df = (
        spark.readStream.format("connectors.numbers")
        .option("end", end)
        .option("rowsPerBatch", rows_per_batch)
        .option("numPartitions", 2)
        .load()
        .selectExpr("value AS id", "concat('n', value) AS name", "value * 0.25 AS amount")  # a decimal
    )
    # 4k: every partition (500 rows, about 15 kB) commits in pieces, so kills land between them too
    options = {"url": url, "dbtable": table, "batchSize": "100", "maxBufferedBytes": "4k", "deliveryGuarantee": "exactly-once",
               "isolationLevel": isolation_level}
    writer = mark_batches(df).writeStream.option("checkpointLocation", checkpoint).trigger(availableNow=True)
    if foreach_batch:
        return writer.foreachBatch(JdbcSink(**options)).start()
    return writer.format("connectors.jdbc").options(**options).start()


def overwrite_postgres(spark, checkpoint, url, table, end):
    """A batch overwrite of ``table`` with the numbers 0..end (2 partitions); no query to await."""
    (spark.range(0, end + 1, 1, 2).write.format("connectors.jdbc")
     .options(url=url, dbtable=table, truncate="true", batchSize="100", maxBufferedBytes="4k")
     .mode("overwrite").save())
    return []
