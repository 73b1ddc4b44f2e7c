"""``connectors.kafka``: Spark's ``kafka`` format: the read side in source.py, the write side in sink.py."""

from connectors.core.datasource import ConnectorDataSource


class KafkaDataSource(ConnectorDataSource):
    format_name = "connectors.kafka"
    read_side = "connectors.kafka.source"
    write_side = "connectors.kafka.sink"
