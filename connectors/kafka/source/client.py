"""Driver-side broker queries of the Kafka source: partitions, offsets, group commits.

One confluent-kafka consumer that never subscribes (so it never joins a group): it lists
topics, fetches earliest / latest / by-timestamp offsets in one batched ListOffsets request
per call, and commits processed offsets when ``kafka.group.id`` is set. Opened on first use,
never pickled.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition

from connectors.core.retry import retry
from connectors.kafka import FORMAT
from connectors.kafka.config import INTERNAL_TOPICS, refusal, with_logger
from connectors.kafka.source.offsets import Offsets, TopicPartition
from connectors.kafka.source.options import (
    EARLIEST,
    EARLIEST_OFFSET,
    LATEST,
    LATEST_OFFSET,
    KafkaSourceOptions,
    PartitionMap,
)

log = logging.getLogger(__name__)
T = TypeVar("T")

_TRANSIENT = {
    KafkaError._TIMED_OUT, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN,
    KafkaError.LEADER_NOT_AVAILABLE, KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.REQUEST_TIMED_OUT,
    KafkaError._WAIT_COORD, KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError.NOT_COORDINATOR,
    # A restarting broker answers before it has loaded its metadata; a partition truly gone
    # still fails, after the retries.
    KafkaError._UNKNOWN_PARTITION, KafkaError.UNKNOWN_TOPIC_OR_PART,
}  # fmt: skip


class KafkaSourceError(RuntimeError):
    """The brokers could not answer a query the source needs (unreachable, unknown partition...)."""


def _transient(exc: BaseException) -> bool:
    if not isinstance(exc, KafkaException):
        return False
    error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
    return error is not None and (error.retriable() or error.code() in _TRANSIENT)


def consumer_config(options: KafkaSourceOptions, group_id: str | None = None) -> dict[str, Any]:
    """The librdkafka settings of every consumer the source opens.

    librdkafka wants a group.id even for consumers that never join a group; like Spark, a unique
    one is derived from ``groupIdPrefix``. Spark's default isolation level (the Java client's,
    read_uncommitted) replaces librdkafka's read_committed unless ``kafka.isolation.level`` is set.
    Fetches take up to 10 MiB per partition instead of librdkafka's 1 MiB: a task reading its
    ranges one after another pauses and resumes partitions, and with 1 MiB fetches librdkafka
    read 3-4x slower (docs/kafka-source.md, Speed). A fetch that finds no records waits 10 ms
    instead of 500: librdkafka sends a broker one fetch at a time, so a consumer a task kept for
    the next one, or a partition resumed in a task, waited out a fetch left waiting at the log's
    end before its own went out (docs/kafka-source.md, Consumer reuse). A partition whose next
    fetch finds the consumer's queue full (``queued.min.messages``, counted over all its
    partitions) tries again 10 ms later instead of librdkafka's 1 s: a task empties that queue
    far sooner and waited out the rest of the second (docs/kafka-source.md, Speed). A new consumer
    connects to every broker at once instead of on demand: on demand, its first request often
    went to the bootstrap connection that librdkafka drops once it learns the brokers, and waited
    ~50 ms for the next connection (docs/kafka-source.md, *Query start*).
    """
    config: dict[str, Any] = {"isolation.level": "read_uncommitted", "max.partition.fetch.bytes": 10 << 20,
                              "fetch.wait.max.ms": 10, "fetch.queue.backoff.ms": 10,
                              "enable.sparse.connections": False, **options.client}
    config.update({
        "group.id": group_id or f"{options.group_id_prefix}-{uuid.uuid4()}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "error",  # a vanished offset must surface as data loss
        "allow.auto.create.topics": False,
    })
    return with_logger(config)


class BrokerClient:
    """What the driver asks the brokers, with ``fetchOffset.numRetries`` attempts per question."""

    def __init__(self, options: KafkaSourceOptions):
        self.options = options
        self._consumer: Consumer | None = None
        # A request waits as long as librdkafka's socket timeout (default 60 s).
        self.timeout = float(options.client.get("socket.timeout.ms", 60000)) / 1000
        self._listed: set[str] = set()  # topics that had partitions (see _metadata)

    @property
    def consumer(self) -> Consumer:
        if self._consumer is None:
            # The user's group (if any) is only ever committed to, never joined.
            config = consumer_config(self.options, self.options.group_id)
            try:
                self._consumer = Consumer(config)
            except KafkaException as exc:  # the first consumer of a query: at query start, on the driver
                raise refusal(FORMAT, self.options.extra, config, exc, Consumer) from None
        return self._consumer

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    def _ask(self, what: str, call: Callable[[], T]) -> T:
        def wrapped() -> T:
            consumer = self.consumer  # a setting librdkafka refuses fails here, once, as an OptionError
            try:
                return call()
            except KafkaException as exc:
                if _transient(exc):
                    raise
                raise KafkaSourceError(self._failure(what, exc)) from None
            finally:
                consumer.poll(0)  # hands librdkafka's log lines (queued until a poll) to logging

        try:
            return retry(wrapped, attempts=self.options.fetch_offset_retries, retry_on=_transient,
                         backoff=self.options.fetch_offset_retry_interval.total_seconds(), what=f"{FORMAT}: {what}")
        except KafkaException as exc:
            raise KafkaSourceError(self._failure(what, exc)) from None

    def _failure(self, what: str, exc: KafkaException) -> str:
        servers = self.options.client["bootstrap.servers"]
        return f"{FORMAT}: cannot {what} from the brokers at kafka.bootstrap.servers = {servers!r}: {exc.args[0]}"

    # -- partitions -------------------------------------------------------------------------

    def partitions(self) -> list[TopicPartition]:
        """The partitions the options select that exist now (assign: the assigned ones among them;
        one gone after the query started is data loss, as a subscribed one)."""
        options = self.options
        if options.assign is not None:
            return self._assigned()[0]
        if options.subscribe is not None:
            return self._existing(options.subscribe)
        topics = self._metadata("list topics", lambda: self.consumer.list_topics(timeout=self.timeout).topics)
        # A match anywhere in the name, as Spark 4.2's source (its partition discovery finds topics with
        # Scala's findFirstIn, not the Java consumer's full match): "orders" also reads "orders-eu".
        pattern = re.compile(options.subscribe_pattern or "")
        tps = sorted((name, p) for name, topic in topics.items()
                     if pattern.search(name) and name not in INTERNAL_TOPICS and topic.error is None
                     for p in topic.partitions)  # fmt: skip
        self._listed = {name for name, _ in tps}
        return tps

    def starting_partitions(self) -> list[TopicPartition]:
        """:meth:`partitions` when a query starts: an assigned partition that does not exist fails
        it, naming the option (Spark 4.2's source skips it without a word, and fails on a missing
        topic with "This server does not host this topic-partition")."""
        if self.options.assign is None:
            return self.partitions()
        tps, missing = self._assigned()
        if missing:
            raise self.options.error("assign", "; ".join(missing))
        return tps

    def _assigned(self) -> tuple[list[TopicPartition], list[str]]:
        """The assigned partitions that exist, and what is missing, a line per topic."""
        assign = self.options.assign or {}
        existing = set(self._existing(assign))
        tps, missing = [], []
        for topic, parts in sorted(assign.items()):
            count = sum(t == topic for t, _ in existing)
            absent = [p for p in parts if (topic, p) not in existing]
            tps.extend((topic, p) for p in parts if p not in absent)
            if absent and not count:
                missing.append(f"topic {topic} does not exist")
            elif absent:
                missing.append(f"topic {topic} has no partition {', '.join(map(str, absent))} "
                               f"(its partitions: 0 to {count - 1})")
        return tps, missing

    def _existing(self, names: Iterable[str]) -> list[TopicPartition]:
        """The partitions of the topics ``names`` that exist. Only these topics' metadata: the
        whole cluster's costs every trigger more the more topics there are (docs/kafka-source.md, Speed)."""
        tps = []
        for name in dict.fromkeys(names):
            topics = self._metadata("list topics",
                                    lambda name=name: self.consumer.list_topics(name, timeout=self.timeout).topics)
            topic = topics.get(name)
            if topic is not None and topic.error is None:
                tps.extend((name, p) for p in topic.partitions)
        self._listed = {name for name, _ in tps}
        return sorted(tps)

    def _metadata(self, what: str, listing: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """Topic metadata, asked again while a topic that had partitions is answered with an error:
        a restarting broker answers UNKNOWN_TOPIC_OR_PART for topics it has not loaded yet, and a
        topic left out of one answer would have been taken for deleted. Still unknown after the
        retries, it is (planning reports the data loss); another error fails, naming the topic.
        Topics never seen (a subscribed one not created yet) are not waited for."""
        last: dict[str, Any] = {}  # the answer of the last attempt, if it got one

        def call() -> dict[str, Any]:
            nonlocal last
            last = {}
            last = topics = listing()
            for name in sorted(self._listed.intersection(topics)):
                if (error := topics[name].error) is not None:
                    raise KafkaException(KafkaError(error.code(), f"topic {name}: {error.str()}"))
            return topics

        try:
            return self._ask(what, call)
        except KafkaSourceError:
            errors = [t.error.code() for name, t in last.items() if name in self._listed and t.error is not None]
            if not errors or any(code != KafkaError.UNKNOWN_TOPIC_OR_PART for code in errors):
                raise
            return last

    # -- offsets ----------------------------------------------------------------------------

    def _list_offsets(self, requests: dict[TopicPartition, int], what: str) -> dict[TopicPartition, int]:
        """ListOffsets for ``{tp: timestamp or -1 latest / -2 earliest}``: -1 in the answer means
        no record at or after that timestamp. Latest honours ``kafka.isolation.level`` (LSO)."""
        if not requests:
            return {}
        query = [KafkaTopicPartition(t, p, ts) for (t, p), ts in requests.items()]
        answer = self._ask(what, lambda: self.consumer.offsets_for_times(query, timeout=self.timeout))
        out = {}
        for tp in answer:
            if tp.error is not None:
                raise KafkaSourceError(f"{FORMAT}: cannot {what} for topic {tp.topic} partition {tp.partition}: "
                                       f"{tp.error}")
            out[tp.topic, tp.partition] = tp.offset
        return out

    def earliest(self, tps: Iterable[TopicPartition]) -> Offsets:
        return self._list_offsets(dict.fromkeys(tps, EARLIEST_OFFSET), "fetch the earliest offsets")

    def latest(self, tps: Iterable[TopicPartition]) -> Offsets:
        return self._list_offsets(dict.fromkeys(tps, LATEST_OFFSET), "fetch the latest offsets")

    def resolve(self, tps: list[TopicPartition], kind: str, spec: Any, option: str, strategy: str) -> Offsets:
        """Concrete offsets of ``tps`` for an option's start/end spec (see KafkaSourceOptions.starting).

        ``strategy`` says what a timestamp after the last record gives: ``error`` or ``latest``.
        """
        if kind == "offsets" and spec == EARLIEST:
            return self.earliest(tps)
        if kind == "offsets" and spec == LATEST:
            return self.latest(tps)
        wanted = dict.fromkeys(tps, spec) if kind == "timestamp" else self._per_partition(tps, spec, option)
        if kind == "offsets":
            special = {tp: n for tp, n in wanted.items() if n < 0}
            return {**wanted, **self._list_offsets(special, "resolve -1/-2 offsets")}
        found = self._list_offsets(wanted, "fetch offsets by timestamp")
        missing = sorted(tp for tp, offset in found.items() if offset < 0)
        if missing and strategy == "error":
            t, p = missing[0]
            raise KafkaSourceError(f"{FORMAT}: option '{option}': no record at or after timestamp {wanted[t, p]} in "
                                   f"topic {t} partition {p}; set startingOffsetsByTimestampStrategy=latest to "
                                   "start at the latest offset instead")
        return {**found, **self.latest(missing)}

    @staticmethod
    def _per_partition(tps: list[TopicPartition], spec: PartitionMap, option: str) -> dict[TopicPartition, int]:
        given = {(t, p): n for t, parts in spec.items() for p, n in parts.items()}
        if given.keys() != set(tps):
            raise KafkaSourceError(
                f"{FORMAT}: option '{option}' must name every partition read, no more (use -2 for earliest, "
                f"-1 for latest): given {_names(given)}, read {_names(tps)}")
        return given

    # -- group commits ----------------------------------------------------------------------

    def commit(self, offsets: Offsets) -> None:
        """Commit ``offsets`` to ``kafka.group.id`` for monitoring; failures are only logged."""
        try:
            self.consumer.commit(offsets=[KafkaTopicPartition(t, p, n) for (t, p), n in offsets.items()],
                                 asynchronous=False)
        except KafkaException as exc:
            log.warning("%s: committing offsets to group %r failed (monitoring only, the query goes on): %s",
                        FORMAT, self.options.group_id, exc)


def _names(tps: Iterable[TopicPartition]) -> str:
    return ", ".join(f"{t}-{p}" for t, p in sorted(tps)) or "none"
