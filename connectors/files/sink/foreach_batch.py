"""``df.writeStream.foreachBatch(FileSink(...))``: the file sink as a foreachBatch callable."""

from __future__ import annotations

from collections.abc import Mapping

from connectors.core.foreach_batch import ForeachBatchSink
from connectors.core.options import Options
from connectors.files.datasource import FileDataSource
from connectors.files.sink.config import (
    BasePathBucketAssigner,
    ColumnBucketAssigner,
    DateTimeBucketAssigner,
    DefaultRollingPolicy,
    OnCheckpointRollingPolicy,
    OutputFileConfig,
)
from connectors.files.sink.options import FileSinkOptions


class FileSink(ForeachBatchSink):
    """``df.writeStream.foreachBatch(FileSink(path, fileFormat="json", ...))``.

    Same options and guarantees as ``format("connectors.files")``; also takes Flink's typed
    configs: ``rolling_policy=RollingPolicy.default_rolling_policy(...)`` or
    ``OnCheckpointRollingPolicy()``, ``output_file_config=OutputFileConfig(...)``,
    ``bucket_assigner=DateTimeBucketAssigner(...)`` / ``BasePathBucketAssigner()`` /
    ``ColumnBucketAssigner(column)``. Other keyword arguments are options by their Spark names.
    """

    data_source = FileDataSource

    def __init__(
        self,
        path: str | None = None,
        options: Options | Mapping[str, object] | None = None,
        *,
        rolling_policy: DefaultRollingPolicy | OnCheckpointRollingPolicy | None = None,
        output_file_config: OutputFileConfig | None = None,
        bucket_assigner: DateTimeBucketAssigner | BasePathBucketAssigner | ColumnBucketAssigner | None = None,
        **kwargs: object,
    ):
        typed: dict[str, object] = {"path": path} if path is not None else {}
        for config in (rolling_policy, output_file_config, bucket_assigner):
            if config is not None:
                typed.update(config.to_options())
        super().__init__(options, **typed, **kwargs)

    def _validate(self) -> None:
        FileSinkOptions.from_options(self.options)
