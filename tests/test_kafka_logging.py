"""librdkafka's own log lines, from every Kafka client the connectors open, go through Python
logging (``connectors.kafka.librdkafka``), never raw to the process's stderr."""

from __future__ import annotations

import logging

import pytest
from confluent_kafka import KafkaException

from connectors.core.options import OptionError
from connectors.kafka.config import LIBRDKAFKA_LOG
from connectors.kafka.sink.exactly_once import PartitionProgress
from connectors.kafka.sink.options import KafkaSinkOptions
from connectors.kafka.sink.producer import (
    SinkProducer,
    check_cluster,
    producer_settings,
)
from connectors.kafka.source.client import BrokerClient, KafkaSourceError
from connectors.kafka.source.offsets import OffsetRange
from connectors.kafka.source.options import KafkaSourceOptions
from connectors.kafka.source.split_reader import RangeReader
from connectors.tools.lag import group_lag

# Nothing listens there: every client logs its failed connection attempts (librdkafka's FAIL).
DEAD = "127.0.0.1:9"
QUICK = {"socket.timeout.ms": "1500", "message.timeout.ms": "1500"}


@pytest.fixture
def records():
    found: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = found.append  # type: ignore[method-assign]
    LIBRDKAFKA_LOG.addHandler(handler)
    yield found
    LIBRDKAFKA_LOG.removeHandler(handler)


def source_options(**extra: str) -> KafkaSourceOptions:
    return KafkaSourceOptions.from_options({"kafka.bootstrap.servers": DEAD, "subscribe": "t",
                                            "fetchOffset.numRetries": "1",
                                            **{f"kafka.{k}": v for k, v in QUICK.items()}, **extra})


def sink_options(**extra: str) -> KafkaSinkOptions:
    return KafkaSinkOptions.from_options({"kafka.bootstrap.servers": DEAD, "topic": "t", "requestTimeout": "2s",
                                          **{f"kafka.{k}": v for k, v in QUICK.items()}, **extra})


def planning_consumer() -> None:
    with pytest.raises(KafkaSourceError):
        BrokerClient(source_options()).partitions()


def task_consumer() -> None:
    with pytest.raises((KafkaException, TimeoutError)):
        list(RangeReader(source_options(**{"kafkaConsumer.pollTimeoutMs": "2000"}), OffsetRange("t", 0, 0, 10)))


def producer() -> None:
    sink = SinkProducer(producer_settings(sink_options()))
    sink.producer.produce("t", b"x")
    sink.producer.flush(3)


def cluster_check() -> None:
    with pytest.raises(OptionError):
        check_cluster(sink_options())


def progress_consumer() -> None:
    progress = PartitionProgress(sink_options().client_settings(), "g", "progress", 2.0)
    with pytest.raises(Exception):  # noqa: B017  (the broker is unreachable: how it fails does not matter here)
        progress.read()  # left open, as a kept producer's progress consumer is: close() would hand them over too


def lag_tool() -> None:
    with pytest.raises(Exception):  # noqa: B017
        group_lag(DEAD, "g", timeout=2.0)


@pytest.mark.parametrize("client", [planning_consumer, task_consumer, producer, cluster_check, progress_consumer,
                                    lag_tool], ids=lambda c: c.__name__)
def test_librdkafka_logs_through_python_logging(client, records, capfd):
    client()
    err = capfd.readouterr().err
    assert "|FAIL|" not in err and "%3|" not in err, err[-2000:]
    if client not in (cluster_check, lag_tool):  # these two never poll: their lines are dropped with them
        assert any(r.levelno == logging.ERROR and r.getMessage().startswith("FAIL ") for r in records), records


def test_kafka_debug_keeps_librdkafkas_own_output(capfd):
    settings = producer_settings(sink_options(**{"kafka.debug": "broker"}))
    SinkProducer(settings).producer.flush(1)
    assert "|BROKER|" in capfd.readouterr().err  # a user asking for debug output gets it where librdkafka writes it
