"""Crash-harness jobs: connectors.numbers -> any exactly-once sink, as a format or a foreachBatch
callable; several such queries in one application for random kills.

Every number 0..end becomes one record ``id`` (Kafka: the value; files: a csv line; JDBC: a row
with ``id``, ``name`` and a decimal ``amount``), so the test can count each one.
"""

from __future__ import annotations

from connectors.testing.crash import mark_batches

_COLUMNS = {
    "kafka": ["cast(value as string) AS value", "cast(value % 10 as string) AS key"],
    "files": ["value AS id"],
    "jdbc": ["value AS id", "concat('n', value) AS name", "value * 0.25 AS amount"],
}


def numbers_to_sink(spark, checkpoint, sink, options, end, rows_per_batch, foreach_batch, dawdle=1.5):
    df = (
        spark.readStream.format("connectors.numbers")
        .option("end", end).option("rowsPerBatch", rows_per_batch).option("numPartitions", 2)
        .load()
    )
    records = mark_batches(df, dawdle).selectExpr(*_COLUMNS[sink])
    writer = records.writeStream.option("checkpointLocation", checkpoint).trigger(availableNow=True)
    if foreach_batch:
        return writer.foreachBatch(_callable(sink, options)).start()
    return writer.format(f"connectors.{sink}").options(**options).start()


def _callable(sink, options):
    if sink == "kafka":
        from connectors.kafka import KafkaSink

        return KafkaSink(options)
    if sink == "files":
        from connectors.files import FileSink

        return FileSink(options=options)
    from connectors.jdbc import JdbcSink

    return JdbcSink(options)


def many(spark, checkpoint, queries):
    """Several jobs of this package's ``jobs`` modules in one application, each on its own
    checkpoint under ``checkpoint``: ``queries`` is a list of ``[name, "module:function", args]``."""
    import importlib

    started = []
    for name, job, args in queries:
        module, _, function = job.partition(":")
        build = getattr(importlib.import_module(module), function)
        started.append(build(spark, f"{checkpoint}/{name}", **args))
    return started
