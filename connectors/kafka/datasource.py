"""``connectors.kafka``: Spark's ``kafka`` format: the read side in source/reader.py, the write side in sink/writer.py."""

from connectors.core.datasource import ConnectorDataSource
from connectors.kafka import FORMAT


class KafkaDataSource(ConnectorDataSource):
    format_name = FORMAT
    read_side = "connectors.kafka.source.reader"
    write_side = "connectors.kafka.sink.writer"
