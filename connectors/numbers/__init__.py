"""``connectors.numbers``: Flink's NumberSequenceSource (batch and streaming)."""

from connectors.core.lazy import lazy_exports

FORMAT = "connectors.numbers"

_EXPORTS = {
    "NumberSequenceDataSource": "connectors.numbers.datasource",
    "NumberSequenceOptions": "connectors.numbers.options",
}

__all__ = ["FORMAT", *_EXPORTS]
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
