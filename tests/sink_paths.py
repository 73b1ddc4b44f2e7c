"""The exactly-once paths of the sinks, for the fault-point tests and the random kills.

A path is one sink in one configuration, written as a format or through its foreachBatch
callable. :class:`Target` prepares its topic, directory or table for one test, gives the
crash-harness job's arguments (``jobs.sinks:numbers_to_sink``) and counts what arrived: every
number 0..end once, or the path lost or duplicated records.

``points``: the fault points of the path, in kill order, as ``"<point>:<hit>"``
(:mod:`connectors.testing.faults`). Task points are hit twice a micro-batch (two partitions),
driver points once; the hits are chosen so each run gets a batch or two further than the last.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

KAFKA_POINTS = ("kafka.task.before_commit:3", "kafka.task.after_commit:3", "kafka.commit.before:2",
                "kafka.commit.after:2")  # fmt: skip
JDBC_POINTS = ("jdbc.task.before_commit:3", "jdbc.task.after_commit:3", "jdbc.commit.before:2", "jdbc.commit.after:2")
# state_written then publish.part: the next run's first commit re-publishes the parts the killed
# version left pending, and is killed again between two of them.
FILES_POINTS = ("files.task.written:3", "files.commit.before:2", "files.commit.state_written:2",
                "files.publish.part:1", "files.commit.after:2")  # fmt: skip
FILES_COMPACTION_POINTS = (*FILES_POINTS[:3], "files.concat.partial:1", *FILES_POINTS[3:])


@dataclasses.dataclass(frozen=True)
class SinkPath:
    sink: str  # kafka, files, jdbc
    variant: str  # what the sink does: transactions, compaction, append, upsert
    foreach_batch: bool
    points: tuple[str, ...]
    options: tuple[tuple[str, str], ...] = ()  # beside the target's

    @property
    def name(self) -> str:
        return f"{self.sink} {self.variant}, {'foreachBatch' if self.foreach_batch else 'format'}"

    @property
    def id(self) -> str:
        return f"{self.sink}-{self.variant}-{'fb' if self.foreach_batch else 'format'}"


def _both(sink: str, variant: str, points: tuple[str, ...], **options: str) -> list[SinkPath]:
    return [SinkPath(sink, variant, fb, points, tuple(options.items())) for fb in (False, True)]


PATHS = [
    *_both("kafka", "transactions", KAFKA_POINTS),
    # parts stay open across batches (appends) and roll by size, each published by a rename
    *_both("files", "no-compaction", FILES_POINTS, autoCompaction="false", partSize="600"),
    # every batch rolls, and the partitions' parts are concatenated into one file
    *_both("files", "compaction", FILES_COMPACTION_POINTS, rollingPolicy="onCheckpoint"),
    *_both("jdbc", "append", JDBC_POINTS),
    *_both("jdbc", "upsert", JDBC_POINTS, mode="upsert"),
]


@dataclasses.dataclass(frozen=True)
class Counts:
    expected: int
    records: int  # what the sink holds (upsert: rows written, counted by a trigger)
    lost: int
    duplicated: int

    @classmethod
    def of(cls, expected: int, ids: list[int]) -> Counts:
        distinct = set(ids)
        return cls(expected, len(ids), len(set(range(expected)) - distinct), len(ids) - len(distinct))


class Target:
    """One path's topic, directory or table; ``name`` unique per test."""

    def __init__(self, path: SinkPath, name: str, workdir: Path, kafka: str | None = None,
                 postgres: str | None = None, guarantee: str = "exactly-once"):  # fmt: skip
        self.path, self.name, self.workdir = path, name, Path(workdir)
        self.kafka, self.postgres, self.guarantee = kafka, postgres, guarantee
        self.out = self.workdir / f"{name}-out"

    def prepare(self) -> Target:
        if self.path.sink == "kafka":
            from confluent_kafka.admin import AdminClient, NewTopic

            admin = AdminClient({"bootstrap.servers": self.kafka})
            admin.create_topics([NewTopic(self.name, 2)])[self.name].result(30)
        elif self.path.sink == "jdbc":
            upsert = dict(self.path.options).get("mode") == "upsert"
            # append: no key, so a duplicate counts; upsert: each row written is counted by a trigger
            # (a rolled-back transaction takes its trigger's rows with it)
            self._sql(f"CREATE TABLE {self.name} (id bigint{' PRIMARY KEY' if upsert else ''}, name text, "
                      "amount numeric(20, 2))")  # fmt: skip
            if upsert:
                self._sql(f"""
                    CREATE TABLE {self.name}_writes (id bigint);
                    CREATE FUNCTION {self.name}_count() RETURNS trigger LANGUAGE plpgsql AS
                        $$ BEGIN INSERT INTO {self.name}_writes VALUES (NEW.id); RETURN NEW; END $$;
                    CREATE TRIGGER {self.name}_count AFTER INSERT OR UPDATE ON {self.name}
                        FOR EACH ROW EXECUTE FUNCTION {self.name}_count();""")
        return self

    def options(self) -> dict[str, str]:
        extra = dict(self.path.options)
        if self.path.sink == "kafka":
            options = {"kafka.bootstrap.servers": self.kafka, "topic": self.name, "deliveryGuarantee": self.guarantee}
            if self.guarantee == "exactly-once":  # a kill's open transaction lingers at most this long
                options |= {"transactionalIdPrefix": self.name, "kafka.transaction.timeout.ms": "60000"}
            return options | extra
        if self.path.sink == "files":
            return {"path": str(self.out), "fileFormat": "csv", "bucketAssigner": "basePath", **extra}
        return {"url": self.postgres, "dbtable": self.name, "batchSize": "100", "deliveryGuarantee": self.guarantee,
                **extra}  # fmt: skip

    def job_args(self, end: int, rows_per_batch: int, dawdle: float = 1.5) -> dict:
        return {"sink": self.path.sink, "options": self.options(), "end": end, "rows_per_batch": rows_per_batch,
                "foreach_batch": self.path.foreach_batch, "dawdle": dawdle}  # fmt: skip

    def ids(self, finished: bool = True) -> list[int]:
        """Every record's id the sink shows now (``finished``: after the query stopped for good;
        the file sink then first publishes what the last run left open)."""
        if self.path.sink == "kafka":
            from test_kafka_sink import consume

            return [int(record.value) for record in consume(self.kafka, self.name)]
        if self.path.sink == "files":
            from test_file_sink import visible_files

            from connectors.files import finish

            if finished:
                finish(str(self.out))
            return [int(line) for path in visible_files(self.out) for line in path.read_text().splitlines()]
        if dict(self.path.options).get("mode") == "upsert":
            return [row[0] for row in self._sql(f"SELECT id FROM {self.name}_writes")]
        return [row[0] for row in self._sql(f"SELECT id FROM {self.name}")]

    def count(self, end: int) -> Counts:
        counts = Counts.of(end + 1, self.ids())
        if self.path.sink == "jdbc":  # every row as the job wrote it
            (wrong,) = self._sql(f"SELECT count(*) FROM {self.name} WHERE amount <> id * 0.25 OR name <> 'n' || id")[0]
            assert wrong == 0, f"{wrong} rows of {self.name} differ from what the job wrote"
        return counts

    def duplicated_so_far(self) -> int:
        """Records already there twice, while the query is stopped between two runs (Kafka: not
        asked, as a killed transaction blocks read_committed readers until the next run aborts it)."""
        if self.path.sink == "kafka":
            return 0
        ids = self.ids(finished=False)
        return len(ids) - len(set(ids))

    def _sql(self, statement: str) -> list[tuple]:
        import psycopg2

        connection = psycopg2.connect(self.postgres)
        try:
            with connection, connection.cursor() as cursor:
                cursor.execute(statement)
                return cursor.fetchall() if cursor.description else []
        finally:
            connection.close()
