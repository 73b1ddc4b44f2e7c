"""The exactly-once bookkeeping table: one row per (sink id, batch id, partition) committed.

A task inserts its row first thing in its transaction and commits it together with the data.
The insert doubles as a lock: a concurrent attempt at the same key (a speculative copy, a zombie)
waits for the first one, then finds the key taken and skips; a later re-execution (task retry,
batch replayed after a driver crash) finds it committed and skips. ``row_count`` lets that
re-execution check it was handed the same rows, or write exactly the rows an attempt whose input
Spark cut short (an upstream failure ends a Python writer's input as if complete) did not.
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
    PRIMARY KEY (sink_id, batch_id, partition_id)
)
"""


@dataclasses.dataclass(frozen=True)
class ProgressKey:
    sink_id: str
    batch_id: int
    partition_id: int

    def params(self) -> tuple[str, int, int]:
        return self.sink_id, self.batch_id, self.partition_id


@dataclasses.dataclass(frozen=True)
class ProgressTable:
    table: str  # quoted SQL name

    def create(self, connection) -> None:
        """Create the table unless it exists (also when another query creates it concurrently)."""
        import psycopg2.errors

        try:
            with connection.cursor() as cursor:
                cursor.execute(_CREATE.format(table=self.table))
            connection.commit()
        except (psycopg2.errors.UniqueViolation, psycopg2.errors.DuplicateTable):
            connection.rollback()  # lost the race to create it: it exists now

    def claim(self, cursor, key: ProgressKey) -> int | None:
        """Take ``key`` in the open transaction; None if taken now, else the committed row count."""
        cursor.execute(
            f"INSERT INTO {self.table} (sink_id, batch_id, partition_id, row_count) VALUES (%s, %s, %s, -1) "
            "ON CONFLICT DO NOTHING",
            key.params(),
        )
        if cursor.rowcount == 1:
            return None
        # Locked: a concurrent attempt that also finds the key waits until this one commits.
        cursor.execute(
            f"SELECT row_count FROM {self.table} WHERE sink_id = %s AND batch_id = %s AND partition_id = %s "
            "FOR UPDATE",
            key.params(),
        )
        return int(cursor.fetchone()[0])

    def record(self, cursor, key: ProgressKey, rows: int) -> None:
        cursor.execute(
            f"UPDATE {self.table} SET row_count = %s WHERE sink_id = %s AND batch_id = %s AND partition_id = %s",
            (rows, *key.params()),
        )

    def forget(self, connection, sink_id: str, before_batch: int | None = None) -> None:
        """Drop the rows of ``sink_id`` (those of batches before ``before_batch``, if given).

        A streaming batch N starts only after N-1 is in Spark's commit log, so batches before the
        one being committed are never executed again.
        """
        with connection.cursor() as cursor:
            if before_batch is None:
                cursor.execute(f"DELETE FROM {self.table} WHERE sink_id = %s", (sink_id,))
            else:
                cursor.execute(f"DELETE FROM {self.table} WHERE sink_id = %s AND batch_id < %s", (sink_id, before_batch))
        connection.commit()
