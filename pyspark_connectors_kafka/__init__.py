"""Auto-registration of ``connectors.kafka`` (see pyspark_connectors_numbers)."""

from connectors.kafka.datasource import KafkaDataSource as DefaultSource

__all__ = ["DefaultSource"]
