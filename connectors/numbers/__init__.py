"""``connectors.numbers``: Flink's NumberSequenceSource (batch and streaming)."""

from connectors.numbers.options import NumberSequenceOptions
from connectors.numbers.datasource import NumberSequenceDataSource

__all__ = ["NumberSequenceDataSource", "NumberSequenceOptions"]
