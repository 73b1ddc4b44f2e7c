"""``df.writeStream.foreachBatch(KafkaSink(...))``: the Kafka sink as a foreachBatch callable."""

from __future__ import annotations

from connectors.core.foreach_batch import ForeachBatchSink
from connectors.kafka.datasource import KafkaDataSource
from connectors.kafka.sink.options import KafkaSinkOptions


class KafkaSink(ForeachBatchSink):
    """``df.writeStream.foreachBatch(KafkaSink(...))``: the ``connectors.kafka`` sink with the same
    options and guarantees, for queries that need foreachBatch (e.g. to write several sinks).

    Parameters
    ----------
    options : KafkaSinkOptions or dict, optional
        The sink's options; keyword arguments add to or override them.

    Examples
    --------
    >>> query = df.writeStream.foreachBatch(KafkaSink(**{
    ...     "kafka.bootstrap.servers": "localhost:9092", "topic": "orders",
    ...     "deliveryGuarantee": "exactly-once", "transactionalIdPrefix": "orders-sink"})).start()
    """

    data_source = KafkaDataSource

    def _validate(self) -> None:
        KafkaSinkOptions.from_options(self.options)
