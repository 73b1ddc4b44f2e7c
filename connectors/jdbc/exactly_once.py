"""The exactly-once bookkeeping table: one row per (sink id, batch id, partition) of a target.

A partition's rows commit in one or more transactions (one per ``maxBufferedBytes`` of rows),
each together with the partition's progress row: how many of the partition's rows are committed
(``row_count``) and a digest of those rows (``connectors.core.digest``). Each transaction takes
the row first thing, so it doubles as a lock: a concurrent attempt at the same key (a speculative
copy, a zombie) waits for the transaction holding it, then resumes after the rows that committed.
A later re-execution (task retry, batch replayed after a driver crash) does the same: it reads
past the committed rows of its input, checks that their digest is the one recorded, and writes
only the rest; a partition it finds complete is skipped.

The sink id names the query and the target (``<query id or sinkId>:<table>``), so two sinks that
share a query or a ``sinkId`` but write different tables never take each other's rows.
"""

from __future__ import annotations

import dataclasses

_CREATE = """
CREATE TABLE IF NOT EXISTS {table} (
    sink_id text NOT NULL,
    batch_id bigint NOT NULL,
    partition_id integer NOT NULL,
    row_count bigint NOT NULL,
    committed_at timestamptz NOT NULL DEFAULT now(),
    digest text,
    PRIMARY KEY (sink_id, batch_id, partition_id)
)
"""
_WHERE = "WHERE sink_id = %s AND batch_id = %s AND partition_id = %s"
# The partition id of the row a finished batch write leaves behind (see ProgressTable.finish).
TOMBSTONE = -1


@dataclasses.dataclass(frozen=True)
class ProgressKey:
    sink_id: str
    batch_id: int
    partition_id: int

    def params(self) -> tuple[str, int, int]:
        return self.sink_id, self.batch_id, self.partition_id

    def __str__(self) -> str:
        return f"sink id '{self.sink_id}', batch {self.batch_id}, partition {self.partition_id}"


@dataclasses.dataclass(frozen=True)
class Committed:
    """What the progress row says: the first ``rows`` rows are committed, with this digest."""

    rows: int
    digest: str | None  # None for rows committed before digests were recorded


@dataclasses.dataclass(frozen=True)
class ProgressTable:
    table: str  # quoted SQL name

    def create(self, connection) -> None:
        """Create the table unless it exists (also when another query creates it concurrently), and
        add the ``digest`` column to a table created before it existed. Server errors (permissions,
        a lock timeout while running queries hold the table) are raised unchanged."""
        import psycopg2.errors

        try:
            with connection.cursor() as cursor:
                cursor.execute(_CREATE.format(table=self.table))
            connection.commit()
        except (psycopg2.errors.UniqueViolation, psycopg2.errors.DuplicateTable):
            connection.rollback()  # lost the race to create it: it exists now
        with connection.cursor() as cursor:
            # Looked up first: ALTER TABLE locks the table exclusively even when the column exists,
            # and running tasks of every query hold row locks on it.
            cursor.execute(
                "SELECT 1 FROM pg_attribute WHERE attrelid = %s::regclass AND attname = 'digest' AND NOT attisdropped",
                (self.table,),
            )
            if cursor.fetchone() is None:
                cursor.execute(f"ALTER TABLE {self.table} ADD COLUMN IF NOT EXISTS digest text")
        connection.commit()

    def claim(self, cursor, key: ProgressKey) -> Committed | None:
        """Take ``key`` in the open transaction; None if it had no row, else what is committed."""
        cursor.execute(
            f"INSERT INTO {self.table} (sink_id, batch_id, partition_id, row_count) VALUES (%s, %s, %s, -1) "
            "ON CONFLICT DO NOTHING",
            key.params(),
        )
        if cursor.rowcount == 1:
            # A key no attempt has taken, unless a later batch of the sink is committed: then this
            # task is a zombie (a task of a driver that died, still running while the restarted
            # query committed this batch and went on; its progress rows are pruned by now), or
            # the batch ids started over (a new checkpoint under the same sinkId). Either way its
            # rows are written already: writing them would duplicate them.
            # A batch write's tombstone (see finish) says the same of the write's only batch.
            cursor.execute(
                f"SELECT batch_id, partition_id FROM {self.table} WHERE sink_id = %s AND batch_id > %s "
                "ORDER BY batch_id DESC, partition_id LIMIT 1",
                (key.sink_id, key.batch_id),
            )
            later = cursor.fetchone()
            if later is not None:
                raise Superseded(int(later[0]), finished=later[1] == TOMBSTONE)
            return None
        # Locked: a concurrent attempt that also finds the key waits until this one commits.
        cursor.execute(f"SELECT row_count, digest FROM {self.table} {_WHERE} FOR UPDATE", key.params())
        rows, digest = cursor.fetchone()
        return Committed(int(rows), digest)

    def committed_rows(self, cursor, sink_ids: list[str], batch_id: int) -> dict[tuple[str, int], int]:
        """(sink id, partition) -> rows committed, of every progress row of batch ``batch_id``."""
        cursor.execute(
            f"SELECT sink_id, partition_id, row_count FROM {self.table} WHERE sink_id = ANY(%s) AND batch_id = %s",
            (sink_ids, batch_id),
        )
        return {(sink_id, int(partition)): int(rows) for sink_id, partition, rows in cursor.fetchall()}

    def record(self, cursor, key: ProgressKey, committed: Committed) -> None:
        cursor.execute(
            f"UPDATE {self.table} SET row_count = %s, digest = %s, committed_at = now() {_WHERE}",
            (committed.rows, committed.digest, *key.params()),
        )

    def forget(self, connection, sink_id: str, before_batch: int) -> None:
        """Drop the rows of ``sink_id`` of batches before ``before_batch``.

        A streaming batch N starts only after N-1 is in Spark's commit log, so batches before the
        one being committed are never executed again. The rows of the newest batch that has any
        are always kept (a batch of empty partitions leaves none): they tell a zombie task of an
        older batch that it is one (see :meth:`claim`).
        """
        with connection.cursor() as cursor:
            cursor.execute(
                f"DELETE FROM {self.table} WHERE sink_id = %s AND batch_id < %s "
                f"AND batch_id < (SELECT max(batch_id) FROM {self.table} WHERE sink_id = %s)",
                (sink_id, before_batch, sink_id),
            )
        connection.commit()

    def finish(self, connection, sink_id: str, batch_id: int) -> None:
        """Replace the rows of a committed batch write (``sink_id``, its only batch ``batch_id``)
        by a tombstone: a row at batch ``batch_id + 1``, partition :data:`TOMBSTONE`.

        A task attempt of the write may still reach its key after the job commit (a speculative
        copy that lost, which PySpark kills asynchronously, or whose input ends early as if it were
        complete): without a row of its key it would write its partition again. The tombstone makes
        :meth:`claim` fail it as a later batch would. Deleting and inserting in one transaction
        leaves either the rows or the tombstone, never neither. Each write has its own sink id, so
        nothing else ever claims under it; tombstones older than a day (no attempt outlives its job
        that long) are pruned here, by the commit of any later batch write.
        """
        with connection.cursor() as cursor:
            cursor.execute(f"DELETE FROM {self.table} WHERE sink_id = %s", (sink_id,))
            cursor.execute(
                f"INSERT INTO {self.table} (sink_id, batch_id, partition_id, row_count) VALUES (%s, %s, %s, 0)",
                (sink_id, batch_id + 1, TOMBSTONE),
            )
            cursor.execute(
                f"DELETE FROM {self.table} WHERE partition_id = %s AND committed_at < now() - interval '1 day'",
                (TOMBSTONE,),
            )
        connection.commit()


class Superseded(Exception):  # noqa: N818 - a state, raised to the task writer, which words it
    """A later batch of the sink is committed than the one a task is about to start writing, or
    (``finished``) the task's batch write is committed and its rows replaced by a tombstone."""

    def __init__(self, later_batch: int, finished: bool):
        super().__init__(later_batch, finished)
        self.later_batch = later_batch
        self.finished = finished
