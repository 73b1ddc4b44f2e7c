"""Run a data source writer from foreachBatch, with the same guarantees as the format.

Every sink is a Spark data source *and* a foreachBatch callable. Rather than a second write
path, the callable drives the very writer the data source uses: ``write()`` runs per partition
inside a ``mapInArrow`` task, the pickled commit messages come back to the driver, and
``commit(messages, batch_id)`` (or ``abort``) runs there, exactly as Spark does for a
``DataSourceStreamArrowWriter``. Task retries work as in any Spark job: only the messages of
successful attempts are collected.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator, Mapping
from typing import ClassVar

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql.datasource import (
    CaseInsensitiveDict,
    DataSource,
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
)

from connectors.core.commit import foreach_batch_query_id, foreach_batch_run_id, streaming_ids
from connectors.core.options import Options, render


def run_stream_writer(
    writer: DataSourceStreamArrowWriter | DataSourceArrowWriter,
    df: DataFrame,
    batch_id: int | None,
    query_id: str | None,
    run_id: str | None = None,
) -> None:
    """Write ``df`` with ``writer`` and commit; ``batch_id`` None means a batch (non-stream) write."""

    def task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        with streaming_ids(query_id, batch_id, run_id):
            message = writer.write(batches)
        yield pa.RecordBatch.from_pylist([{"message": pickle.dumps(message)}])

    rows = df.mapInArrow(task, "message binary").collect()
    messages = [pickle.loads(row.message) for row in rows]
    if batch_id is None:
        writer.commit(messages)  # type: ignore[call-arg]
    else:
        writer.commit(messages, batch_id)  # type: ignore[call-arg]


class ForeachBatchSink:
    """Base of the foreachBatch callables: ``df.writeStream.foreachBatch(KafkaSink(...))``.

    Takes the format's options as keyword arguments (typed values or strings) or a typed
    options object, validates them at construction (so a bad option fails before the query
    starts), and writes each micro-batch through the format's stream writer.
    """

    data_source: ClassVar[type[DataSource]]

    def __init__(self, options: Options | Mapping[str, object] | None = None, **kwargs: object):
        base = options.to_options() if isinstance(options, Options) else dict(options or {})
        merged = {**base, **kwargs}
        self.options = {key: value if isinstance(value, str) else render(value) for key, value in merged.items()}
        self._validate()

    def _validate(self) -> None:
        """Subclasses parse ``self.options`` with their options class here."""

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        source = self.data_source(CaseInsensitiveDict(self.options))
        writer = source.streamWriter(df.schema, False)
        query_id = foreach_batch_query_id(df)
        run_stream_writer(writer, df, batch_id, query_id, foreach_batch_run_id(query_id))
