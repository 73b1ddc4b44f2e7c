"""Spark imports ``pyspark_*`` modules at the first data source lookup and registers their
``DefaultSource``: this makes ``format("connectors.numbers")`` work with no register() call."""

from connectors.numbers.datasource import NumberSequenceDataSource as DefaultSource

__all__ = ["DefaultSource"]
