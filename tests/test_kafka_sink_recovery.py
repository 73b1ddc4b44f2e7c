"""The exactly-once Kafka sink's recovery checks and kept producers, against fakes of the
Kafka clients: no broker, no Spark."""

from __future__ import annotations

from concurrent.futures import Future

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import ConsumerGroupListing, ListConsumerGroupsResult
from pyspark.sql.types import StringType, StructField, StructType

from connectors.kafka.sink import exactly_once, recovery
from connectors.kafka.sink.exactly_once import Progress, WorkUnit, write_exactly_once
from connectors.kafka.sink.options import KafkaSinkOptions
from connectors.kafka.sink.producer import IDLE, DeliveryReports, KafkaSinkError, producer_settings, settings_key
from connectors.kafka.sink.records import RecordLayout


def sink_options(prefix: str = "sink") -> KafkaSinkOptions:
    return KafkaSinkOptions.from_options({"kafka.bootstrap.servers": "x:9092", "topic": "out",
                                          "deliveryGuarantee": "exactly-once", "transactionalIdPrefix": prefix})


# --- listing the progress groups ----------------------------------------------------------------


class _FakeAdmin:
    """Lists groups <prefix>-0..2; the broker coordinating <prefix>-2 answers
    COORDINATOR_LOAD_IN_PROGRESS for the first ``partial`` listings."""

    listings = 0

    def __init__(self, conf):
        pass

    def list_consumer_groups(self, request_timeout=None):
        type(self).listings += 1
        loading = type(self).listings <= self.partial
        future = Future()
        future.set_result(ListConsumerGroupsResult(
            valid=[ConsumerGroupListing(f"sink-{p}", True) for p in ((0, 1) if loading else (0, 1, 2))],
            errors=[self.error(KafkaError(KafkaError.COORDINATOR_LOAD_IN_PROGRESS))] if loading else []))
        return future


@pytest.fixture(params=[KafkaError, KafkaException], ids=["KafkaError", "KafkaException"])
def admin(request, monkeypatch):
    """confluent-kafka 2.x puts KafkaError items in ListConsumerGroupsResult.errors; its docs say
    KafkaException."""
    fake = type("Admin", (_FakeAdmin,), {"partial": 0, "error": staticmethod(
        (lambda error: error) if request.param is KafkaError else KafkaException)})
    monkeypatch.setattr(recovery, "AdminClient", fake)
    monkeypatch.setattr("connectors.core.retry.time.sleep", lambda seconds: None)
    return fake


class _FakeProgress:
    """Partition 2 committed 100 records of batch 5 of the run in an earlier attempt."""

    def __init__(self, settings, group, topic, timeout):
        self.group = group

    def read(self):
        return Progress("query", 5, 100) if self.group == "sink-2" else None

    def close(self):
        pass


def test_a_listing_some_broker_failed_to_answer_fails_the_replay_check(admin, monkeypatch):
    """The cluster restarted, and the query with fewer partitions: the broker that coordinates
    sink-2 is still loading its groups. Taken for the whole listing, it hid partition 2, whose
    records batch 5 now writes a second time, and the batch passed."""
    admin.partial = 1000
    monkeypatch.setattr(recovery, "PartitionProgress", _FakeProgress)
    with pytest.raises(KafkaSinkError) as info:
        recovery.check_moved(sink_options(), "query", 5, 2, replayed=True)
    assert ("listing the progress groups of transactionalIdPrefix 'sink' failed: 1 broker(s) answered with an error: "
            "Broker: Coordinator load in progress (COORDINATOR_LOAD_IN_PROGRESS)") in str(info.value)
    assert admin.listings == recovery._LIST_ATTEMPTS


def test_a_listing_retried_until_every_broker_answers_finds_the_gone_partition(admin, monkeypatch):
    admin.partial = 2
    monkeypatch.setattr(recovery, "PartitionProgress", _FakeProgress)
    monkeypatch.setattr(recovery, "_fence_all", lambda options, ids: None)
    assert recovery.progress_partitions(sink_options()) == {0, 1, 2}
    with pytest.raises(KafkaSinkError) as info:
        recovery.check_moved(sink_options(), "query", 5, 2, replayed=True)
    assert ("batch 5 was re-executed with 2 Spark partitions, but in an earlier attempt partition 2 committed 100"
            in str(info.value))


# --- kept transactional producers ---------------------------------------------------------------


class _FakeLibrdkafka:
    """A transactional librdkafka producer: ``abort_transaction`` times out while ``fail_aborts``;
    a timed-out abort leaves it where no transaction can begin (librdkafka's _STATE error)."""

    def __init__(self, fail_aborts: int = 0):
        self.fail_aborts, self.aborting = fail_aborts, False

    def init_transactions(self, timeout):
        pass

    def begin_transaction(self):
        if self.aborting:
            raise KafkaException(KafkaError(KafkaError._STATE, "Operation not valid in state AbortingTransaction"))

    def abort_transaction(self, timeout):
        if self.fail_aborts:
            self.fail_aborts -= 1
            self.aborting = True
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "Transactional API operation timed out"))
        self.aborting = False

    def send_offsets_to_transaction(self, positions, metadata, timeout):
        pass

    def commit_transaction(self):
        pass

    def poll(self, timeout):
        return 0


class _FakeSinkProducer:
    made: list[_FakeSinkProducer] = []
    fail_aborts = 0

    def __init__(self, settings):
        self.producer, self.closed = _FakeLibrdkafka(self.fail_aborts), False
        self.reports = DeliveryReports()
        self.made.append(self)

    def close(self):
        self.closed = True


class _FakePartitionProgress:
    def __init__(self, settings, group, topic, timeout):
        pass

    def read(self):
        return Progress("query", 0, 10)

    def add_to_transaction(self, producer, progress, attempts=3):
        pass

    def close(self):
        pass


@pytest.fixture
def fake_clients(monkeypatch):
    monkeypatch.setattr(exactly_once, "SinkProducer", type("SinkProducer", (_FakeSinkProducer,), {"made": []}))
    monkeypatch.setattr(exactly_once, "PartitionProgress", _FakePartitionProgress)
    monkeypatch.setattr(exactly_once, "_owners", lambda: None)  # no owner files: resume() asks the "broker"
    return exactly_once.SinkProducer


def test_a_producer_whose_abort_failed_is_not_kept(fake_clients):
    """A task with nothing to write aborts its transaction; when that fails, the producer cannot
    begin the next one: kept, it failed the next task of its partition and leaked."""
    fake_clients.fail_aborts = 1
    options = sink_options("abort-failed")
    key = (settings_key(producer_settings(options, "abort-failed-0")), options.progress_topic)
    layout = RecordLayout.of(StructType([StructField("value", StringType())]), "out")
    try:
        assert write_exactly_once(options, layout, [], WorkUnit("query", 1, 0)) == (0, 0)
        (first,) = fake_clients.made
        assert first.closed and IDLE.take(key) is None
        fake_clients.fail_aborts = 0
        assert write_exactly_once(options, layout, [], WorkUnit("query", 2, 0)) == (0, 0)
    finally:
        kept = IDLE.take(key)
        if kept is not None:
            kept.close()


def test_a_kept_producer_that_cannot_begin_a_transaction_is_not_resumed(fake_clients):
    txn = exactly_once.TransactionalProducer(sink_options(), "sink-0", 1.0)
    txn.sink.producer.aborting = True  # e.g. an abort that failed after the producer was kept
    assert txn.resume() is False
