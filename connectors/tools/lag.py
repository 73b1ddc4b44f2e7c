"""A consumer group's lag per partition: what ``connectors lag`` prints and lag tools compute.

The Kafka source commits its processed offsets to ``kafka.group.id`` (for monitoring only), so
this shows how far a query is behind, which Spark's own Kafka source cannot.
"""

from __future__ import annotations

import dataclasses

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from connectors.kafka.config import with_logger


@dataclasses.dataclass(frozen=True)
class PartitionLag:
    topic: str
    partition: int
    committed: int
    end: int

    @property
    def lag(self) -> int:
        return max(0, self.end - self.committed)


def group_lag(bootstrap_servers: str, group: str, topic: str | None = None, timeout: float = 10.0) -> list[PartitionLag]:
    admin = AdminClient(with_logger({"bootstrap.servers": bootstrap_servers}))
    future = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)], request_timeout=timeout)[group]
    committed = [tp for tp in future.result().topic_partitions if tp.offset >= 0 and topic in (None, tp.topic)]
    consumer = Consumer(with_logger({"bootstrap.servers": bootstrap_servers, "group.id": f"{group}-lag-probe",
                                     "enable.auto.commit": False}))
    try:
        rows = []
        for tp in sorted(committed, key=lambda t: (t.topic, t.partition)):
            _, high = consumer.get_watermark_offsets(TopicPartition(tp.topic, tp.partition), timeout=timeout)
            rows.append(PartitionLag(tp.topic, tp.partition, tp.offset, high))
        return rows
    finally:
        consumer.close()
