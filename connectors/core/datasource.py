"""The base of every format: one name, a read side and/or a write side.

Each side lives in its own module of the connector's subpackage and is imported on first use,
so the registration import Spark does at lookup stays cheap. A read-side module defines
``schema(options)``, ``reader(options, schema)`` and ``stream_reader(options, schema)``; a
write-side module defines ``writer(options, schema, overwrite)`` and
``stream_writer(options, schema, overwrite)``. Each side validates its own options there, so a
bad option fails when the query starts. Stream readers are written against Spark 4.2's API and
adapted to the running Spark line by :mod:`connectors.core.spark_compat`.
"""

from __future__ import annotations

import importlib
from typing import ClassVar

from pyspark.sql.datasource import DataSource

from connectors.core import spark_compat
from connectors.core.options import OptionError


class ConnectorDataSource(DataSource):
    format_name: ClassVar[str]
    read_side: ClassVar[str | None] = None
    write_side: ClassVar[str | None] = None

    @classmethod
    def name(cls) -> str:
        return cls.format_name

    def _side(self, module: str | None, function: str, what: str):
        if module is None:
            raise OptionError(self.format_name, "format", self.format_name, f"this format cannot be {what}")
        return getattr(importlib.import_module(module), function)

    def schema(self):
        return self._side(self.read_side, "schema", "read")(self.options)

    def reader(self, schema):
        return self._side(self.read_side, "reader", "read")(self.options, schema)

    def streamReader(self, schema):
        reader = self._side(self.read_side, "stream_reader", "read as a stream")(self.options, schema)
        return spark_compat.stream_reader(reader)

    def writer(self, schema, overwrite):
        return self._side(self.write_side, "writer", "written")(self.options, schema, overwrite)

    def streamWriter(self, schema, overwrite):
        return self._side(self.write_side, "stream_writer", "written as a stream")(self.options, schema, overwrite)
