"""Auto-registration of ``connectors.files`` (see pyspark_connectors_numbers)."""

from connectors.files.datasource import FileDataSource as DefaultSource

__all__ = ["DefaultSource"]
