"""Auto-registration of ``connectors.jdbc`` (see pyspark_connectors_numbers)."""

from connectors.jdbc.datasource import JdbcDataSource as DefaultSource

__all__ = ["DefaultSource"]
