"""Where a write runs: the ids every sink's commit and idempotence logic is keyed by.

Spark gives a Python writer no batch id as an argument; it is a local property of the task
(observed on 4.2/4.3, not documented API). The query id is stable across restarts from the same
checkpoint, so (query id or a user sink id, batch id, partition) names one unit of work for good:
a retried task, a speculative copy, or a batch re-run after a driver crash all carry the same key,
and a sink that records the key together with the data can skip work already committed.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator


@dataclasses.dataclass(frozen=True)
class TaskAttempt:
    """The unit of work a writer task performs."""

    query_id: str | None  # None outside a streaming query (batch write)
    batch_id: int | None  # None outside a streaming query
    partition_id: int
    # Spark's runId of the streaming query, new at every start (query_id is not); None where
    # Spark does not tell (outside a query, Spark Connect's foreachBatch).
    run_id: str | None = None


_override: tuple[str | None, int | None, str | None] | None = None


@contextlib.contextmanager
def streaming_ids(query_id: str | None, batch_id: int | None, run_id: str | None = None) -> Iterator[None]:
    """Make :func:`current_task` report these ids: foreachBatch runs writers in plain tasks
    that carry no streaming local properties, so the runner passes the ids explicitly."""
    global _override
    previous, _override = _override, (query_id, batch_id, run_id)
    try:
        yield
    finally:
        _override = previous


def current_task() -> TaskAttempt:
    """The ids of the Spark task this code runs in (inside ``write()`` or ``read()``)."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        raise RuntimeError("current_task() must run inside a Spark task")
    run_id = None
    if _override is not None:
        query_id, batch_id, run_id = _override
    else:
        batch = ctx.getLocalProperty("streaming.sql.batchId")
        query_id, batch_id = ctx.getLocalProperty("sql.streaming.queryId"), None if batch is None else int(batch)
    if run_id is None and ctx.getLocalProperty("sql.streaming.queryId"):
        # A stream's jobs carry its runId as their job group (StreamExecution sets both properties).
        run_id = ctx.getLocalProperty("spark.jobGroup.id")
    return TaskAttempt(
        query_id=query_id,
        batch_id=batch_id,
        partition_id=ctx.partitionId(),
        run_id=run_id,
    )


def foreach_batch_query_id(df) -> str | None:
    """The streaming query id inside a foreachBatch function, or None where Spark does not tell.

    Classic Spark calls the function on the query's thread, whose local properties hold the id.
    Spark Connect (4.2, 4.3) calls it in a Python worker with a session cloned for the query:
    neither its conf, nor the local properties its jobs carry, nor its ``streams`` name the query,
    so there it is None, as for a function called outside any query. A sink that keys its progress
    by this id then needs an id of its own from the user, and decides what to do without one
    (the Kafka sink: ``transactionalIdPrefix``; the JDBC sink: ``sinkId``).
    """
    session = df.sparkSession
    if type(session).__module__.startswith("pyspark.sql.connect"):  # no SparkContext to ask
        return None
    return session.sparkContext.getLocalProperty("sql.streaming.queryId")


def foreach_batch_run_id(query_id: str | None) -> str | None:
    """Spark's runId of the query ``query_id`` inside its foreachBatch function, or None where
    Spark does not tell.

    The query's jobs carry the runId as their job group, but the function may set a job group of
    its own (``setJobGroup``), which its jobs then carry at every start. The function's DataFrame
    belongs to a session cloned for the query, whose ``streams`` do not list it (checked on 4.3);
    the session active on the query's thread, where classic Spark calls the function, does.
    """
    from pyspark.sql import SparkSession

    session = SparkSession.getActiveSession() if query_id else None
    if session is None or type(session).__module__.startswith("pyspark.sql.connect"):
        return None
    query = session.streams.get(query_id)
    return None if query is None else query.runId
