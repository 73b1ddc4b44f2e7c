"""``connectors.kafka``: Flink's Kafka connectors with Spark's Kafka options.

Write side: ``df.write(Stream).format("connectors.kafka")`` or ``foreachBatch(KafkaSink(...))``,
with ``deliveryGuarantee`` none / at-least-once / exactly-once (docs/kafka-sink.md).
"""

from connectors.core.guarantees import DeliveryGuarantee
from connectors.kafka.sink import KafkaSink
from connectors.kafka.sink_options import KafkaSinkOptions

__all__ = ["DeliveryGuarantee", "KafkaSink", "KafkaSinkOptions"]
