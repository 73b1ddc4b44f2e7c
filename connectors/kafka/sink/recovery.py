"""Exactly-once at query start, on the driver: end the transactions earlier runs left open, and
refuse to re-run a batch whose progress Kafka dropped.

**Lingering transactions.** A task killed mid-transaction (an executor lost, a query stopped,
a driver killed) leaves its transaction open: ``read_committed`` consumers of the partitions it
wrote wait until the id's next producer aborts it or ``transaction.timeout.ms`` passes. A Spark
partition that runs again aborts its own at its first task, but a query restarted with fewer
partitions, or never restarted, leaves ids nothing uses again. So when a query starts, before any
of its tasks, :func:`abort_lingering` initializes every transactional id of the prefix that may
exist (as Flink's KafkaSink does at start), in parallel: ``init_transactions()`` fences the id's
last producer and aborts its open transaction. The ids that may exist are ``<prefix>-0`` up to
the highest ``<prefix>-<p>`` with a progress group (every id that ever committed has one);
confluent-kafka offers no call that lists the transaction coordinator's ids.
``connectors abort-transactions`` does the same for a query that is gone.

**Expired progress.** A progress group has no members, so Kafka drops its offsets the brokers'
``offsets.retention.minutes`` (7 days by default) after its last commit, and a re-run batch would
then be written again in full. The tasks of a batch commit within moments of each other, so once
the progress of the batch being re-run has expired, no group of the prefix is left:
:func:`check_replay` refuses to start when the checkpoint re-runs a batch N > 0 (planned more than
:data:`RERUN_AGE_S` before: a new batch reaches the sink within seconds) and the prefix has no
progress group.

When a query starts is not something Spark tells a Python sink: its writer is created anew for
every micro-batch, in a driver-side Python worker that lives as long as it is used. So
:func:`on_query_start` runs when this process has not planned a batch of the sink for
:data:`RESTART_GAP_S`: at the first batch of a query in a new application, after a restart in
the same one a minute or more after its last batch, and before each batch of a query triggered
less often (whose executors' Python workers, which keep the producers, have stopped meanwhile).

**Partitions a replay no longer has.** Each task checks the records it skips against its own
partition's progress, but no task sees a partition that is gone: :func:`check_moved` does, at a
batch's commit on the driver (see there). It learns of a restart within :data:`RESTART_GAP_S`
from Spark's runId of the query, which the tasks read from their local properties.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient

from connectors.core.checkpoint import read_checkpoint
from connectors.core.retry import retry
from connectors.kafka import FORMAT
from connectors.kafka.config import with_logger
from connectors.kafka.sink.exactly_once import PartitionProgress, Progress, transactional_id
from connectors.kafka.sink.options import KafkaSinkOptions
from connectors.kafka.sink.producer import KafkaSinkError, describe, producer_settings

log = logging.getLogger(__name__)

RESTART_GAP_S = 60.0  # as long as Spark keeps an idle Python worker
RERUN_AGE_S = 60.0
# A group coordinator loads its groups for seconds after a broker restarts: ~15 s of retries.
_LIST_ATTEMPTS, _LIST_BACKOFF_S = 5, 1.0
_PARALLEL = 16  # ids initialized at once: each is a producer with its own connections and threads
_planned: dict[tuple, float] = {}  # (cluster, prefix) -> when this process last planned a batch of it
_started: set[tuple] = set()  # (cluster, prefix) whose on_query_start ran here, until a commit checks (check_moved)
_checked_runs: dict[tuple, str] = {}  # (cluster, prefix) -> Spark's runId of the query check_moved last checked


def _sink_key(options: KafkaSinkOptions) -> tuple:
    return options.client_settings()["bootstrap.servers"], options.transactional_id_prefix


def on_query_start(options: KafkaSinkOptions, spark_options: Mapping[str, str]) -> None:
    """Before the tasks of a query's first batch: :func:`check_replay` when Spark passed the
    checkpoint, then :func:`abort_lingering`. A no-op within :data:`RESTART_GAP_S` of the last call
    for the same sink: it fences the producers the executors keep, so running it for every batch
    would cost each task a new producer."""
    key = _sink_key(options)
    now = time.monotonic()
    last = _planned.get(key)
    if last is not None and now - last < RESTART_GAP_S:
        _planned[key] = now
        return
    groups = progress_partitions(options)
    checkpoint = next((value for name, value in spark_options.items() if name.lower() == "checkpointlocation"), None)
    if checkpoint:
        check_replay(options, checkpoint, groups)
    abort_lingering(options, groups)
    _planned[key] = now
    _started.add(key)


def progress_partitions(options: KafkaSinkOptions) -> set[int]:
    """The Spark partitions whose progress group ``<prefix>-<p>`` exists (has offsets)."""
    prefix = options.transactional_id_prefix
    pattern = re.compile(re.escape(f"{prefix}-") + r"(\d+)")
    admin = AdminClient(with_logger(options.client_settings()))
    what = f"listing the progress groups of transactionalIdPrefix '{prefix}'"

    def list_groups() -> list:
        future = admin.list_consumer_groups(request_timeout=options.request_timeout.total_seconds())
        try:
            listing = future.result()
        except KafkaException as exc:
            raise KafkaSinkError(f"{what} failed: {describe(exc.args[0])}") from None
        # A broker that failed to answer (its group coordinator loading after a restart, or
        # unreachable) is reported here, not raised: the groups it coordinates are missing, and
        # a listing without them hides gone partitions (check_moved), expired progress
        # (check_replay) and ids to abort (abort_lingering).
        if listing.errors:
            raise _PartialListing(listing.errors)
        return listing.valid

    try:
        valid = retry(list_groups, attempts=_LIST_ATTEMPTS, retry_on=(_PartialListing,), backoff=_LIST_BACKOFF_S,
                      what=what)
    except _PartialListing as exc:
        raise KafkaSinkError(
            f"{what} failed: {exc}. The groups those brokers coordinate are unknown, so the sink cannot check a "
            "replay for records it would write twice and fails instead; restart the query once every broker "
            "answers") from None
    return {int(match.group(1)) for group in valid if (match := pattern.fullmatch(group.group_id))}


class _PartialListing(Exception):
    """Some brokers answered the listing of consumer groups with an error."""

    def __init__(self, errors: list):
        # confluent-kafka documents KafkaException items; 2.x gives KafkaError ones.
        errors = [error.args[0] if isinstance(error, KafkaException) else error for error in errors]
        super().__init__(f"{len(errors)} broker(s) answered with an error: "
                         + "; ".join(describe(error) for error in errors))


def check_replay(options: KafkaSinkOptions, checkpoint: str, groups: set[int]) -> None:
    """Raise when the checkpoint re-runs a batch N > 0 and the prefix has no progress left."""
    if groups:
        return
    try:
        state = read_checkpoint(checkpoint)
    except FileNotFoundError:
        return  # a new query
    except Exception as exc:  # a filesystem fsspec cannot reach: the guard is off, the query runs
        log.warning("%s: cannot read the checkpoint %s (%s); not checking whether the progress of a re-run batch "
                    "expired", FORMAT, checkpoint, exc)
        return
    pending = state.pending_batch
    if not pending or state.planned_at_ms is None or time.time() - state.planned_at_ms / 1000 < RERUN_AGE_S:
        return
    prefix, topic = options.transactional_id_prefix, options.progress_topic
    raise KafkaSinkError(
        f"the checkpoint re-runs batch {pending}, but progressTopic '{topic}' holds no progress of "
        f"transactionalIdPrefix '{prefix}' (no consumer group '{prefix}-<partition>'): Kafka dropped it (the "
        "brokers' offsets.retention.minutes, 7 days by default, after the query stopped) or it was deleted, so the "
        f"sink cannot tell which records of batch {pending} it committed before, and writing the batch again could "
        f"duplicate them. If batch {pending}'s records are not in the topic, or duplicates are acceptable, delete "
        f"{checkpoint.rstrip('/')}/offsets/{pending} (Spark plans the batch anew) and restart. Keep "
        "offsets.retention.minutes above the longest stop of a query")


def check_moved(options: KafkaSinkOptions, run: str, batch: int, partitions: int, replayed: bool,
                spark_run_id: str | None = None) -> None:
    """Fail batch ``batch`` of ``run``, now written by ``partitions`` tasks, when a Spark partition
    it no longer has committed records of it in an earlier attempt.

    A re-executed batch whose partition count shrank (the source's partition count or a
    repartition changed before the restart) brings the records a partition ``p >= partitions``
    committed in the other partitions, after the records those committed: each of those tasks
    finds its own committed records first (their digest matches), skips them and writes the rest,
    so ``p``'s records are in Kafka twice by now. The batch fails, every time it runs, instead of
    passing silently. Listing consumer groups asks every broker, so this runs only where a batch
    can be a replay: at a query's first commit in this process (a new ``spark_run_id``, Spark's
    runId of the query; where Spark does not tell it, the first commit after
    :func:`on_query_start` ran here) and at a batch a task found partly committed (``replayed``).
    """
    key = _sink_key(options)
    started = key in _started
    _started.discard(key)
    new_run = spark_run_id is not None and _checked_runs.get(key) != spark_run_id
    if spark_run_id is not None:
        _checked_runs[key] = spark_run_id
    if not (started or new_run or replayed):
        return
    groups = progress_partitions(options)
    gone = sorted(p for p in groups if p >= partitions)
    if not gone:
        return
    prefix, timeout = options.transactional_id_prefix, options.request_timeout.total_seconds()
    assert prefix is not None
    # No task of this run uses a gone partition's id, so none aborts what it left open, and a
    # restart within RESTART_GAP_S ran no on_query_start: abort it here, or read_committed
    # consumers of the topic wait for transaction.timeout.ms.
    _fence_all(options, [transactional_id(prefix, p) for p in gone])

    def read(partition: int) -> Progress | None:
        progress = PartitionProgress(options.client_settings(), transactional_id(prefix, partition),
                                     options.progress_topic, timeout)
        try:
            return progress.read()
        finally:
            progress.close()

    with ThreadPoolExecutor(min(_PARALLEL, len(gone))) as pool:
        progress = dict(zip(gone, pool.map(read, gone)))
    moved = {p: found.records for p, found in progress.items()
             if found is not None and found.run == run and found.batch == batch}  # fmt: skip
    if moved:
        details = " and ".join(f"partition {p} committed {records}" for p, records in moved.items())
        groups_named = " ".join(f"--group {transactional_id(prefix, p)}" for p in moved)
        raise KafkaSinkError(
            f"batch {batch} was re-executed with {partitions} Spark partitions, but in an earlier attempt {details} "
            f"records of it (progress of consumer groups '{prefix}-<partition>' on progressTopic "
            f"'{options.progress_topic}'): those records are now in the other partitions, after the records those "
            "committed, and were written again, so the sink's topic holds them twice. Exactly-once needs a "
            "re-executed batch to keep its partitions (it does not when the source's partition count or a "
            "repartition changed before the restart; see docs/kafka-sink.md#replays). The batch fails each time it "
            f"runs until those groups are deleted (kafka-consumer-groups.sh --delete {groups_named}), after the "
            "topic is checked")


def abort_lingering(options: KafkaSinkOptions, groups: set[int], partitions: int = 0) -> list[str]:
    """Initialize the transactional ids ``<prefix>-0`` .. up to the highest of ``groups`` and
    ``partitions - 1``, in parallel: each one's open transaction is aborted. Returns the ids."""
    assert options.transactional_id_prefix is not None
    count = max(partitions, max(groups, default=-1) + 1)
    ids = [transactional_id(options.transactional_id_prefix, p) for p in range(count)]
    _fence_all(options, ids)
    return ids


def _fence_all(options: KafkaSinkOptions, ids: list[str]) -> None:
    if ids:
        with ThreadPoolExecutor(min(_PARALLEL, len(ids))) as pool:
            list(pool.map(lambda txn_id: _fence(options, txn_id), ids))
        log.info("%s: initialized transactional ids %s .. %s: transactions earlier runs left open are aborted",
                 FORMAT, ids[0], ids[-1])


def _fence(options: KafkaSinkOptions, txn_id: str) -> None:
    producer = Producer(with_logger(producer_settings(options, txn_id)))
    try:
        producer.init_transactions(options.request_timeout.total_seconds())
    except KafkaException as exc:
        raise KafkaSinkError(f"aborting the open transaction of transactional id '{txn_id}' failed: "
                             f"{describe(exc.args[0])}") from None
    finally:
        producer.close()
