"""The task side of the file sink: one task's rows into part files, and what it reports.

A task keeps one open part per slot, a slot being (bucket, Spark partition): the same partition
of the next micro-batch continues the same part, as a Flink subtask keeps writing its in-progress
file across checkpoints. What the task wrote travels to the commit in a :class:`FileSinkMessage`;
nothing becomes visible, and nothing enters the sink's state, before the commit.
"""

from __future__ import annotations

import dataclasses
import os
import time
import uuid
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import WriterCommitMessage

from connectors.files.sink.buckets import Bucketer, bucketer
from connectors.files.sink.formats import PartEncoder, csv_header, encoder
from connectors.files.sink.options import FileSinkOptions
from connectors.files.sink.part_files import final_name, in_progress_name
from connectors.files.sink.rolling import RollingRules
from connectors.files.sink.state import Part, Piece, SinkState
from connectors.files.sink.storage import Storage


@dataclasses.dataclass(frozen=True)
class TaskPart:
    """The bytes one task wrote for one part: new pieces only (appends start where the committed
    part ended). ``continues``: the part existed before this batch; ``closed``: publish it now."""

    final: str
    pieces: tuple[Piece, ...]
    opened: float
    written: float
    continues: bool
    closed: bool
    header: int = 0  # a new part: the bytes of its csv header at the start of its piece

    def as_part(self) -> Part:
        return Part(self.final, self.pieces, self.opened, self.written, self.header)


@dataclasses.dataclass
class SlotResult:
    rolled: str | None = None  # final name of the committed part closed before new data arrived
    parts: list[TaskPart] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class FileSinkMessage(WriterCommitMessage):
    query: str | None
    batch: int | None
    skipped: bool  # this batch was already committed (a replay after a driver crash)
    slots: dict[str, SlotResult]
    run: str | None = None  # Spark's runId of the query (None where Spark does not tell)


def slot_key(bucket: str, partition: int) -> str:
    return f"{bucket}#{partition}"


def slot_bucket(slot: str) -> str:
    return slot.rsplit("#", 1)[0]


@dataclasses.dataclass
class SinkPlan:
    """Everything a task or a commit needs, built once on the driver from the options and the
    names of the columns written to the files."""

    config: FileSinkOptions
    columns: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        c = self.config
        self.storage = Storage(c.path, c.storage_options)
        self.rules: RollingRules = c.rules
        self.header = csv_header(list(self.columns), c.row_options, c.codec) if c.header else b""
        self.compaction = c.rules.part_size if c.compacts else 0

    @property
    def bucketer(self) -> Bucketer:
        c = self.config
        return bucketer(c.bucket_assigner, c.bucket_format, c.bucket_time_zone, c.bucket_column)

    def new_final(self, bucket: str, uid: str, counter: int) -> str:
        return final_name(bucket, self.config.part_prefix, uid, counter, self.config.final_suffix)


class _OpenPart:
    """A part this task is writing: an encoder over one hidden file."""

    def __init__(self, plan: SinkPlan, final: str, committed: Part | None, now: float):
        self.plan, self.final, self.committed = plan, final, committed
        tail = committed.pieces[-1] if committed and committed.pieces else None
        handle = plan.storage.append_piece(tail.path, tail.end) if tail is not None else None
        if handle is not None:
            self.path, self.start, self.handle = tail.path, tail.end, handle
        else:
            self.path, self.start = in_progress_name(final), 0
            self.handle = plan.storage.new_piece(self.path)
        self.header = 0
        if committed is None and plan.header:  # written once per part: appends and retries skip it
            self.handle.write(plan.header)
            self.header = len(plan.header)
        self.base_size = committed.size if committed else 0
        self.opened = committed.opened if committed else now
        self.written = self.opened
        self._encoder: PartEncoder | None = None

    @property
    def size(self) -> int:
        return self.base_size + self.handle.tell() - self.start

    def write(self, rows: pa.RecordBatch, now: float) -> None:
        if self._encoder is None:
            c = self.plan.config
            self._encoder = encoder(self.handle, c.file_format, c.codec, rows.schema, c.row_options,
                                    c.avro_layout)
        self._encoder.write(rows)
        self.written = now

    def close(self, closed: bool) -> TaskPart:
        if self._encoder is not None:
            self._encoder.close()
        end = self.handle.tell()
        self.handle.flush()
        if self.plan.storage.local:
            os.fsync(self.handle.fileno())  # committed bytes must survive a machine crash
        self.handle.close()
        return TaskPart(self.final, (Piece(self.path, self.start, end),), self.opened, self.written,
                        continues=self.committed is not None, closed=closed, header=self.header)  # fmt: skip


class TaskWriter:
    """Writes one task's batches. ``state``: the committed sink state whose open parts this task
    continues (None for a batch write); ``keep_open``: leave parts open for the next micro-batch
    (a stream write with the default rolling policy)."""

    def __init__(self, plan: SinkPlan, partition: int, state: SinkState | None, keep_open: bool):
        self.plan, self.partition, self.state, self.keep_open = plan, partition, state, keep_open
        self.uid, self.counter = uuid.uuid4().hex, 0
        self.open: dict[str, _OpenPart] = {}
        self.results: dict[str, SlotResult] = {}

    def write_all(self, batches: Iterator[pa.RecordBatch]) -> dict[str, SlotResult]:
        split, rules = self.plan.bucketer, self.plan.rules
        for batch in batches:
            if batch.num_rows == 0:
                continue
            now = time.time()
            for bucket, rows in split(batch, now):
                slot = slot_key(bucket, self.partition)
                part = self.open.get(slot) or self._open(slot, bucket, now)
                part.write(rows, now)
                if rules.full(part.size):
                    self._close(slot, closed=True)
        for slot in list(self.open):
            self._close(slot, closed=not self.keep_open or rules.on_checkpoint)
        return self.results

    def _open(self, slot: str, bucket: str, now: float) -> _OpenPart:
        result = self.results.setdefault(slot, SlotResult())
        first = not result.parts and result.rolled is None
        committed = self.state.parts.get(slot) if self.state is not None and first else None
        if committed is not None and self.plan.rules.roll_before_write(
            committed.size, committed.opened, committed.written, now
        ):
            result.rolled, committed = committed.final, None
        if committed is not None:
            part = _OpenPart(self.plan, committed.final, committed, now)
        else:
            part = _OpenPart(self.plan, self.plan.new_final(bucket, self.uid, self.counter), None, now)
            self.counter += 1
        self.open[slot] = part
        return part

    def _close(self, slot: str, closed: bool) -> None:
        self.results[slot].parts.append(self.open.pop(slot).close(closed))
