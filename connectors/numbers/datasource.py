"""``connectors.numbers``: Flink's NumberSequenceSource (source.py); read only."""

from connectors.core.datasource import ConnectorDataSource


class NumberSequenceDataSource(ConnectorDataSource):
    format_name = "connectors.numbers"
    read_side = "connectors.numbers.source"
