"""``connectors.kafka``: Flink's Kafka connectors with Spark's Kafka options.

Read side (``source/``): ``spark.read(Stream).format("connectors.kafka")``, Spark's Kafka source
options with offsets in the checkpoint (docs/kafka-source.md); ``KafkaSourceOptions`` is its
typed config. Write side (``sink/``): ``df.write(Stream).format("connectors.kafka")`` or
``foreachBatch(KafkaSink(...))``, with ``deliveryGuarantee`` none / at-least-once /
exactly-once (docs/kafka-sink.md).
"""

from connectors.core.lazy import lazy_exports

FORMAT = "connectors.kafka"

_EXPORTS = {
    "KafkaDataSource": "connectors.kafka.datasource",
    "KafkaSourceOptions": "connectors.kafka.source.options",
    "KafkaSink": "connectors.kafka.sink.foreach_batch",
    "KafkaSinkOptions": "connectors.kafka.sink.options",
    "DeliveryGuarantee": "connectors.core.guarantees",
}

__all__ = ["FORMAT", *_EXPORTS]
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
