"""Options of the ``connectors.kafka`` write side: Spark's Kafka sink options plus Flink's guarantees.

``topic`` and ``kafka.*`` mean what they mean for Spark's Kafka sink; ``deliveryGuarantee`` and
``transactionalIdPrefix`` are Flink's ``KafkaSink`` settings. Everything is checked here, on the
driver, when the query starts.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from connectors.core.guarantees import DeliveryGuarantee, parse_guarantee
from connectors.core.options import (
    OptionError,
    Options,
    non_negative,
    option,
    parse_bool,
    parse_duration,
    parse_int,
    positive,
)
from connectors.kafka import FORMAT
from connectors.kafka.config import client_config, parse_topic
from connectors.kafka.registry import RegistryOptions

# librdkafka settings the sink owns; name -> why a user may not set them.
MANAGED_CLIENT_SETTINGS = {
    "transactional.id": "is set by the sink per Spark partition; set the option 'transactionalIdPrefix' instead",
    "delivery.report.only.error": "is managed by the sink (it checks every delivery report)",
    "on_delivery": "is managed by the sink (it checks every delivery report)",
    "dr_cb": "is managed by the sink (it checks every delivery report)",
    "dr_msg_cb": "is managed by the sink (it checks every delivery report)",
}

# librdkafka defaults the sink changes (a user's kafka.* setting still wins). With sparse
# connections (librdkafka's default) a new client connects to the brokers it learned from the
# bootstrap metadata only on demand, so init_transactions() and the progress consumer's group
# coordinator wait for a connection (docs/kafka-sink.md has the numbers).
CLIENT_DEFAULTS = {"enable.sparse.connections": "false"}

def parse_prefix(text: str) -> str:
    if not text.strip():
        raise ValueError("must not be empty")
    return text


@dataclasses.dataclass(frozen=True)
class KafkaSinkOptions(RegistryOptions, Options):
    """Options of ``df.write(Stream).format("connectors.kafka")`` and of ``KafkaSink``.

    ``kafka.*`` entries go to the librdkafka producer (``extra``), as Spark passes them to the
    Java producer; ``kafka.bootstrap.servers`` is required.
    """

    source_name = FORMAT
    passthrough_prefixes = ("kafka.", "schema.registry.")

    topic: str | None = option(
        "topic", parse_topic, default=None,
        doc="topic of every record; overrides the topic column (required without that column)")
    delivery_guarantee: DeliveryGuarantee = option(
        "deliveryGuarantee", parse_guarantee, default=DeliveryGuarantee.AT_LEAST_ONCE,
        doc="none, at-least-once or exactly-once (Flink's DeliveryGuarantee)")
    transactional_id_prefix: str | None = option(
        "transactionalIdPrefix", parse_prefix, default=None,
        doc="exactly-once: required, unique per sink; transactional ids are <prefix>-<Spark partition>; "
            "where Spark gives no streaming query id (Spark Connect's foreachBatch) it alone names the sink")
    progress_topic: str = option(
        "progressTopic", parse_topic, default="connectors-sink-progress",
        doc="exactly-once: existing or creatable topic whose partition 0 anchors the sink's progress "
            "offsets (nothing is written to it); shared by all sinks")
    progress_topic_replication_factor: int | None = option(
        "progressTopicReplicationFactor", parse_int, default=None, checks=[positive],
        doc="exactly-once: replication factor of progressTopic when the sink creates it "
            "(default: the brokers' default.replication.factor)")
    request_timeout: timedelta = option(
        "requestTimeout", parse_duration, default=timedelta(seconds=60), checks=[positive],
        doc="longest wait for the broker in one blocking call: the check at query start, "
            "starting a transaction, reading the sink's progress")
    producer_cache_size: int = option(
        "producerCacheSize", parse_int, default=8, checks=[non_negative],
        doc="most idle producers a Python worker process keeps for later tasks and micro-batches "
            "(least recently used closed first); 0: a new producer per task")
    auto_register_schemas: bool = option(
        "autoRegisterSchemas", parse_bool, default=True,
        doc="avro-confluent: register the schema under the subject at query start; false: it must be registered")
    # kafka.* settings; left out of repr, as they may hold kafka.sasl.password and the like.
    extra: dict[str, str] = dataclasses.field(default_factory=dict, repr=False)

    def validate(self) -> None:
        for key, value in self.extra.items():
            name = key[len("kafka."):].lower()
            if name in MANAGED_CLIENT_SETTINGS:
                raise OptionError(FORMAT, key, value, f"Kafka option '{name}' {MANAGED_CLIENT_SETTINGS[name]}")
        client_config(FORMAT, self.extra)  # Java-only names and a missing bootstrap.servers fail here
        self.validate_formats()
        if self.exactly_once:
            if self.transactional_id_prefix is None:
                raise OptionError(FORMAT, "transactionalIdPrefix", None,
                                  "required with deliveryGuarantee exactly-once (unique per sink, e.g. 'orders-sink')")
            idempotence = self.client_settings().get("enable.idempotence", "true").strip().lower()
            if idempotence != "true":
                raise OptionError(FORMAT, "kafka.enable.idempotence", idempotence,
                                  "must be true with deliveryGuarantee exactly-once (Kafka transactions need it)")

    @property
    def exactly_once(self) -> bool:
        return self.delivery_guarantee is DeliveryGuarantee.EXACTLY_ONCE

    def client_settings(self) -> dict[str, str]:
        """:data:`CLIENT_DEFAULTS` and the user's ``kafka.*`` settings, prefix removed, names
        lower-cased (as librdkafka's): the settings of every client of the sink."""
        user = {name.lower(): value for name, value in client_config(FORMAT, self.extra).items()}
        return {**CLIENT_DEFAULTS, **user}
