"""Exactly-once: Kafka transactions per (micro-batch, Spark partition) that carry their own progress.

Each Spark partition ``p`` of the sink has the stable transactional id ``<prefix>-<p>``. A task:

1. ``init_transactions()``: fences any older producer of the same id (a zombie or speculative
   attempt) and aborts its lingering transaction, or waits for one that was committing;
2. reads the partition's progress: how many records of which (run, batch) are committed, kept as
   the committed offset of consumer group ``<prefix>-<p>`` on partition 0 of ``progressTopic``
   (offset ``batch + 1``; run, batch, record count and their digest in the offset's metadata);
3. skips the records of this (run, batch) already committed: all of them when the task is a
   retry of a committed one or the batch is re-executed after the driver died before Spark
   recorded it; the progress holds a digest of the committed records (:mod:`connectors.core.digest`),
   and a replay whose skipped records differ from them fails rather than skip the wrong ones. A
   later batch's progress fails the task: Spark never re-runs a batch older than its last one;
4. produces the rest in one transaction, adds the new progress to the same transaction
   (``send_offsets_to_transaction``) and commits: records and progress become visible to
   ``read_committed`` consumers together, or not at all.

Steps 1 and 2 cost a new producer and consumer and several round trips, so the Python worker
keeps the producer after the task (see :class:`TransactionalProducer`). The next task of the
same partition in that worker replaces them with one check: it adds the progress it committed
last to its new transaction, which the transaction coordinator refuses if a newer producer of the
id exists (the partition ran in another worker, or a newer attempt started). Refused, the task
drops the kept producer and takes steps 1 and 2; nothing of its input has been read yet.

Why a record count, not a done flag: when a task's *input* fails (an upstream error), Spark ends
the Python writer's input as if it were complete, so ``write()`` commits what it got, and Spark
discards the attempt. The count lets the retry write exactly the records that are missing.
Precondition, as for any replay: a re-executed partition yields the same records, and in the same
order when an attempt committed only some of them (all of them may come in any order: a shuffle's
fetch order changes between attempts); the digest turns a violation into a failed batch instead
of lost or duplicated records.

The run is the streaming query id (stable across restarts from the same checkpoint), or a fresh
id per batch write; the batch is Spark's batch id. Where Spark gives no query id (Spark Connect's
foreachBatch, a ``KafkaSink`` called outside a query) the run is :data:`SINK_RUN`: the prefix
alone names the sink, whose batch ids then only go up. A transaction lives only inside one task, so ``transaction.timeout.ms`` bounds how
long one task may take to write its partition.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
import json
import logging
import os
import sys
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar, cast

import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from connectors.core.digest import Replayed, RowsDigest
from connectors.core.private_dir import private_dir
from connectors.core.retry import retry
from connectors.kafka import FORMAT
from connectors.kafka.config import with_logger
from connectors.kafka.sink.options import KafkaSinkOptions
from connectors.kafka.sink.producer import (
    IDLE,
    KafkaSinkError,
    SinkProducer,
    describe,
    producer_settings,
    settings_key,
)
from connectors.kafka.sink.records import RecordLayout
from connectors.testing.faults import fault_point

T = TypeVar("T")
log = logging.getLogger(__name__)

_ATTEMPTS = 3  # of a blocking transactional call that timed out or hit a retriable error
_STUCK_GRACE = 5.0  # s past a call's own timeout before it counts as stuck (see _bounded)
# Producer-only librdkafka settings a user may pass; the progress consumer would warn about each.
_PRODUCER_ONLY = frozenset({
    "acks", "request.required.acks", "enable.idempotence", "transaction.timeout.ms", "linger.ms",
    "queue.buffering.max.ms", "queue.buffering.max.messages", "queue.buffering.max.kbytes", "batch.size",
    "batch.num.messages", "compression.type", "compression.codec", "compression.level", "message.timeout.ms",
    "delivery.timeout.ms", "request.timeout.ms", "retries", "message.send.max.retries", "partitioner",
    "sticky.partitioning.linger.ms", "enable.gapless.guarantee",
})
ALL = sys.maxsize  # "every record of the unit is committed"
SINK_RUN = ""  # the run without a streaming query id: the sink named by its prefix alone
# One file per transactional id, in a private directory (see _owners): the token of the
# producer on this host that initialized it last.
OWNERS_DIR = "kafka-sink-owners"


@dataclasses.dataclass(frozen=True)
class WorkUnit:
    """What one task writes: Spark partition ``partition`` of batch ``batch`` of run ``run``."""

    run: str
    batch: int
    partition: int


@dataclasses.dataclass(frozen=True)
class Progress:
    """``records`` records of batch ``batch`` of run ``run`` are committed; ``digest`` is their
    :class:`RowsDigest` (None in progress written before digests were kept)."""

    run: str
    batch: int
    records: int
    digest: str | None = None

    def marker(self) -> str:
        return json.dumps(dataclasses.asdict(self), separators=(",", ":"))

    def committed_of(self, unit: WorkUnit) -> int:
        """How many records of ``unit`` are committed (ALL when a later batch is)."""
        if self.run != unit.run or self.batch < unit.batch:
            return 0
        return self.records if self.batch == unit.batch else ALL


def transactional_id(prefix: str, partition: int) -> str:
    return f"{prefix}-{partition}"


def _transient(exc: BaseException) -> bool:
    return isinstance(exc, KafkaException) and exc.args[0].retriable()


def _transient_not_timed_out(exc: BaseException) -> bool:
    """Retriable, unless the call timed out. librdkafka resumes a timed-out
    ``send_offsets_to_transaction()`` when it is called again, and the resumed call can wait for
    the group coordinator forever: it never checks its timeout (confluentinc/librdkafka#5456) and
    may never look the coordinator up again after a broker restart or freeze (#5511)."""
    return _transient(exc) and exc.args[0].code() != KafkaError._TIMED_OUT


def _call(what: str, call: Callable[[], T], transient: Callable[[BaseException], bool] = _transient,
          attempts: int = _ATTEMPTS) -> T:
    try:
        return retry(call, attempts=attempts, retry_on=transient, backoff=0.5, what=what)
    except KafkaException as exc:
        raise KafkaSinkError(f"{what} failed: {describe(exc.args[0])}") from None


class StuckCallError(KafkaSinkError):
    """A librdkafka call blocked past its own timeout. Its producer is left to the blocked
    thread (closing it would block too); the next producer of the id fences and aborts it."""


def _bounded(what: str, call: Callable[[], T], timeout: float) -> T:
    """``call()``, given at most ``timeout`` + :data:`_STUCK_GRACE` seconds.

    ``send_offsets_to_transaction()`` never returns when the group coordinator it has cached went
    away and librdkafka does not look it up again (a broker frozen or restarted under a kept
    producer): it never checks its own timeout (confluentinc/librdkafka#5456, #5511). The call
    runs in a thread of its own, so the task can go on or fail instead of hanging forever.
    """
    outcome: list[tuple[bool, Any]] = []

    def run() -> None:
        try:
            outcome.append((True, call()))
        except BaseException as exc:  # handed to the caller's thread
            outcome.append((False, exc))

    thread = threading.Thread(target=run, name=f"{FORMAT}: {what}", daemon=True)
    thread.start()
    thread.join(timeout + _STUCK_GRACE)
    if not outcome:
        raise StuckCallError(f"{what} did not return within {timeout + _STUCK_GRACE:.0f} s (its own timeout is "
                             f"{timeout:.0f} s; librdkafka blocks past it while the group coordinator is unreachable)")
    ok, value = outcome[0]
    if not ok:
        raise value
    return value


class PartitionProgress:
    """The progress of one Spark partition of the sink, in consumer group ``group``.

    A consumer that never subscribes: it reads the group's committed offset on ``topic``-0 with
    ``isolation.level=read_committed`` (so librdkafka asks for stable offsets, never a pending
    transaction's) and provides the group metadata that ties the producer's transactional offset
    commit to the group.
    """

    def __init__(self, client_settings: dict[str, str], group: str, topic: str, timeout: float):
        self.group, self.anchor, self.timeout = group, TopicPartition(topic, 0), timeout
        self.consumer = Consumer(with_logger({
            **{name: value for name, value in client_settings.items() if name not in _PRODUCER_ONLY},
            "group.id": group,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }))

    def read(self) -> Progress | None:
        try:
            (position,) = _call("reading the sink's progress", lambda: self.consumer.committed([self.anchor], self.timeout))
        finally:
            self.consumer.poll(0)  # hands librdkafka's log lines (queued until a poll) to logging
        if position.error is not None:
            raise KafkaSinkError(f"reading the sink's progress failed: {describe(position.error)}")
        if position.offset < 0 or not position.metadata:
            return None
        try:
            return Progress(**json.loads(position.metadata))
        except (ValueError, TypeError):
            raise KafkaSinkError(
                f"consumer group '{self.group}' has offsets on '{self.anchor.topic}' that this sink did not "
                "write: is transactionalIdPrefix shared with another application?") from None

    def add_to_transaction(self, producer: SinkProducer, progress: Progress, attempts: int = _ATTEMPTS) -> None:
        """Raises :class:`StuckCallError` when librdkafka does not return (see :func:`_bounded`); a
        timeout is not retried (see :func:`_transient_not_timed_out`): the task fails and its
        producer is dropped."""
        what = "adding the sink's progress to the transaction"
        position = TopicPartition(self.anchor.topic, 0, progress.batch + 1, progress.marker())
        metadata = self.consumer.consumer_group_metadata()
        send = functools.partial(producer.producer.send_offsets_to_transaction, [position], metadata, self.timeout)
        _call(what, lambda: _bounded(what, send, self.timeout), _transient_not_timed_out, attempts)

    def close(self) -> None:
        self.consumer.close()


class _Replay:
    """The input of a task: drops the first ``count`` records, which an earlier attempt of the
    same (run, batch, partition) committed, after checking that they are the records it committed
    (their digest, ``expected``), and digests everything, for the progress this task commits."""

    def __init__(self, txn_id: str, unit: WorkUnit, committed: Progress | None, columns: tuple[str, ...]):
        self.txn_id, self.unit = txn_id, unit
        self.count = committed.committed_of(unit) if committed else 0
        if self.count == ALL:
            assert committed is not None
            raise KafkaSinkError(_superseded(txn_id, unit, committed))
        self.expected = committed.digest if committed and self.count else None
        self.digest = RowsDigest(columns)
        self.skipped = 0
        self.reordered = False  # the committed records came again, in another order: nothing may follow

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            drop = min(self.count - self.skipped, batch.num_rows)
            if drop:
                self.digest.update(batch.slice(0, drop))
                self.skipped += drop
                if self.skipped == self.count:
                    self._check()
            if drop < batch.num_rows:
                if self.reordered:
                    raise self._replayed_with(
                        f"the {self.count} records an earlier attempt committed in another order, and more after "
                        "them, so which of them it committed is unknown")
                rest = batch.slice(drop) if drop else batch
                self.digest.update(rest)
                yield rest
        if self.skipped < self.count:
            raise self._replayed_with(
                f"only {self.skipped} records, but an earlier attempt committed {self.count}",
                "; or the input failed (then its own error follows)")

    def _check(self) -> None:
        if self.expected is None:
            return
        replayed = self.digest.compare(self.expected)
        if replayed is Replayed.OTHER:
            raise self._replayed_with(f"other records than the {self.count} an earlier attempt committed "
                                      "(their digest differs)")
        # A shuffle's fetch order may change between attempts: the same records and no more were all committed.
        self.reordered = replayed is Replayed.REORDERED

    def _replayed_with(self, what: str, cause: str = "") -> KafkaSinkError:
        return KafkaSinkError(
            f"transactional id '{self.txn_id}': batch {self.unit.batch} is re-run and its partition "
            f"{self.unit.partition} now holds {what}: the input's partitioning changed since the batch first ran "
            f"(the source's partition count, a repartition), or the input is not deterministic{cause}. "
            "Skipping by count would lose or duplicate records, so the batch fails: restart with the partitioning "
            "the batch first ran with, and change it once the batch is committed")


def _superseded(txn_id: str, unit: WorkUnit, committed: Progress) -> str:
    if unit.run == SINK_RUN:
        return (f"transactional id '{txn_id}' has committed batch {committed.batch}, so batch {unit.batch} is "
                "not a batch of this sink: without a streaming query id (Spark Connect's foreachBatch, or a "
                "KafkaSink called outside a query) transactionalIdPrefix alone names the sink and its batch ids "
                "only go up. A new query needs a new transactionalIdPrefix")
    return (f"transactional id '{txn_id}' has committed batch {committed.batch} of this query, so batch {unit.batch} "
            "was committed before it and nothing of it is written again: this task is a zombie (it ran on after "
            "its driver died, while the restarted query committed later batches), or the checkpoint was rolled "
            "back (batches deleted from its offsets and commits, or an older copy restored), whose re-planned "
            "batches would hold records never written. Restart from the checkpoint as the query left it, or with "
            "a new checkpoint and a new transactionalIdPrefix")


@functools.cache
def _owners() -> Path | None:
    """The directory of the owner files, or None (no shortcut: the broker checks alone) when it is
    not private to this user."""
    try:
        return private_dir(OWNERS_DIR)
    except OSError as exc:
        log.warning("%s: no owner files (%s); kept producers ask the broker whether they were replaced", FORMAT, exc)
        return None


class TransactionalProducer:
    """The producer of one transactional id, and the progress it knows to be committed.

    Kept between tasks like any producer of the sink (:data:`IDLE`). As long as no newer producer
    initialized the same id, no other producer can have committed progress for it, so
    ``committed`` is exact without reading it again; :meth:`resume` proves that with one round
    trip to the transaction coordinator before the task reads any input.

    Most newer producers are another worker on the same host: each producer leaves a token in a
    file of :func:`_owners` after its ``init_transactions()``, so a kept producer that finds another
    token gives up without asking the broker (nor making librdkafka log a fatal "fenced" error).
    The file is only a shortcut: a stale or lost one costs a new producer or the broker's check.
    """

    def __init__(self, options: KafkaSinkOptions, txn_id: str, timeout: float):
        self.txn_id, self.timeout = txn_id, timeout
        cluster = options.client_settings()["bootstrap.servers"]
        owners = _owners()
        name = hashlib.sha256(f"{cluster}\0{txn_id}".encode()).hexdigest()[:32]
        self.owner_file = None if owners is None else owners / name
        self.token = uuid.uuid4().hex
        self.stuck = False  # a call of the producer never returned (StuckCallError): never touch it again
        # Created first, so its coordinator lookup overlaps init_transactions().
        self.progress = PartitionProgress(options.client_settings(), txn_id, options.progress_topic, timeout)
        try:
            self.sink = SinkProducer(producer_settings(options, txn_id))
        except BaseException:
            self.progress.close()
            raise
        try:
            _call(f"initializing transactional id '{txn_id}'", lambda: self.sink.producer.init_transactions(timeout))
            self._claim()
            # Read only after init_transactions() fenced every older producer: none commits after this.
            self.committed = self.progress.read()
            self.sink.producer.begin_transaction()
        except BaseException:
            self.close()
            raise

    def resume(self) -> bool:
        """Begin the transaction of a new task on a kept producer. False when a newer producer of
        the id fenced this one (the partition ran in another worker since) or the check failed."""
        assert self.committed is not None  # only producers that know the progress are kept
        if not self._owns():
            return False
        self.sink.reports.reset()
        try:
            # Refused when the producer is in no state for a new transaction (an error since it was kept).
            self.sink.producer.begin_transaction()
        except KafkaException as exc:
            log.info("%s: the kept producer cannot begin a transaction: %s", self.txn_id, exc)
            return False
        try:
            # Adding the progress already committed changes nothing, but the coordinator checks
            # the producer's epoch: a fenced producer fails here, before any input is consumed.
            # One attempt: whatever fails, a new producer is the surer way on.
            self._add_progress(self.committed, attempts=1)
        except KafkaSinkError as exc:
            log.info("%s: the kept producer failed its check: %s", self.txn_id, exc)
            return False
        return True

    def _add_progress(self, progress: Progress, attempts: int = _ATTEMPTS) -> None:
        try:
            self.progress.add_to_transaction(self.sink, progress, attempts)
        except StuckCallError:
            self.stuck = True
            raise

    def _claim(self) -> None:
        if self.owner_file is None:
            return
        draft = self.owner_file.with_name(f"{self.owner_file.name}.{self.token}")
        draft.write_text(self.token)
        os.replace(draft, self.owner_file)  # atomic: readers see the old or the new token

    def _owns(self) -> bool:
        if self.owner_file is None:
            return True  # unknown here: the broker's check in resume() decides
        try:
            return self.owner_file.read_text() == self.token
        except OSError:
            return False

    def commit(self, progress: Progress) -> None:
        self._add_progress(progress)
        fault_point("kafka.task.before_commit", self.txn_id)
        self.sink.producer.commit_transaction()  # flushes; fails if any delivery failed
        fault_point("kafka.task.after_commit", self.txn_id)
        self.committed = progress

    def undelivered(self, wait: bool) -> KafkaSinkError | None:
        """The task's delivery errors, which name the record, once the reports librdkafka queued
        are served: a failed commit can return before they are (then ``wait`` gives them up to
        0.5 s). None if every record queued so far was delivered or is still in flight."""
        try:
            if not self.stuck:
                self.sink.producer.poll(0)
                if wait and self.sink.reports.error() is None:
                    self.sink.producer.poll(0.5)
        except KafkaException:  # a fenced producer raises its fatal error from poll(): the task's own error says it
            pass
        return self.sink.reports.error()

    def abort(self) -> bool:
        """Best effort: the next init_transactions() of this id aborts the transaction anyway.
        False when it failed: the producer's transaction state is then unknown, not to be kept."""
        if self.stuck:
            return False
        try:
            self.sink.producer.abort_transaction(self.timeout)
        except KafkaException as exc:
            log.warning("aborting transaction '%s' failed (%s); the next attempt aborts it", self.txn_id, exc)
            return False
        return True

    def close(self) -> None:
        self.progress.close()
        if self.stuck:  # the blocked thread holds the producer; destroying it would block as well
            log.warning("%s: dropping producer '%s' whose call never returned; the next producer of the id "
                        "aborts its transaction", FORMAT, self.txn_id)
            return
        self.sink.close()


def _begin(options: KafkaSinkOptions, txn_id: str, key: tuple) -> TransactionalProducer:
    """A producer of ``txn_id`` in a new transaction: this worker's kept one if it is still the
    newest producer of the id, else a new one (which fences the others)."""
    kept = cast("TransactionalProducer | None", IDLE.take(key))
    if kept is not None:
        if kept.resume():
            return kept
        log.info("%s: a newer producer replaced the kept one (the partition ran in another worker or "
                 "attempt since); opening a new one", txn_id)
        kept.close()
    return TransactionalProducer(options, txn_id, options.request_timeout.total_seconds())


def write_exactly_once(
    options: KafkaSinkOptions, layout: RecordLayout, batches: Iterable[pa.RecordBatch], unit: WorkUnit
) -> tuple[int, int]:
    """Write the records of ``unit`` not yet committed, in one transaction.

    Returns (records written, records skipped because an earlier attempt committed them).
    """
    assert options.transactional_id_prefix is not None  # validated at query start
    txn_id = transactional_id(options.transactional_id_prefix, unit.partition)
    key = (settings_key(producer_settings(options, txn_id)), options.progress_topic)
    txn = _begin(options, txn_id, key)
    try:
        replay = _Replay(txn_id, unit, txn.committed, layout.columns)
        remaining = replay(batches)
        first = next(remaining, None)
        count, reusable = 0, True
        if first is None:  # nothing (left) to write
            reusable = txn.abort()
        else:
            count = txn.sink.produce(itertools.chain([first], remaining), layout)
            txn.commit(Progress(unit.run, unit.batch, replay.skipped + count, replay.digest.hexdigest()))
    except BaseException as exc:
        undelivered = txn.undelivered(wait=isinstance(exc, KafkaException))  # before abort and close purge them
        txn.abort()
        txn.close()  # dropped, not kept: its state is unknown
        if undelivered is not None:  # the delivery error says more than the commit error
            raise undelivered from None
        if isinstance(exc, KafkaException):
            raise KafkaSinkError(f"committing transaction '{txn_id}' failed: {describe(exc.args[0])}") from None
        raise
    if replay.skipped:
        log.info("%s: %d records of batch %d (run %s) were committed before; skipped",
                 txn_id, replay.skipped, unit.batch, unit.run)
    # A kept producer must know the progress to prove it later, and be able to begin a transaction.
    if txn.committed is None or not reusable:
        txn.close()
    else:
        IDLE.keep(key, txn, options.producer_cache_size)
    return count, replay.skipped
