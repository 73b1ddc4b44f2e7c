"""``connectors.kafka``: Flink's Kafka connectors with Spark's Kafka options.

Read side: ``spark.read(Stream).format("connectors.kafka")``, Spark's Kafka source options with
offsets in the checkpoint (docs/kafka-source.md); ``KafkaSourceOptions`` is its typed config.
Write side: ``df.write(Stream).format("connectors.kafka")`` or ``foreachBatch(KafkaSink(...))``,
with ``deliveryGuarantee`` none / at-least-once / exactly-once (docs/kafka-sink.md).
"""

from connectors.core.guarantees import DeliveryGuarantee
from connectors.kafka.sink import KafkaSink
from connectors.kafka.sink_options import KafkaSinkOptions
from connectors.kafka.source_options import KafkaSourceOptions

__all__ = ["DeliveryGuarantee", "KafkaSink", "KafkaSinkOptions", "KafkaSourceOptions"]
