"""``connectors.files``: Flink's FileSource (``source/``, docs/file-source.md) and FileSink
(``sink/``, docs/file-sink.md) as the format ``connectors.files``."""

from connectors.core.lazy import lazy_exports

FORMAT = "connectors.files"

_EXPORTS = {
    "FileDataSource": "connectors.files.datasource",
    "FileSourceOptions": "connectors.files.source.options",
    "FileSink": "connectors.files.sink.foreach_batch",
    "FileSinkOptions": "connectors.files.sink.options",
    "OutputFileConfig": "connectors.files.sink.config",
    "RollingPolicy": "connectors.files.sink.config",
    "DefaultRollingPolicy": "connectors.files.sink.config",
    "OnCheckpointRollingPolicy": "connectors.files.sink.config",
    "DateTimeBucketAssigner": "connectors.files.sink.config",
    "BasePathBucketAssigner": "connectors.files.sink.config",
    "ColumnBucketAssigner": "connectors.files.sink.config",
    "FileSinkListener": "connectors.tools.file_sink",
    "finish": "connectors.tools.file_sink",
}

__all__ = ["FORMAT", *_EXPORTS]
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
