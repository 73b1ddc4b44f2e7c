"""``connectors.files``: Flink's FileSource and FileSink as the format ``connectors.files``.

Public names are imported on first use, so Spark's registration import stays cheap.
"""

from __future__ import annotations

import importlib

# Name -> module defining it.
_EXPORTS = {
    # read side (docs/file-source.md)
    "FileSourceOptions": "connectors.files.source_options",
    # write side (docs/file-sink.md)
    "FileSink": "connectors.files.sink",
    "FileSinkOptions": "connectors.files.sink_options",
    "OutputFileConfig": "connectors.files.sink_options",
    "RollingPolicy": "connectors.files.rolling",
    "DefaultRollingPolicy": "connectors.files.rolling",
    "OnCheckpointRollingPolicy": "connectors.files.rolling",
    "DateTimeBucketAssigner": "connectors.files.buckets",
    "BasePathBucketAssigner": "connectors.files.buckets",
    "ColumnBucketAssigner": "connectors.files.buckets",
    "FileSinkListener": "connectors.files.sink_maintenance",
    "finish": "connectors.files.sink_maintenance",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
