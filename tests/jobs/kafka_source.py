"""Crash-harness job: connectors.kafka -> a per-batch idempotent parquet sink.

Every micro-batch overwrites its own directory ``out/batch=<id>``, so a batch replayed after a
kill replaces its earlier output, and any offset the source skips or delivers twice across
restarts shows up in the final count.
"""

from connectors.testing.crash import to_idempotent_parquet


def kafka_to_parquet(spark, checkpoint, out, bootstrap, max_offsets, topic=None, subscription=None):
    """Reads ``subscription``, the option that chooses the partitions and its value (e.g.
    ``["assign", '{"t":[0,1]}']``), by default ``["subscribe", topic]``."""
    name, value = subscription or ("subscribe", topic)
    df = (
        spark.readStream.format("connectors.kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option(name, value)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", max_offsets)
        .load()
        .select("partition", "offset", "value")
    )
    return to_idempotent_parquet(df, checkpoint, out)
