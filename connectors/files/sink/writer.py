"""``connectors.files`` write side: Flink's FileSink on Spark (stream and batch writes, foreachBatch).

Exactly-once in three steps per micro-batch:
- tasks write to hidden in-progress files and report what they wrote (never visible, never in
  the state yet); a task appends to its slot's open part unless another attempt holds or has
  extended that file, in which case it writes a new piece;
- the commit (driver) writes the next version of the sink's state log: the commit point;
- the parts that rolled are published (rename, or copy on object stores) after that.

After a crash the state log decides: a batch it already holds is a replay (tasks skip it), pending
parts are published again (idempotent), and bytes past the committed length of an in-progress
file are never published (the part continues in a new piece). See docs/file-sink.md.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter
from pyspark.sql.types import StructType

from connectors.core.commit import current_task
from connectors.core.options import OptionError
from connectors.files import FORMAT
from connectors.files.sink.exactly_once import commit_batch
from connectors.files.sink.formats import check_schema
from connectors.files.sink.options import FileSinkOptions
from connectors.files.sink.part_files import publish
from connectors.files.sink.state import StateLog, compact
from connectors.files.sink.task_writer import FileSinkMessage, SinkPlan, TaskWriter
from connectors.testing.faults import fault_point

__all__ = ["writer", "stream_writer"]

# Where errors of the filesystem layer come from, beside OSError (s3fs lets connection errors through)
_STORAGE_MODULES = ("botocore", "aiobotocore", "aiohttp", "s3fs", "fsspec", "gcsfs", "adlfs")


class FileSinkError(RuntimeError):
    """The filesystem failed under the sink (an object store down, a disk full)."""


def _storage_errors(what: str) -> Callable:
    """A writer method whose filesystem errors fail as one line naming the base path and what
    failed, instead of the client library's traceback (the micro-batch is retried on restart)."""

    def decorate(method: Callable) -> Callable:
        @functools.wraps(method)
        def wrapped(self, *args):
            try:
                return method(self, *args)
            except Exception as exc:
                if not isinstance(exc, OSError) and not type(exc).__module__.startswith(_STORAGE_MODULES):
                    raise
                detail = f"{type(exc).__name__}: {exc}"
                raise FileSinkError(f"{FORMAT}: {what} under {self.plan.config.path} failed: {detail}") from None

        return wrapped

    return decorate


def _plan(options, schema: StructType) -> SinkPlan:
    config = FileSinkOptions.from_options(options)
    column = config.bucket_column
    if column is not None and column not in schema.fieldNames():
        raise config.error("bucketColumn", f"no such column; columns: {', '.join(schema.fieldNames())}")
    columns = [name for name in schema.fieldNames() if name != column]
    check_schema(schema, config.file_format, columns, config.avro_layout)
    return SinkPlan(config, tuple(columns))


def writer(options, schema: StructType, overwrite: bool) -> FileBatchWriter:
    return FileBatchWriter(_plan(options, schema), overwrite)


def stream_writer(options, schema: StructType, overwrite: bool) -> FileStreamWriter:
    if overwrite:
        raise OptionError(FORMAT, "outputMode", "complete", "the file sink only appends: use append")
    return FileStreamWriter(_plan(options, schema))


class FileStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, plan: SinkPlan):
        self.plan = plan

    @_storage_errors("writing part files")
    def write(self, iterator: Iterator[pa.RecordBatch]) -> FileSinkMessage:
        task = current_task()
        if task.query_id is None or task.batch_id is None:
            raise RuntimeError("connectors.files: a stream write without a query id / batch id")
        state = StateLog(self.plan.storage, task.query_id).latest()
        if task.batch_id <= state.batch:
            # committed before a driver crash: this run is a replay (or, in the run that committed
            # it, a second write of the batch, which the commit refuses)
            for _ in iterator:
                pass
            return FileSinkMessage(task.query_id, task.batch_id, True, {}, task.run_id)
        slots = TaskWriter(self.plan, task.partition_id, state, keep_open=True).write_all(iterator)
        fault_point("files.task.written", self.plan.config.path)
        return FileSinkMessage(task.query_id, task.batch_id, False, slots, task.run_id)

    @_storage_errors("committing the micro-batch")
    def commit(self, messages: list[FileSinkMessage | None], batchId: int) -> None:
        fault_point("files.commit.before", self.plan.config.path)
        commit_batch(self.plan, messages, batchId)
        fault_point("files.commit.after", self.plan.config.path)

    def abort(self, messages: list[FileSinkMessage | None], batchId: int) -> None:
        # Nothing to undo: what the tasks wrote is hidden and in no state version; the batch is
        # retried (or the query restarted) and the next commit in these buckets deletes it.
        pass


class FileBatchWriter(DataSourceArrowWriter):
    """``df.write``: each task writes closed parts; the job commit publishes them all (those of a
    bucket compacted into files of at most ``partSize``, as a stream's rolling parts)."""

    def __init__(self, plan: SinkPlan, overwrite: bool):
        self.plan, self.overwrite = plan, overwrite

    def write(self, iterator: Iterator[pa.RecordBatch]) -> FileSinkMessage:
        partition = current_task().partition_id
        slots = TaskWriter(self.plan, partition, None, keep_open=False).write_all(iterator)
        return FileSinkMessage(None, None, False, slots)

    def commit(self, messages: list[FileSinkMessage | None]) -> None:
        storage = self.plan.storage
        parts = list(self._parts(messages))
        if self.overwrite:  # everything under the base path but this job's own pieces
            keep = {storage.abs(piece.path) for part in parts for piece in part.pieces}
            for path in storage.fs.find(storage.abs("")):
                if path not in keep:
                    storage.fs.rm_file(path)
        for part in compact(parts, self.plan.compaction):
            publish(storage, part, rename=True)
            for piece in part.pieces:  # the sources of a concatenation (a renamed piece is gone)
                storage.delete(piece.path)

    def abort(self, messages: list[FileSinkMessage | None]) -> None:
        for part in self._parts(messages):
            for piece in part.pieces:
                self.plan.storage.delete(piece.path)

    @staticmethod
    def _parts(messages: list[FileSinkMessage | None]):
        for message in messages:
            for result in (message.slots if message else {}).values():
                for task_part in result.parts:
                    yield task_part.as_part()
