"""``connectors.jdbc``: Flink's JdbcSink for PostgreSQL, as a Spark format and a foreachBatch callable.

``df.writeStream.format("connectors.jdbc")``, ``df.write.format("connectors.jdbc")`` and
``foreachBatch(JdbcSink(...))`` share one writer: COPY appends, upserts, custom SQL, retries, and
exactly-once through a progress row committed with each partition's rows. See docs/jdbc.md.
"""

from connectors.core.guarantees import DeliveryGuarantee
from connectors.jdbc.datasource import JdbcDataSource
from connectors.jdbc.options import JdbcConnectionOptions, JdbcExecutionOptions, JdbcSinkOptions, WriteMode

__all__ = [
    "DeliveryGuarantee",
    "JdbcConnectionOptions",
    "JdbcDataSource",
    "JdbcExecutionOptions",
    "JdbcSink",
    "JdbcSinkOptions",
    "WriteMode",
]


def __getattr__(name: str):
    # JdbcSink pulls in pyspark's writer classes: imported on first use, like the format's sides.
    if name == "JdbcSink":
        from connectors.jdbc.sink import JdbcSink

        return JdbcSink
    raise AttributeError(name)
