"""Flink's DataStream connectors for PySpark, with Flink's delivery guarantees.

Formats (usable with no registration call once the package is installed):
``connectors.numbers``, ``connectors.kafka``, ``connectors.files``, ``connectors.jdbc``.
"""

from __future__ import annotations

import functools
import importlib

__all__ = ["FORMATS", "__version__", "register"]

# The one place the version is written: pyproject.toml reads it (setuptools' dynamic version).
__version__ = "0.1.0"

# Each connector's package defines its format name (FORMAT) and DataSource; each also has a
# top-level pyspark_connectors_* package exposing it as DefaultSource, which Spark registers.
_CONNECTORS = {
    "numbers": "NumberSequenceDataSource",
    "kafka": "KafkaDataSource",
    "files": "FileDataSource",
    "jdbc": "JdbcDataSource",
}



def __getattr__(name: str) -> object:
    # FORMATS imports every connector's package (and so connectors.core): computed on first use,
    # because the worker startup hook imports this package in every Python process, long before
    # connectors.core may be imported (connectors/core/worker_gc.py decides at that import).
    if name == "FORMATS":
        return _formats()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@functools.cache
def _formats() -> dict[str, str]:
    """Format name -> "module:DataSource class"."""
    return {
        importlib.import_module(f"connectors.{package}").FORMAT: f"connectors.{package}.datasource:{cls}"
        for package, cls in _CONNECTORS.items()
    }


def register(spark) -> None:
    """Register every format with ``spark`` explicitly (e.g. where auto-registration is off)."""
    for target in _formats().values():
        module, _, cls = target.partition(":")
        spark.dataSource.register(getattr(importlib.import_module(module), cls))
