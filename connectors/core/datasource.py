"""The base of every format: one name, a read side and/or a write side.

Each side lives in its own module of the connector's subpackage and is imported on first use,
so the registration import Spark does at lookup stays cheap. A read-side module defines
``schema(options)``, ``reader(options, schema)`` and ``stream_reader(options, schema)``; a
write-side module defines ``writer(options, schema, overwrite)`` and
``stream_writer(options, schema, overwrite)``. Each side validates its own options there, so a
bad option fails when the query starts. Stream readers are written against Spark 4.2's API and
adapted to the running Spark line by :mod:`connectors.core.spark_compat`.

Spark also makes a fresh stream writer for every micro-batch only to call ``commit()`` or
``abort()`` on it, in its streaming commit runner; see :class:`AbortOnlyWriter` for when making it
fails.
"""

from __future__ import annotations

import importlib
import logging
import sys
from typing import ClassVar

from pyspark.sql.datasource import DataSource, DataSourceStreamWriter

from connectors.core import spark_compat
from connectors.core.options import OptionError

log = logging.getLogger(__name__)

# The module of PySpark's driver-side worker that makes a stream writer only to commit or abort.
_COMMIT_RUNNER = "pyspark.sql.worker.python_streaming_sink_runner"


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
        make = self._side(self.write_side, "stream_writer", "written as a stream")
        try:
            return make(self.options, schema, overwrite)
        except Exception as exc:
            if not _in_commit_runner():
                raise
            return AbortOnlyWriter(self.format_name, exc)


class AbortOnlyWriter(DataSourceStreamWriter):
    """Stands in for a stream writer that Spark's commit runner could not make, typically because
    the server is down, which is often also why the micro-batch's tasks failed.

    ``commit()`` raises that error, as making the writer would have. ``abort()`` logs it and
    returns: every sink's abort only logs (what tasks committed stays, and a re-run skips or
    replaces it), and an abort that raises makes Spark report "Writing job failed" in place of the
    error of the task that failed the batch.
    """

    def __init__(self, format_name: str, error: Exception):
        self.format_name, self.error = format_name, error

    def write(self, iterator):  # abstract in Spark's class; Spark sends only its planner's writers to tasks
        raise self.error

    def commit(self, messages, batchId):
        raise self.error

    def abort(self, messages, batchId):
        log.warning("%s: batch %d aborted; its writer could not be made: %s", self.format_name, batchId, self.error)


def _in_commit_runner() -> bool:
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_globals.get("__name__") == _COMMIT_RUNNER:
            return True
        frame = frame.f_back
    return False
