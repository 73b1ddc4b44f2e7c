"""Options of the ``connectors.kafka`` read side: Spark's Kafka source options, same names and meanings.

Offsets specs parse to :data:`EARLIEST` / :data:`LATEST` or a ``{topic: {partition: n}}`` dict
(``-2`` earliest, ``-1`` latest, as in Spark); timestamps specs to ``{topic: {partition: ms}}``.
"""

from __future__ import annotations

import dataclasses
import json
import re
from datetime import timedelta
from typing import Any

from connectors.core.avro_options import AvroReadOptions
from connectors.core.options import (
    OptionError,
    Options,
    choice,
    non_negative,
    option,
    parse_bool,
    parse_duration,
    parse_int,
    parse_list,
    parse_size,
    positive,
)
from connectors.kafka import FORMAT
from connectors.kafka.config import client_config, topic_names
from connectors.kafka.registry import RegistryOptions

EARLIEST, LATEST = "earliest", "latest"
EARLIEST_OFFSET, LATEST_OFFSET = -2, -1  # Spark's placeholders inside JSON offsets

PartitionMap = dict[str, dict[int, int]]  # topic -> partition -> offset or timestamp
OffsetsSpec = str | PartitionMap  # EARLIEST, LATEST or a PartitionMap


# kafka.* settings Spark rejects, and the librdkafka ones the reader must own; name -> why.
REJECTED_CLIENT_SETTINGS = {
    "auto.offset.reset": "is not supported; set the source option 'startingOffsets' to 'earliest' or 'latest' "
    "instead: the query decides which offsets are consumed, and a restart always resumes from its checkpoint",
    "key.deserializer": "is not supported: keys are always read as bytes; deserialize them with DataFrame operations",
    "value.deserializer": "is not supported: values are always read as bytes; deserialize them with DataFrame "
    "operations",
    "enable.auto.commit": "is not supported: offsets are kept in the query's checkpoint (set kafka.group.id to have "
    "processed offsets committed to that group for monitoring)",
    "interceptor.classes": "is not supported: consumer interceptors would see records of retried tasks twice",
    "enable.auto.offset.store": "is managed by the source",
    "enable.partition.eof": "is managed by the source",
}


def _partition_map(text: str, what: str) -> PartitionMap:
    value = json.loads(text) if isinstance(text, str) else text
    example = '{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}'
    if not isinstance(value, dict) or not all(isinstance(p, dict) for p in value.values()):
        raise ValueError(f"expected JSON {what} per topic and partition, e.g. {example}")
    try:
        return {str(t): {int(p): int(n) for p, n in parts.items()} for t, parts in value.items()}
    except (TypeError, ValueError):
        raise ValueError(f"expected integer partitions and {what}, e.g. {example}") from None


def parse_offsets(text: str) -> OffsetsSpec:
    """``earliest``, ``latest`` or JSON ``{"topic":{"partition":offset}}`` (-2 earliest, -1 latest)."""
    if text.strip().lower() in (EARLIEST, LATEST):
        return text.strip().lower()
    try:
        offsets = _partition_map(text, "offsets")
    except json.JSONDecodeError:
        raise ValueError('expected earliest, latest or JSON such as {"topicA":{"0":23,"1":-1}}') from None
    # Brokers read other negative numbers as other requests (-3: the record with the largest
    # timestamp), which would start or end a read somewhere else without a word.
    for topic, parts in offsets.items():
        for partition, offset in parts.items():
            if offset < EARLIEST_OFFSET:
                raise ValueError(f"offset {offset} of topic {topic} partition {partition}: expected an offset "
                                 f"(>= 0), {EARLIEST_OFFSET} for earliest or {LATEST_OFFSET} for latest")
    return offsets


def parse_timestamps(text: str) -> PartitionMap:
    """JSON ``{"topic":{"partition":epoch_millis}}``."""
    try:
        return _partition_map(text, "timestamps")
    except json.JSONDecodeError:
        raise ValueError('expected JSON such as {"topicA":{"0":1700000000000}}') from None


def parse_assign(text: str) -> dict[str, tuple[int, ...]]:
    """JSON ``{"topicA":[0,1],"topicB":[2]}``."""
    try:
        value = json.loads(text)
        if isinstance(value, dict) and value and all(isinstance(p, list) for p in value.values()):
            return {str(t): tuple(sorted(int(p) for p in parts)) for t, parts in value.items()}
    except (json.JSONDecodeError, TypeError, ValueError):
        pass
    raise ValueError('expected JSON such as {"topicA":[0,1],"topicB":[0,1]}')


def assigned_partitions(assign: dict[str, tuple[int, ...]]) -> None:
    """Every topic of ``assign`` names a partition, and none is negative: an empty list read
    nothing of its topic without a word, and librdkafka takes -1 for "any partition"."""
    for topic, parts in assign.items():
        if not parts or min(parts) < 0:
            raise ValueError(f"topic {topic}: expected a list of partition numbers (>= 0), e.g. "
                             f"{json.dumps({topic: [0, 1]})}")


def parse_pattern(text: str) -> str:
    if not text.strip():
        raise ValueError("the pattern to subscribe to is empty")
    try:
        re.compile(text)
    except re.error as exc:
        raise ValueError(f"not a regular expression ({exc})") from None
    return text


@dataclasses.dataclass(frozen=True)
class KafkaSourceOptions(AvroReadOptions, RegistryOptions, Options):
    """Spark's Kafka source options; ``kafka.*`` entries go to librdkafka (``extra``), the
    ``schema.registry.*`` ones to the Schema Registry client (see :mod:`connectors.kafka.registry`)."""

    source_name = FORMAT
    passthrough_prefixes = ("kafka.", "schema.registry.")

    assign: dict[str, tuple[int, ...]] | None = option(
        "assign", parse_assign, default=None, checks=[assigned_partitions],
        doc='exact partitions to read, JSON {"topicA":[0,1]}')
    subscribe: tuple[str, ...] | None = option(
        "subscribe", parse_list, default=None, checks=[topic_names],
        doc="comma-separated topics; new partitions are picked up")
    subscribe_pattern: str | None = option(
        "subscribePattern", parse_pattern, default=None,
        doc="regular expression; topics that start to match are picked up from earliest")
    starting_offsets: OffsetsSpec | None = option(
        "startingOffsets", parse_offsets, default=None,
        doc="earliest, latest or JSON (-2 earliest, -1 latest) for a new query; "
            "default latest for streams, earliest for batch reads")
    starting_timestamp: int | None = option(
        "startingTimestamp", parse_int, default=None, checks=[non_negative],
        doc="start every partition at the first record at or after this epoch-millis timestamp")
    starting_offsets_by_timestamp: PartitionMap | None = option(
        "startingOffsetsByTimestamp", parse_timestamps, default=None,
        doc='per-partition start timestamps, JSON {"topicA":{"0":1700000000000}}')
    starting_offsets_by_timestamp_strategy: str = option(
        "startingOffsetsByTimestampStrategy", choice("error", "latest"), default="error",
        doc="when no record is at or after the timestamp: fail (error) or start at the latest offset")
    ending_offsets: OffsetsSpec | None = option(
        "endingOffsets", parse_offsets, default=None, doc="batch only: latest (default) or JSON (-1 latest)")
    ending_timestamp: int | None = option(
        "endingTimestamp", parse_int, default=None, checks=[non_negative],
        doc="batch only: stop before the first record at or after this epoch-millis timestamp")
    ending_offsets_by_timestamp: PartitionMap | None = option(
        "endingOffsetsByTimestamp", parse_timestamps, default=None, doc="batch only: per-partition end timestamps")
    fail_on_data_loss: bool = option(
        "failOnDataLoss", parse_bool, default=True,
        doc="fail when offsets to read were deleted (retention, topic recreated); false: log and go on")
    max_offsets_per_trigger: int | None = option(
        "maxOffsetsPerTrigger", parse_int, default=None, checks=[positive],
        doc="most offsets per micro-batch, split across partitions by backlog")
    min_offsets_per_trigger: int | None = option(
        "minOffsetsPerTrigger", parse_int, default=None, checks=[positive],
        doc="fewest offsets per micro-batch, unless maxTriggerDelay has passed")
    max_trigger_delay: timedelta = option(
        "maxTriggerDelay", parse_duration, default=timedelta(minutes=15), checks=[positive],
        doc="with minOffsetsPerTrigger: longest wait before a smaller micro-batch runs anyway")
    min_partitions: int | None = option(
        "minPartitions", parse_int, default=None, checks=[positive],
        doc="fewest Spark partitions; big Kafka partitions are split into several")
    max_records_per_partition: int | None = option(
        "maxRecordsPerPartition", parse_int, default=None, checks=[positive],
        doc="most offsets one Spark partition reads; bigger ranges are split")
    target_records_per_partition: int = option(
        "targetRecordsPerPartition", parse_int, default=50_000, checks=[positive],
        doc="ours: offset ranges smaller than this share a Spark partition, up to this many offsets "
            "(1: one partition per range, as Spark)")
    max_bytes_per_batch: int = option(
        "maxBytesPerBatch", parse_size, default=16 << 20, checks=[positive],
        doc="most key and value bytes in one Arrow batch a read task hands to Spark (not a micro-batch "
            "limit: see maxOffsetsPerTrigger); bounds a task's memory whatever the message size")
    include_headers: bool = option(
        "includeHeaders", parse_bool, default=False, doc="add the headers column")
    group_id_prefix: str = option(
        "groupIdPrefix", default="spark-kafka-source",
        doc="prefix of the generated group.id of the reading consumers (they never join or commit)")
    consumer_cache_size: int = option(
        "consumerCacheSize", parse_int, default=8, checks=[non_negative],
        doc="ours: most idle consumers a Python worker process keeps for the next task that goes on "
            "where one ended (least recently used closed first); 0: a new consumer per task")
    poll_timeout: timedelta = option(
        "kafkaConsumer.pollTimeoutMs", parse_duration, default=timedelta(minutes=2), checks=[positive],
        doc="a task fails when its partition delivers nothing for this long")
    fetch_offset_retries: int = option(
        "fetchOffset.numRetries", parse_int, default=3, checks=[positive],
        doc="attempts at fetching offsets and metadata from the brokers")
    fetch_offset_retry_interval: timedelta = option(
        "fetchOffset.retryIntervalMs", parse_duration, default=timedelta(milliseconds=10), checks=[non_negative],
        doc="first wait between those attempts (doubling)")
    fetch_offset_min_interval: timedelta = option(
        "fetchOffset.minIntervalMs", parse_duration, default=timedelta(milliseconds=100), checks=[non_negative],
        doc="streams: reuse the latest offsets and partition list for this long "
            "(Spark asks the source every ~10 ms when idle)")
    mode: str = option(
        "mode", choice("FAILFAST", "PERMISSIVE"), default="FAILFAST",
        doc="avro-confluent: a record that cannot be decoded fails the query, or is read as null")
    column_name_of_corrupt_record: str = option(
        "columnNameOfCorruptRecord", default="_corrupt_record",
        doc="PERMISSIVE: the column holding the raw bytes of a value that cannot be decoded")
    # kafka.* settings; left out of repr, as they may hold kafka.sasl.password and the like.
    extra: dict[str, str] = dataclasses.field(default_factory=dict, repr=False)

    def validate(self) -> None:
        given = [n for n, v in (("assign", self.assign), ("subscribe", self.subscribe),
                                ("subscribePattern", self.subscribe_pattern)) if v is not None]
        if len(given) != 1:
            what = "Only one" if given else "One"
            raise OptionError(FORMAT, "/".join(given) or "assign/subscribe/subscribePattern", None,
                              f"{what} of the options assign, subscribe, subscribePattern must be given")
        for key, value in self.extra.items():
            name = key[len("kafka."):].lower()
            if name in REJECTED_CLIENT_SETTINGS:
                raise OptionError(FORMAT, key, value, f"Kafka option '{name}' {REJECTED_CLIENT_SETTINGS[name]}")
        client_config(FORMAT, self.extra)  # Java-only names and a missing bootstrap.servers fail here
        if self.max_bytes_per_batch > 1 << 30:
            raise self.error("maxBytesPerBatch", "must be at most 1g (an Arrow binary column holds less than 2 GiB)")
        self.validate_formats()
        if (self.min_offsets_per_trigger and self.max_offsets_per_trigger
                and self.min_offsets_per_trigger > self.max_offsets_per_trigger):
            raise self.error("minOffsetsPerTrigger",
                             f"must not exceed maxOffsetsPerTrigger ({self.max_offsets_per_trigger})")

    def for_batch(self) -> KafkaSourceOptions:
        """Check the batch-only rules (Spark's) and return self."""
        if self.starting_offsets == LATEST:
            raise self.error("startingOffsets", "starting offset can't be latest for batch queries")
        if self.ending_offsets == EARLIEST:
            raise self.error("endingOffsets", "ending offset can't be earliest for batch queries")
        for name, spec, bad, word in (("startingOffsets", self.starting_offsets, LATEST_OFFSET, "latest"),
                                      ("endingOffsets", self.ending_offsets, EARLIEST_OFFSET, "earliest")):
            if isinstance(spec, dict):
                for topic, parts in spec.items():
                    for partition, offset in parts.items():
                        if offset == bad:
                            raise self.error(name, f"offset for {topic}-{partition} can't be {word} "
                                                   "for batch queries")
        for name in ("maxOffsetsPerTrigger", "minOffsetsPerTrigger"):
            if getattr(self, self._field(name)) is not None:
                raise self.error(name, "is only valid in streaming queries")
        return self

    def for_stream(self) -> KafkaSourceOptions:
        """Check the streaming rules (Spark's) and return self."""
        for name in ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp"):
            if getattr(self, self._field(name)) is not None:
                raise self.error(name, "ending offsets are not valid in streaming queries")
        return self

    @classmethod
    def _field(cls, option_name: str) -> str:
        return next(f for f, spec in cls.specs().items() if spec.name == option_name)

    @property
    def client(self) -> dict[str, str]:
        """The librdkafka settings given as ``kafka.*`` options."""
        return client_config(FORMAT, self.extra)

    @property
    def group_id(self) -> str | None:
        """``kafka.group.id``: the group processed offsets are committed to, for monitoring only."""
        return self.client.get("group.id")

    def starting(self, default: str) -> tuple[str, Any]:
        """Where a new query starts, by Spark's precedence: ``("timestamp", ms)``,
        ``("timestamps", PartitionMap)`` or ``("offsets", OffsetsSpec)``."""
        if self.starting_timestamp is not None:
            return "timestamp", self.starting_timestamp
        if self.starting_offsets_by_timestamp is not None:
            return "timestamps", self.starting_offsets_by_timestamp
        return "offsets", self.starting_offsets or default

    def ending(self) -> tuple[str, Any]:
        """Where a batch read ends, by the same precedence (default latest)."""
        if self.ending_timestamp is not None:
            return "timestamp", self.ending_timestamp
        if self.ending_offsets_by_timestamp is not None:
            return "timestamps", self.ending_offsets_by_timestamp
        return "offsets", self.ending_offsets or LATEST
