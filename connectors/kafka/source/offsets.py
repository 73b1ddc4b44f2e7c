"""Offset arithmetic of the Kafka source: checkpoint format, rate limits, splitting, data loss.

Pure functions, no broker: the stream and batch readers feed them offsets fetched by
:mod:`connectors.kafka.source.client`.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence

from pyspark.sql.datasource import InputPartition

from connectors.kafka import FORMAT

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
Offsets = dict[TopicPartition, int]  # (topic, partition) -> next offset to read


class DataLossError(RuntimeError):
    """Offsets the query still had to read are gone (retention, topic recreated or deleted)."""


# Keys of a stream's end offset that are not topics ("$" is not allowed in a topic name): how the
# batch ending there is split, and, for a query's first batch, where it starts. A replay after a
# restart plans the same ranges from them, whatever the options or the topic's latest offsets are
# then (Spark asks initialOffset() again to replay the first batch).
SPLIT, START = "$split", "$start"


def to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """The checkpoint form, as Spark's: ``{"topic": {"partition": next_offset_to_read}}``."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = offset
    return out


def from_json(offsets: Mapping[str, Mapping[str, int]]) -> Offsets:
    return {(topic, int(partition)): int(offset) for topic, parts in offsets.items() if not topic.startswith("$")
            for partition, offset in parts.items()}  # fmt: skip


class OffsetRange(InputPartition):
    """Offsets ``start`` (inclusive) to ``end`` (exclusive) of one Kafka partition."""

    def __init__(self, topic: str, partition: int, start: int, end: int):
        super().__init__((topic, partition, start, end))
        self.topic, self.partition, self.start, self.end = topic, partition, start, end

    @property
    def size(self) -> int:
        return self.end - self.start

    def __repr__(self) -> str:
        return f"OffsetRange({self.topic}-{self.partition} [{self.start}, {self.end}))"


class TaskRanges(InputPartition):
    """The offset ranges one Spark task reads, at most one per Kafka partition (as a Flink reader
    holds many splits)."""

    def __init__(self, ranges: Sequence[OffsetRange]):
        super().__init__(tuple(r.value for r in ranges))
        self.ranges = tuple(ranges)

    @property
    def size(self) -> int:
        return sum(r.size for r in self.ranges)

    def __repr__(self) -> str:
        return f"TaskRanges({', '.join(map(repr, self.ranges))})"


def rate_limit(start: Offsets, latest: Offsets, limit: int) -> Offsets:
    """At most ``limit`` offsets past ``start``, split across partitions by backlog (Spark's rule).

    ``start`` must have an entry for every partition of ``latest``. A partition whose share is
    below one offset still gets one, so small partitions are never starved.

    Each share is computed as Spark does, ``limit * (size / total)`` in doubles, floored: that
    product can fall just below a whole number (22 * (30 / 44) = 14.999...: 14 offsets). A backlog
    within the limit is read whole, where Spark's shares may leave an offset of it for another
    micro-batch (15 and 7 under 22: 14 and 7).
    """
    sizes = {tp: end - start[tp] for tp, end in latest.items() if end > start[tp]}
    total = sum(sizes.values())
    if total <= limit:
        return dict(latest)
    limited = dict(latest)
    for tp, size in sizes.items():
        share = limit * (size / total)
        limited[tp] = min(latest[tp], start[tp] + (math.ceil(share) if share < 1 else math.floor(share)))
    return limited


def split(ranges: list[OffsetRange], min_partitions: int | None, max_records: int | None) -> list[OffsetRange]:
    """Spark's range calculator: one task per non-empty range, unless ``minPartitions`` asks for
    more tasks (big ranges are then cut in proportion to their size, small ones left whole) or a
    range exceeds ``maxRecordsPerPartition``."""
    ranges = [r for r in ranges if r.size > 0]
    parts = {id(r): 1 for r in ranges}
    if min_partitions and len(ranges) < min_partitions:
        total = sum(r.size for r in ranges)
        share = lambda size, of, among: max(round(size / of * among), 1)  # noqa: E731
        whole = {id(r) for r in ranges if share(r.size, total, min_partitions) == 1}
        cut_total = total - sum(r.size for r in ranges if id(r) in whole)
        cut_among = max(min_partitions - len(whole), 1)
        for r in ranges:
            if id(r) not in whole:
                parts[id(r)] = share(r.size, cut_total, cut_among)
    if max_records:
        for r in ranges:
            parts[id(r)] = max(parts[id(r)], math.ceil(r.size / max_records))
    out = []
    for r in ranges:
        count, position, remaining = parts[id(r)], r.start, r.size
        for index in range(count):  # the last piece takes the rounding
            piece = remaining // (count - index)
            out.append(OffsetRange(r.topic, r.partition, position, position + piece))
            position, remaining = position + piece, remaining - piece
    return [r for r in out if r.size > 0]


def pack(ranges: list[OffsetRange], target: int, min_partitions: int | None,
         max_records: int | None) -> list[TaskRanges]:
    """The split ranges, in order, into tasks of at most ``target`` records each (and at most
    ``maxRecordsPerPartition``, and the total / ``minPartitions``): a task is closed when the next
    range would take it past that, or when closing it later would leave fewer than ``minPartitions``
    tasks. A range bigger than that has a task of its own (cutting ranges is :func:`split`'s job).
    A target of 1 gives one task per range, as Spark plans."""
    total, wanted = sum(r.size for r in ranges), min_partitions or 0
    cap = min(target, max_records or target, math.ceil(total / wanted) if wanted else target)
    tasks: list[list[OffsetRange]] = []
    current: list[OffsetRange] = []
    size = 0
    for index, r in enumerate(ranges):
        # With r in the current task, at most this many tasks are left possible.
        possible = len(tasks) + len(ranges) - index
        if current and (size + r.size > cap or possible < wanted):
            tasks.append(current)
            current, size = [], 0
        last = current[-1] if current else None
        if last and (last.topic, last.partition, last.end) == (r.topic, r.partition, r.start):
            current[-1] = OffsetRange(r.topic, r.partition, last.start, r.end)  # pieces of one partition join again
        else:
            current.append(r)
        size += r.size
    return [TaskRanges(task) for task in tasks + [current] if task]


def data_loss_handler(fail: bool) -> Callable[[str], None]:
    """``failOnDataLoss``: raise :class:`DataLossError`, or log a warning and go on."""

    def report(message: str) -> None:
        if fail:
            raise DataLossError(f"{FORMAT}: {message}. Set failOnDataLoss=false to continue from the "
                                "earliest available offset instead")
        log.warning("%s: %s; continuing from the earliest available offset (failOnDataLoss=false)", FORMAT, message)

    return report


def plan(start: Offsets, end: Offsets, earliest: Offsets, on_loss: Callable[[str], None]) -> list[OffsetRange]:
    """The ranges ``start`` -> ``end`` (before splitting), checked against ``earliest``.

    A partition missing from ``start`` is new and read from its earliest offset; one whose
    earliest offset is not 0 lost records before the query found it (Spark's source reports
    that too). A start below the earliest available offset (retention), above ``end`` (the topic
    was recreated) or a partition missing from ``end`` (deleted) is data loss: reported, then
    read from earliest.
    """
    for topic, partition in sorted(start.keys() - end.keys()):
        on_loss(f"topic {topic} partition {partition} was deleted (it was to be read from offset "
                f"{start[topic, partition]})")
    ranges = []
    for (topic, partition), until in sorted(end.items()):
        first = earliest[topic, partition]
        wanted = start.get((topic, partition), first)
        if (topic, partition) not in start and first != 0:
            on_loss(f"topic {topic} partition {partition} was added and starts at offset {first}, not 0: records "
                    "deleted before the query found it are missed")
        if wanted < first or wanted > until:
            gone = "was deleted" if wanted < first else "is past the end of the partition (topic recreated?)"
            on_loss(f"topic {topic} partition {partition}: offset {wanted} {gone}; earliest available offset "
                    f"is {first}, latest {until}")
            wanted = first
        ranges.append(OffsetRange(topic, partition, wanted, max(wanted, until)))
    return ranges
