"""Flink's DataStream connectors for PySpark, with Flink's delivery guarantees.

Formats (usable with no registration call once the package is installed):
``connectors.numbers``, ``connectors.kafka``, ``connectors.files``, ``connectors.jdbc``.
"""

from __future__ import annotations

import importlib

__all__ = ["FORMATS", "__version__", "register"]

# The one place the version is written: pyproject.toml reads it (setuptools' dynamic version).
__version__ = "0.1.0"

# Format name -> "module:DataSource class". Each also has a top-level pyspark_connectors_* package
# exposing it as DefaultSource, which Spark registers automatically.
FORMATS = {
    "connectors.numbers": "connectors.numbers.datasource:NumberSequenceDataSource",
    "connectors.kafka": "connectors.kafka.datasource:KafkaDataSource",
    "connectors.files": "connectors.files.datasource:FileDataSource",
    "connectors.jdbc": "connectors.jdbc.datasource:JdbcDataSource",
}


def register(spark) -> None:
    """Register every format with ``spark`` explicitly (e.g. where auto-registration is off)."""
    for target in FORMATS.values():
        module, _, cls = target.partition(":")
        spark.dataSource.register(getattr(importlib.import_module(module), cls))
