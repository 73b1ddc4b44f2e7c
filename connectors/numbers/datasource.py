"""``connectors.numbers``: Flink's NumberSequenceSource (reader.py); read only."""

from connectors.core.datasource import ConnectorDataSource
from connectors.numbers import FORMAT


class NumberSequenceDataSource(ConnectorDataSource):
    format_name = FORMAT
    read_side = "connectors.numbers.reader"
