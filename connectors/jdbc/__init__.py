"""``connectors.jdbc``: Flink's JdbcSink for PostgreSQL, as a Spark format and a foreachBatch callable.

``df.writeStream.format("connectors.jdbc")``, ``df.write.format("connectors.jdbc")`` and
``foreachBatch(JdbcSink(...))`` share one writer: COPY appends, upserts, custom SQL, retries, and
exactly-once through a progress row committed with each partition's rows. See docs/jdbc.md.
"""

from connectors.core.lazy import lazy_exports

FORMAT = "connectors.jdbc"

_EXPORTS = {
    "JdbcDataSource": "connectors.jdbc.datasource",
    "JdbcSink": "connectors.jdbc.foreach_batch",
    "JdbcSinkOptions": "connectors.jdbc.options",
    "JdbcConnectionOptions": "connectors.jdbc.options",
    "JdbcExecutionOptions": "connectors.jdbc.options",
    "WriteMode": "connectors.jdbc.options",
    "DeliveryGuarantee": "connectors.core.guarantees",
}

__all__ = ["FORMAT", *_EXPORTS]
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
